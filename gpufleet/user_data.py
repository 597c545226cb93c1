"""Launch-template user data: the node scripts of scripts/node/ assembled, at synth time, into one bash script.

The user data writes the settings to /etc/gpufleet/node.env (shell-quoted ``export`` lines, also read by the
systemd units), installs the scripts' shared helpers as /opt/gpufleet/lib/helpers.sh (scripts/lib/helpers.sh, which
every script sources from ../lib/ beside its own directory), the enabled scripts under /opt/gpufleet/node and their
units and the CloudWatch agent's configuration (gpufleet/monitoring.py), then starts the spot watcher and the node
setup. A feature the environment turns off leaves its script out entirely. Running the user data again rewrites the
same files and re-runs the idempotent setup; the setup unit repeats it at boot.

The operator scripts of scripts/ops/ do not fit beside them: they travel as a gzip-compressed tar archive, a CDK file
asset (operator_scripts_archive, operator_scripts_location), which the setup step operator-scripts.sh fetches and
checks against the archive's SHA-256 at boot and installs under /opt/gpufleet/ops. Scripts needed only after boot go
there: the health check, nccl-tests, the default checkpoint hook, and the run scripts start-run.sh and stop-run.sh,
which `gpufleet run` and `gpufleet stop` call through Run Command and join-runs.sh, the boot step after
operator-scripts, calls to start a run.

The launch template carries the script gzip-compressed: cloud-init uncompresses gzip user data and then treats it
"as if it were not compressed" (source: cloud-init doc/rtd/topics/format.rst, "Gzip Compressed Content", which gives
EC2's ~16384-byte limit as the reason). The scripts go to the nodes without their comment-only lines; with every
option on the compressed user data leaves 2 KiB of EC2's 16 KiB for node features to grow
(tests/gpufleet/test_user_data.py measures every catalog type): a feature that needs more room moves scripts to the
operator scripts' archive.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import shlex
import tarfile
from functools import cache
from pathlib import Path

from gpufleet import shipped_path
from gpufleet.ami import published_profile
from gpufleet.catalog import InstanceType
from gpufleet.constants import (
    BACKEND_AUTO_SCALING,
    CDK_ASSETS_BUCKET,
    CLUSTER_USER_ID,
    CLUSTER_USER_NAME,
    READINESS_TAG_KEY,
    ROLLOUT_REPLACE_ALL,
    SHARED_STORAGE_TAG_KEY,
    TERMINATION_HOOK_NAME,
)
from gpufleet.deep_learning_ami import DeepLearningAmi
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.monitoring import agent_configuration

SCRIPTS_DIR = shipped_path("scripts", "node")
INSTALL_DIR = "/opt/gpufleet/node"
# The operator scripts every node gets, beside the node scripts (the same helpers serve both), installed under
# /opt/gpufleet/ops by operator-scripts.sh: node-ready.sh runs the health check at boot, and a user runs nccl-tests
# from a node; `gpufleet run` and `gpufleet stop` call the run scripts through Run Command (gpufleet/ops/runs.py), and
# join-runs.sh starts a joined run through start-run.sh; the checkpoint hook's callers run save-checkpoint.sh (below).
# They need neither gpufleet nor AWS credentials.
OPS_SCRIPTS_DIR = shipped_path("scripts", "ops")
OPS_INSTALL_DIR = "/opt/gpufleet/ops"
OPS_SCRIPTS = ("node-health-check", "run-nccl-tests", "start-run", "stop-run", "save-checkpoint")
# Setup steps that run after operator-scripts and travel in its archive rather than in the user data, which EC2 caps at
# 16 KiB (test_user_data keeps 2 KiB of it free): run-setup.sh finds a step after operator-scripts under
# OPS_INSTALL_DIR when the user data did not install it.
ARCHIVED_SETUP_STEPS = ("join-runs",)
# run-nccl-tests.sh's floor on a node: the catalog's published all_reduce bus bandwidth less this margin.
NCCL_BUSBW_TOLERANCE = 0.9
HELPERS = shipped_path("scripts", "lib", "helpers.sh")
HELPERS_PATH = "/opt/gpufleet/lib/helpers.sh"
SETTINGS_FILE = "/etc/gpufleet/node.env"
UNIT_DIR = "/etc/systemd/system"
# The default checkpoint hook (scripts/ops/save-checkpoint.sh), at the path the shipped environments name, a link to
# its copy among the operator scripts (it finds the helpers from there; the link waits for operator-scripts.sh to
# install it at boot, before any run can start: a node is ready only after); the folder where it meets the training
# processes (docs/guides/interruptions.md), world-writable with the sticky bit like /tmp, made again at every boot by
# systemd-tmpfiles ("d" lines: create the directory with that mode, tmpfiles.d(5)) since /run is a tmpfs.
DEFAULT_CHECKPOINT_HOOK = "/usr/local/bin/save-checkpoint"
CHECKPOINT_DIR = "/run/gpufleet/checkpoint"
CHECKPOINT_TMPFILES = "/etc/tmpfiles.d/gpufleet-checkpoint.conf"
SETUP_UNIT = "gpufleet-node-setup.service"
WATCHER_UNIT = "gpufleet-spot-watcher.service"
# The one folder of the shared file system linked to S3 where the environment has storage.data_repository: the storage
# stack's association links FileSystemPath /data to s3://BUCKET/PREFIX/data/ (stacks/storage_stack.py), so only
# files under MOUNT/data are exported to the bucket and only they can be made or changed from S3 (auto-import). The
# cluster user's home, the runs' folders (gpufleet/ops/runs.py RUNS_SUBDIR), caches and everything else on the file
# system are outside it: never exported, never imported; root never reads or writes under it.
SHARED_DATA_SUBDIR = "data"
# The runs' package and dataset caches on the shared file system, MOUNT/cache, beside the data folder and never under
# it: nothing there is exported to S3 or made from it. The runs make it and fill it as the cluster user
# (gpufleet/ops/runs.py cache_steps), so a replacement node's setup finds the wheels the others downloaded.
SHARED_CACHE_SUBDIR = "cache"
# Written by the user data, read by scripts/node/cloudwatch-agent.sh (gpufleet/monitoring.py says what is in it).
CLOUDWATCH_AGENT_CONFIG = "/etc/gpufleet/cloudwatch-agent.json"
# EC2 rejects user data over 16 KB "in raw form, before it is base64-encoded" (source: EC2 user guide, "Work with
# instance user data", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html); the raw
# form here is the gzip-compressed script.
USER_DATA_LIMIT_BYTES = 16384
END_OF_FILE = "GPUFLEET_END_OF_FILE"
# Fabric Manager must be up before the GPUs of an NVSwitch system can be used (CUDA error 802 otherwise).
FABRIC_MANAGER_DROP_IN = """[Unit]
Wants=nvidia-fabricmanager.service
After=nvidia-fabricmanager.service
"""


def _flag(enabled: bool) -> str:
    return "1" if enabled else "0"


def setup_scripts(env: Environment, instance: InstanceType) -> list[str]:
    """The boot-time setup scripts this environment enables, in the order they run: mig before gpu-clocks, since
    enabling MIG on Ampere resets the GPU, which would drop clocks locked before it; shared-storage before the
    cluster user, whose home is on it, and before the readiness checks, which a node passes only with its storage
    mounted. Every node gets the cluster user, and runs the CloudWatch agent, so that its journal outlives it;
    node-ready last of those that set the node up, since it judges the node they set up (scripts/node/node-ready.sh);
    with shared storage, join-runs after it: a ready node joins the torchrun runs under way
    (scripts/node/join-runs.sh)."""
    enabled = {
        "raid0-nvme": env.node.raid0_nvme and instance.nvme.count > 0,
        "mig": env.node.mig_profile is not None,
        "gpu-clocks": env.node.max_clocks,
        "deep-learning-ami": deep_learning_ami(env) is not None,
        "efa-env": env.efa and instance.efa_supported,
        "shared-storage": env.storage is not None,
        "cluster-user": True,
        "cloudwatch-agent": True,
        "operator-scripts": True,
        # /etc/gpufleet/python.env: the image's virtualenv, which start-run.sh hands to every run (python-env.sh).
        "python-env": True,
        "node-ready": True,
        "join-runs": env.storage is not None,
    }
    return [name for name, on in enabled.items() if on]


def deep_learning_ami(env: Environment) -> DeepLearningAmi | None:
    """The AWS Deep Learning AMI the nodes boot (ami.deep_learning_ami), None for any other image and on eks."""
    return env.ami.deep_learning if env.ami is not None else None


# What deep-learning-ami.sh writes on a Deep Learning AMI's nodes in the form of the versions manifest they lack, and
# efa-env.sh reads in its place (GPUFLEET_VERSIONS_MANIFEST).
DEEP_LEARNING_AMI_VERSIONS = "/etc/gpufleet/deep-learning-ami.json"


def deep_learning_ami_settings(env: Environment) -> dict[str, str]:
    """What the nodes of a Deep Learning AMI need, which has no versions manifest (none for another image, so that its
    user data does not grow): the variant, which deep-learning-ami.sh and the health check go by, the venv
    deep-learning-ami.sh names in /etc/gpufleet/python.env (empty: the variant has none), and the file efa-env.sh reads
    in place of the manifest."""
    dlami = deep_learning_ami(env)
    if dlami is None:
        return {}
    return {
        "GPUFLEET_DEEP_LEARNING_AMI": dlami.name,
        "GPUFLEET_IMAGE_PYTHON_VENV": dlami.python_venv or "",
        "GPUFLEET_VERSIONS_MANIFEST": DEEP_LEARNING_AMI_VERSIONS,
    }


def watches_spot(env: Environment) -> bool:
    """Spot nodes watch for interruption notices; every node of an Auto Scaling group for its termination."""
    return env.capacity.spot > 0 or env.fleet.backend == BACKEND_AUTO_SCALING


def auto_scaling_settings(env: Environment) -> dict[str, str]:
    """What the node watcher needs to complete the group's termination lifecycle action; none for a Spot Fleet."""
    if env.fleet.backend != BACKEND_AUTO_SCALING:
        return {}
    return {
        "GPUFLEET_LIFECYCLE_HOOK": TERMINATION_HOOK_NAME,
        "GPUFLEET_AUTO_SCALING_GROUP": env.auto_scaling_group_prefix,
        "GPUFLEET_GROUP_NAME_HAS_IMAGE": _flag(env.fleet.image_rollout == ROLLOUT_REPLACE_ALL),
    }


