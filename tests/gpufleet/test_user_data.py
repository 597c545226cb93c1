"""render_user_data: one bash script per environment, only the enabled node scripts; the launch template carries it
gzip-compressed, under EC2's 16 KiB limit."""

import base64
import gzip
import hashlib
import io
import json
import random
import re
import shlex
import subprocess
import tarfile
from pathlib import PurePosixPath

import pytest

import gpufleet.user_data as user_data
from gpufleet.catalog import load_catalog
from gpufleet.environment import CapacityBlock, Storage
from gpufleet.errors import GpufleetError
from gpufleet.loading import environment_files, load_environments, load_named_environment
from gpufleet.user_data import (
    SCRIPTS_DIR,
    compressed_user_data,
    launch_template_user_data,
    node_settings,
    operator_scripts_archive,
    render_user_data,
)

# The shipped environments whose nodes run this user data: the fleet flavour's (eks nodes boot EKS's image).
SHIPPED = [env.name for env in load_environments(environment_files()) if env.flavour == "fleet"]
# EC2's limit on user data "in raw form, before it is base64-encoded": 16 KB
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html).
EC2_USER_DATA_LIMIT = 16384
ALL_SCRIPTS = {
    "raid0-nvme",
    "gpu-clocks",
    "mig",
    "efa-env",
    "cluster-user",
    "cluster-address",
    "shared-storage",
    "cloudwatch-agent",
    "operator-scripts",
    "python-env",
    "node-ready",
    "run-setup",
    "spot-watcher",
}
# What each shipped environment turns on (environments/*.yaml): h100 is all on-demand, so it has no spot watcher;
# p5-block is all on-demand too, but its nodes belong to an Auto Scaling group, whose terminations the watcher sees,
# and to a Capacity Block, whose end runs capacity-block-end; prod and elastic have shared storage, and elastic boots
# the Deep Learning AMI, whose layout deep-learning-ami.sh reads.
EXPECTED_SCRIPTS = {
    "dev": ALL_SCRIPTS - {"mig", "shared-storage"},
    "elastic": ALL_SCRIPTS - {"mig"} | {"deep-learning-ami"},
    "prod": ALL_SCRIPTS - {"mig"},
    "h100": ALL_SCRIPTS - {"spot-watcher", "mig", "shared-storage"},
    "p5-block": ALL_SCRIPTS - {"mig", "shared-storage"} | {"capacity-block-end"},
}
# An existing FSx for Lustre file system (storage.existing), the shared storage of everything_on().
EXISTING_FILE_SYSTEM = {
    "existing": {
        "file_system_id": "fs-0123456789abcdef0",
        "dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "mount_name": "abcdefgh",
        "security_group_id": "sg-0123456789abcdef0",
    }
}


def render(env):
    return render_user_data(env, load_catalog()[env.instance_type])


def compressed_size(env) -> int:
    return len(compressed_user_data(env, load_catalog()[env.instance_type]))


def with_node(env, **node):
    return env.model_copy(update={"node": env.node.model_copy(update=node)})


def everything_on():
    """A p4d environment with every node option on (spot nodes, EFA, RAID0, clocks, MIG, a hook, shared storage)."""
    dev = load_named_environment("dev")
    return with_node(
        dev.model_copy(update={"storage": Storage.model_validate(EXISTING_FILE_SYSTEM)}),
        raid0_nvme=True,
        max_clocks=True,
        mig_profile="1g.5gb",
        checkpoint_hook="/usr/local/bin/save-checkpoint --bucket s3://ml-ckpt/run-42 --urgent",
    )


def installed_scripts(user_data: str) -> set[str]:
    return set(re.findall(r'^write_file "\$root/opt/gpufleet/node/([a-z0-9-]+)\.sh"', user_data, re.MULTILINE))


def settings(user_data: str) -> dict[str, str]:
    exports = re.findall(r"^export (GPUFLEET_\w+)=(.*)$", user_data, re.MULTILINE)
    return {name: "".join(shlex.split(value)) for name, value in exports}


def test_every_shipped_environment_is_covered():
    assert sorted(SHIPPED) == sorted(EXPECTED_SCRIPTS)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_environment_user_data_is_valid_bash_under_the_limit(name, tmp_path):
    user_data = render(load_named_environment(name))
    script = tmp_path / "user-data.sh"
    script.write_text(user_data)

    assert user_data.startswith("#!/bin/bash\n")
    assert compressed_size(load_named_environment(name)) < EC2_USER_DATA_LIMIT
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


@pytest.mark.parametrize("name", SHIPPED)
def test_only_the_enabled_scripts_are_in_the_user_data(name):
    user_data = render(load_named_environment(name))

    assert installed_scripts(user_data) == EXPECTED_SCRIPTS[name]
    assert ("gpufleet-spot-watcher.service" in user_data) == ("spot-watcher" in EXPECTED_SCRIPTS[name])
    for script in ALL_SCRIPTS - EXPECTED_SCRIPTS[name]:
        assert f"{script}.sh" not in user_data


