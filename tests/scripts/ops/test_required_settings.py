"""Every operator script checks its settings the same way (require_settings of scripts/lib/helpers.sh): each
missing or empty one gets its own line, naming it and where it is documented, all of them at once, before the
script runs anything; exit status 2, which both scripts keep for input they refuse."""

from __future__ import annotations

import pytest

from tests.scripts.failing_step import scripts_in
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


def test_every_script_has_a_case():
    assert sorted(CASES) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("script", sorted(CASES))
def test_missing_settings_are_named_together_and_nothing_runs(run_script, calls, script):
    settings, lines = CASES[script]

    done = run_script(script, **settings)

    assert (done.returncode, done.stderr.splitlines(), done.stdout) == (2, lines, "")
    assert calls() == []
