"""The rendered user data run on a fake node: it installs the scripts and units, and the installed setup works."""

import hashlib
import json
import subprocess
import tarfile

from gpufleet.catalog import load_catalog
from gpufleet.environment import Environment, Storage
from gpufleet.loading import load_named_environment
from gpufleet.user_data import OPS_SCRIPTS_DIR, operator_scripts_location, render_user_data
from tests.gpufleet.test_user_data import EXISTING_FILE_SYSTEM
from tests.scripts.efa_install import install_efa
from tests.scripts.fake_bin import install_fakes
from tests.scripts.node.conftest import CLUSTER_NODE_METADATA, FAKE_COMMANDS
from tests.scripts.node.test_node_ready import INSTANCE

HOOK = """/usr/local/bin/save-checkpoint --tag "run 42" --note 'it'"'"'s urgent'"""
A100_CLOCKS = "".join(f"1215, {graphics}\n" for graphics in range(1410, 209, -15))


def p4d_environment():
    env = load_named_environment("dev")
    node = env.node.model_copy(update={"mig_profile": "7g.40gb", "checkpoint_hook": HOOK})
    return env.model_copy(update={"node": node})


def run_user_data(node, tmp_path, env: Environment | None = None):
    script = tmp_path / "user-data.sh"
    script.write_text(render_user_data(env or p4d_environment(), load_catalog()["p4d.24xlarge"]))
    script.chmod(0o755)
    return node.run(script)


def install_cloudwatch_agent(node, tmp_path):
    """The image's CloudWatch agent: its ctl keeps the configuration it is handed, in tmp_path/handed.json."""
    ctl = node.root / "opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
    ctl.parent.mkdir(parents=True, exist_ok=True)
    ctl.write_text(f'#!/bin/sh\ncp "{node.root}${{6#file:}}" "{tmp_path}/handed.json"\n')
    ctl.chmod(0o755)


def test_user_data_installs_scripts_units_and_settings(node, tmp_path):
    run_user_data(node, tmp_path)

    installed = sorted(path.name for path in (node.root / "opt/gpufleet/node").iterdir())
    assert installed == [
        "cloudwatch-agent.sh",
        "cluster-address.sh",
        "cluster-user.sh",
        "efa-env.sh",
        "gpu-clocks.sh",
        "mig.sh",
        "node-ready.sh",
        "operator-scripts.sh",
        "python-env.sh",
        "raid0-nvme.sh",
        "run-setup.sh",
        "spot-watcher.sh",
    ]
    # The scripts source it from ../lib beside their own directory.
    assert sorted(path.name for path in (node.root / "opt/gpufleet/lib").iterdir()) == ["helpers.sh"]
    units = node.root / "etc/systemd/system"
    assert (units / "gpufleet-node-setup.service").exists() and (units / "gpufleet-spot-watcher.service").exists()
    assert "nvidia-fabricmanager.service" in (units / "gpufleet-node-setup.service.d/fabric-manager.conf").read_text()
    assert node.calls("systemctl") == [
        ["daemon-reload"],
        ["enable", "gpufleet-spot-watcher.service", "gpufleet-node-setup.service"],
        ["restart", "gpufleet-spot-watcher.service"],
        ["restart", "gpufleet-node-setup.service"],
    ]
    settings = node.root / "etc/gpufleet/node.env"
    shell = subprocess.run(
        ["bash", "-c", f'. "{settings}" && printf %s "$GPUFLEET_CHECKPOINT_HOOK"'], capture_output=True, text=True
    )
    assert shell.stdout == HOOK


def test_running_the_user_data_again_changes_nothing(node, tmp_path):
    run_user_data(node, tmp_path)
    before = {path: path.read_bytes() for path in node.root.rglob("*") if path.is_file()}

    run_user_data(node, tmp_path)

    assert {path: path.read_bytes() for path in node.root.rglob("*") if path.is_file()} == before


def publish_operator_scripts(tmp_path) -> tuple[dict[str, str], str]:
    """The operator scripts' archive in the environment's assets bucket, as operator-scripts.sh fetches it, holding
    the fake health check of fake_commands.py (which logs its call and answers from the state) in place of the real
    one, and the real start script, which join-runs.sh, the step after, calls: the fake AWS CLI's s3_objects, and the
    archive's SHA-256 for the node's settings."""
    fake = tmp_path / "fake-ops"
    fake.mkdir()
    install_fakes(fake, FAKE_COMMANDS, ("node-health-check",))
    archive = tmp_path / "operator-scripts.tar.gz"
    with tarfile.open(archive, "w:gz") as packed:
        packed.add(fake / "node-health-check", arcname="node-health-check.sh")
        packed.add(OPS_SCRIPTS_DIR / "start-run.sh", arcname="start-run.sh")
        # The setup step after operator-scripts that travels in the archive (user_data.py ARCHIVED_SETUP_STEPS).
        packed.add(OPS_SCRIPTS_DIR.parent / "node" / "join-runs.sh", arcname="join-runs.sh")
    objects = {operator_scripts_location(p4d_environment()): str(archive)}
    return objects, hashlib.sha256(archive.read_bytes()).hexdigest()


