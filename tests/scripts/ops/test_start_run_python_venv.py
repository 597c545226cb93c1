"""start-run.sh hands a run the image's virtualenv (/etc/gpufleet/python.env) only where root alone controls it: the
file, the virtualenv's bin/ and every folder above them root's, no link, not writable by group or others. The body
(gpufleet/ops/runs.py PYTHON_VENV_STEP) then puts GPUFLEET_PYTHON_VENV/bin first on PATH, before the run's setup."""

from __future__ import annotations

import os
import subprocess

import pytest

from gpufleet.ops.runs import node_script, plan_run, unit_body
from tests.gpufleet.ops.test_runs import RUN_ID, node, two_node_plan
from tests.scripts.ops.test_start_run import UNIT, cluster_node, on_node  # noqa: F401

VENV_SETTING = "--setenv=GPUFLEET_PYTHON_VENV=/opt/gpufleet/pytorch"


def image_with_venv(node, line: str = "GPUFLEET_PYTHON_VENV=/opt/gpufleet/pytorch\n") -> None:
    os.umask(0o022)
    (node.root / "opt/gpufleet/pytorch/bin").mkdir(parents=True)
    (node.root / "etc/gpufleet").mkdir(parents=True, exist_ok=True)
    (node.root / "etc/gpufleet/python.env").write_text(line)


def setenv_options(node) -> list[str]:
    (call,) = node.calls("systemd-run")
    return [option for option in call if option.startswith("--setenv=")]


def start(node):
    result = on_node(node, node_script(two_node_plan()), "i-0000000000000000b")
    assert result.returncode == 0, result.stderr
    return result


def test_a_virtualenv_root_controls_reaches_the_unit_before_its_rank(cluster_node):  # noqa: F811
    image_with_venv(cluster_node)
    result = start(cluster_node)
    assert result.stderr == ""
    assert setenv_options(cluster_node)[-2:] == [VENV_SETTING, "--setenv=GPUFLEET_NODE_RANK=1"]


@pytest.mark.parametrize("line", ["", "GPUFLEET_PYTHON_VENV=\n", "OTHER=/opt/gpufleet/pytorch\n"])
def test_an_empty_or_foreign_python_env_hands_over_nothing(cluster_node, line):  # noqa: F811
    image_with_venv(cluster_node, line)
    start(cluster_node)
    assert not [o for o in setenv_options(cluster_node) if "PYTHON_VENV" in o]


def test_without_python_env_nothing_is_handed_over(cluster_node):  # noqa: F811
    start(cluster_node)
    assert not [o for o in setenv_options(cluster_node) if "PYTHON_VENV" in o]


def make_bin_the_users(node):
    os.chown(node.root / "opt/gpufleet/pytorch/bin", 65534, 65534)


def make_bin_a_link(node):
    bin_dir = node.root / "opt/gpufleet/pytorch/bin"
    bin_dir.rmdir()
    (node.root / "tmp/user-bin").mkdir(parents=True)
    bin_dir.symlink_to(node.root / "tmp/user-bin")


def make_parent_writable(node):
    (node.root / "opt/gpufleet").chmod(0o777)


def make_env_file_writable(node):
    (node.root / "etc/gpufleet/python.env").chmod(0o666)


def make_env_file_the_users(node):
    os.chown(node.root / "etc/gpufleet/python.env", 65534, 65534)


def make_path_climb(node):
    (node.root / "etc/gpufleet/python.env").write_text("GPUFLEET_PYTHON_VENV=/opt/gpufleet/../gpufleet/pytorch\n")


@pytest.mark.parametrize(
    ("steer", "warned"),
    [
        (make_bin_the_users, True),
        (make_bin_a_link, True),
        (make_parent_writable, True),
        (make_env_file_writable, False),
        (make_env_file_the_users, False),
        (make_path_climb, False),
    ],
)
def test_a_virtualenv_another_user_could_steer_is_left_out(cluster_node, steer, warned):  # noqa: F811
    image_with_venv(cluster_node)
    steer(cluster_node)
    result = start(cluster_node)
    assert not [o for o in setenv_options(cluster_node) if "PYTHON_VENV" in o]
    expected = (
        "start-run: warning: /opt/gpufleet/pytorch/bin is not a folder root alone controls: the run's PATH leaves it "
        "out\n"
    )
    assert result.stderr == (expected if warned else "")


def test_the_body_puts_the_virtualenv_first_and_a_setup_venv_still_wins(tmp_path):
    """The unit's body run by bash with GPUFLEET_PYTHON_VENV set: python resolves to the image's virtualenv, and a
    --setup that activates its own virtualenv comes after and wins."""
    nodes = [node("i-0000000000000000b", "10.40.0.9", "spot"), node("i-0000000000000000a", "10.40.0.4", minute=5)]
    probe = ["sh", "-c", "command -v python"]
    plan = plan_run(RUN_ID, "dev", nodes, 8, probe, setup=f". {tmp_path}/own/bin/activate")
    for venv in ("image", "own"):
        (tmp_path / venv / "bin").mkdir(parents=True)
        (tmp_path / venv / "bin" / "python").write_text("#!/bin/sh\n")
        (tmp_path / venv / "bin" / "python").chmod(0o755)
    (tmp_path / "own/bin/activate").write_text(f'PATH="{tmp_path}/own/bin:$PATH"\n')
    body = unit_body(plan).replace("cd ~gpufleet", f"cd {tmp_path}")
    env = {"PATH": "/usr/bin:/bin", "GPUFLEET_PYTHON_VENV": str(tmp_path / "image"), "HOME": str(tmp_path)}
    with_setup = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True, check=True)
    assert with_setup.stdout == f"{tmp_path}/own/bin/python\n"
    without_setup = unit_body(plan_run(RUN_ID, "dev", nodes, 8, probe))
    without_setup = without_setup.replace("cd ~gpufleet", f"cd {tmp_path}")
    result = subprocess.run(["bash", "-c", without_setup], env=env, capture_output=True, text=True, check=True)
    assert result.stdout == f"{tmp_path}/image/bin/python\n"