def in_capacity_block(env: Environment) -> bool:
    """Nodes of a Capacity Block get capacity-block-end.sh, which the block's expiration warning runs through SSM
    Run Command (stacks/constructs/capacity_block_warning.py); it needs no unit of its own."""
    return env.capacity.capacity_block is not None


def hook_program(hook: str | None) -> str | None:
    """The program a checkpoint hook command runs, its first word as the shell splits it; None without a hook or
    for one the shell could not split."""
    try:
        words = shlex.split(hook or "")
    except ValueError:
        return None
    return words[0] if words else None


def shared_data_dir(env: Environment) -> str:
    """Where data and checkpoints that must outlive the file system go (GPUFLEET_SHARED_DATA_DIR): MOUNT/data, the
    folder linked to S3, where the environment has a data repository; else the mount path itself (nothing on the file
    system is exported then); empty without shared storage."""
    if env.storage is None:
        return ""
    if env.data_repository_location is None:
        return env.storage.mount_path
    return f"{env.storage.mount_path}/{SHARED_DATA_SUBDIR}"


def installs_default_hook(env: Environment) -> bool:
    return hook_program(env.node.checkpoint_hook) == DEFAULT_CHECKPOINT_HOOK


def node_settings(env: Environment, instance: InstanceType) -> dict[str, str]:
    """The GPUFLEET_* variables the node scripts read (documented in docs/reference/node-settings.md)."""
    scripts = setup_scripts(env, instance)
    return {
        "GPUFLEET_ENVIRONMENT": env.name,
        "GPUFLEET_INSTANCE_TYPE": instance.name,
        "GPUFLEET_SETUP_SCRIPTS": " ".join(scripts),
        "GPUFLEET_RAID0_NVME": _flag("raid0-nvme" in scripts),
        "GPUFLEET_SCRATCH_MOUNT": env.node.scratch_mount,
        "GPUFLEET_NVME_COUNT": str(instance.nvme.count),
        "GPUFLEET_MAX_CLOCKS": _flag("gpu-clocks" in scripts),
        "GPUFLEET_GPU_COUNT": str(instance.gpu.count),
        # mig.sh, gpu-clocks.sh: from Hopper (9.0) on, MIG needs no GPU reset and memory clocks lock deferred.
        "GPUFLEET_GPU_COMPUTE_CAPABILITY": instance.gpu.compute_capability,
        "GPUFLEET_MIG_PROFILE": env.node.mig_profile or "",
        "GPUFLEET_EFA": _flag("efa-env" in scripts),
        "GPUFLEET_GPUDIRECT_RDMA": _flag(instance.gpudirect_rdma),
        # node-health-check.sh: what this node must show (one EFA device per interface the launch template attaches).
        "GPUFLEET_EFA_COUNT": str(expected_efa_devices(env, instance)),
        "GPUFLEET_NVSWITCH": _flag(instance.nvswitch),
        # run-nccl-tests.sh: its pass floor in GB/s (empty where the catalog publishes no bandwidth for the type).
        "GPUFLEET_MIN_BUSBW": nccl_busbw_floor(instance),
        "GPUFLEET_SPOT_WATCHER": _flag(watches_spot(env)),
        "GPUFLEET_CHECKPOINT_HOOK": env.node.checkpoint_hook or "",
        # capacity-block-end.sh: the block this node runs in (empty outside one).
        "GPUFLEET_CAPACITY_BLOCK": env.capacity.capacity_block.reservation_id if env.capacity.capacity_block else "",
        # scripts/ops/node-health-check.sh: the profile the node's image must be built from (its versions.json);
        # empty for an image given by ami.id or by a parameter the AMI pipeline does not write.
        "GPUFLEET_AMI_PROFILE": published_profile(env.image_parameter) or "",
        # cluster-user.sh: the cluster user, and the secret with its key (stacks/constructs/cluster_user/).
        "GPUFLEET_CLUSTER_USER": CLUSTER_USER_NAME,
        "GPUFLEET_CLUSTER_UID": str(CLUSTER_USER_ID),
        # Its home where every node sees it, the shared file system, where the environment has one.
        "GPUFLEET_CLUSTER_HOME": f"{env.storage.mount_path if env.storage else ''}/home/{CLUSTER_USER_NAME}",
        "GPUFLEET_CLUSTER_KEY_SECRET": env.cluster_user_key_secret_name,
        # shared-storage.sh (empty: no shared storage); checkpoints that must outlive the file system go under
        # GPUFLEET_SHARED_DATA_DIR, the only folder exported to S3 (save-checkpoint.sh names it to training code).
        "GPUFLEET_SHARED_DIR": env.storage.mount_path if env.storage else "",
        "GPUFLEET_SHARED_DATA_DIR": shared_data_dir(env),
        "GPUFLEET_SHARED_STORAGE_TAG": SHARED_STORAGE_TAG_KEY if env.storage else "",
        # operator-scripts.sh: the archive of scripts/ops it installs.
        "GPUFLEET_OPERATOR_SCRIPTS": operator_scripts_location(env),
        "GPUFLEET_OPERATOR_SCRIPTS_SHA256": operator_scripts_sha256(),
        # node-ready.sh: the instance tag that says whether the node is ready for jobs.
        "GPUFLEET_READINESS_TAG": READINESS_TAG_KEY,
        **auto_scaling_settings(env),
        **deep_learning_ami_settings(env),
    }


