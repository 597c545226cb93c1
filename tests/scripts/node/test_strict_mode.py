"""Strict mode, as behaviour: a step of a node script that fails stops the script with that step's exit status,
and nothing after it runs (`set -euo pipefail`). Each case fails one call in the middle of a script on the fake
node and names a later call that must not be made."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
from collections.abc import Callable

import pytest

from gpufleet.user_data import operator_scripts_archive
from tests.gpufleet.ops.test_runs import RUN_ID
from tests.scripts.efa_install import install_efa
from tests.scripts.failing_step import FAILED_STATUS, Call, Case, StepProbe, accounted_for, scripts_in
from tests.scripts.fake_bin import install_fakes
from tests.scripts.node.conftest import CLUSTER_NODE_METADATA, FAKE_COMMANDS, SCRIPTS_DIR, FakeNode
from tests.scripts.node.test_deep_learning_ami import install_plugin, install_venv
from tests.scripts.node.test_join_runs import describe

BLOCK = "cr-0123456789abcdef0"
# The head of join-runs.sh's run: the kernel completes connections to a listening socket without an accept.
LISTENING_HEAD = socket.create_server(("127.0.0.1", 0))
HOOK = "checkpoint-hook --now"  # the watched later step: a command on PATH

CASES = [
    Case(
        "capacity-block-end.sh",
        fails=Call("mkdir", "-p {root}/var/lib/gpufleet/checkpoint-hook-runs"),
        must_not_run=Call("checkpoint-hook"),
        why="the hook run without its record: it would run again on the next warning",
    ),
    Case(
        "cloudwatch-agent.sh",
        fails=Call("sed", "s/@MARKET@/spot/g {root}/etc/gpufleet/cloudwatch-agent.json"),
        must_not_run=Call("mv"),
        why="an empty agent configuration put in place of the last good one",
    ),
    Case(
        "cluster-user.sh",
        fails=Call("chown", "2000:2000 {root}/home/gpufleet"),
        must_not_run=Call("runuser"),
        why="the user's SSH files written into a home that is still root's, which sshd refuses to use (StrictModes)",
    ),
    Case(
        "deep-learning-ami.sh",
        fails=Call("mkdir", "-p {root}/etc/gpufleet"),
        must_not_run=Call("grep"),
        why="the image read, and its files written, after the folder for them could not be made",
    ),
    Case(
        "efa-env.sh",
        fails=Call("chmod", "0644 {root}/etc/gpufleet/efa.env.tmp"),
        must_not_run=Call("mv"),
        why="an environment file put in place with the wrong mode",
    ),
    Case(
        "python-env.sh",
        fails=Call("chmod", "0644 {root}/etc/gpufleet/python.env.tmp"),
        must_not_run=Call("mv"),
        why="a python.env put in place with the wrong mode",
    ),
    Case(
        "join-runs.sh",
        fails=Call("mkdir", "-p {root}/var/lib/gpufleet/run-ranks"),
        must_not_run=Call("systemd-run"),
        why="a run joined without the node's rank recorded: gpufleet logs --node could not find the node (the "
        "failure is in start-run.sh --joined, whose status for root's folders ends this step too)",
    ),
    Case(
        "mig.sh",
        fails=Call("nvidia-smi", "-i 0 -mig 1"),
        must_not_run=Call("nvidia-smi", "-r -i *"),
        why="a GPU reset after nvidia-smi refused to enable MIG",
    ),
    Case(
        "node-ready.sh",
        fails=Call("tr", "-s  "),
        must_not_run=Call("aws"),
        why="a tag value EC2 may refuse, or one cut in the middle of a character, set on the instance",
    ),
    Case(
        "raid0-nvme.sh",
        fails=Call("mkfs.xfs", "-q -K /dev/nvme1n1"),
        must_not_run=Call("mount"),
        why="mounting a drive that was not formatted",
    ),
    Case(
        "shared-storage.sh",
        fails=Call("mkdir", "-p {root}/fsx"),
        must_not_run=Call("mount", "-t lustre *"),
        why="a Lustre mount over a mount point that could not be made",
    ),
    Case(
        "operator-scripts.sh",
        fails=Call("mkdir", "-p {root}/opt/gpufleet/ops"),
        must_not_run=Call("tar", "-xzf *"),
        why="the archive unpacked where no folder could be made",
    ),
    Case(
        "spot-watcher.sh",
        fails=Call("mkdir", "-p {root}/var/lib/gpufleet/checkpoint-hook-runs"),
        must_not_run=Call("checkpoint-hook"),
        why="the hook run without its record: it would run again for the same notice",
    ),
]

# Scripts with no step whose failure strict mode has to catch, and why.
NOTHING_TO_CATCH = {
    "cluster-address.sh": "a check with no side effect: an address that does not resolve is handled (|| exit 1), "
    "and its last command is the answer",
    "gpu-clocks.sh": "every nvidia-smi call is checked: a failure warns and tries the next setting, or stops it",
    "run-setup.sh": "each setup script's failure is collected (|| failed+=) and makes it exit 1 at the end",
}


def capacity_block(node: FakeNode) -> dict[str, str]:
    return {"GPUFLEET_CAPACITY_BLOCK": BLOCK, "GPUFLEET_CHECKPOINT_HOOK": HOOK}


def agent_installed(node: FakeNode) -> dict[str, str]:
    ctl = node.root / "opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
    ctl.parent.mkdir(parents=True)
    ctl.write_text("#!/bin/sh\n")
    ctl.chmod(0o755)
    (node.root / "etc/gpufleet").mkdir(parents=True)
    (node.root / "etc/gpufleet/cloudwatch-agent.json").write_text("{}")
    node.set_state(imds={"instance-life-cycle": [[200, "spot"]]})
    return {"GPUFLEET_IMDS_URL": "http://imds.test"}


def cluster_user_node(node: FakeNode) -> dict[str, str]:
    key = node.root.parent / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    node.set_state(imds=CLUSTER_NODE_METADATA, secrets={"gpufleet-lab-cluster-user-key": key.read_text()})
    return {
        "GPUFLEET_CLUSTER_USER": "gpufleet",
        "GPUFLEET_CLUSTER_UID": "2000",
        "GPUFLEET_CLUSTER_HOME": "/home/gpufleet",
        "GPUFLEET_CLUSTER_KEY_SECRET": "gpufleet-lab-cluster-user-key",
        "GPUFLEET_IMDS_URL": "http://imds.test",
    }


def efa_node(node: FakeNode) -> dict[str, str]:
    install_efa(node.root, "ubuntu")
    manifest = node.root / "etc/gpufleet/versions.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"components": {"aws_ofi_nccl": "1.7.0"}}))
    return {"GPUFLEET_EFA": "1", "GPUFLEET_GPUDIRECT_RDMA": "1"}


def deep_learning_ami_node(node: FakeNode) -> dict[str, str]:
    install_efa(node.root, "ubuntu")
    install_plugin(node)
    install_venv(node)
    return {"GPUFLEET_DEEP_LEARNING_AMI": "pytorch-2.11-ubuntu-24.04", "GPUFLEET_EFA": "1"}


def ampere_gpu_without_mig(node: FakeNode) -> dict[str, str]:
    node.set_state(
        gpus=[{"mig_current": "Disabled", "mig_pending": "Disabled", "profiles": {"1g.5gb": [19, 7, 7]}}],
    )
    return {"GPUFLEET_MIG_PROFILE": "1g.5gb", "GPUFLEET_GPU_COUNT": "1", "GPUFLEET_GPU_COMPUTE_CAPABILITY": "8.0"}


def healthy_node(node: FakeNode) -> dict[str, str]:
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    node.set_state(imds={"instance-id": [[200, "i-0123456789abcdef0"]], "placement/region": [[200, "us-east-1"]]})
    return {"GPUFLEET_READINESS_TAG": "gpufleet:readiness", "GPUFLEET_IMDS_URL": "http://imds.test"}


def one_blank_drive(node: FakeNode) -> dict[str, str]:
    node.set_state(drives=[["nvme1n1", "Amazon EC2 NVMe Instance Storage"]])
    return {
        "GPUFLEET_RAID0_NVME": "1",
        "GPUFLEET_SCRATCH_MOUNT": str(node.root / "scratch"),
        "GPUFLEET_NVME_COUNT": "1",
        "GPUFLEET_NVME_WAIT_SECONDS": "0",
    }


def tagged_with_a_file_system(node: FakeNode) -> dict[str, str]:
    source = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh"
    node.set_state(imds={"tags/instance/gpufleet:lustre-mount": [[200, source]]}, lustre={"reachable": [source]})
    return {
        "GPUFLEET_SHARED_DIR": str(node.root / "fsx"),
        "GPUFLEET_SHARED_STORAGE_TAG": "gpufleet:lustre-mount",
        "GPUFLEET_IMDS_URL": "http://imds.test",
    }


def archive_in_its_bucket(node: FakeNode) -> dict[str, str]:
    archive = node.root.parent / "operator-scripts.tar.gz"
    archive.write_bytes(operator_scripts_archive())
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    url = "s3://cdk-hnb659fds-assets-123456789012-eu-west-1/0123abcd.gz"
    node.set_state(imds={"placement/region": [[200, "eu-west-1"]]}, s3_objects={url: str(archive)})
    return {
        "GPUFLEET_OPERATOR_SCRIPTS": url,
        "GPUFLEET_OPERATOR_SCRIPTS_SHA256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "GPUFLEET_IMDS_URL": "http://imds.test",
    }


def run_described_with_its_head_answering(node: FakeNode) -> dict[str, str]:
    """A torchrun run on the shared file system whose head (a port of this machine, kept listening for the test
    session) answers."""
    shared = node.root.parent / "fsx"
    directory = describe(shared, RUN_ID, LISTENING_HEAD.getsockname()[1])
    assert directory.is_dir()
    return {"GPUFLEET_SHARED_DIR": str(shared), "GPUFLEET_CLUSTER_USER": "gpufleet", "GPUFLEET_CLUSTER_UID": "2000"}


def interruption_notice(node: FakeNode) -> dict[str, str]:
    node.set_state(imds={"spot/instance-action": [[200, '{"action": "terminate", "time": "2024-05-01T12:02:00Z"}']]})
    return {
        "GPUFLEET_SPOT_WATCHER": "1",
        "GPUFLEET_IMDS_URL": "http://imds.test",
        "GPUFLEET_POLL_SECONDS": "0",
        "GPUFLEET_WATCH_ITERATIONS": "1",
        "GPUFLEET_CHECKPOINT_HOOK": HOOK,
    }


def pytorch_image(node: FakeNode) -> dict[str, str]:
    """An image with a PyTorch virtualenv; mktemp answers with a name of its own so the failing chmod is known."""
    manifest = node.root / "etc/gpufleet/versions.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"paths": {"python_venv": "/opt/gpufleet/pytorch"}}))
    mktemp = node.bin_dir / "mktemp"
    mktemp.write_text('#!/bin/sh\n: >"${1%.XXXXXX}.tmp"\necho "${1%.XXXXXX}.tmp"\n')
    mktemp.chmod(0o755)
    return {}


# Each script's node and settings, up to the failing step.
PREPARE: dict[str, Callable[[FakeNode], dict[str, str]]] = {
    "capacity-block-end.sh": capacity_block,
    "cloudwatch-agent.sh": agent_installed,
    "cluster-user.sh": cluster_user_node,
    "deep-learning-ami.sh": deep_learning_ami_node,
    "efa-env.sh": efa_node,
    "python-env.sh": pytorch_image,
    "join-runs.sh": run_described_with_its_head_answering,
    "mig.sh": ampere_gpu_without_mig,
    "node-ready.sh": healthy_node,
    "operator-scripts.sh": archive_in_its_bucket,
    "raid0-nvme.sh": one_blank_drive,
    "shared-storage.sh": tagged_with_a_file_system,
    "spot-watcher.sh": interruption_notice,
}
ARGUMENTS = {
    "capacity-block-end.sh": [BLOCK, "2026-12-01T11:30:00Z"],
}


def test_every_script_has_a_failing_step_or_a_reason_for_none():
    assert accounted_for(CASES, NOTHING_TO_CATCH) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.script)
def test_a_failing_step_stops_the_script(node, tmp_path, case):
    settings = PREPARE[case.script](node)
    path = f"{node.bin_dir}:/usr/bin:/bin"
    probe = StepProbe(tmp_path / "probe", path)
    stopped_at_the_failure = probe.install(case, root=str(node.root))

    result = node.run(
        case.script, check=False, args=ARGUMENTS.get(case.script, ()), PATH=f"{probe.bin_dir}:{path}", **settings
    )

    assert probe.calls() == stopped_at_the_failure, result.stdout + result.stderr
    assert result.returncode == FAILED_STATUS, result.stderr