def test_every_option_on_p4d_installs_every_script():
    user_data = render(everything_on())

    assert installed_scripts(user_data) == ALL_SCRIPTS
    assert "fabric-manager.conf" in user_data


@pytest.mark.parametrize("instance_type", sorted(load_catalog()))
def test_every_option_on_every_catalog_type_leaves_room_under_the_limit(instance_type):
    """With every node option on (MIG where the GPU has it) the compressed user data leaves 2 KiB of EC2's 16 KiB
    for node features to grow: the scripts needed only after boot (the operator scripts, the run scripts start-run.sh
    and stop-run.sh, the default checkpoint hook) travel in the operator scripts' archive (operator_scripts_archive)."""
    instance = load_catalog()[instance_type]
    env = everything_on().model_copy(update={"instance_type": instance_type})
    env = with_node(env, mig_profile=instance.mig_profiles[0] if instance.mig_profiles else None)
    assert compressed_size(env) < EC2_USER_DATA_LIMIT - 2048


def test_the_launch_template_carries_the_script_gzip_compressed_and_base64_encoded():
    env, instance = everything_on(), load_catalog()["p4d.24xlarge"]
    carried = base64.b64decode(launch_template_user_data(env, instance), validate=True)

    assert carried[:2] == b"\x1f\x8b"  # gzip's magic number: cloud-init uncompresses such user data
    assert gzip.decompress(carried).decode() == render_user_data(env, instance)
    assert launch_template_user_data(env, instance) == launch_template_user_data(env, instance)


def test_the_node_gets_the_scripts_without_their_comment_lines():
    user_data = render(everything_on())
    for name in ALL_SCRIPTS:
        source = (SCRIPTS_DIR / f"{name}.sh").read_text().splitlines()
        code = [line for line in source[1:] if line.strip() and not line.lstrip().startswith("#")]
        assert all(line in user_data.splitlines() for line in code), name
        assert not [
            line
            for line in source[1:]
            if line.lstrip().startswith("# ")
            and line in user_data.splitlines()
            and not line.lstrip().startswith("# shellcheck")
        ], name


@pytest.mark.parametrize(
    ("node", "left_out"),
    [
        ({"raid0_nvme": False}, {"raid0-nvme"}),
        ({"max_clocks": False}, {"gpu-clocks"}),
        ({"raid0_nvme": False, "max_clocks": False, "mig_profile": None}, {"raid0-nvme", "gpu-clocks", "mig"}),
    ],
)
def test_options_turned_off_leave_their_scripts_out(node, left_out):
    user_data = render(with_node(everything_on(), **node))

    assert installed_scripts(user_data) == ALL_SCRIPTS - left_out
    setup_order = [
        s
        for s in (
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
        )
        if s not in left_out
    ]
    assert settings(user_data)["GPUFLEET_SETUP_SCRIPTS"] == " ".join(setup_order)


@pytest.mark.parametrize(("instance_type", "capability"), [("p4d.24xlarge", "8.0"), ("p5.48xlarge", "9.0")])
def test_node_scripts_get_the_compute_capability_of_the_catalog(instance_type, capability):
    settings = node_settings(everything_on(), load_catalog()[instance_type])

    assert settings["GPUFLEET_GPU_COMPUTE_CAPABILITY"] == capability


@pytest.mark.parametrize(
    ("ami", "profile"),
    [
        ({"ssm_parameter": "/gpufleet/ami/ubuntu2204-cuda12"}, "ubuntu2204-cuda12"),
        ({"ssm_parameter": "/team/images/gpu"}, ""),
        ({"ssm_parameter": None, "id": "ami-0123456789abcdef0"}, ""),
    ],
)
def test_node_health_check_gets_the_profile_of_the_image_parameter(ami, profile):
    env = everything_on()
    env = env.model_copy(update={"ami": env.ami.model_copy(update=ami)})
    assert node_settings(env, load_catalog()[env.instance_type])["GPUFLEET_AMI_PROFILE"] == profile


DEEP_LEARNING_AMI = {"ssm_parameter": None, "deep_learning_ami": "pytorch-2.11-ubuntu-24.04"}


def on_the_deep_learning_ami(env):
    return env.model_copy(update={"ami": env.ami.model_copy(update=DEEP_LEARNING_AMI)})


def test_a_deep_learning_ami_node_reads_its_layout_before_the_efa_environment():
    user_data = render(on_the_deep_learning_ami(everything_on()))

    assert installed_scripts(user_data) == ALL_SCRIPTS | {"deep-learning-ami"}
    found = settings(user_data)
    assert found["GPUFLEET_SETUP_SCRIPTS"] == (
        "raid0-nvme mig gpu-clocks deep-learning-ami efa-env shared-storage cluster-user cloudwatch-agent "
        "operator-scripts python-env node-ready join-runs"
    )
    assert found["GPUFLEET_DEEP_LEARNING_AMI"] == "pytorch-2.11-ubuntu-24.04"
    assert found["GPUFLEET_IMAGE_PYTHON_VENV"] == "/opt/pytorch"
    # efa-env.sh reads what deep-learning-ami.sh wrote, in place of the versions manifest the DLAMI lacks.
    assert found["GPUFLEET_VERSIONS_MANIFEST"] == "/etc/gpufleet/deep-learning-ami.json"
    # No versions manifest and no pipeline profile: the health check does not compare the image's profile.
    assert found["GPUFLEET_AMI_PROFILE"] == ""