@cache
def operator_scripts_archive() -> bytes:
    """scripts/ops and the ARCHIVED_SETUP_STEPS of scripts/node as the nodes get them: a gzip-compressed tar of the
    scripts, each 0755 and root's, byte for byte the same on every synthesis (no timestamps, no names of the machine
    that made it)."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.USTAR_FORMAT) as archive,
    ):
        sources = [OPS_SCRIPTS_DIR / f"{name}.sh" for name in OPS_SCRIPTS]
        for source in sources + [SCRIPTS_DIR / f"{name}.sh" for name in ARCHIVED_SETUP_STEPS]:
            name, content = source.stem, source.read_bytes()
            member = tarfile.TarInfo(f"{name}.sh")
            member.size, member.mode, member.mtime = len(content), 0o755, 0
            archive.addfile(member, io.BytesIO(content))
    return buffer.getvalue()


def operator_scripts_sha256() -> str:
    return hashlib.sha256(operator_scripts_archive()).hexdigest()


def operator_scripts_location(env: Environment) -> str:
    """Where the environment's nodes fetch operator_scripts_archive: the object stacks/constructs/operator_scripts.py
    publishes in the CDK assets bucket of the environment's account and region. Its asset hash is the archive's
    SHA-256 (a custom hash), which aws-cdk-lib hashes once more with SHA-256 to name the object, then adds the file's
    extension (aws-cdk-lib 2.275.0 core/lib/asset-staging.js calculateHash and renderAssetFilename); the construct
    fails synthesis where the asset lands elsewhere."""
    bucket = CDK_ASSETS_BUCKET.format(account=env.account, region=env.region)
    return f"s3://{bucket}/{hashlib.sha256(operator_scripts_sha256().encode()).hexdigest()}.gz"


def expected_efa_devices(env: Environment, instance: InstanceType) -> int:
    """The EFA devices a node of ENV shows: one per interface the launch template attaches, none with efa off."""
    return instance.max_efa_interfaces if env.efa else 0


def nccl_busbw_floor(instance: InstanceType) -> str:
    busbw = instance.nccl_allreduce_busbw_gbs
    return "" if busbw is None else f"{busbw * NCCL_BUSBW_TOLERANCE:.1f}"


def _without_comments(text: str) -> str:
    """The text without its comment-only lines (the shebang and shellcheck directives stay): the node scripts are
    commented at length, and the room under EC2's limit is kept for features. The commented originals are
    scripts/node/ in the gpufleet repository."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines[1:] if not line.lstrip().startswith("#") or line.lstrip().startswith("# shellcheck")]
    return "".join(lines[:1] + kept)


