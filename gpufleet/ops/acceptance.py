"""`gpufleet acceptance`: the checks run on the nodes through SSM Run Command, and what the nodes send back.

Two command texts. The node checks go to every running node (ready or not), 50 to a SendCommand as every gpufleet
Run Command does (gpufleet.ops.runs.send_to_nodes): the health check every node has (scripts/ops/
node-health-check.sh, its settings from /etc/gpufleet/node.env) and `fi_info -p efa -t FI_EP_RDM`, each between
marker lines (gpufleet.constants.ACCEPTANCE_MARKER) with its exit status, which gpufleet.reports.acceptance reads.
The nccl-tests run goes to the head alone (the first ready node in job order: on-demand before spot): as the cluster
user, a hostfile of the ready nodes, then scripts/ops/run-nccl-tests.sh (mpirun over the cluster user's SSH trust),
the log sent back without its per-rank lines.

Outside facts:
- GetCommandInvocation's StandardOutputContent holds the first 24000 characters of the output, ListCommandInvocations'
  CommandPlugins[].Output the first 2500 (botocore 1.44.5's ssm model): every node that ran the checks is read with
  one GetCommandInvocation, as its output (the health check's lines, fi_info's 6 lines per EFA device: about 3.5 KB
  on p5.48xlarge's 32) may pass 2500.
- AWS-RunShellScript's executionTimeout: "Default is 3600 (1 hour). Maximum is 172800 (48 hours)" (the document's
  parameter description and allowedPattern as GetDocument returns it, quoted in public repositories; (unconfirmed)
  against AWS's console).
- `timeout` signals the command's whole process group unless --foreground ("in this mode, children of COMMAND will
  not be timed out", GNU coreutils timeout(1)), so mpirun and its ranks end with run-nccl-tests.sh.
- runuser(1) (util-linux): `runuser [options] -u user [[--] command [argument...]]`, for root only, without PAM
  authentication; util-linux ships it on Amazon Linux 2 and Ubuntu (the version each image has: (unconfirmed)).
- fi_info is in /opt/amazon/efa/bin, which the EFA installer puts on login shells' PATH only ("log out of the
  instance and then log back in", EC2 user guide, efa-start; scripts/ami/17-validate.sh adds it the same way):
  Run Command's `sh -c` is no login shell.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from typing import Any

from gpufleet.constants import ACCEPTANCE_MARKER, CLUSTER_USER_NAME
from gpufleet.ops.hostlists import mpi_hostfile
from gpufleet.ops.runs import DELIVERY_TIMEOUT_SECONDS, NodeResult, node_results, send_to_nodes

# Section names of the node checks' output.
HEALTH_SECTION = "health"
FI_INFO_SECTION = "fi_info"
NCCL_LOG_SECTION = "nccl-log"
NCCL_SCRIPT_SECTION = "nccl-script"

# Where every node has them (scripts/node/operator-scripts.sh installs scripts/ops; the user data writes node.env).
# GPUFLEET_ROOT prefixes them in tests, as in the node scripts.
HEALTH_CHECK = "${GPUFLEET_ROOT:-}/opt/gpufleet/ops/node-health-check.sh"
RUN_NCCL_TESTS = "${GPUFLEET_ROOT:-}/opt/gpufleet/ops/run-nccl-tests.sh"
NODE_SETTINGS = "${GPUFLEET_ROOT:-}/etc/gpufleet/node.env"
EFA_BIN = "/opt/amazon/efa/bin"

# The health check's bound where a node runs it at boot (scripts/node/node-ready.sh HEALTH_CHECK_TIMEOUT_SECONDS: it
# reads nvidia-smi, fi_info and the kernel log, seconds when healthy); fi_info lists devices, no traffic.
HEALTH_TIMEOUT_SECONDS = 300
FI_INFO_TIMEOUT_SECONDS = 60
# What SSM grants the node checks (executionTimeout): both bounds and a minute for the rest.
NODE_CHECKS_EXECUTION_SECONDS = HEALTH_TIMEOUT_SECONDS + FI_INFO_TIMEOUT_SECONDS + 60

# After SIGTERM, timeout waits this long before SIGKILL (--kill-after), and SSM this much more before it gives up on
# the command (executionTimeout), so the log cut short still comes back with its markers.
NCCL_KILL_AFTER_SECONDS = 30
NCCL_EXECUTION_MARGIN_SECONDS = 120
# AWS-RunShellScript's executionTimeout maximum (see the module docstring).
MAX_EXECUTION_SECONDS = 172800
MAX_NCCL_TIMEOUT_SECONDS = MAX_EXECUTION_SECONDS - NCCL_EXECUTION_MARGIN_SECONDS
# What comes back of the nccl-tests log and of run-nccl-tests.sh's own output: together with the marker lines under
# the 24000 characters of StandardOutputContent. The log's per-rank device lines ("#  Rank  0 Group  0 Pid ...": 16
# on 2 nodes, 2048 on 256) and NCCL INFO lines are left out first; the table (35 rows at most, about 5 KB) is at the
# end, so the tail keeps it.
NCCL_LOG_TAIL_CHARACTERS = 20000
NCCL_SCRIPT_TAIL_CHARACTERS = 2000
# How long the laptop waits past a command's executionTimeout for SSM to report it over.
WAIT_MARGIN_SECONDS = 60


def _section(name: str, command: str) -> list[str]:
    """COMMAND's output between NAME's marker lines, the second with its exit status (0 where it ran and passed)."""
    return [
        f'echo "{ACCEPTANCE_MARKER} {name} begin"',
        "status=0",
        f"{command} || status=$?",
        f'echo "{ACCEPTANCE_MARKER} {name} exit $status"',
    ]


def node_checks_script(fi_info: bool) -> str:
    """The node checks (POSIX sh, as aws:runShellScript runs it): the health check with the node's settings, then,
    where FI_INFO (an environment with EFA), fi_info. Everything goes to standard output, the one stream
    GetCommandInvocation's StandardOutputContent holds; the text always ends with exit status 0, the verdict being in
    the markers."""
    lines = [
        "exec 2>&1",
        f'PATH="$PATH:{EFA_BIN}"',
        f'if [ -r "{NODE_SETTINGS}" ]; then . "{NODE_SETTINGS}"; fi',
        *_section(HEALTH_SECTION, f'timeout {HEALTH_TIMEOUT_SECONDS} "{HEALTH_CHECK}"'),
    ]
    if fi_info:
        lines += _section(FI_INFO_SECTION, f"timeout {FI_INFO_TIMEOUT_SECONDS} fi_info -p efa -t FI_EP_RDM")
    return "\n".join(lines)


def nccl_script(
    private_ips: list[str], gpus_per_node: int, instance_type: str, floor: str, timeout_seconds: int
) -> str:
    """What the head runs: as the cluster user, the hostfile of PRIVATE_IPS (head first, as mpirun's rank 0), then
    run-nccl-tests.sh against FLOOR (GB/s; "0" for a type the catalog publishes none for) within TIMEOUT_SECONDS;
    then the log without its per-rank lines, its last NCCL_LOG_TAIL_CHARACTERS, and the tail of the script's own
    output (its verdict, or why it stopped), each between markers with run-nccl-tests.sh's exit status (124: cut short
    by the timeout)."""
    hosts = " ".join(shlex.quote(line) for line in mpi_hostfile(private_ips, gpus_per_node).splitlines())
    settings = (
        f'GPUFLEET_HOSTFILE="$work/hosts" GPUFLEET_NCCL_LOG="$work/nccl.log" '
        f"GPUFLEET_INSTANCE_TYPE={shlex.quote(instance_type)} GPUFLEET_MIN_BUSBW={shlex.quote(floor)}"
    )
    as_cluster_user = "\n".join(
        [
            "work=$(mktemp -d)",
            f'printf "%s\\n" {hosts} > "$work/hosts"',
            # The home every node has: mpirun starts the remote ranks in the directory it runs in where that exists.
            "cd",
            "status=0",
            f"{settings} timeout --kill-after={NCCL_KILL_AFTER_SECONDS} {timeout_seconds} "
            f'"{RUN_NCCL_TESTS}" > "$work/script.out" 2>&1 || status=$?',
            f'echo "{ACCEPTANCE_MARKER} {NCCL_LOG_SECTION} begin"',
            f"if [ -r \"$work/nccl.log\" ]; then grep -v -e '^#  *Rank ' -e ' NCCL INFO ' \"$work/nccl.log\" | "
            f"tail -c {NCCL_LOG_TAIL_CHARACTERS}; echo; fi",
            f'echo "{ACCEPTANCE_MARKER} {NCCL_LOG_SECTION} exit $status"',
            f'echo "{ACCEPTANCE_MARKER} {NCCL_SCRIPT_SECTION} begin"',
            f'tail -c {NCCL_SCRIPT_TAIL_CHARACTERS} "$work/script.out"; echo',
            f'echo "{ACCEPTANCE_MARKER} {NCCL_SCRIPT_SECTION} exit $status"',
            'rm -rf "$work"',
        ]
    )
    return "\n".join(["exec 2>&1", f"runuser -u {CLUSTER_USER_NAME} -- sh -c {shlex.quote(as_cluster_user)}"])


def nccl_execution_seconds(timeout_seconds: int) -> int:
    """The executionTimeout of the nccl-tests command: the run's own bound, then room for the kill and the report."""
    return timeout_seconds + NCCL_EXECUTION_MARGIN_SECONDS


def run_on_nodes(
    ssm: Any,
    instance_ids: list[str],
    script: str,
    comment: str,
    execution_seconds: int,
    progress: Callable[[NodeResult], None] = lambda _: None,
) -> list[NodeResult]:
    """SCRIPT on INSTANCE_IDS (batches of 50, gpufleet.ops.runs), waited for until SSM says each is over: each node's
    result, in the order of INSTANCE_IDS where SSM took them (refused batches first), its output read in full (the
    first 24000 characters) with one GetCommandInvocation where the script ran to its end."""
    commands, refused = send_to_nodes(ssm, instance_ids, script, comment, execution_seconds)
    wait = DELIVERY_TIMEOUT_SECONDS + execution_seconds + WAIT_MARGIN_SECONDS
    results = refused + node_results(ssm, commands, wait, progress=progress)
    command_of = {node: command for command, nodes in commands.items() for node in nodes}
    return [
        dataclasses.replace(
            result,
            output=ssm.get_command_invocation(CommandId=command_of[result.instance_id], InstanceId=result.instance_id)[
                "StandardOutputContent"
            ],
        )
        if result.ok
        else result
        for result in results
    ]
