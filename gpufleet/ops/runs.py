"""`gpufleet run`: a process started on every ready node through SSM Run Command, kept alive by systemd.

The plan (plan_run) puts the ready nodes in job order (gpufleet.ops.fleet.job_order: on-demand before spot), so
rank 0 and the head address are a node EC2 cannot reclaim when there is one. Every node of a SendCommand batch gets
the same one line (node_script): a call of the operator script scripts/ops/start-run.sh, which every node installs
at boot from the operator scripts' archive (gpufleet/user_data.py), with the run's specification (start_spec: the
batch's instance ids in rank order, the unit's script and environment) as one base64 word. Each node finds its rank
by its own id, read from IMDSv2, and starts a transient systemd service as the cluster user, then returns: the process
belongs to systemd, not to the SSM agent, so neither Run Command's timeouts nor a closed laptop end it. The node side
(what root may do where the cluster user writes, the unit's script in a file of root's) is the script's;
docs/guides/running-jobs.md explains it for users.

Outside facts (botocore 1.44.5's ssm model): SendCommand takes at most 50 InstanceIds, and a node SSM refuses is split
out of its batch (gpufleet/ssm_batches.py, the one way every caller sends); its TimeoutSeconds (30 to
2592000) is the time a command may wait to start ("If this time is reached and the command hasn't already started
running, it won't run"); ListCommandInvocations answers at most 50 invocations a page (MaxResults 1..50);
CommandPlugin.Output holds at most 2500 characters. aws:runShellScript runs the commands with `sh -c`
(aws/amazon-ssm-agent, the runshellscript plugin's test: ShellCommand "sh", ShellArguments ["-c"]), so the text is
POSIX sh.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import io
import json
import re
import shlex
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.constants import CLUSTER_USER_NAME
from gpufleet.errors import GpufleetError
from gpufleet.ops.fleet import FleetInstance, job_order
from gpufleet.ops.torchrun import LAST_CALL_SECONDS, RENDEZVOUS_PORT, torchrun_command
from gpufleet.ssm_batches import FINISHED_STATUSES, RUN_SHELL_SCRIPT, SEND_COMMAND_MAX_INSTANCES, send_in_batches
from gpufleet.user_data import OPS_INSTALL_DIR, SETTINGS_FILE, SHARED_CACHE_SUBDIR

LIST_INVOCATIONS_MAX_RESULTS = 50  # botocore ssm model: ListCommandInvocationsRequest.MaxResults max 50
# How long a node may take to pick the start up (SendCommand TimeoutSeconds, 30..2592000): a node whose agent is
# offline that long is reported, and the run goes on without it.
DELIVERY_TIMEOUT_SECONDS = 600
# How long the start itself may run on a node (AWS-RunShellScript's executionTimeout parameter, seconds, as a
# string): it only starts a unit, so two minutes are plenty; the unit is not bound by it.
START_TIMEOUT_SECONDS = 120
POLL_SECONDS = 5
FOLLOW_SECONDS = 10
# The scripts a run's start and stop call on each node: operator scripts, which operator-scripts.sh installs at boot
# from the archive the user data names (gpufleet/user_data.py OPS_SCRIPTS).
START_SCRIPT = f"{OPS_INSTALL_DIR}/start-run.sh"
STOP_SCRIPT = f"{OPS_INSTALL_DIR}/stop-run.sh"
# The EFA environment of the image for shells (scripts/node/efa-env.sh writes it): the FI_/NCCL_ variables and the
# library path prepended to LD_LIBRARY_PATH.
EFA_PROFILE = "/etc/profile.d/gpufleet-efa.sh"
# Each node's rank in each run it started, one file a run, root's, kept across reboots (written by
# scripts/ops/start-run.sh start_run_unit): `gpufleet logs --node RANK` finds the node by it after the unit is gone.
# GPUFLEET_ROOT prefixes it in tests, as in the node scripts.
RANKS_DIR = "${GPUFLEET_ROOT:-}/var/lib/gpufleet/run-ranks"
RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")

# --secret NAME=SECRET_ID: a Secrets Manager secret every node of the run reads into the environment variable NAME
# (secret_steps), so that the value never travels with the run: only the reference is in the SendCommand text, the
# unit's file and run.json. NAME: a shell variable name; the names starting gpufleet_ (any case) are gpufleet's own
# (the run's GPUFLEET_ settings, the reader's locals). SECRET_ID: a secret name, or its ARN, in the environment's
# namespace, the one the node role may read (stacks/constructs/run_secrets.py): names starting with the environment's
# stack prefix and a slash, gpufleet-NAME/. Secret names (botocore 1.44.5's secretsmanager model, CreateSecret Name:
# "ASCII letters, numbers, and the following characters: /_+=.@-", NameType at most 512 characters); a secret's ARN
# is arn:${Partition}:secretsmanager:${Region}:${Account}:secret:${SecretId} (the Service Authorization Reference as
# parliament 1.6.4 bundles it), where "Secrets Manager automatically adds a hyphen and six random characters after the
# secret name" (the same model, CreateSecret Name).
SECRET_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
SECRET_ARN = re.compile(
    r"arn:(?P<partition>aws[a-z-]*):secretsmanager:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):"
    r"secret:(?P<name>.+)"
)
RESERVED_VARIABLE_PREFIX = "gpufleet_"


def secret_namespace(stack_prefix: str) -> str:
    """The secret names an environment's nodes may read begin with this: its stack prefix and a slash (gpufleet-dev/).
    The slash ends the environment's name, which has none, so no environment's namespace holds another's (dev's holds
    no gpufleet-dev-2/...), nor the cluster user's key secret (gpufleet-NAME-cluster-user-key)."""
    return f"{stack_prefix}/"


