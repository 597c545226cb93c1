"""The interruption fan-out, run by an EventBridge rule on EC2's spot interruption warning and rebalance
recommendation: when the instance the event names is one of this environment's nodes, the checkpoint hook runs on
every other running node of the environment through SSM Run Command (AWS-RunShellScript).

Why a function between the rule and Run Command: an EventBridge pattern matches the event's own fields, and these
events carry the instance id and action only ("detail": {"instance-id", "instance-action"}, EC2 user guide,
spot-instance-termination-notices.html and rebalance-recommendations.html), no tag; a rule that sent Run Command
straight to the environment's nodes would run their hook for every spot instance of the account and region. The
function asks EC2 whether the instance carries the environment tag (DescribeInstances with the tag and instance-id
filters: an id EC2 does not describe yet is left out, not an error), and sends the command to the environment's
running nodes but that one, whose spot watcher (scripts/node/spot-watcher.sh) already runs the hook from instance
metadata.

The command goes to the running peers only (gpufleet.ssm_batches.command_targets: a pending, stopping or
shutting-down peer runs no job to checkpoint, and a command held for it would run after the moment), in SendCommand
batches of 50 that one node SSM refuses (its agent not registered yet, or going away) cannot silence
(gpufleet.ssm_batches.send_in_batches: a call refused with InvalidInstanceId is split until the node is alone). The
log line names each peer passed over and each node SSM refused. A refusal of the call itself (AccessDenied, a throttle
past botocore's retries) stops the sending; the nodes it left are named with its code, and when no batch went out it
fails the run with its message in the function's log. Nothing is retried: the rule and the function's asynchronous
invocation both retry nothing, since a warning two minutes ahead is useless later.

Lambda environment: ENVIRONMENT_NAME (the value of the environment tag), SETTINGS_FILE (the node settings the hook's
command reads, gpufleet/user_data.py).

Runs in AWS Lambda with the standard library and boto3 (both in the Lambda Python runtime) and gpufleet/constants.py,
gpufleet/aws_faults.py, gpufleet/checkpoint_hook.py (the command, one rule with the other callers of the hook) and
gpufleet/ssm_batches.py (the sending, one rule with every Run Command caller), which the asset carries
(runtime/gpufleet/).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import boto3

from gpufleet.aws_faults import client_config
from gpufleet.checkpoint_hook import hook_command
from gpufleet.constants import ENVIRONMENT_TAG_KEY
from gpufleet.ssm_batches import RUN_SHELL_SCRIPT, command_targets, send_in_batches

# Four attempts: a throttled call waits at most 1 + 2 + 4 = 7 seconds between them (botocore's standard mode backs
# off rand(0, 1) * 2 ** (try - 1) seconds on throttling, botocore/retries/standard.py ExponentialBackoff): the
# warning gives two minutes, and the run must be over well inside them.
CLIENT_CONFIG = client_config(4)
# What the hook hears (GPUFLEET_NOTICE_PATH) for each event, by its detail-type; docs/guides/interruptions.md lists
# these beside the notices the spot watcher passes.
NOTICE_PATHS = {
    "EC2 Spot Instance Interruption Warning": "peer/spot-interruption",
    "EC2 Instance Rebalance Recommendation": "peer/rebalance-recommendation",
    "EC2 Spot Instance Rebalance Recommended": "peer/rebalance-recommendation",
}
# An instance id as EC2 writes it (i- and 8 or 17 hex digits): checked before it goes into a shell command.
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8}([0-9a-f]{9})?")
# InstanceStateName: the nodes that may still be the environment's (the event's instance among them); the recipients
# are those of them that take a command now (command_targets).
PRESENT_STATES = ("pending", "running", "stopping", "shutting-down")


def environment_nodes(ec2: Any, environment: str) -> dict[str, str]:
    """The environment's instances that are not stopped or gone: instance id -> state."""
    filters = [
        {"Name": f"tag:{ENVIRONMENT_TAG_KEY}", "Values": [environment]},
        {"Name": "instance-state-name", "Values": list(PRESENT_STATES)},
    ]
    return {
        instance["InstanceId"]: instance["State"]["Name"]
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    }


def fan_out(event: dict, ec2: Any, ssm: Any, environment: str, settings_file: str) -> dict[str, Any]:
    detail_type = event.get("detail-type", "")
    instance_id = str(event.get("detail", {}).get("instance-id", ""))
    line: dict[str, Any] = {"event": "interruption-fanout", "detail_type": detail_type, "instance": instance_id}
    notice_path = NOTICE_PATHS.get(detail_type)
    if notice_path is None or not INSTANCE_ID.fullmatch(instance_id):
        line["skipped"] = "not a spot interruption warning or rebalance recommendation with an instance id"
        return line
    nodes = environment_nodes(ec2, environment)
    if instance_id not in nodes:
        line["skipped"] = f"{instance_id} is not a node of {environment}"
        return line
    recipients, passed_over = command_targets({node: state for node, state in nodes.items() if node != instance_id})
    arguments = {
        "DocumentName": RUN_SHELL_SCRIPT,
        # At most 97 characters (SendCommand takes 100): names have 24 at most, the detail-types 38.
        "Comment": f"gpufleet {environment}: {detail_type} for {instance_id}",
        "Parameters": {"commands": [hook_command(settings_file, notice_path, instance_id)]},
    }
    delivery = send_in_batches(ssm, recipients, lambda _: arguments)
    delivery.raise_if_nothing_went_out()
    line.update(
        notice_path=notice_path,
        nodes=recipients,
        commands=list(delivery.commands),
        passed_over=passed_over,
        refused=delivery.refused_lines(),
    )
    return line


def on_notice(event: dict, context: Any, clients: dict[str, Any] | None = None) -> dict[str, Any]:
    clients = clients or {service: boto3.client(service, config=CLIENT_CONFIG) for service in ("ec2", "ssm")}
    line = fan_out(event, clients["ec2"], clients["ssm"], os.environ["ENVIRONMENT_NAME"], os.environ["SETTINGS_FILE"])
    # Printed, not logged: one JSON document a line for CloudWatch Logs Insights, as the capacity fallback does.
    print(json.dumps(line, sort_keys=True), flush=True)
    return line
