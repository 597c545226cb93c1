"""One Run Command to many nodes, in SendCommand batches that no single node can silence, and which instance states a
command goes to: one rule for every caller. The interruption fan-out (its Lambda carries this file), `gpufleet run`,
`runs`, `stop`, `logs` and the acceptance checks (gpufleet/ops/runs.py), and the checkpoint hook's senders
(gpufleet/checkpoint_hook.py: the capacity fallback, the fleet teardown).

What SSM does, from botocore 1.44.5's ssm model: SendCommand takes at most 50 InstanceIds. InvalidInstanceId is one of
SendCommand's errors, so an answer to the call (no command id comes back); its documentation gives four causes: no
permission to access the managed node, SSM Agent not running, SSM Agent not registered with the SSM endpoint, and a
node that "isn't in a valid state. Valid states are: Running, Pending, Stopped, and Stopping. Invalid states are:
Shutting-down and Terminated." Neither the model nor the Systems Manager user guide says whether one such id among
many refuses the whole call or fails only that node's invocation, which the invocation statuses would allow
("Undeliverable: The command can't be delivered to the managed node. The managed node might not exist or might not be
responding", CommandInvocation.StatusDetails). Users report the first: guardian/ssm-scala#126 (a list holding
terminated instances failed with InvalidInstanceId) and aws-cli#3646; AWS has not said it (unconfirmed).

So the outcome does not depend on it: a call refused with InvalidInstanceId is split in halves and each half sent again,
down to single nodes. A refused call sent nothing, so no node gets the command twice; the nodes SSM refuses on their
own are reported (Delivery.refused), and every other node gets the command. Where SSM fails only the node's invocation
instead, the call is taken and that node's invocation says so (Undeliverable), which the callers read as they read any
failed invocation. Calls: one per 50 nodes, 12 more for each node refused in a batch of 50 (six halvings, two calls
each), at most 2n - 1 for a batch of n. The error's message sometimes names instances ("Instances [[i-...]] not in a
valid state for account ...", aws-samples/eks-security-compromised-cluster-remediation#12), in a form no documentation
gives, so it is not read. A call for one node SSM cannot reach is refused under either answer (that issue's call named
one instance, as did aws-cli#2412's): a caller that must know when it sends which nodes did not get the command (the
checkpoint hook before nodes end) sends one node a call (batch_size=1).

Any other refusal is the call's, not a node's (AccessDeniedException, InvalidDocument, InvalidParameters, or throttling
that outlasted the client's retries: botocore's standard mode retries throttling and 5xx answers itself, with the
callers' configs, gpufleet/aws.py and gpufleet/aws_faults.py). It is not split, and the sending stops: the next call
would meet the same account, document and permissions, and throttling that outlasted the backoff would make each
further call wait through its own, past a Lambda's time. The call's nodes and those not sent yet are reported with its
code, and the error is kept (Delivery.call_refusal) for the callers that have nothing to say but that when no command
went out (raise_if_nothing_went_out).

Imports the standard library, and botocore inside send_in_batches: the Lambda assets carry this file (a link in their
runtime/gpufleet/), and the stacks import gpufleet.checkpoint_hook, which imports it, where synthesis must not load the
AWS SDK (tests/test_app.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SEND_COMMAND_MAX_INSTANCES = 50  # botocore ssm model: SendCommandRequest.InstanceIds max 50
# The document every gpufleet Run Command runs: a shell script as root (AWS-owned, in every region).
RUN_SHELL_SCRIPT = "AWS-RunShellScript"
# CommandInvocationStatus values of an invocation that is over, whatever its result (botocore ssm model).
FINISHED_STATUSES = ("Success", "Cancelled", "TimedOut", "Failed")
INVALID_INSTANCE_ID = "InvalidInstanceId"
RUNNING = "running"
# Why a node in each of EC2's instance states (InstanceStateName, botocore's ec2 model: pending, running,
# shutting-down, terminated, stopping, stopped) gets no command now; a running node gets it. SSM may take a command
# for a pending, stopping or stopped node (valid states for InvalidInstanceId) but holds it until the agent answers
# ("Delayed: The system attempted to send the command to the managed node but wasn't successful. The system retries
# again", CommandInvocation.StatusDetails): it would run after the moment it was meant for, a peer's checkpoint after a
# restart, a run's start on a node that joined since.
NO_COMMAND_BECAUSE = {
    "pending": "pending: still starting, its SSM agent may not be registered yet",
    "stopping": "stopping: a command would wait for its next start",
    "stopped": "stopped: a command would wait for its next start",
    "shutting-down": "shutting-down: SSM refuses it",
    "terminated": "terminated: gone",
}


def command_targets(states: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Of STATES (instance id -> InstanceStateName), the nodes a command goes to now, sorted, and one line for each
    other node, in id order, saying why not."""
    targets = sorted(node for node, state in states.items() if state == RUNNING)
    passed_over = [
        f"{node}: no command ({NO_COMMAND_BECAUSE.get(state, f'{state}: a state gpufleet does not know')})"
        for node, state in sorted(states.items())
        if state != RUNNING
    ]
    return targets, passed_over


@dataclass
class Delivery:
    """What a send did: each command id with the nodes it went to, each node SSM did not take with the error code, and
    the refusal of a call itself that stopped the sending, if one did."""

    commands: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    call_refusal: Exception | None = None

    def refused_lines(self) -> list[str]:
        return [f"{node}: SSM refused it ({code})" for node, code in self.refused.items()]

    def raise_if_nothing_went_out(self) -> None:
        if self.call_refusal is not None and not self.commands:
            raise self.call_refusal


def send_in_batches(
    ssm: Any,
    instance_ids: Sequence[str],
    request: Callable[[int], dict[str, Any]],
    batch_size: int = SEND_COMMAND_MAX_INSTANCES,
) -> Delivery:
    """SendCommand to INSTANCE_IDS, in their order, BATCH_SIZE (1 to 50) to a call: REQUEST(the position in
    INSTANCE_IDS of the batch's first node) gives the call's other arguments; the nodes of a split batch keep their
    batch's. A call refused with InvalidInstanceId is split, another refusal stops the sending, as the module's doc
    says; no ClientError is raised."""
    from botocore.exceptions import ClientError

    if not 1 <= batch_size <= SEND_COMMAND_MAX_INSTANCES:
        raise ValueError(f"batch_size {batch_size}: SendCommand takes 1 to {SEND_COMMAND_MAX_INSTANCES} ids")
    delivery = Delivery()
    for start in range(0, len(instance_ids), batch_size):
        arguments = request(start)
        waiting = [list(instance_ids[start : start + batch_size])]
        while waiting:
            batch = waiting.pop(0)
            try:
                command = ssm.send_command(InstanceIds=batch, **arguments)["Command"]
            except ClientError as error:
                code = str(error.response.get("Error", {}).get("Code", ""))
                if code == INVALID_INSTANCE_ID and len(batch) > 1:
                    half = (len(batch) + 1) // 2
                    waiting[:0] = [batch[:half], batch[half:]]
                    continue
                if code == INVALID_INSTANCE_ID:
                    delivery.refused[batch[0]] = code
                    continue
                not_sent = [*batch, *(node for rest in waiting for node in rest), *instance_ids[start + batch_size :]]
                delivery.refused.update(dict.fromkeys(not_sent, code))
                delivery.call_refusal = error
                return delivery
            delivery.commands[command["CommandId"]] = batch
    return delivery