@dataclass(frozen=True)
class WorkdirArchive:
    """A run's --workdir packed: its s3:// address and the region of its bucket, the environment's."""

    address: str
    region: str


@dataclass(frozen=True)
class RunSecret:
    """A secret a run's nodes read into an environment variable: NAME from SECRET_ID in REGION, the environment's."""

    name: str
    secret_id: str
    region: str


def parse_secrets(options: list[str], *, stack_prefix: str, region: str, account: str) -> tuple[RunSecret, ...]:
    """The --secret NAME=SECRET_ID options of a run of the environment of STACK_PREFIX, REGION and ACCOUNT, checked
    before any AWS call: GpufleetError (exit 2) with a line for each bad one. A SECRET_ID outside the namespace is not
    repeated in its line: it may be a value pasted where its name belongs."""
    namespace = secret_namespace(stack_prefix)
    secrets: list[RunSecret] = []
    problems: list[str] = []
    for option in options:
        name, equals, secret_id = option.partition("=")
        if not equals or not name:
            problems.append("--secret: expected NAME=SECRET_ID, e.g. --secret HF_TOKEN=" + namespace + "hf-token")
            continue
        if not SECRET_VARIABLE.fullmatch(name):
            problems.append(
                f"--secret {name}=...: NAME must be a shell variable name (letters, digits and _, not starting with a "
                "digit)"
            )
            continue
        if name.lower().startswith(RESERVED_VARIABLE_PREFIX):
            problems.append(
                f"--secret {name}=...: names starting {RESERVED_VARIABLE_PREFIX.upper()} are gpufleet's own"
            )
            continue
        if any(secret.name == name for secret in secrets):
            problems.append(f"--secret {name}=...: {name} is given twice")
            continue
        arn = SECRET_ARN.fullmatch(secret_id)
        secret_name = arn["name"] if arn else secret_id
        if not (SECRET_NAME.fullmatch(secret_name) and secret_name.startswith(namespace) and secret_name != namespace):
            problems.append(
                f"--secret {name}=...: SECRET_ID is not one the nodes may read: a Secrets Manager secret name starting "
                f"{namespace} (letters, digits and /_+=.@-, at most 512) or its ARN, never the value itself"
            )
            continue
        if arn and (arn["region"], arn["account"]) != (region, account):
            problems.append(
                f"--secret {name}=...: the ARN names region {arn['region']} and account {arn['account']}: the nodes "
                f"read secrets of their own, {region} and {account}"
            )
            continue
        secrets.append(RunSecret(name, secret_id, region))
    if problems:
        raise GpufleetError(*problems, exit_code=2)
    return tuple(secrets)


# What the unit's bash (and, in an MPI run, each process's bash) defines to read a secret: `gpufleet_secret NAME
# SECRET_ID REGION` reads the secret's string with the node role's credentials (the AWS CLI, which every image profile
# installs, through the instance's metadata, as scripts/node/cluster-user.sh reads the cluster key) into the exported
# variable NAME. Command substitution keeps the value in memory: no file, no command line, no journal holds it (the
# AWS CLI's own stderr goes to a file of mktemp's, removed at once, read only when the call failed). A failed read
# ends the shell (status 1) with one line naming the variable and the secret, and the AWS CLI's last line of error.
# One line, so that it can also stand in an MPI process's `bash -c` text. The AWS CLI prints the string and a newline
# (--output text); command substitution drops every trailing newline. Its locals begin gpufleet_, which no NAME may.
SECRET_READER = (
    "gpufleet_secret() { local gpufleet_value gpufleet_error; gpufleet_error=$(mktemp); "
    'if ! gpufleet_value=$(aws secretsmanager get-secret-value --region "$3" --secret-id "$2" '
    '--query SecretString --output text 2>"$gpufleet_error"); then '
    'echo "gpufleet run: --secret $1=$2: cannot read it in $3 with the node role: '
    '$(grep -v \'^$\' "$gpufleet_error" | tail -n 1 | cut -c 1-300)" >&2; rm -f "$gpufleet_error"; exit 1; fi; '
    'rm -f "$gpufleet_error"; export "$1=$gpufleet_value"; }'
)


def secret_steps(secrets: tuple[RunSecret, ...]) -> list[str]:
    """The shell lines that read SECRETS into their variables (none without secrets)."""
    if not secrets:
        return []
    return [SECRET_READER] + [
        f"gpufleet_secret {secret.name} {shlex.quote(secret.secret_id)} {shlex.quote(secret.region)}"
        for secret in secrets
    ]


