"""Strict mode, as behaviour: a step of an operator script that fails stops the script with that step's exit
status, and nothing after it runs (`set -euo pipefail`). Each case fails one call in the middle of a script with
the stubs of conftest.py and names a later call that must not be made."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts.failing_step import FAILED_STATUS, Call, Case, StepProbe, accounted_for, scripts_in

SCRIPTS_DIR = Path(__file__).resolve().parents[3] / "scripts" / "ops"

CASES = [
    Case(
        "run-nccl-tests.sh",
        fails=Call("paste", "-sd  "),
        must_not_run=Call("mpirun", "* --mca *"),
        why="the benchmark run on hosts whose MIG mode could not be judged (NCCL does not work with MIG)",
    ),
]

NOTHING_TO_CATCH = {
    "node-health-check.sh": "every check's commands are checked: a failure is that check's FAIL line and the other "
    "checks still run (the versions manifest's jq too: a damaged manifest stopped the script before issue 23)",
}


def settings(script: str, tmp_path: Path) -> dict[str, str]:
    """Each script's settings and files, up to the failing step."""
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
