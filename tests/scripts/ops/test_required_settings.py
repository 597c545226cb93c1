"""Every operator script checks its settings the same way (require_settings of scripts/lib/helpers.sh): each
missing or empty one gets its own line, naming it and where it is documented, all of them at once, before the
script runs anything; exit status 2, which the health check and nccl-tests keep for input they refuse. The run
scripts, which Run Command runs after `. /etc/gpufleet/node.env`, name that file and exit 1, as the node scripts do
(tests/scripts/node/test_required_settings.py)."""

from __future__ import annotations

import pytest

from tests.scripts.failing_step import scripts_in
from tests.scripts.node.conftest import FakeNode
from tests.scripts.ops.test_strict_mode import SCRIPTS_DIR

# Each script with settings left out (missing, or set but empty), and the lines it answers with.
CASES = {
    "node-health-check.sh": (
        {"GPUFLEET_EFA_COUNT": "4", "GPUFLEET_NVSWITCH": ""},
        [
            "node-health-check: error: GPUFLEET_GPU_COUNT is not set (see the header of "
            "scripts/ops/node-health-check.sh)",
            "node-health-check: error: GPUFLEET_NVSWITCH is not set (see the header of "
            "scripts/ops/node-health-check.sh)",
            "node-health-check: error: GPUFLEET_GPUDIRECT_RDMA is not set (see the header of "
            "scripts/ops/node-health-check.sh)",
            "node-health-check: error: GPUFLEET_INSTANCE_TYPE is not set (see the header of "
            "scripts/ops/node-health-check.sh)",
        ],
    ),
    "run-nccl-tests.sh": (
        {"GPUFLEET_HOSTFILE": ""},
        [
            "run-nccl-tests: error: GPUFLEET_HOSTFILE is not set (see the header of scripts/ops/run-nccl-tests.sh)",
            "run-nccl-tests: error: GPUFLEET_INSTANCE_TYPE is not set (see the header of "
            "scripts/ops/run-nccl-tests.sh)",
        ],
    ),
}


# The run scripts on the node scripts' fake node: their arguments, and the lines they answer with.
RUN_SCRIPT_CASES = {
    "start-run.sh": (("e30=",), ["start-run: error: GPUFLEET_CLUSTER_USER is not set (from /etc/gpufleet/node.env)"]),
    "stop-run.sh": (
        ("20261126-210500-3fa2",),
        ["stop-run: error: GPUFLEET_CLUSTER_USER is not set (from /etc/gpufleet/node.env)"],
    ),
}

# Scripts that require no setting, and why.
NO_REQUIRED_SETTINGS = {
    "save-checkpoint.sh": "its caller's notice variables and GPUFLEET_SHARED_DATA_DIR are each optional",
}


def test_every_script_has_a_case():
    assert sorted([*CASES, *RUN_SCRIPT_CASES, *NO_REQUIRED_SETTINGS]) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("script", sorted(CASES))
def test_missing_settings_are_named_together_and_nothing_runs(run_script, calls, script):
    settings, lines = CASES[script]

    done = run_script(script, **settings)

    assert (done.returncode, done.stderr.splitlines(), done.stdout) == (2, lines, "")
    assert calls() == []


@pytest.mark.parametrize("script", sorted(RUN_SCRIPT_CASES))
def test_the_run_scripts_name_the_node_settings_they_miss_and_run_nothing(node: FakeNode, script):
    args, lines = RUN_SCRIPT_CASES[script]

    result = node.run(SCRIPTS_DIR / script, check=False, args=args)

    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (1, lines, "")
    assert node.calls() == []