def new_run_id(now: dt.datetime, token: str) -> str:
    """A run id: the UTC start time and four hex digits (TOKEN, e.g. secrets.token_hex(2)), e.g. 20261126-210500-3fa2.
    It names the systemd unit (gpufleet-run-RUNID), so it keeps to letters, digits and dashes."""
    run_id = f"{now.astimezone(dt.UTC):%Y%m%d-%H%M%S}-{token}"
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"not a run id: {run_id}")
    return run_id


def unit_name(run_id: str) -> str:
    return f"gpufleet-run-{run_id}"


@dataclass(frozen=True)
class RunPlan:
    """What one run starts where: the nodes in rank order and what each node runs."""

    run_id: str
    environment: str
    nodes: tuple[FleetInstance, ...]
    gpus_per_node: int
    command: tuple[str, ...]  # the argv run on every node
    setup: str = ""  # a shell command run first on every node, in the working directory
    workdir: str = ""  # the node's working directory; empty: the cluster user's home
    workdir_archive: WorkdirArchive | None = None  # a tar.gz every node unpacks into workdir first (upload_workdir)
    mpi: bool = False  # mpirun on the head starts the command on every node over SSH
    # The head's own argv where it differs from the others' (torchrun: the head hosts the c10d store, is_host=1,
    # gpufleet.ops.torchrun); empty: the head runs `command` too.
    head_command: tuple[str, ...] = ()
    # A torchrun run's rendezvous port on the head (0: not a torchrun run, which no node joins later).
    rendezvous_port: int = 0
    # The environment's shared file system (empty: none), where a torchrun run's description waits for replacement
    # nodes (run_description).
    shared_dir: str = ""
    # Secrets every node reads into the unit's environment before the setup (--secret; secret_steps).
    secrets: tuple[RunSecret, ...] = ()

    @property
    def targets(self) -> list[str]:
        """The nodes Run Command starts a unit on: every node, or with MPI the head alone (mpirun reaches the others
        over the cluster user's SSH trust, scripts/node/cluster-user.sh)."""
        return self.instance_ids[:1] if self.mpi else self.instance_ids

    @property
    def head_address(self) -> str:
        return self.nodes[0].private_ip

    @property
    def instance_ids(self) -> list[str]:
        return [node.instance_id for node in self.nodes]

    @property
    def joinable(self) -> bool:
        """Whether a node that becomes ready later joins this run: torchrun's elastic rendezvous takes it in, and the
        run's description is where the node can read it. A plain or MPI run has a fixed set of processes."""
        return bool(self.rendezvous_port and self.shared_dir)

    @property
    def comment(self) -> str:
        """SendCommand's Comment (at most 100 characters): environment names have at most 24, run ids 20."""
        return f"gpufleet {self.environment} run {self.run_id}"


def plan_run(
    run_id: str,
    environment: str,
    ready: list[FleetInstance],
    gpus_per_node: int,
    command: list[str],
    setup: str = "",
    workdir: str = "",
    workdir_archive: WorkdirArchive | None = None,
    mpi: bool = False,
    head_command: list[str] | None = None,
    secrets: tuple[RunSecret, ...] = (),
    shared_dir: str = "",
) -> RunPlan:
    """The plan of a run on READY (the nodes that say they are ready), ranked in job order; SHARED_DIR, the
    environment's shared file system, holds its caches (cache_steps)."""
    if not ready:
        raise GpufleetError(f"{environment} has no node ready for jobs: see `gpufleet status {environment}`")
    if not command:
        raise GpufleetError("gpufleet run: no command: put it after --, e.g. `gpufleet run ENV -- python train.py`")
    nodes = tuple(sorted(ready, key=job_order))
    return RunPlan(
        run_id,
        environment,
        nodes,
        gpus_per_node,
        tuple(command),
        setup,
        workdir,
        workdir_archive,
        mpi,
        tuple(head_command or ()),
        shared_dir=shared_dir,
        secrets=secrets,
    )


def plan_torchrun(
    run_id: str,
    environment: str,
    ready: list[FleetInstance],
    gpus_per_node: int,
    command: list[str],
    *,
    min_nodes: int,
    max_restarts: int,
    setup: str = "",
    shared_dir: str = "",
    port: int = RENDEZVOUS_PORT,
    last_call_seconds: int = LAST_CALL_SECONDS,
    secrets: tuple[RunSecret, ...] = (),
) -> RunPlan:
    """The plan of a torchrun run: every node runs torchrun (gpufleet.ops.torchrun) with COMMAND, GPUS_PER_NODE
    processes a node, between MIN_NODES and every ready node, the head hosting the c10d store (its own argv). A node
    that joins later runs the others' argv, so the node range's maximum is the number of nodes ready now."""
    plan = plan_run(run_id, environment, ready, gpus_per_node, command, setup=setup, secrets=secrets)
    problems = []
    if not 1 <= min_nodes <= len(plan.nodes):
        problems.append(f"--min-nodes {min_nodes}: need 1 to {len(plan.nodes)} (the nodes ready for jobs now)")
    if max_restarts < 0:
        problems.append(f"--max-restarts {max_restarts}: need 0 or more")
    if problems:
        raise GpufleetError("\n".join(problems))

    def node_command(is_head: bool) -> tuple[str, ...]:
        try:
            argv = torchrun_command(
                run_id=run_id,
                head_address=plan.head_address,
                is_head=is_head,
                min_nodes=min_nodes,
                max_nodes=len(plan.nodes),
                processes_per_node=gpus_per_node,
                max_restarts=max_restarts,
                command=command,
                port=port,
                last_call_seconds=last_call_seconds,
            )
        except ValueError as error:
            raise GpufleetError(f"--torchrun: {error}") from None
        return tuple(argv)

    return dataclasses.replace(
        plan,
        command=node_command(is_head=False),
        head_command=node_command(is_head=True),
        rendezvous_port=port,
        shared_dir=shared_dir,
    )