def _write_file(path: str, mode: str, content: str) -> str:
    """A quoted heredoc (nothing in it is expanded) written through a temporary file: replacing a script that
    is running (the spot watcher) must not change the file under the running shell."""
    if END_OF_FILE in content.splitlines():
        raise GpufleetError(f"{path}: a line of its content is '{END_OF_FILE}', which would end the heredoc early")
    if not content.endswith("\n"):
        content += "\n"
    return f"write_file \"$root{path}\" {mode} <<'{END_OF_FILE}'\n{content}{END_OF_FILE}\n"


def _install(path: str, mode: str, source: Path) -> str:
    return _write_file(path, mode, _without_comments(source.read_text()))


def render_user_data(env: Environment, instance: InstanceType) -> str:
    """The complete user data (a bash script) for the nodes of ``env``, which run ``instance``."""
    settings = node_settings(env, instance)
    scripts = setup_scripts(env, instance)
    # Every node has something to set up (the cluster user and readiness at least), so every node gets the setup unit.
    units = ([WATCHER_UNIT] if watches_spot(env) else []) + [SETUP_UNIT]
    installed = (
        [name for name in scripts if name not in ARCHIVED_SETUP_STEPS]
        # The cluster user's ssh runs it for every host it connects to (cluster-user.sh writes ~/.ssh/config).
        + ["cluster-address", "run-setup"]
        + (["spot-watcher"] if watches_spot(env) else [])
        + (["capacity-block-end"] if in_capacity_block(env) else [])
    )

    parts = [
        "#!/bin/bash\n"
        f"# gpufleet node user data for environment {env.name} ({instance.name}), from gpufleet/user_data.py.\n"
        f"# Installs under {INSTALL_DIR}: {', '.join(installed) or 'nothing'}; with their systemd units.\n"
        "# Runs them; safe to run again. GPUFLEET_ROOT (tests) prefixes every path it writes. The scripts'\n"
        "# commented sources are scripts/node/ in gpufleet; the launch template carries this file gzip-compressed.\n"
        "set -euo pipefail\n"
        "root=${GPUFLEET_ROOT:-}\n"
        'write_file() { mkdir -p "$(dirname "$1")" && cat >"$1.tmp" && chmod "$2" "$1.tmp" && mv -f "$1.tmp" "$1"; }\n',
        _write_file(SETTINGS_FILE, "0644", "".join(f"export {k}={shlex.quote(v)}\n" for k, v in settings.items())),
        f'# shellcheck source=/dev/null\n. "$root{SETTINGS_FILE}"\n',
    ]
    # Written before the scripts that source it, so no installed script is ever without it.
    parts.append(_install(HELPERS_PATH, "0644", HELPERS))
    parts += [_install(f"{INSTALL_DIR}/{name}.sh", "0755", SCRIPTS_DIR / f"{name}.sh") for name in installed]
    parts += [_install(f"{UNIT_DIR}/{unit}", "0644", SCRIPTS_DIR / unit) for unit in units]
    # Every gpufleet unit's journal goes to CloudWatch.
    agent_config = json.dumps(agent_configuration(env, instance, units), separators=(",", ":"), sort_keys=True)
    parts.append(_write_file(CLOUDWATCH_AGENT_CONFIG, "0644", agent_config))
    if installs_default_hook(env):
        parts.append(
            f'mkdir -p "$root{Path(DEFAULT_CHECKPOINT_HOOK).parent}"\n'
            f'ln -sfn "$root{OPS_INSTALL_DIR}/save-checkpoint.sh" "$root{DEFAULT_CHECKPOINT_HOOK}"\n'
            + _write_file(CHECKPOINT_TMPFILES, "0644", f"d {CHECKPOINT_DIR} 1777 root root -\n")
            + f'install -d -m 1777 "$root{CHECKPOINT_DIR}"\n'
        )
    if instance.nvswitch:
        parts.append(_write_file(f"{UNIT_DIR}/{SETUP_UNIT}.d/fabric-manager.conf", "0644", FABRIC_MANAGER_DROP_IN))
    # restart, not start: a second run must re-run the oneshot setup and load a rewritten watcher script.
    parts.append(
        "systemctl daemon-reload\n"
        f"systemctl enable {' '.join(units)}\n" + "".join(f"systemctl restart {unit}\n" for unit in units)
    )
    return "".join(parts)


def compressed_user_data(env: Environment, instance: InstanceType) -> bytes:
    """The script gzip-compressed, byte for byte the same on every synthesis (no timestamp in the gzip header)."""
    return gzip.compress(render_user_data(env, instance).encode(), compresslevel=9, mtime=0)


def user_data_size_problem(env: Environment, instance: InstanceType) -> str | None:
    size = len(compressed_user_data(env, instance))
    if size > USER_DATA_LIMIT_BYTES:
        return (
            f"the user data is {size} bytes compressed, over EC2's limit of {USER_DATA_LIMIT_BYTES}; "
            "turn off a node feature or shorten node.checkpoint_hook"
        )
    return None


def launch_template_user_data(env: Environment, instance: InstanceType) -> str:
    """What the launch template's UserData holds: the compressed script, base64-encoded as EC2 expects."""
    problem = user_data_size_problem(env, instance)
    if problem is not None:
        raise GpufleetError(f"environments/{env.name}.yaml: node: {problem}")
    return base64.b64encode(compressed_user_data(env, instance)).decode()
