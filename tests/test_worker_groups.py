"""The worker groups of the test suite: which file belongs to which group, and that pytest-xdist (the pinned
release, with the pinned pytest) really runs a group on one worker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPOSITORY
from tests.worker_groups import group_of, misplaced


@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        ("tests/stacks/test_cluster_stack.py::test_outputs", "cdk-synth"),
        ("tests/stacks/constructs/test_gpu_spot_fleet.py::test_x[prod]", "cdk-synth"),
        ("tests/test_app.py::test_env_context", "cdk-synth"),
        ("tests/gpufleet/ops/test_plan.py::test_tag_change", "cdk-synth"),
        ("tests/gpufleet/commands/test_summary.py::test_table", "cdk-synth"),
        ("tests/packaging/test_wheel.py::test_console_script", "wheel"),
        ("tests/gpufleet/ops/test_fleet.py::test_status", None),
        ("tests/test_app_extra.py::test_x", None),
        ("tests/stacksmith/test_x.py::test_x", None),
    ],
)
def test_a_tests_group_follows_from_its_file(nodeid, group):
    assert group_of(nodeid) == group


def test_a_test_using_a_groups_fixture_elsewhere_is_refused():
    assert misplaced("tests/gpufleet/test_x.py::test_y", ["tmp_path", "assembly"]) == [
        "tests/gpufleet/test_x.py::test_y: uses assembly, so it must be in a file of group cdk-synth (tests/stacks/, "
        "tests/test_app.py, tests/gpufleet/ops/test_plan.py, tests/gpufleet/commands/test_summary.py, "
        "tests/fuzz/test_summary.py, tests/fuzz/test_plan.py; see tests/worker_groups.py)"
    ]
    assert misplaced("tests/stacks/test_x.py::test_y", ["assembly"]) == []
    assert misplaced("tests/stacks/test_x.py::test_y", ["installed_wheel"]) == [
        "tests/stacks/test_x.py::test_y: uses installed_wheel, so it must be in a file of group wheel "
        "(tests/packaging/; see tests/worker_groups.py)"
    ]


TEST_MODULE = """
import os
from pathlib import Path

import pytest


@pytest.mark.parametrize("case", range(6))
def test_case(case, request):
    name = request.node.nodeid.replace("/", "_").replace(":", "_")
    Path(os.environ["RUN_LOG"], name).write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_pytest_xdist_runs_a_group_on_one_worker(tmp_path):
    project, log = tmp_path / "project", tmp_path / "log"
    log.mkdir()
    for module in ("tests/stacks/test_a.py", "tests/stacks/test_b.py", "tests/other/test_c.py"):
        (project / module).parent.mkdir(parents=True, exist_ok=True)
        (project / module).write_text(TEST_MODULE)
    (project / "tests/conftest.py").write_text(
        "import pytest\n\nfrom worker_groups import GroupScheduling\n\n\n"
        "@pytest.hookimpl(optionalhook=True, tryfirst=True)\n"
        "def pytest_xdist_make_scheduler(config, log):\n    return GroupScheduling(config, log)\n"
    )
    # The module under test, beside the project's own tests/ (which would shadow the repository's tests package).
    shutil.copy(REPOSITORY / "tests/worker_groups.py", project / "worker_groups.py")
    (project / "pytest.ini").write_text("[pytest]\naddopts = --import-mode=importlib -p no:cacheprovider\n")
    environment = {**os.environ, "RUN_LOG": str(log), "PYTHONPATH": str(project)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "tests"],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {path.name: path.read_text() for path in log.iterdir()}
    assert len(workers) == 18
    grouped = {worker for name, worker in workers.items() if name.startswith("tests_stacks_")}
    assert len(grouped) == 1
    assert set(workers.values()) == {"gw0", "gw1"}