def test_without_efa_a_deep_learning_ami_node_still_writes_its_python_env():
    env = on_the_deep_learning_ami(everything_on()).model_copy(update={"efa": False})

    assert {"deep-learning-ami"} <= installed_scripts(render(env))
    assert "efa-env" not in installed_scripts(render(env))


def test_other_images_get_no_deep_learning_ami_settings():
    """Their user data does not grow: the settings exist only on a Deep Learning AMI's nodes."""
    for env in (everything_on(), load_named_environment("h100")):
        found = node_settings(env, load_catalog()[env.instance_type])
        dlami_settings = {"GPUFLEET_DEEP_LEARNING_AMI", "GPUFLEET_IMAGE_PYTHON_VENV", "GPUFLEET_VERSIONS_MANIFEST"}
        assert not dlami_settings & set(found)
        assert "deep-learning-ami" not in installed_scripts(render(env))


@pytest.mark.parametrize("instance_type", sorted(load_catalog()))
def test_every_option_on_a_deep_learning_ami_fits_ec2s_limit(instance_type):
    instance = load_catalog()[instance_type]
    env = on_the_deep_learning_ami(everything_on()).model_copy(update={"instance_type": instance_type})
    env = with_node(env, mig_profile=instance.mig_profiles[0] if instance.mig_profiles else None)
    assert compressed_size(env) < EC2_USER_DATA_LIMIT


def test_no_efa_leaves_the_efa_environment_out():
    env = everything_on().model_copy(update={"efa": False})

    assert "efa-env" not in installed_scripts(render(env))


def test_with_every_option_off_the_node_still_sets_up_its_cluster_user_agent_and_readiness():
    env = with_node(everything_on(), raid0_nvme=False, max_clocks=False, mig_profile=None)
    env = env.model_copy(update={"efa": False, "storage": None})

    user_data = render(env)

    assert installed_scripts(user_data) == {
        "cluster-user",
        "cluster-address",
        "cloudwatch-agent",
        "operator-scripts",
        "python-env",
        "node-ready",
        "run-setup",
        "spot-watcher",
    }
    assert (
        settings(user_data)["GPUFLEET_SETUP_SCRIPTS"]
        == "cluster-user cloudwatch-agent operator-scripts python-env node-ready"
    )
    assert "systemctl enable gpufleet-spot-watcher.service gpufleet-node-setup.service\n" in user_data


