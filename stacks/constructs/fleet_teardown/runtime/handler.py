"""Custom-resource handlers that guarantee no node outlives its stack, for CDK's custom_resources.Provider.

Before anything ends, the nodes checkpoint: with CHECKPOINT_COMMAND set (the environment has node.checkpoint_hook),
on_event runs the hook on every running node of the fleet through Run Command and waits until each run is over or
gpufleet.checkpoint_hook's REMOVAL_WAIT_SECONDS have passed (gpufleet/checkpoint_hook.py); a node in another state
(gpufleet.ssm_batches.command_targets), a hook that could not start or a call SSM refused is logged, never a reason
to keep the nodes.

The Provider framework speaks CloudFormation's protocol and polls is_complete until it answers done or the total
timeout passes, so the wait is not bounded by one Lambda run (15 minutes).

On Delete, on_event then cancels the Spot Fleet request with TerminateInstances and terminates any instance of the fleet
still running (on-demand ones included); is_complete then answers done only when every instance of the fleet is
terminated, and terminates again whatever still runs, so the placement group and security group deleted after it
are free. A fleet that is already gone counts as torn down. Create and Update do nothing but name the resource after
the fleet: when a stack update replaces the fleet, the physical id changes and CloudFormation sends a Delete for the
old fleet during cleanup.

Protocol (aws-cdk-lib custom_resources.Provider, 2.275): on_event returns {"PhysicalResourceId": ...};
is_complete returns {"IsComplete": bool}, and {"IsComplete": False} is polled again at the query interval until the
total timeout, after which the resource fails ("Operation timed out"). An error raised by either handler fails the
resource at once: the framework's safeHandler answers FAILED for any error but its own Retry. source: aws-cdk-lib
2.275.0 custom-resources/lib/provider-framework/runtime/framework.js, cfn-response.js (safeHandler) and
waiter-state-machine.js (in the installed package's jsii assembly, aws_cdk/_jsii/aws-cdk-lib@2.275.0.jsii.tgz).
So a stack's deletion must not fail on a passing fault: the calls retry in botocore's standard mode (CLIENT_CONFIG),
and a fault that passes (gpufleet.aws_faults: throttling, a timeout, a server error, an unreachable endpoint) still
standing after those retries makes is_complete answer "not yet", so the next poll asks again; any other error (a
denied call, say) still fails the resource at once, with its message.

Runs in AWS Lambda with the standard library and boto3 (both present in the Lambda Python runtime) and
gpufleet/aws_faults.py, gpufleet/checkpoint_hook.py and gpufleet/ssm_batches.py, which the asset carries
(runtime/gpufleet/).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from gpufleet.aws_faults import client_config, passing
from gpufleet.checkpoint_hook import run_hook_and_wait
from gpufleet.ssm_batches import command_targets

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

FLEET_TAG = "aws:ec2spot:fleet-request-id"
GONE_FLEET_ERRORS = {"InvalidSpotFleetRequestId.NotFound", "InvalidSpotFleetRequestId.Malformed"}
GONE_FLEET_CANCEL_CODES = {"fleetRequestIdDoesNotExist", "fleetRequestIdMalformed", "fleetRequestNotInCancellableState"}
# An instance in these states is on its way out: terminating it again changes nothing.
ENDING_STATES = {"shutting-down", "terminated"}
# Seven attempts: a throttled call waits at most 1 + 2 + 4 + 8 + 16 + 20 = 51 seconds between them
# (botocore's standard mode backs off rand(0, 1) * min(2 ** (try - 1), 20) seconds on throttling,
# botocore/retries/standard.py ExponentialBackoff), so one call's retries take less than half the handlers'
# two-minute timeout: a handler that runs out of time fails the resource as an error does (the framework's
# invokeUserFunction throws on the function's error). is_complete's next poll, 30 seconds on, is the retry after that.
CLIENT_CONFIG = client_config(7)


def physical_id(fleet_id: str) -> str:
    return f"teardown-{fleet_id}"


def fleet_instances(ec2: Any, fleet_id: str) -> dict[str, str]:
    """Instance id -> state of every instance the fleet launched that is not terminated yet: the fleet's own list
    (which forgets a cancelled fleet) and the fleet tag (which stays on the instances)."""
    listed: set[str] = set()
    try:
        for page in ec2.get_paginator("describe_spot_fleet_instances").paginate(SpotFleetRequestId=fleet_id):
            listed.update(item["InstanceId"] for item in page.get("ActiveInstances", []))
    except ClientError as error:
        if error.response["Error"]["Code"] not in GONE_FLEET_ERRORS:
            raise
    tag_filter = [{"Name": f"tag:{FLEET_TAG}", "Values": [fleet_id]}]
    states = _not_terminated(ec2.get_paginator("describe_instances").paginate(Filters=tag_filter))
    if untagged := listed - set(states):
        states |= _described(ec2, untagged)
    return states


def _described(ec2: Any, instance_ids: set[str]) -> dict[str, str]:
    """The states of these instances, found by filter rather than by id: EC2's describe calls are eventually
    consistent, and an id EC2 does not know yet would fail DescribeInstances(InstanceIds=...) with
    InvalidInstanceID.NotFound where a filter just finds nothing (EC2 API reference, "Eventual consistency")."""
    id_filter = [{"Name": "instance-id", "Values": sorted(instance_ids)}]
    return _not_terminated(ec2.get_paginator("describe_instances").paginate(Filters=id_filter))


def _not_terminated(pages: Any) -> dict[str, str]:
    return {
        instance["InstanceId"]: instance["State"]["Name"]
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
        if instance["State"]["Name"] != "terminated"
    }


def cancel_fleet(ec2: Any, fleet_id: str) -> None:
    try:
        response = ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[fleet_id], TerminateInstances=True)
    except ClientError as error:
        if error.response["Error"]["Code"] in GONE_FLEET_ERRORS:
            LOGGER.info("fleet %s no longer exists", fleet_id)
            return
        raise
    for failure in response.get("UnsuccessfulFleetRequests", []):
        code = failure["Error"]["Code"]
        if code not in GONE_FLEET_CANCEL_CODES:
            raise RuntimeError(f"cannot cancel fleet {fleet_id}: {code}: {failure['Error'].get('Message', '')}")
        LOGGER.info("fleet %s: %s", fleet_id, code)


def terminate_survivors(ec2: Any, fleet_id: str, states: dict[str, str]) -> list[str]:
    """Terminate the instances that are not on their way out; return their ids."""
    survivors = sorted(instance_id for instance_id, state in states.items() if state not in ENDING_STATES)
    if survivors:
        LOGGER.info("terminating %d instance(s) of %s: %s", len(survivors), fleet_id, survivors)
        ec2.terminate_instances(InstanceIds=survivors)
    return survivors


def checkpoint(ssm: Any, fleet_id: str, states: dict[str, str], command: str, **waiting: Any) -> None:
    """Run the checkpoint hook on the fleet's running nodes and wait for it, bounded; log what happened, and each node
    in another state."""
    running, passed_over = command_targets(states)
    try:
        lines = run_hook_and_wait(
            ssm, running, command, "gpufleet teardown: checkpoint before the fleet ends", **waiting
        )
    except (BotoCoreError, ClientError) as error:
        lines = [f"checkpoint hook not awaited ({error}); the teardown goes on"]
    for line in [*passed_over, *lines]:
        LOGGER.info("%s: %s", fleet_id, line)


def on_event(event: dict, context: Any, ec2: Any = None, ssm: Any = None, **waiting: Any) -> dict:
    """waiting: gpufleet.checkpoint_hook.run_hook_and_wait's clock and sleep (tests)."""
    fleet_id = event["ResourceProperties"]["FleetRequestId"]
    if event["RequestType"] != "Delete":
        return {"PhysicalResourceId": physical_id(fleet_id)}
    ec2 = ec2 or boto3.client("ec2", config=CLIENT_CONFIG)
    known = fleet_instances(ec2, fleet_id)
    command = os.environ.get("CHECKPOINT_COMMAND", "")
    if command and known:
        checkpoint(ssm or boto3.client("ssm", config=CLIENT_CONFIG), fleet_id, known, command, **waiting)
    cancel_fleet(ec2, fleet_id)
    # Cancelling with TerminateInstances should end them all; whatever still runs (a fleet that was already
    # cancelled without terminating, say) is terminated here, and is_complete waits for all of them.
    if known:
        terminate_survivors(ec2, fleet_id, _described(ec2, set(known)))
    return {"PhysicalResourceId": event["PhysicalResourceId"]}


def is_complete(event: dict, context: Any, ec2: Any = None) -> dict:
    if event["RequestType"] != "Delete":
        return {"IsComplete": True}
    fleet_id = event["ResourceProperties"]["FleetRequestId"]
    ec2 = ec2 or boto3.client("ec2", config=CLIENT_CONFIG)
    try:
        alive = fleet_instances(ec2, fleet_id)
        if not alive:
            LOGGER.info("every instance of %s is terminated", fleet_id)
            return {"IsComplete": True}
        LOGGER.info("instances of %s not terminated yet: %s", fleet_id, sorted(alive.items()))
        terminate_survivors(ec2, fleet_id, alive)
    except (BotoCoreError, ClientError) as error:
        if not passing(error):
            raise
        LOGGER.warning("%s; asking again at the next poll", error)
    return {"IsComplete": False}