def boot(node, tmp_path, cluster_key, manifest='{"components": {"aws_ofi_nccl": "1.7.3-aws"}}', imds=None, **state):
    """The installed setup as gpufleet-node-setup.service starts it (settings from node.env, the scratch mount and the
    shared directory moved into tmp_path), on an on-demand p4d with its drives, GPUs, EFA, IMDS (and the items of
    IMDS), the AWS CLI, the cluster user's key, the CloudWatch agent, the health check and the image's versions
    MANIFEST."""
    (node.root / "etc/gpufleet/versions.json").write_text(manifest)
    install_efa(node.root, "ubuntu")
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    s3_objects, archive_sha256 = publish_operator_scripts(tmp_path)
    install_cloudwatch_agent(node, tmp_path)
    node.set_state(
        drives=[[f"nvme{i}n1", "Amazon EC2 NVMe Instance Storage"] for i in range(1, 9)],
        gpus=[{"mig_current": "Disabled", "mig_pending": "Disabled", "profiles": {"7g.40gb": [0, 1, 1]}}] * 8,
        supported_clocks=A100_CLOCKS,
        imds={
            **CLUSTER_NODE_METADATA,
            "instance-id": [[200, INSTANCE]],
            "placement/region": [[200, "us-east-1"]],
            "instance-life-cycle": [[200, "on-demand"]],
            **(imds or {}),
        },
        secrets={"gpufleet-dev-cluster-user-key": cluster_key[0]},
        s3_objects=s3_objects,
        **state,
    )
    node.clear_log()
    return subprocess.run(
        [
            "bash",
            "-c",
            f'. "{node.root}/etc/gpufleet/node.env" && GPUFLEET_SCRATCH_MOUNT={tmp_path / "scratch"} '
            f"GPUFLEET_SHARED_DIR={tmp_path / 'fsx'} GPUFLEET_OPERATOR_SCRIPTS_SHA256={archive_sha256} "
            f'GPUFLEET_IMDS_URL=http://imds.test exec "{node.root}/opt/gpufleet/node/run-setup.sh"',
        ],
        env={
            "PATH": f"{node.bin_dir}:/usr/bin:/bin",
            "GPUFLEET_ROOT": str(node.root),
            "FAKE_STATE": str(node.state_file),
            "FAKE_LOG": str(node.log_file),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def tags(node) -> list[str]:
    """The readiness tag's values in the order the node set them."""
    return [
        args[-1].split('"Value": "')[1].split('"')[0]
        for name, *args in node.calls()
        if name == "aws" and args[:2] == ["ec2", "create-tags"]
    ]


def milestones(node) -> list[str]:
    """The boot's steps that order matters for, as the fake commands logged them: the readiness tag set (but for the
    mark of each step as it starts, which tags() shows), the scratch volume mounted, the health check run."""
    steps = []
    for name, *args in node.calls():
        if name == "aws" and args[:2] == ["ec2", "create-tags"]:
            value = args[-1].split('"Value": "')[1].split('"')[0]
            if not value.startswith("booting: step "):
                steps.append("tag " + value)
        elif name == "mount":
            steps.append("mount")
        elif name == "node-health-check":
            steps.append("health check")
    return steps


def test_installed_setup_runs_every_enabled_script_in_order(node, tmp_path, cluster_key):
    run_user_data(node, tmp_path)

    setup = boot(node, tmp_path, cluster_key)

    assert setup.returncode == 0, setup.stderr
    ran = [line.split("running ")[1] for line in setup.stdout.splitlines() if line.startswith("run-setup: running")]
    # MIG first: enabling it resets the A100s, which would drop clocks locked before. Readiness last.
    assert ran == [
        "raid0-nvme",
        "mig",
        "gpu-clocks",
        "efa-env",
        "cluster-user",
        "cloudwatch-agent",
        "operator-scripts",
        "python-env",
        "node-ready",
    ]
    assert milestones(node) == ["tag booting", "mount", "health check", "tag ready"]
    # The first step is marked; a step that starts while the previous mark is still being set goes unmarked; the marks
    # come in the steps' order, and "ready" last.
    marks = [f"booting: step {index}/9 {name}" for index, name in enumerate(ran[:-1], start=1)]
    set_marks = tags(node)[1:-1]
    assert (tags(node)[0], tags(node)[-1]) == ("booting", "ready")
    assert set_marks[0] == marks[0]
    assert set_marks == [mark for mark in marks if mark in set_marks]
    assert node.state["mounts"] == {str(tmp_path / "scratch"): "/dev/md/scratch"}
    assert ["-lgc", "1410,1410"] in node.calls("nvidia-smi")
    assert node.state["locked_graphics_clocks"] == "1410,1410"
    assert all(gpu["profiles"]["7g.40gb"][1] == 0 for gpu in node.state["gpus"])
    assert "GPUFLEET_EFA_LIBRARY_PATH=" in (node.root / "etc/gpufleet/efa.env").read_text()
    assert node.state["instance_tags"] == {INSTANCE: {"gpufleet:readiness": "ready"}}
    handed = json.loads((tmp_path / "handed.json").read_text())
    assert handed["metrics"]["metrics_collected"]["mem"]["append_dimensions"] == {"Market": "on-demand"}
    assert handed["metrics"]["namespace"] == "gpufleet/dev"
    # The installed checker, beside the installed cluster-user.sh.
    assert (
        (node.root / "home/gpufleet/.ssh/config")
        .read_text()
        .startswith(f'Match exec "{node.root}/opt/gpufleet/node/cluster-address.sh %h 10.40.0.0/20"\n')
    )


def test_a_failing_health_check_fails_the_setup_and_leaves_the_node_not_ready(node, tmp_path, cluster_key):
    run_user_data(node, tmp_path)

    setup = boot(node, tmp_path, cluster_key, health_output="FAIL efa: 3 EFA devices (expected 4)", health_exit=1)

    assert setup.returncode == 1
    assert milestones(node) == ["tag booting", "mount", "health check", "tag not ready: health check failed: efa"]
    assert setup.stderr.splitlines()[-1] == "run-setup: error: failed: node-ready (see the lines above)"


def test_a_failed_setup_step_leaves_the_node_not_ready_without_checking_it(node, tmp_path, cluster_key):
    run_user_data(node, tmp_path)

    setup = boot(node, tmp_path, cluster_key, manifest="{}")  # efa-env.sh finds no aws-ofi-nccl version in it

    assert setup.returncode == 1
    assert milestones(node) == ["tag booting", "mount", "tag not ready: setup failed: efa-env"]
    assert setup.stderr.splitlines()[-1] == "run-setup: error: failed: efa-env node-ready (see the lines above)"


def test_a_failing_setup_script_does_not_stop_the_others(node, tmp_path):
    run_user_data(node, tmp_path)
    node.set_state(drives=[], gpus=[], supported_clocks="")

    setup = node.run(
        node.root / "opt/gpufleet/node/run-setup.sh",
        check=False,
        GPUFLEET_SETUP_SCRIPTS="gpu-clocks efa-env",
        GPUFLEET_MAX_CLOCKS="1",
        GPUFLEET_GPU_COUNT="8",
        GPUFLEET_GPU_COMPUTE_CAPABILITY="8.0",
        GPUFLEET_EFA="0",
    )

    assert setup.returncode == 1
    assert "run-setup: running efa-env" in setup.stdout
    assert "run-setup: error: failed: gpu-clocks (see the lines above)" in setup.stderr


def test_the_installed_setup_mounts_the_shared_storage_before_the_node_is_checked(node, tmp_path, cluster_key):
    """dev with an existing file system (storage.existing): the user data installs shared-storage.sh, and the setup
    unit's run mounts the file system of the node's tag before the health check and the readiness tag."""
    source = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh"
    env = p4d_environment().model_copy(update={"storage": Storage.model_validate(EXISTING_FILE_SYSTEM)})
    run_user_data(node, tmp_path, env)

    setup = boot(
        node,
        tmp_path,
        cluster_key,
        imds={"tags/instance/gpufleet:lustre-mount": [[200, source]]},
        lustre={"reachable": [source]},
    )

    assert setup.returncode == 0, setup.stderr
    ran = [line.split("running ")[1] for line in setup.stdout.splitlines() if line.startswith("run-setup: running")]
    assert ran == [
        "raid0-nvme",
        "mig",
        "gpu-clocks",
        "efa-env",
        "shared-storage",
        "cluster-user",
        "cloudwatch-agent",
        "operator-scripts",
        "python-env",
        "node-ready",
        "join-runs",
    ]
    assert milestones(node) == ["tag booting", "mount", "mount", "health check", "tag ready"]
    assert node.state["mounts"] == {str(tmp_path / "scratch"): "/dev/md/scratch", str(tmp_path / "fsx"): source}