# Amazon's Open MPI, which the EFA installer puts in /opt/amazon/openmpi (scripts/ami/07-efa-installer.sh) and which is
# on PATH only through /etc/profile.d. mpirun is called by its absolute path: "invoking mpirun via an absolute path
# name is equivalent to specifying the --prefix option with a <dir> value equivalent to the directory where mpirun
# resides, minus its last subdirectory" (Open MPI mpirun(1), SYNOPSIS; --prefix sets PATH and LD_LIBRARY_PATH on the
# remote node, "Remote Execution"), so the orted it starts over SSH on the other nodes is found, where a non-login
# shell's PATH does not reach.
MPIRUN = "/opt/amazon/openmpi/bin/mpirun"
# mpirun's options for a run, as scripts/ops/run-nccl-tests.sh launches nccl-tests: MPI only starts the processes, so
# its own traffic stays on TCP (not the EFA devices NCCL uses) and pinning is left to the program. The EFA variables
# and the library path the head's shell has (EFA_PROFILE) go to every process (-x).
MPIRUN_OPTIONS = ("--bind-to", "none", "--mca", "pml", "^cm,ucx", "--mca", "btl", "tcp,self")
MPI_FORWARDED = (
    r"-x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} $(env | sed -n 's/^\(\(FI\|NCCL\)_[A-Za-z0-9_]*\)=.*/-x \1/p')"
)


def _mpi_steps(plan: RunPlan, directory: str) -> list[str]:
    """The head's steps of an MPI run: the hostfile of the plan's nodes (hostlists.mpi_hostfile's lines) in a file of
    mktemp's (a name nobody can guess beforehand, removed when the unit's bash ends), the setup once per node through
    mpirun, then the command, GPUS_PER_NODE processes a node. With secrets, each process mpirun starts reads them on its
    own node first (a bash that then runs the setup, or execs the command): the values never travel between nodes, nor
    through mpirun's command line or -x."""
    lines = " ".join(shlex.quote(f"{node.private_ip} slots={plan.gpus_per_node}") for node in plan.nodes)
    nodes = len(plan.nodes)
    # The shared caches reach the processes on the other nodes as the EFA variables do.
    cached = [*CACHE_VARIABLES, ("UV_LINK_MODE", "")] if plan.shared_dir else []
    options = " ".join([*(shlex.quote(option) for option in MPIRUN_OPTIONS), *(f"-x {name}" for name, _ in cached)])
    mpirun = f'{MPIRUN} --hostfile "$hostfile"'
    steps = ["hostfile=$(mktemp)", """trap 'rm -f "$hostfile"' EXIT""", f"printf '%s\\n' {lines} > \"$hostfile\""]
    reads = "".join(f"{step}; " for step in secret_steps(plan.secrets))
    if plan.setup:
        setup = shlex.quote(f"{reads}cd {directory} && {plan.setup}")
        steps.append(f"{mpirun} -n {nodes} -N 1 {options} {MPI_FORWARDED} bash -c {setup}")
    processes = nodes * plan.gpus_per_node
    command = shlex.join(plan.command)
    if reads:
        wrapper = shlex.quote(reads + 'exec "$@"')
        command = f"bash -c {wrapper} bash {command}"
    steps.append(f"{mpirun} -n {processes} -N {plan.gpus_per_node} {options} {MPI_FORWARDED} {command}")
    return steps


# The image's Python virtualenv first on PATH, before the run's own setup (which may activate another): start-run.sh
# sets GPUFLEET_PYTHON_VENV only for a virtualenv root alone controls (/etc/gpufleet/python.env; docs/guides/
# running-jobs.md, "The image's Python").
PYTHON_VENV_STEP = 'if [ -n "${GPUFLEET_PYTHON_VENV:-}" ]; then export PATH="$GPUFLEET_PYTHON_VENV/bin:$PATH"; fi'


