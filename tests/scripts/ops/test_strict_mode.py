"""Strict mode, as behaviour: a step of an operator script that fails stops the script with that step's exit
status, and nothing after it runs (`set -euo pipefail`). Each case fails one call in the middle of a script with
the stubs of conftest.py and names a later call that must not be made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts.failing_step import FAILED_STATUS, Call, Case, StepProbe, accounted_for, scripts_in

SCRIPTS_DIR = Path(__file__).resolve().parents[3] / "scripts" / "ops"

CASES = [
    Case(
        "node-health-check.sh",
        fails=Call("jq", "-r .profile // empty {root}/etc/gpufleet/versions.json"),
        must_not_run=Call("fi_info"),
        why="the image's profile left unread and the other checks run as if it matched",
    ),
    Case(
        "run-nccl-tests.sh",
        fails=Call("paste", "-sd  "),
        must_not_run=Call("mpirun", "* --mca *"),
        why="the benchmark run on hosts whose MIG mode could not be judged (NCCL does not work with MIG)",
    ),
]

# Every script here has a step whose failure only strict mode catches.
NOTHING_TO_CATCH: dict[str, str] = {}


def settings(script: str, tmp_path: Path) -> dict[str, str]:
    """Each script's settings and files, up to the failing step."""
    if script == "node-health-check.sh":
        manifest = tmp_path / "root/etc/gpufleet/versions.json"
        manifest.parent.mkdir(parents=True)
        manifest.write_text(json.dumps({"profile": "p4d-ubuntu1804-cuda11", "components": {"driver": "450.80.02"}}))
        return {
            "GPUFLEET_GPU_COUNT": "8",
            "GPUFLEET_EFA_COUNT": "4",
            "GPUFLEET_NVSWITCH": "1",
            "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
            "GPUFLEET_AMI_PROFILE": "p4d-ubuntu1804-cuda11",
        }
    hostfile = tmp_path / "hosts"
    hostfile.write_text("10.40.0.4 slots=8\n10.40.0.5 slots=8\n")
    return {
        "GPUFLEET_HOSTFILE": str(hostfile),
        "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
        "GPUFLEET_NCCL_LOG": str(tmp_path / "nccl.log"),
        "GPUFLEET_MIN_BUSBW": "40",
    }


def test_every_script_has_a_failing_step_or_a_reason_for_none():
    assert accounted_for(CASES, NOTHING_TO_CATCH) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.script)
def test_a_failing_step_stops_the_script(run_script, stub_dir, tmp_path, case):
    path = f"{stub_dir}:/usr/bin:/bin"
    probe = StepProbe(tmp_path / "probe", path)
    stopped_at_the_failure = probe.install(case, root=str(tmp_path / "root"))

    result = run_script(case.script, PATH=f"{probe.bin_dir}:{path}", **settings(case.script, tmp_path))

    assert probe.calls() == stopped_at_the_failure, result.stdout + result.stderr
    assert result.returncode == FAILED_STATUS, result.stderr
