"""The boot order a node's readiness rests on, with run-setup.sh and node-ready.sh as the user data installs them and a
stand-in for a step that mounts storage: the node is marked booting, the storage is mounted, the health check runs,
and only then is the node marked ready; a step that fails, or a failing check, leaves it not ready with the reason.

The stand-in takes the place of shared-storage.sh (another part of issue 20) so that this order is tested whatever
that script does: it mounts a device with the fake mount of fake_commands.py and fails, in one line, when it cannot.
"""

import shutil

import pytest

from tests.scripts.fake_bin import install_fakes
from tests.scripts.node.conftest import FAKE_COMMANDS, SCRIPTS_DIR
from tests.scripts.node.test_node_ready import INSTANCE, install_health_check
from tests.scripts.node.test_user_data_on_node import milestones, tags

STORAGE_STEP = """#!/usr/bin/env bash
set -euo pipefail
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"
mount "$STORAGE_DEVICE" "$STORAGE_DIR" || die "cannot mount $STORAGE_DEVICE at $STORAGE_DIR"
"""
DEVICE = "/dev/nvme1n1"


@pytest.fixture
def boot(node, tmp_path):
    """A node with run-setup.sh, node-ready.sh and the storage stand-in installed under /opt/gpufleet, IMDS, the AWS
    CLI, the health check and a device holding a file system; boot(steps, **state) runs the setup as the unit does."""
    installed = node.root / "opt/gpufleet/node"
    installed.mkdir(parents=True)
    for name in ("run-setup.sh", "node-ready.sh"):
        shutil.copy(SCRIPTS_DIR / name, installed / name)
    (installed / "shared-storage.sh").write_text(STORAGE_STEP)
    (installed / "shared-storage.sh").chmod(0o755)
    (node.root / "opt/gpufleet/lib").mkdir()
    shutil.copy(SCRIPTS_DIR.parent / "lib/helpers.sh", node.root / "opt/gpufleet/lib/helpers.sh")
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    install_health_check(node)
    storage = tmp_path / "shared"
    storage.mkdir()

    def boot(steps: str, **state: object):
        node.set_state(
            **{
                "drives": [["nvme1n1", "Amazon Elastic Block Store"]],
                "filesystems": {DEVICE: "lustre"},
                "imds": {"instance-id": [[200, INSTANCE]], "placement/region": [[200, "us-east-1"]]},
                **state,
            }
        )
        return node.run(
            installed / "run-setup.sh",
            check=False,
            GPUFLEET_SETUP_SCRIPTS=steps,
            GPUFLEET_READINESS_TAG="gpufleet:readiness",
            GPUFLEET_IMDS_URL="http://imds.test",
            STORAGE_DEVICE=DEVICE,
            STORAGE_DIR=str(storage),
        )

    return boot


def readiness(node) -> str:
    return node.state["instance_tags"][INSTANCE]["gpufleet:readiness"]


def test_the_node_is_marked_ready_after_the_storage_is_mounted_and_the_check_passed(node, boot):
    setup = boot("shared-storage node-ready")

    assert setup.returncode == 0, setup.stderr
    assert milestones(node) == ["tag booting", "mount", "health check", "tag ready"]
    # Each step's mark is set while it runs, and lands before the next mark and before "ready".
    assert tags(node) == ["booting", "booting: step 1/2 shared-storage", "ready"]
    assert readiness(node) == "ready"
    assert setup.stdout.splitlines()[-1] == "run-setup: done: shared-storage node-ready"


def test_storage_that_cannot_be_mounted_leaves_the_node_not_ready_unchecked(node, boot):
    setup = boot("shared-storage node-ready", filesystems={})

    assert setup.returncode == 1
    assert milestones(node) == [
        "tag booting",
        "mount",
        "tag not ready: setup failed: shared-storage",
    ]
    assert readiness(node) == "not ready: setup failed: shared-storage"
    assert setup.stderr.splitlines()[-3:] == [
        f"shared-storage: error: cannot mount {DEVICE} at {node.root.parent / 'shared'}",
        "node-ready: error: not ready: setup failed: shared-storage",
        "run-setup: error: failed: shared-storage node-ready (see the lines above)",
    ]


def test_a_failing_check_after_the_mount_leaves_the_node_not_ready_naming_the_checks(node, boot):
    failing = "PASS driver: driver 580.95.05\nFAIL efa: 3 EFA devices (expected 4)\nFAIL gpu-health: 1 GPU(s) to reset"

    setup = boot("shared-storage node-ready", health_output=failing, health_exit=1)

    assert setup.returncode == 1
    assert milestones(node) == [
        "tag booting",
        "mount",
        "health check",
        "tag not ready: health check failed: efa gpu-health",
    ]
    # The check's own lines are in the unit's output (its journal and the console), where the tag sends the operator.
    assert "FAIL efa: 3 EFA devices (expected 4)" in setup.stdout.splitlines()


def test_a_rebooted_node_is_no_longer_ready_while_its_setup_runs_again(node, boot):
    boot("shared-storage node-ready")
    assert readiness(node) == "ready"
    node.clear_log()

    setup = boot("shared-storage node-ready", filesystems={}, instance_tags=node.state["instance_tags"])

    assert setup.returncode == 1
    assert milestones(node) == [
        "tag booting",
        "mount",
        "tag not ready: setup failed: shared-storage",
    ]


def test_without_node_ready_the_setup_leaves_the_readiness_tag_alone(node, boot):
    setup = boot("shared-storage")

    assert setup.returncode == 0, setup.stderr
    assert milestones(node) == ["mount"]
