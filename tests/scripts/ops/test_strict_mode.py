"""Strict mode, as behaviour: a step of an operator script that fails stops the script with that step's exit
status, and nothing after it runs (`set -euo pipefail`). Each case fails one call in the middle of a script with
the stubs of conftest.py (the run scripts and the checkpoint hook: on the node scripts' fake node) and names a later
call that must not be made."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.ops.runs import node_script
from tests.gpufleet.ops.test_runs import RUN_ID, two_node_plan
from tests.scripts.failing_step import FAILED_STATUS, Call, Case, StepProbe, accounted_for, scripts_in
from tests.scripts.node.conftest import FakeNode

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


# The scripts that act on the node's systemd, IMDS and folders, run on the node scripts' fake node.
ON_THE_NODE = [
    Case(
        "save-checkpoint.sh",
        fails=Call("mktemp", "{root}/run/gpufleet/checkpoint/.request.XXXXXX"),
        must_not_run=Call("mv"),
        why="processes signalled for a request that was never written",
    ),
    Case(
        "start-run.sh",
        fails=Call("mkdir", "-p {root}/var/lib/gpufleet/run-ranks"),
        must_not_run=Call("systemd-run"),
        why="a run started without the node's rank recorded: gpufleet logs --node could not find the node",
    ),
    Case(
        "stop-run.sh",
        fails=Call("systemctl", f"stop gpufleet-run-{RUN_ID}"),
        must_not_run=Call("rm"),
        why="the unit's script removed and the run reported stopped while systemd still runs it",
    ),
]


def a_run_to_start(node: FakeNode) -> dict[str, str]:
    """This node is rank 0 of a plain run (start-run.sh's argument: NODE_ARGUMENTS)."""
    node.set_state(imds={"instance-id": [[200, "i-0000000000000000a"]]})
    return {
        "GPUFLEET_CLUSTER_USER": "gpufleet",
        "GPUFLEET_CLUSTER_UID": "2000",
        "GPUFLEET_IMDS_URL": "http://imds.test",
    }


def a_run_to_stop(node: FakeNode) -> dict[str, str]:
    node.set_state(active_units=[f"gpufleet-run-{RUN_ID}"])
    return {"GPUFLEET_CLUSTER_USER": "gpufleet", "GPUFLEET_SHARED_DIR": ""}


# Each script's node and settings, up to the failing step, and its arguments.
PREPARE: dict[str, Callable[[FakeNode], dict[str, str]]] = {
    "save-checkpoint.sh": lambda node: {},
    "start-run.sh": a_run_to_start,
    "stop-run.sh": a_run_to_stop,
}
NODE_ARGUMENTS = {"start-run.sh": [node_script(two_node_plan()).split("'")[1]], "stop-run.sh": [RUN_ID]}


def test_every_script_has_a_failing_step_or_a_reason_for_none():
    assert accounted_for(CASES + ON_THE_NODE, NOTHING_TO_CATCH) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.script)
def test_a_failing_step_stops_the_script(run_script, stub_dir, tmp_path, case):
    path = f"{stub_dir}:/usr/bin:/bin"
    probe = StepProbe(tmp_path / "probe", path)
    stopped_at_the_failure = probe.install(case, root=str(tmp_path / "root"))

    result = run_script(case.script, PATH=f"{probe.bin_dir}:{path}", **settings(case.script, tmp_path))

    assert probe.calls() == stopped_at_the_failure, result.stdout + result.stderr
    assert result.returncode == FAILED_STATUS, result.stderr


@pytest.mark.parametrize("case", ON_THE_NODE, ids=lambda case: case.script)
def test_a_failing_step_stops_the_script_on_the_node(node, tmp_path, case):
    settings = PREPARE[case.script](node)
    path = f"{node.bin_dir}:/usr/bin:/bin"
    probe = StepProbe(tmp_path / "probe", path)
    stopped_at_the_failure = probe.install(case, root=str(node.root))

    result = node.run(
        SCRIPTS_DIR / case.script,
        check=False,
        args=NODE_ARGUMENTS.get(case.script, ()),
        PATH=f"{probe.bin_dir}:{path}",
        **settings,
    )

    assert probe.calls() == stopped_at_the_failure, result.stdout + result.stderr
    assert result.returncode == FAILED_STATUS, result.stderr