# Where a run's package and model caches go on an environment with shared storage: MOUNT/cache (gpufleet.user_data
# SHARED_CACHE_SUBDIR), outside the data folder, the only one linked to S3, so no wheel or model is exported. Every node
# uses the same cache, and a replacement node's `--setup 'uv pip install ...'` takes what the others downloaded. Each
# tool's own variable, with what its project says of several processes, on several nodes, sharing it:
# - uv (UV_CACHE_DIR): "It's safe to run multiple uv commands concurrently, even against the same virtual
#   environment. uv's cache is designed to be thread-safe and append-only, and thus robust to multiple concurrent
#   readers and writers" (uv docs, concepts/cache.md, "Cache safety"); its locks are file locks, which the nodes share
#   through the Lustre mount's flock option (scripts/node/shared-storage.sh; coherent across clients per the Lustre
#   manual: unconfirmed here). UV_LINK_MODE=copy: a venv on the node's own disk is on another file system than the
#   cache, where uv's default hardlinks fail and it warns ("If the cache and target directories are on different
#   filesystems, hardlinking may not be supported. If this is intentional, set `export UV_LINK_MODE=copy`", uv's
#   own warning).
# - pip (PIP_CACHE_DIR): no lock; each entry is written to a temporary file and renamed into place, and a read needs
#   both of an entry's files (pip 26.3, pip/_internal/network/cache.py SafeFileCache, whose docstring calls the
#   write side's race benign for files that never change, psf/cachecontrol#324): two nodes may download the same wheel
#   twice, neither reads half of one. So the guides use uv; pip works too.
# - Hugging Face (HF_HUB_CACHE, HF_DATASETS_CACHE): the Hub cache keeps "Lock files for concurrent download safety"
#   in .locks/ (huggingface.co/docs/hub/local-cache); datasets' cache, under the same file locks (unconfirmed for
#   several nodes). Not HF_HOME, which holds the login token too: that stays in the cluster user's home.
# The folder is made by the run itself, as the cluster user, mode 0750: root never makes or follows anything there.
CACHE_VARIABLES = (
    ("PIP_CACHE_DIR", "pip"),
    ("UV_CACHE_DIR", "uv"),
    ("HF_HUB_CACHE", "huggingface/hub"),
    ("HF_DATASETS_CACHE", "huggingface/datasets"),
)


def cache_steps(shared_dir: str) -> list[str]:
    """The steps that point a run's pip, uv and Hugging Face caches at the shared file system (CACHE_VARIABLES); none
    without one."""
    if not shared_dir:
        return []
    cache = f"{shared_dir}/{SHARED_CACHE_SUBDIR}"
    exports = " ".join(f"{name}={shlex.quote(f'{cache}/{folder}')}" for name, folder in CACHE_VARIABLES)
    return [f"mkdir -p -m 0750 {shlex.quote(cache)}", f"export {exports} UV_LINK_MODE=copy"]


def unit_body(plan: RunPlan, head: bool = False) -> str:
    """What the unit's bash runs: the EFA environment, the secrets (references: each node reads the values), the
    working directory, the setup, then the command (the head's own where the plan has one and HEAD; with MPI: mpirun,
    which runs both on every node)."""
    directory = shlex.quote(plan.workdir) if plan.workdir else f"~{CLUSTER_USER_NAME}"
    steps = [f"if [ -r {EFA_PROFILE} ]; then . {EFA_PROFILE}; fi", PYTHON_VENV_STEP, *secret_steps(plan.secrets)]
    steps += cache_steps(plan.shared_dir)
    if plan.workdir_archive:
        # Every node unpacks its own copy: the AWS CLI (every AMI profile installs it) reads the object with the node
        # role, which may read the data repository prefix (storage.data_repository). With its region: without one the
        # call goes to S3's global endpoint, which the S3 gateway endpoint of a VPC outside us-east-1 does not serve
        # (issue 30; gpufleet.reachability).
        archive = plan.workdir_archive
        steps += [
            f"mkdir -p {directory}",
            f"aws s3 cp --only-show-errors --region {shlex.quote(archive.region)} {shlex.quote(archive.address)} - "
            f"| tar -xz -C {directory}",
        ]
    steps.append(f"cd {directory}")
    if plan.mpi:
        steps += _mpi_steps(plan, directory)
    else:
        if plan.setup:
            steps.append(plan.setup)
        command = plan.head_command if head and plan.head_command else plan.command
        if head and plan.joinable:
            # The head's torchrun ends when the run does (done, or out of restarts): mark the description ended, so
            # that no node joins it later, when the head may serve another run's rendezvous on the same port.
            ended = shlex.quote(description_dir(plan.shared_dir, plan.run_id) + "/ended")
            steps += ["status=0", shlex.join(command) + " || status=$?", f"touch {ended}", 'exit "$status"']
        else:
            steps.append("exec " + shlex.join(command))
    return "set -eo pipefail\n" + "\n".join(steps)


def run_settings(plan: RunPlan) -> dict[str, str]:
    """The run's environment every node's unit gets, but for its rank (GPUFLEET_NODE_RANK, set on the node)."""
    return {
        "GPUFLEET_RUN_ID": plan.run_id,
        "GPUFLEET_NODE_COUNT": str(len(plan.nodes)),
        "GPUFLEET_GPUS_PER_NODE": str(plan.gpus_per_node),
        "GPUFLEET_HEAD_ADDRESS": plan.head_address,
    }