@pytest.mark.parametrize(
    "hook",
    ["/usr/local/bin/save-checkpoint --urgent", """save "my run" --tag 'it's' $HOME `x` \\n; echo done""", ""],
)
def test_checkpoint_hook_survives_quoting(hook, tmp_path):
    user_data = render(with_node(everything_on(), checkpoint_hook=hook or None))
    settings = user_data.split("<<'GPUFLEET_END_OF_FILE'\n", 1)[1].split("GPUFLEET_END_OF_FILE\n", 1)[0]
    settings_file = tmp_path / "node.env"
    settings_file.write_text(settings)

    shell = subprocess.run(
        ["bash", "-c", f'. "{settings_file}" && printf %s "$GPUFLEET_CHECKPOINT_HOOK"'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )

    assert shell.stdout == hook


def incompressible_hook(length: int) -> str:
    return "/usr/local/bin/save-checkpoint " + "".join(random.Random(7).choices("abcdefghijklmnop0123456789", k=length))


def test_too_large_user_data_is_a_clear_error():
    env = with_node(everything_on(), checkpoint_hook=incompressible_hook(20000))
    with pytest.raises(
        GpufleetError,
        match=r"^environments/dev.yaml: node: the user data is \d+ bytes compressed, "
        r"over EC2's limit of 16384; turn off a node feature or shorten "
        r"node.checkpoint_hook$",
    ):
        launch_template_user_data(env, load_catalog()["p4d.24xlarge"])


@pytest.mark.parametrize(("hook_length", "fits"), [(2000, True), (20000, False)])
def test_the_limit_is_on_the_compressed_size(hook_length, fits):
    env = with_node(everything_on(), checkpoint_hook=incompressible_hook(hook_length))
    assert len(render(env).encode()) > EC2_USER_DATA_LIMIT  # the script itself is over 16 KiB either way
    assert (compressed_size(env) <= EC2_USER_DATA_LIMIT) == fits


def test_a_line_that_would_end_a_heredoc_is_refused():
    with pytest.raises(GpufleetError, match="would end the heredoc early"):
        render(with_node(everything_on(), checkpoint_hook="x\nGPUFLEET_END_OF_FILE\ny"))


def with_fleet(env, **fleet):
    return env.model_copy(update={"fleet": env.fleet.model_copy(update=fleet)})


@pytest.mark.parametrize(("rollout", "has_image"), [(None, "0"), ("replace-all", "1")])
def test_every_node_of_an_auto_scaling_group_watches_for_its_termination(rollout, has_image):
    """h100 is all on-demand: as a Spot Fleet its nodes run no watcher; as a group they wait for its termination."""
    h100 = load_named_environment("h100")
    assert "spot-watcher" not in installed_scripts(render(h100))
    group = with_fleet(h100, backend="auto-scaling", type="maintain", rollout=rollout)
    user_data = render(group)
    assert "spot-watcher" in installed_scripts(user_data)
    found = settings(user_data)
    assert {key: found[key] for key in found if "LIFECYCLE" in key or "GROUP" in key or key.endswith("WATCHER")} == {
        "GPUFLEET_SPOT_WATCHER": "1",
        "GPUFLEET_LIFECYCLE_HOOK": "gpufleet-checkpoint",
        "GPUFLEET_AUTO_SCALING_GROUP": "gpufleet-h100-nodes",
        "GPUFLEET_GROUP_NAME_HAS_IMAGE": has_image,
    }


def test_a_spot_fleet_node_gets_no_auto_scaling_settings():
    assert not [key for key in settings(render(load_named_environment("dev"))) if "LIFECYCLE" in key or "GROUP" in key]


def test_the_settings_of_the_dev_environment():
    """environments/dev.yaml (p4d, one spot node, a checkpoint hook, node defaults) on the catalog's p4d.24xlarge."""
    found = node_settings(load_named_environment("dev"), load_catalog()["p4d.24xlarge"])
    # The operator scripts' archive changes with every edit of scripts/ops (test_the_operator_scripts_archive...).
    sha256 = hashlib.sha256(operator_scripts_archive()).hexdigest()
    assert found.pop("GPUFLEET_OPERATOR_SCRIPTS_SHA256") == sha256
    assert found.pop("GPUFLEET_OPERATOR_SCRIPTS") == (
        f"s3://cdk-hnb659fds-assets-123456789012-us-east-1/{hashlib.sha256(sha256.encode()).hexdigest()}.gz"
    )
    assert found == {
        "GPUFLEET_ENVIRONMENT": "dev",
        "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
        "GPUFLEET_SETUP_SCRIPTS": (
            "raid0-nvme gpu-clocks efa-env cluster-user cloudwatch-agent operator-scripts python-env node-ready"
        ),
        "GPUFLEET_RAID0_NVME": "1",
        "GPUFLEET_SCRATCH_MOUNT": "/scratch",
        "GPUFLEET_NVME_COUNT": "8",
        "GPUFLEET_MAX_CLOCKS": "1",
        "GPUFLEET_GPU_COUNT": "8",
        "GPUFLEET_GPU_COMPUTE_CAPABILITY": "8.0",
        "GPUFLEET_MIG_PROFILE": "",
        "GPUFLEET_EFA": "1",
        "GPUFLEET_GPUDIRECT_RDMA": "1",
        "GPUFLEET_EFA_COUNT": "4",
        "GPUFLEET_NVSWITCH": "1",
        "GPUFLEET_MIN_BUSBW": "70.2",
        "GPUFLEET_SPOT_WATCHER": "1",
        "GPUFLEET_CHECKPOINT_HOOK": "/usr/local/bin/save-checkpoint",
        "GPUFLEET_CAPACITY_BLOCK": "",
        "GPUFLEET_AMI_PROFILE": "p4d-ubuntu1804-cuda11",
        "GPUFLEET_CLUSTER_USER": "gpufleet",
        "GPUFLEET_CLUSTER_UID": "2000",
        "GPUFLEET_CLUSTER_HOME": "/home/gpufleet",
        "GPUFLEET_CLUSTER_KEY_SECRET": "gpufleet-dev-cluster-user-key",
        "GPUFLEET_SHARED_DIR": "",
        "GPUFLEET_SHARED_DATA_DIR": "",
        "GPUFLEET_SHARED_STORAGE_TAG": "",
        "GPUFLEET_READINESS_TAG": "gpufleet:readiness",
    }


def test_every_option_off_sets_every_flag_to_zero():
    """h100 is all on-demand; with EFA and every node option off only the cluster user, the agent and readiness are
    set up, and nothing watches."""
    env = with_node(load_named_environment("h100"), raid0_nvme=False, max_clocks=False, checkpoint_hook=None)
    env = env.model_copy(update={"efa": False})
    found = node_settings(env, load_catalog()["p5.48xlarge"])

    assert found["GPUFLEET_SETUP_SCRIPTS"] == "cluster-user cloudwatch-agent operator-scripts python-env node-ready"
    assert {key: found[key] for key in found if found[key] in ("0", "1", "")} == {
        "GPUFLEET_RAID0_NVME": "0",
        "GPUFLEET_MAX_CLOCKS": "0",
        "GPUFLEET_MIG_PROFILE": "",
        "GPUFLEET_EFA": "0",
        "GPUFLEET_GPUDIRECT_RDMA": "1",
        "GPUFLEET_EFA_COUNT": "0",
        "GPUFLEET_NVSWITCH": "1",
        "GPUFLEET_SPOT_WATCHER": "0",
        "GPUFLEET_CHECKPOINT_HOOK": "",
        "GPUFLEET_CAPACITY_BLOCK": "",
        "GPUFLEET_SHARED_DIR": "",
        "GPUFLEET_SHARED_DATA_DIR": "",
        "GPUFLEET_SHARED_STORAGE_TAG": "",
    }


@pytest.mark.parametrize(("nvme_count", "striped"), [(0, False), (1, True)])
def test_raid0_needs_at_least_one_nvme_drive(nvme_count, striped):
    """g5.8xlarge has one NVMe drive (catalog): it is striped alone; a type without any gets no RAID0 script."""
    g5 = load_catalog()["g5.8xlarge"]
    instance = g5.model_copy(update={"nvme": g5.nvme.model_copy(update={"count": nvme_count})})
    env = load_named_environment("dev").model_copy(update={"instance_type": "g5.8xlarge"})

    assert ("raid0-nvme" in node_settings(env, instance)["GPUFLEET_SETUP_SCRIPTS"].split()) == striped


def test_the_user_data_header_says_what_it_installs_and_stops_on_the_first_error():
    lines = render(load_named_environment("dev")).splitlines()[:8]

    assert lines == [
        "#!/bin/bash",
        "# gpufleet node user data for environment dev (p4d.24xlarge), from gpufleet/user_data.py.",
        "# Installs under /opt/gpufleet/node: raid0-nvme, gpu-clocks, efa-env, cluster-user, cloudwatch-agent, "
        "operator-scripts, python-env, node-ready, cluster-address, run-setup, spot-watcher; with their systemd units.",
        "# Runs them; safe to run again. GPUFLEET_ROOT (tests) prefixes every path it writes. The scripts'",
        "# commented sources are scripts/node/ in gpufleet; the launch template carries this file gzip-compressed.",
        "set -euo pipefail",
        "root=${GPUFLEET_ROOT:-}",
        'write_file() { mkdir -p "$(dirname "$1")" && cat >"$1.tmp" && chmod "$2" "$1.tmp" && mv -f "$1.tmp" "$1"; }',
    ]


def test_a_node_with_every_option_off_installs_the_cluster_user_and_agent_steps_and_their_unit():
    env = with_node(load_named_environment("h100"), raid0_nvme=False, max_clocks=False)
    user_data = render(env.model_copy(update={"efa": False}))

    assert (
        "# Installs under /opt/gpufleet/node: cluster-user, cloudwatch-agent, operator-scripts, python-env, "
        "node-ready, cluster-address, run-setup; with their systemd units.\n" in user_data
    )
    assert re.findall(r"^systemctl .*", user_data, re.MULTILINE)[-3:] == [
        "systemctl daemon-reload",
        "systemctl enable gpufleet-node-setup.service",
        "systemctl restart gpufleet-node-setup.service",
    ]


def run_user_data_in(root, user_data: str, tmp_path) -> list[str]:
    """Run the user data with GPUFLEET_ROOT=root and a systemctl that records its arguments; return them."""
    assert "root=${GPUFLEET_ROOT:-}\n" in user_data  # never write outside root
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "systemctl.log"
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$*" >>"{log}"\n')
    (bin_dir / "systemctl").chmod(0o755)
    script = tmp_path / "user-data.sh"
    script.write_text(user_data)
    subprocess.run(
        ["bash", str(script)], check=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "GPUFLEET_ROOT": str(root)}
    )
    return log.read_text().splitlines() if log.exists() else []


