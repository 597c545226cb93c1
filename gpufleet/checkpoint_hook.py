"""The checkpoint hook run on nodes through SSM Run Command: one rule for every Lambda that makes the nodes run it
(the interruption fan-out) or ends nodes (the capacity fallback's hand-back, the fleet teardown, the old group of a
replace-all rollout).

The command is the node's settings, then the hook with the notice named, as scripts/node/spot-watcher.sh runs it
(docs/guides/interruptions.md lists the notices). It is sent as every Run Command is (gpufleet/ssm_batches.py), one
node a call: the callers end these nodes, so they must know when they send which nodes got no hook, and only a call for
one node tells that under either answer to what SSM does with a node it cannot reach among many (refuses the call, or
takes it and fails that node's invocation). GetCommandInvocation says when a node's run is over; right after
SendCommand it may answer InvocationDoesNotExist (eventual consistency), which counts as not over yet. Sources:
botocore's ssm model (SendCommand, GetCommandInvocation, the CommandInvocationStatus enum).

Imports the standard library and gpufleet/ssm_batches.py, and botocore inside the functions that call SSM: the Lambda
assets carry both files (links in their runtime/gpufleet/), and the stacks import hook_command from it, where
synthesis must not load the AWS SDK (tests/test_app.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpufleet.ssm_batches import FINISHED_STATUSES, RUN_SHELL_SCRIPT, send_in_batches

# How long a removal waits for the hooks before it ends the nodes anyway: the default hook's own wait (90 seconds,
# scripts/ops/save-checkpoint.sh) with room for Run Command's delivery. A hook still running then runs on until
# the node ends.
REMOVAL_WAIT_SECONDS = 180
POLL_SECONDS = 5


def hook_command(settings_file: str, notice_path: str, notice: str) -> str:
    """What Run Command runs on a node: its settings, then its checkpoint hook with the notice named. notice_path and
    notice are gpufleet's own words or an instance id (checked by the caller): nothing here quotes them."""
    return (
        f". {settings_file} && GPUFLEET_NOTICE_PATH={notice_path} GPUFLEET_NOTICE={notice} "
        'bash -c "$GPUFLEET_CHECKPOINT_HOOK"'
    )


def error_code(error: Any) -> str:
    """The code of a botocore ClientError."""
    return str(error.response.get("Error", {}).get("Code", ""))


def send_hook(ssm: Any, nodes: list[str], command: str, comment: str) -> tuple[dict[str, str], list[str]]:
    """Start the hook on each node: (node -> command id, "node (error code)" for each node SSM did not take). Raises
    no ClientError: an instance SSM does not manage (yet), or one on its way out (InvalidInstanceId), is named alone;
    a refusal of the call itself (AccessDenied, throttling past the client's retries) stops the sending and names every
    node not sent. The caller decides what a node without its hook means."""
    request = {"DocumentName": RUN_SHELL_SCRIPT, "Comment": comment, "Parameters": {"commands": [command]}}
    delivery = send_in_batches(ssm, nodes, lambda _: request, batch_size=1)
    commands = {node: command_id for command_id, (node,) in delivery.commands.items()}
    return commands, [f"{node} ({code})" for node, code in delivery.refused.items()]


def hook_finished(ssm: Any, command_id: str, node: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        status = ssm.get_command_invocation(CommandId=command_id, InstanceId=node)["Status"]
    except ClientError as error:
        if error_code(error) != "InvocationDoesNotExist":
            raise
        return False
    return status in FINISHED_STATUSES


def run_hook_and_wait(
    ssm: Any,
    nodes: list[str],
    command: str,
    comment: str,
    wait_seconds: float = REMOVAL_WAIT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Run the hook on NODES and wait until every run is over or WAIT_SECONDS have passed; return what happened, a
    line each, for the caller's log."""
    if not nodes:
        return []
    deadline = clock() + wait_seconds
    commands, unreachable = send_hook(ssm, nodes, command, comment)
    lines = [f"checkpoint hook not started on {node}" for node in unreachable]
    running = dict(commands)
    while running:
        running = {node: command_id for node, command_id in running.items() if not hook_finished(ssm, command_id, node)}
        if not running:
            break
        if clock() >= deadline:
            lines.append(f"checkpoint hook still running after {wait_seconds:g}s on {', '.join(sorted(running))}")
            return lines
        sleep(POLL_SECONDS)
    lines.append(f"checkpoint hook over on {', '.join(sorted(commands)) or 'no node'}")
    return lines