# Where a joinable run's description lives on the shared file system; scripts/node/join-runs.sh reads it there.
RUNS_SUBDIR = "gpufleet-runs"


def description_dir(shared_dir: str, run_id: str) -> str:
    return f"{shared_dir}/{RUNS_SUBDIR}/{run_id}"


def run_description(plan: RunPlan) -> dict[str, Any]:
    """What a node that becomes ready after the start needs to join PLAN (scripts/node/join-runs.sh): where the head
    serves the rendezvous, the others' unit body (the EFA environment, the working directory's download, the setup,
    the non-head torchrun line) and environment. The rest is there for people reading it."""
    return {
        "run_id": plan.run_id,
        "environment": plan.environment,
        "head_address": plan.head_address,
        "rendezvous_port": plan.rendezvous_port,
        "node_count": len(plan.nodes),
        "command": list(plan.command),
        "setup": plan.setup,
        "secrets": {secret.name: secret.secret_id for secret in plan.secrets},
        "workdir_archive": plan.workdir_archive.address if plan.workdir_archive else "",
        "settings": run_settings(plan),
        "body": unit_body(plan),
    }


def start_spec(plan: RunPlan, first_rank: int = 0) -> dict[str, Any]:
    """The specification scripts/ops/start-run.sh starts PLAN's unit from on the nodes of one SendCommand batch,
    those from FIRST_RANK on (its header documents each member): the batch's ids in rank order, so that the text's size
    does not grow with the cluster; rank 0's own script and the run's description only in the batch that holds
    rank 0."""
    spec: dict[str, Any] = {
        "run_id": plan.run_id,
        "first_rank": first_rank,
        "nodes": plan.instance_ids[first_rank : first_rank + SEND_COMMAND_MAX_INSTANCES],
        "node_count": len(plan.nodes),
        "settings": run_settings(plan),
        "body": unit_body(plan),
    }
    if first_rank == 0 and plan.head_command:
        spec["head_body"] = unit_body(plan, head=True)
    if first_rank == 0 and plan.joinable:
        spec["description"] = run_description(plan)
    return spec


def node_script(plan: RunPlan, first_rank: int = 0) -> str:
    """The command text Run Command runs on the nodes of one SendCommand batch of PLAN, those from FIRST_RANK on: one
    POSIX sh line that reads the node's settings (the cluster user, the shared file system) and calls start-run.sh
    with start_spec as one argument, compact JSON in base64, whose alphabet (A-Z a-z 0-9 + / =) neither sh nor the
    script reads as more than a word: every $, ` and % of the scripts inside reaches the unit's bash as it is. Exit 0:
    started, or already running; 3: this node is not in the batch; 1: it could not start (the script's line says
    why)."""
    text = json.dumps(start_spec(plan, first_rank), separators=(",", ":"))
    return f". {SETTINGS_FILE} && {START_SCRIPT} '{base64.b64encode(text.encode()).decode()}'"


@dataclass(frozen=True)
class NodeResult:
    """How a command went on one node: the invocation's status, its detail (Undeliverable, DeliveryTimedOut, ...) and
    the first 2500 characters of its output."""

    instance_id: str
    status: str
    detail: str
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "Success"

    def line(self, done: str = "started") -> str:
        if self.ok:
            return f"{self.instance_id}: {done}"
        last = self.output.strip().splitlines()[-1] if self.output.strip() else ""
        return f"{self.instance_id}: not {done} ({self.detail or self.status}){': ' + last if last else ''}"


def send_to_nodes(
    ssm: Any,
    instance_ids: list[str],
    script: str | Callable[[int], str],
    comment: str,
    execution_timeout: int = START_TIMEOUT_SECONDS,
) -> tuple[dict[str, list[str]], list[NodeResult]]:
    """Send SCRIPT to INSTANCE_IDS, 50 to a call (a function of SCRIPT gets the position of each batch's first node),
    each node's run of it bounded by EXECUTION_TIMEOUT seconds (AWS-RunShellScript's executionTimeout):
    (command id -> its nodes, each node SSM refused with the error code). A node SSM refuses (InvalidInstanceId: its
    agent not running or not registered, or the instance shutting down) is split out of its batch, whose other nodes
    still get the command; a refusal of the call itself stops the sending, and raises when no command went out, so that
    nothing was sent, else is reported for every node not sent (gpufleet.ssm_batches.send_in_batches)."""

    def request(first: int) -> dict[str, Any]:
        return {
            "DocumentName": RUN_SHELL_SCRIPT,
            "Comment": comment,
            "TimeoutSeconds": DELIVERY_TIMEOUT_SECONDS,
            "Parameters": {
                "commands": [script if isinstance(script, str) else script(first)],
                "executionTimeout": [str(execution_timeout)],
            },
        }

    delivery = send_in_batches(ssm, instance_ids, request)
    delivery.raise_if_nothing_went_out()
    return delivery.commands, [NodeResult(node, "Refused", code) for node, code in delivery.refused.items()]


def start_run(ssm: Any, plan: RunPlan) -> tuple[dict[str, list[str]], list[NodeResult]]:
    """Send PLAN's start to its nodes (send_to_nodes), each batch the text of its own ranks."""
    return send_to_nodes(ssm, plan.targets, lambda first_rank: node_script(plan, first_rank), plan.comment)