def test_the_user_data_writes_scripts_executable_and_the_rest_read_only_then_restarts_the_units(tmp_path):
    root = tmp_path / "node"
    calls = run_user_data_in(root, render(everything_on()), tmp_path)

    modes = {
        str(path.relative_to(root)): oct(path.stat().st_mode & 0o777) for path in root.rglob("*") if path.is_file()
    }
    assert modes == {
        "etc/gpufleet/node.env": "0o644",
        "opt/gpufleet/lib/helpers.sh": "0o644",
        "opt/gpufleet/node/raid0-nvme.sh": "0o755",
        "opt/gpufleet/node/mig.sh": "0o755",
        "opt/gpufleet/node/gpu-clocks.sh": "0o755",
        "opt/gpufleet/node/efa-env.sh": "0o755",
        "opt/gpufleet/node/cluster-user.sh": "0o755",
        "opt/gpufleet/node/shared-storage.sh": "0o755",
        "opt/gpufleet/node/cloudwatch-agent.sh": "0o755",
        "opt/gpufleet/node/cluster-address.sh": "0o755",
        "opt/gpufleet/node/operator-scripts.sh": "0o755",
        "opt/gpufleet/node/python-env.sh": "0o755",
        "opt/gpufleet/node/node-ready.sh": "0o755",
        "opt/gpufleet/node/run-setup.sh": "0o755",
        "opt/gpufleet/node/spot-watcher.sh": "0o755",
        # The default hook's link, usr/local/bin/save-checkpoint, names the copy operator-scripts.sh installs at boot:
        # no file yet (test_the_default_hook_is_linked_where_environments_name_it...).
        "etc/tmpfiles.d/gpufleet-checkpoint.conf": "0o644",
        "etc/systemd/system/gpufleet-spot-watcher.service": "0o644",
        "etc/systemd/system/gpufleet-node-setup.service": "0o644",
        "etc/gpufleet/cloudwatch-agent.json": "0o644",
        "etc/systemd/system/gpufleet-node-setup.service.d/fabric-manager.conf": "0o644",
    }
    assert calls == [
        "daemon-reload",
        "enable gpufleet-spot-watcher.service gpufleet-node-setup.service",
        "restart gpufleet-spot-watcher.service",
        "restart gpufleet-node-setup.service",
    ]


