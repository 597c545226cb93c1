"""Every node script checks its settings the same way (require_settings of scripts/lib/helpers.sh): each missing
or empty one gets its own line, naming it and /etc/gpufleet/node.env, where the user data writes it, all of them at
once, before the script runs any command. A script that a flag turns off needs its other settings only when on."""

from __future__ import annotations

import pytest

from tests.scripts.failing_step import scripts_in
from tests.scripts.node.conftest import SCRIPTS_DIR

BLOCK_END = ("cr-0123456789abcdef0", "2026-12-01T11:30:00Z")

# script, its settings (missing ones left out, or set but empty), its arguments, and the lines it answers with.
CASES = [
    (
        "capacity-block-end.sh",
        {},
        BLOCK_END,
        ["capacity-block-end: error: GPUFLEET_CAPACITY_BLOCK is not set (from /etc/gpufleet/node.env)"],
    ),
    (
        "cluster-address.sh",
        {},
        ("10.40.0.7",),
        ["cluster-address: error: usage: cluster-address.sh HOST CIDR"],
    ),
    (
        "cluster-user.sh",
        {"GPUFLEET_CLUSTER_UID": "2000"},
        (),
        [
            "cluster-user: error: GPUFLEET_CLUSTER_USER is not set (from /etc/gpufleet/node.env)",
            "cluster-user: error: GPUFLEET_CLUSTER_HOME is not set (from /etc/gpufleet/node.env)",
            "cluster-user: error: GPUFLEET_CLUSTER_KEY_SECRET is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    (
        "deep-learning-ami.sh",
        {},
        (),
        [
            "deep-learning-ami: error: GPUFLEET_DEEP_LEARNING_AMI is not set (from /etc/gpufleet/node.env)",
            "deep-learning-ami: error: GPUFLEET_EFA is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    ("efa-env.sh", {}, (), ["efa-env: error: GPUFLEET_EFA is not set (from /etc/gpufleet/node.env)"]),
    (
        "operator-scripts.sh",
        {"GPUFLEET_OPERATOR_SCRIPTS_SHA256": ""},
        (),
        [
            "operator-scripts: error: GPUFLEET_OPERATOR_SCRIPTS is not set (from /etc/gpufleet/node.env)",
            "operator-scripts: error: GPUFLEET_OPERATOR_SCRIPTS_SHA256 is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    (
        "efa-env.sh",
        {"GPUFLEET_EFA": "1", "GPUFLEET_GPUDIRECT_RDMA": ""},
        (),
        ["efa-env: error: GPUFLEET_GPUDIRECT_RDMA is not set (from /etc/gpufleet/node.env)"],
    ),
    ("gpu-clocks.sh", {}, (), ["gpu-clocks: error: GPUFLEET_MAX_CLOCKS is not set (from /etc/gpufleet/node.env)"]),
    (
        "gpu-clocks.sh",
        {"GPUFLEET_MAX_CLOCKS": "1", "GPUFLEET_GPU_COUNT": ""},
        (),
        [
            "gpu-clocks: error: GPUFLEET_GPU_COUNT is not set (from /etc/gpufleet/node.env)",
            "gpu-clocks: error: GPUFLEET_GPU_COMPUTE_CAPABILITY is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    (
        "mig.sh",
        {"GPUFLEET_MIG_PROFILE": "1g.5gb"},
        (),
        [
            "mig: error: GPUFLEET_GPU_COUNT is not set (from /etc/gpufleet/node.env)",
            "mig: error: GPUFLEET_GPU_COMPUTE_CAPABILITY is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    (
        "join-runs.sh",
        {},
        (),
        [
            "join-runs: error: GPUFLEET_SHARED_DIR is not set (from /etc/gpufleet/node.env)",
            "join-runs: error: GPUFLEET_CLUSTER_USER is not set (from /etc/gpufleet/node.env)",
            "join-runs: error: GPUFLEET_CLUSTER_UID is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    (
        "node-ready.sh",
        {},
        (),
        ["node-ready: error: GPUFLEET_READINESS_TAG is not set (from /etc/gpufleet/node.env)"],
    ),
    ("raid0-nvme.sh", {}, (), ["raid0-nvme: error: GPUFLEET_RAID0_NVME is not set (from /etc/gpufleet/node.env)"]),
    (
        "raid0-nvme.sh",
        {"GPUFLEET_RAID0_NVME": "1"},
        (),
        [
            "raid0-nvme: error: GPUFLEET_SCRATCH_MOUNT is not set (from /etc/gpufleet/node.env)",
            "raid0-nvme: error: GPUFLEET_NVME_COUNT is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    (
        "run-setup.sh",
        {"GPUFLEET_SETUP_SCRIPTS": ""},
        (),
        ["run-setup: error: GPUFLEET_SETUP_SCRIPTS is not set (from /etc/gpufleet/node.env)"],
    ),
    (
        "shared-storage.sh",
        {"GPUFLEET_SHARED_DIR": ""},
        (),
        [
            "shared-storage: error: GPUFLEET_SHARED_DIR is not set (from /etc/gpufleet/node.env)",
            "shared-storage: error: GPUFLEET_SHARED_STORAGE_TAG is not set (from /etc/gpufleet/node.env)",
        ],
    ),
    (
        "spot-watcher.sh",
        {},
        (),
        ["spot-watcher: error: GPUFLEET_SPOT_WATCHER is not set (from /etc/gpufleet/node.env)"],
    ),
    (
        "spot-watcher.sh",
        {"GPUFLEET_SPOT_WATCHER": "1", "GPUFLEET_LIFECYCLE_HOOK": "gpufleet-checkpoint"},
        (),
        ["spot-watcher: error: GPUFLEET_AUTO_SCALING_GROUP is not set (from /etc/gpufleet/node.env)"],
    ),
]


# Scripts that require no setting, and why.
NO_REQUIRED_SETTINGS = {
    "cloudwatch-agent.sh": "its configuration is the file the user data writes, /etc/gpufleet/cloudwatch-agent.json",
    "python-env.sh": "it reads the image's versions manifest alone",
}


def test_every_script_has_a_case():
    assert sorted({script for script, *_ in CASES} | set(NO_REQUIRED_SETTINGS)) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize(("script", "settings", "args", "lines"), CASES, ids=[case[0] for case in CASES])
def test_missing_settings_are_named_together_and_nothing_runs(node, script, settings, args, lines):
    result = node.run(script, check=False, args=args, **settings)

    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (1, lines, "")
    assert node.calls() == []


@pytest.mark.parametrize(
    ("script", "flag", "line"),
    [
        ("efa-env.sh", "GPUFLEET_EFA", "efa-env: disabled (GPUFLEET_EFA=0)"),
        ("gpu-clocks.sh", "GPUFLEET_MAX_CLOCKS", "gpu-clocks: disabled (GPUFLEET_MAX_CLOCKS=0)"),
        ("raid0-nvme.sh", "GPUFLEET_RAID0_NVME", "raid0-nvme: disabled (GPUFLEET_RAID0_NVME=0)"),
        ("spot-watcher.sh", "GPUFLEET_SPOT_WATCHER", "spot-watcher: disabled (GPUFLEET_SPOT_WATCHER=0)"),
    ],
)
def test_a_script_turned_off_needs_no_other_setting(node, script, flag, line):
    result = node.run(script, **{flag: "0"})

    assert (result.stdout.splitlines(), result.stderr) == ([line], "")
    assert node.calls() == []