def _invocations(ssm: Any, command_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    arguments: dict[str, Any] = {"CommandId": command_id, "Details": True, "MaxResults": LIST_INVOCATIONS_MAX_RESULTS}
    while True:
        page = ssm.list_command_invocations(**arguments)
        found += page["CommandInvocations"]
        if not page.get("NextToken"):
            return found
        arguments["NextToken"] = page["NextToken"]


def node_results(
    ssm: Any,
    commands: dict[str, list[str]],
    wait_seconds: float,
    progress: Callable[[NodeResult], None] = lambda _: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[NodeResult]:
    """Wait until every node's invocation of COMMANDS is over, or WAIT_SECONDS have passed; PROGRESS hears each node
    once, when its invocation is over. A node still pending at the end is reported with its last status."""
    deadline = clock() + wait_seconds
    over: dict[str, NodeResult] = {}
    latest: dict[str, NodeResult] = {}
    while True:
        for command_id, nodes in commands.items():
            if all(node in over for node in nodes):
                continue
            for invocation in _invocations(ssm, command_id):
                plugins = invocation.get("CommandPlugins", [])
                start = NodeResult(
                    invocation["InstanceId"],
                    invocation["Status"],
                    invocation.get("StatusDetails", ""),
                    plugins[0].get("Output", "") if plugins else "",
                )
                latest[start.instance_id] = start
                if start.status in FINISHED_STATUSES and start.instance_id not in over:
                    over[start.instance_id] = start
                    progress(start)
        wanted = [node for nodes in commands.values() for node in nodes]
        if all(node in over for node in wanted) or clock() >= deadline:
            return [
                over.get(node) or latest.get(node) or NodeResult(node, "Pending", "no invocation yet")
                for node in wanted
            ]
        sleep(POLL_SECONDS)


def stop_script(run_id: str) -> str:
    """What `gpufleet stop` runs on every running node: scripts/ops/stop-run.sh, which marks a joinable run's
    description stopped (as the cluster user), so that no node joins it later (scripts/node/join-runs.sh), then stops
    the run's unit where it is active. RUN_ID is checked (RUN_ID) before it gets here."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"not a run id: {run_id}")
    return f". {SETTINGS_FILE} && {STOP_SCRIPT} {run_id}"


def stopped_line(run_id: str) -> str:
    """The line stop-run.sh prints first on a node where it stopped the run's unit."""
    return f"stop-run: run {run_id}: stopped"


# `systemctl list-units` takes glob patterns since systemd 209 (systemd NEWS 209: "systemctl now supports globbing on
# the various list-xyz commands"); --plain drops the tree marks (NEWS 203). Its columns: UNIT LOAD ACTIVE SUB ...
LIST_RUNS_SCRIPT = (
    "systemctl list-units --all --plain 'gpufleet-run-*' | awk '$1 ~ /^gpufleet-run-.*[.]service$/ {print $1, $3, $4}'"
)
UNIT_LINE = re.compile(r"gpufleet-run-(?P<run>[0-9]{8}-[0-9]{6}-[0-9a-f]{4})\.service (?P<active>\S+) (?P<sub>\S+)")


def runs_on_nodes(results: list[NodeResult]) -> dict[str, dict[str, str]]:
    """The runs the nodes' answers to LIST_RUNS_SCRIPT name: run id -> {instance id: "ACTIVE/SUB"}, runs in id order
    (their start time). A unit that ended well is gone from systemd's list (transient units are unloaded); one that
    failed stays, as failed, until it is reset."""
    runs: dict[str, dict[str, str]] = {}
    for result in results:
        for line in result.output.splitlines():
            match = UNIT_LINE.fullmatch(line.strip())
            if match:
                runs.setdefault(match["run"], {})[result.instance_id] = f"{match['active']}/{match['sub']}"
    return dict(sorted(runs.items()))


# GetCommandInvocation's StandardOutputContent holds the first 24000 characters of the output (botocore ssm model):
# the log's tail is cut to less, so that the marker line and the newest lines both come back.
LOG_TAIL_CHARACTERS = 20000


def log_marker(run_id: str, rank: int) -> str:
    return f"gpufleet logs: run {run_id} rank {rank}"


# The line journalctl --show-cursor ends with (systemd NEWS 206: "--show-cursor ... prints the cursor string of the
# last shown log line", to continue with --after-cursor=); both are older than every image's systemd (219 and up).
# The line's form: journalctl.c prints `printf("-- cursor: %s\n", cursor)` after the entries (systemd's
# src/journal/journalctl.c of the 2xx releases and src/journal/journalctl-show.c today, read through the code search).
CURSOR_PREFIX = "-- cursor: "


@dataclass(frozen=True)
class NodeLog:
    """What one node of a run sent back for `gpufleet logs`: the journal's lines and where they ended."""

    instance_id: str
    text: str
    cursor: str


def logs_script(run_id: str, rank: int, lines: int, after_cursor: str = "") -> str:
    """What `gpufleet logs` runs on the nodes: only the node that was RANK in RUN_ID prints, its marker line then the
    unit's journal (what the processes printed): the last LINES lines, or those after AFTER_CURSOR; at most
    LOG_TAIL_CHARACTERS, ending with the cursor line. It stays shell text here, not a node script: as root it reads
    only root's own rank file (RANKS_DIR, a folder only root writes) and journalctl, nothing the cluster user controls,
    and every value in it is a number, a run id or a quoted cursor."""
    rank_file = f"{RANKS_DIR}/{run_id}"
    which = f"--after-cursor={shlex.quote(after_cursor)}" if after_cursor else f"--lines={lines}"
    return "\n".join(
        [
            f'if [ ! -r "{rank_file}" ] || [ "$(cat "{rank_file}")" != {rank} ]; then exit 0; fi',
            f'echo "{log_marker(run_id, rank)}"',
            f"journalctl --unit={unit_name(run_id)} --output=cat --no-pager --show-cursor {which} | "
            f"tail -c {LOG_TAIL_CHARACTERS}",
        ]
    )


def _read_log(instance_id: str, output: str, after_cursor: str) -> NodeLog:
    """OUTPUT of logs_script without its marker line, its cursor line taken off (AFTER_CURSOR when no new line
    came)."""
    lines = output.split("\n")[1:]
    if lines and lines[-1] == "":
        lines.pop()
    cursor = after_cursor
    if lines and lines[-1].startswith(CURSOR_PREFIX):
        cursor = lines.pop()[len(CURSOR_PREFIX) :]
    return NodeLog(instance_id, "".join(line + "\n" for line in lines), cursor)


def node_log(
    ssm: Any, commands: dict[str, list[str]], results: list[NodeResult], run_id: str, rank: int, after_cursor: str = ""
) -> NodeLog:
    """The journal lines the node of RANK sent back (the answer to logs_script), read in full with
    GetCommandInvocation; GpufleetError when no node answered as that rank."""
    marker = log_marker(run_id, rank)
    for result in results:
        if result.ok and result.output.startswith(marker):
            command_id = next(command for command, nodes in commands.items() if result.instance_id in nodes)
            output = ssm.get_command_invocation(CommandId=command_id, InstanceId=result.instance_id)
            return _read_log(result.instance_id, output["StandardOutputContent"], after_cursor)
    raise GpufleetError(
        f"no running node was rank {rank} of run {run_id}: check the run id with `gpufleet runs`; a node that is gone "
        "took its journal with it"
    )


def follow_log(
    ssm: Any, start: NodeLog, run_id: str, rank: int, comment: str, wait_seconds: float
) -> Iterator[NodeLog]:
    """`gpufleet logs --follow`: every FOLLOW_SECONDS, the lines after the last cursor, from the one node of START
    (one SendCommand and its polls a round, whatever the cluster's size), forever."""
    latest = start
    while True:
        time.sleep(FOLLOW_SECONDS)
        script = logs_script(run_id, rank, 0, latest.cursor)
        commands, refused = send_to_nodes(ssm, [latest.instance_id], script, comment)
        results = refused + node_results(ssm, commands, wait_seconds)
        latest = node_log(ssm, commands, results, run_id, rank, latest.cursor)
        yield latest


# A working directory is code and small files, uploaded with one PutObject: gpufleet's own bound, far below S3's 5 GB
# for one PUT (S3 user guide, "Uploading objects": "upload a single object up to 5 GB", (unconfirmed) here). Data
# belongs on the shared file system.
WORKDIR_ARCHIVE_LIMIT_BYTES = 512 * 1024 * 1024


def node_workdir(run_id: str) -> str:
    """Where each node unpacks an uploaded working directory: node-local, so that nodes never write over each other
    (the cluster user's home may be on shared storage)."""
    return f"/var/tmp/{unit_name(run_id)}"


def pack_workdir(directory: Path) -> bytes:
    """DIRECTORY's content as a gzip-compressed tar archive, its entries relative to it, in name order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(directory.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return buffer.getvalue()


def upload_workdir(s3: Any, directory: Path, location: tuple[str, str], run_id: str, *, region: str) -> WorkdirArchive:
    """Upload DIRECTORY once, to the data repository's bucket and prefix (LOCATION, in REGION) under
    gpufleet-runs/RUN_ID/."""
    if not directory.is_dir():
        raise GpufleetError(f"--workdir: {directory} is not a directory")
    archive = pack_workdir(directory)
    if len(archive) > WORKDIR_ARCHIVE_LIMIT_BYTES:
        raise GpufleetError(
            f"--workdir: {directory} packs to {len(archive) / 2**20:.0f} MiB, over "
            f"{WORKDIR_ARCHIVE_LIMIT_BYTES // 2**20} MiB: keep data on the shared file system and upload code only"
        )
    bucket, prefix = location
    key = f"{prefix}/gpufleet-runs/{run_id}/workdir.tar.gz"
    s3.put_object(Bucket=bucket, Key=key, Body=archive)
    return WorkdirArchive(f"s3://{bucket}/{key}", region)