def test_the_helpers_are_written_before_the_scripts_that_source_them():
    written = re.findall(r'^write_file "\$root(/opt/gpufleet/\S+)"', render(everything_on()), re.MULTILINE)

    assert written == [
        "/opt/gpufleet/lib/helpers.sh",
        "/opt/gpufleet/node/raid0-nvme.sh",
        "/opt/gpufleet/node/mig.sh",
        "/opt/gpufleet/node/gpu-clocks.sh",
        "/opt/gpufleet/node/efa-env.sh",
        "/opt/gpufleet/node/shared-storage.sh",
        "/opt/gpufleet/node/cluster-user.sh",
        "/opt/gpufleet/node/cloudwatch-agent.sh",
        "/opt/gpufleet/node/operator-scripts.sh",
        "/opt/gpufleet/node/python-env.sh",
        "/opt/gpufleet/node/node-ready.sh",
        "/opt/gpufleet/node/cluster-address.sh",
        "/opt/gpufleet/node/run-setup.sh",
        "/opt/gpufleet/node/spot-watcher.sh",
    ]


def test_a_node_with_every_option_off_still_gets_the_step_that_installs_the_operator_scripts():
    """h100 is all on-demand: with EFA and every node option off, operator-scripts.sh still installs the health check,
    run-nccl-tests and the run scripts at boot, beside the agent's step; the user data carries none of them."""
    env = with_node(load_named_environment("h100"), raid0_nvme=False, max_clocks=False)
    user_data = render(env.model_copy(update={"efa": False}))

    written = re.findall(r'^write_file "\$root(/opt/gpufleet/\S+)"', user_data, re.MULTILINE)
    assert written == [
        "/opt/gpufleet/lib/helpers.sh",
        "/opt/gpufleet/node/cluster-user.sh",
        "/opt/gpufleet/node/cloudwatch-agent.sh",
        "/opt/gpufleet/node/operator-scripts.sh",
        "/opt/gpufleet/node/python-env.sh",
        "/opt/gpufleet/node/node-ready.sh",
        "/opt/gpufleet/node/cluster-address.sh",
        "/opt/gpufleet/node/run-setup.sh",
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_node_env_holds_every_setting_the_operator_scripts_need_on_the_node(name):
    """What node-health-check.sh and run-nccl-tests.sh require (their require_settings lines) or take as their
    floor, as node.env gives it: no gpufleet or AWS call is needed to run them on the node."""
    env = load_named_environment(name)
    found = node_settings(env, load_catalog()[env.instance_type])
    for setting in (
        "GPUFLEET_GPU_COUNT",
        "GPUFLEET_EFA_COUNT",
        "GPUFLEET_NVSWITCH",
        "GPUFLEET_GPUDIRECT_RDMA",
        "GPUFLEET_INSTANCE_TYPE",
    ):
        assert found[setting] != "", setting
    busbw = {"dev": "70.2", "prod": "70.2", "h100": "438.3", "p5-block": "438.3", "elastic": "438.3"}
    assert found["GPUFLEET_MIN_BUSBW"] == busbw[name]


@pytest.mark.parametrize(("instance_type", "efa", "count"), [("p5.48xlarge", True, "32"), ("p5.48xlarge", False, "0")])
def test_the_health_check_expects_one_efa_device_per_network_card_when_efa_is_on(instance_type, efa, count):
    env = load_named_environment("h100").model_copy(update={"efa": efa})
    assert node_settings(env, load_catalog()[instance_type])["GPUFLEET_EFA_COUNT"] == count


def test_a_capacity_block_node_gets_the_end_of_block_script(tmp_path):
    env = load_named_environment("h100")
    block = CapacityBlock(
        reservation_id="cr-0123456789abcdef0", start="2099-01-05T11:30:00Z", end="2099-01-12T11:30:00Z"
    )
    env = env.model_copy(update={"capacity": env.capacity.model_copy(update={"capacity_block": block})})
    user_data = render(env)

    assert "capacity-block-end" in installed_scripts(user_data)
    assert settings(user_data)["GPUFLEET_CAPACITY_BLOCK"] == "cr-0123456789abcdef0"


def test_the_compressed_script_has_no_timestamp_and_maximum_compression():
    """gzip header (RFC 1952): magic 1f 8b, deflate (08), no flags, MTIME 0, XFL 2 (slowest, best); the OS byte
    after it is the platform's."""
    compressed = compressed_user_data(load_named_environment("dev"), load_catalog()["p4d.24xlarge"])

    assert compressed[:9] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02"


@pytest.mark.parametrize(
    ("size", "problem"),
    [
        (16384, None),
        (
            16385,
            "the user data is 16385 bytes compressed, over EC2's limit of 16384; turn off a node feature or "
            "shorten node.checkpoint_hook",
        ),
    ],
)
def test_the_limit_allows_exactly_16_kib(size, problem, monkeypatch):
    env = load_named_environment("dev")  # validated before the size is faked
    monkeypatch.setattr(user_data, "compressed_user_data", lambda env, instance: b"x" * size)

    assert user_data.user_data_size_problem(env, load_catalog()["p4d.24xlarge"]) == problem


def test_a_file_without_a_final_newline_gets_one_before_the_end_marker():
    assert user_data._write_file("/etc/x.conf", "0600", "a=1") == (
        "write_file \"$root/etc/x.conf\" 0600 <<'GPUFLEET_END_OF_FILE'\na=1\nGPUFLEET_END_OF_FILE\n"
    )
    assert user_data._write_file("/etc/x.conf", "0600", "a=1\n") == (
        "write_file \"$root/etc/x.conf\" 0600 <<'GPUFLEET_END_OF_FILE'\na=1\nGPUFLEET_END_OF_FILE\n"
    )


def test_comment_lines_go_but_the_shebang_code_and_shellcheck_directives_stay():
    script = (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        "# why this is done\n"
        "    # an indented comment\n"
        "    # shellcheck disable=SC2086\n"
        "echo $x  # a trailing comment stays\n"
    )
    assert user_data._without_comments(script) == (
        "#!/bin/bash\nset -euo pipefail\n    # shellcheck disable=SC2086\necho $x  # a trailing comment stays\n"
    )


@pytest.mark.parametrize(
    ("storage", "mount_path"),
    [(EXISTING_FILE_SYSTEM, "/fsx"), ({**EXISTING_FILE_SYSTEM, "mount_path": "/shared"}, "/shared")],
)
def test_shared_storage_is_mounted_before_readiness_and_runs_are_joined_after_it(storage, mount_path):
    env = load_named_environment("dev").model_copy(update={"storage": Storage.model_validate(storage)})
    found = node_settings(env, load_catalog()["p4d.24xlarge"])

    assert (
        found["GPUFLEET_SETUP_SCRIPTS"]
        == "raid0-nvme gpu-clocks efa-env shared-storage cluster-user cloudwatch-agent operator-scripts python-env "
        "node-ready join-runs"
    )
    assert found["GPUFLEET_SHARED_DIR"] == mount_path
    assert found["GPUFLEET_CLUSTER_HOME"] == f"{mount_path}/home/gpufleet"
    assert found["GPUFLEET_SHARED_STORAGE_TAG"] == "gpufleet:lustre-mount"
    # No data repository: nothing on the file system is exported, and data goes anywhere on it.
    assert found["GPUFLEET_SHARED_DATA_DIR"] == mount_path


@pytest.mark.parametrize(("mount_path", "data_dir"), [(None, "/fsx/data"), ("/shared", "/shared/data")])
def test_with_a_data_repository_data_goes_to_the_folder_linked_to_s3_outside_the_home(mount_path, data_dir):
    """prod links its new file system to S3: only MOUNT/data is exported (stacks/storage_stack.py ASSOCIATED_PATH,
    tests/stacks/test_exported_paths.py), and the cluster user's home is beside it, not in it."""
    env = load_named_environment("prod")
    if mount_path:
        env = env.model_copy(update={"storage": env.storage.model_copy(update={"mount_path": mount_path})})
    found = node_settings(env, load_catalog()["p4d.24xlarge"])

    assert found["GPUFLEET_SHARED_DATA_DIR"] == data_dir
    assert not PurePosixPath(found["GPUFLEET_CLUSTER_HOME"]).is_relative_to(data_dir)


def test_the_agent_configuration_on_the_node_is_the_environments():
    """/etc/gpufleet/cloudwatch-agent.json as the user data writes it for environments/dev.yaml (p4d, EFA, spot
    nodes): the journals of both gpufleet units and the kernel's Xid lines to /gpufleet/dev/nodes, GPU and EFA metrics
    and the node-count series to gpufleet/dev; cloudwatch-agent.sh puts the node's market in place of @MARKET@."""
    user_data = render(load_named_environment("dev"))
    written = re.search(
        r"^write_file \"\$root/etc/gpufleet/cloudwatch-agent.json\" 0644 <<'GPUFLEET_END_OF_FILE'\n(.*)\n",
        user_data,
        re.MULTILINE,
    )
    assert written is not None
    assert json.loads(written.group(1)) == {
        "agent": {"metrics_collection_interval": 60},
        "logs": {
            "logs_collected": {
                "journald": {
                    "collect_list": [
                        {
                            "log_group_name": "/gpufleet/dev/nodes",
                            "log_stream_name": "{instance_id}/gpufleet",
                            "units": ["gpufleet-spot-watcher.service", "gpufleet-node-setup.service"],
                        },
                        {
                            "log_group_name": "/gpufleet/dev/nodes",
                            "log_stream_name": "{instance_id}/kernel-xid",
                            "matches": [{"_TRANSPORT": "kernel"}],
                            "filters": [{"type": "include", "expression": "NVRM: Xid"}],
                        },
                    ]
                }
            }
        },
        "metrics": {
            "namespace": "gpufleet/dev",
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [["Market"]],
            "metrics_collected": {
                "nvidia_gpu": {
                    "measurement": [
                        "utilization_gpu",
                        "utilization_memory",
                        "memory_used",
                        "memory_total",
                        "temperature_gpu",
                        "power_draw",
                    ]
                },
                "mem": {"measurement": ["mem_used_percent"], "append_dimensions": {"Market": "@MARKET@"}},
                "efa": {"measurement": ["efa_rx_bytes", "efa_tx_bytes", "efa_rdma_read_bytes", "efa_rdma_write_bytes"]},
            },
        },
    }


def test_without_efa_the_agent_collects_no_efa_metrics():
    env = load_named_environment("dev").model_copy(update={"efa": False})
    assert '"efa":' not in render(env)


def test_the_default_hook_is_linked_where_environments_name_it_with_its_folder_made_now_and_at_every_boot(tmp_path):
    root = tmp_path / "node"
    run_user_data_in(root, render(load_named_environment("dev")), tmp_path)

    link = root / "usr/local/bin/save-checkpoint"
    # The operator scripts' copy, which operator-scripts.sh installs at boot, before the node can be ready for a run.
    assert link.is_symlink() and link.readlink() == root / "opt/gpufleet/ops/save-checkpoint.sh"
    # tmpfiles.d(5): "d" creates the directory with the mode given, at every boot (/run is a tmpfs).
    assert (
        root / "etc/tmpfiles.d/gpufleet-checkpoint.conf"
    ).read_text() == "d /run/gpufleet/checkpoint 1777 root root -\n"
    assert oct((root / "run/gpufleet/checkpoint").stat().st_mode & 0o7777) == "0o1777"


@pytest.mark.parametrize("hook", ["/opt/train/checkpoint.sh", "/usr/local/bin/save-checkpoint-v2", None])
def test_another_hook_or_none_gets_no_default_hook(hook):
    user_data = render(with_node(load_named_environment("dev"), checkpoint_hook=hook))

    assert "save-checkpoint.sh" not in user_data
    assert "tmpfiles" not in user_data


def test_the_operator_scripts_archive_holds_scripts_ops_as_written_executable_and_roots():
    archive = operator_scripts_archive()

    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as unpacked:
        members = {
            member.name: (oct(member.mode), member.uid, member.gid, member.uname, member.mtime)
            for member in unpacked.getmembers()
        }
        contents = {name: unpacked.extractfile(name).read() for name in members}
    assert members == {
        "node-health-check.sh": ("0o755", 0, 0, "", 0),
        "run-nccl-tests.sh": ("0o755", 0, 0, "", 0),
        "start-run.sh": ("0o755", 0, 0, "", 0),
        "stop-run.sh": ("0o755", 0, 0, "", 0),
        "save-checkpoint.sh": ("0o755", 0, 0, "", 0),
        # A setup step after operator-scripts, which run-setup.sh finds there (ARCHIVED_SETUP_STEPS).
        "join-runs.sh": ("0o755", 0, 0, "", 0),
    }
    assert contents == {
        name: (SCRIPTS_DIR.parent / ("node" if name == "join-runs.sh" else "ops") / name).read_bytes()
        for name in members
    }


def test_the_operator_scripts_archive_is_the_same_on_every_synthesis():
    """No timestamp or file name in the gzip header (RFC 1952: MTIME 0, no FNAME flag), so the asset's hash, and with
    it every node's user data, changes only when scripts/ops does."""
    archive = operator_scripts_archive.__wrapped__()

    assert archive == operator_scripts_archive.__wrapped__()
    assert archive[:10] == bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 2, 255])
