"""Custom-resource handlers that guarantee no node outlives its stack, for CDK's custom_resources.Provider.

The Provider framework speaks CloudFormation's protocol and polls is_complete until it answers done or the total
timeout passes, so the wait is not bounded by one Lambda run (15 minutes).

On Delete, on_event cancels the Spot Fleet request with TerminateInstances and terminates any instance of the fleet
still running (on-demand ones included); is_complete then answers done only when every instance of the fleet is
terminated, and terminates again whatever still runs, so the placement group and security group deleted after it
are free. A fleet that is already gone counts as torn down. Create and Update do nothing but name the resource after
the fleet: when a stack update replaces the fleet, the physical id changes and CloudFormation sends a Delete for the
old fleet during cleanup.

Protocol (aws-cdk-lib custom_resources.Provider, 2.275): on_event returns {"PhysicalResourceId": ...};
is_complete returns {"IsComplete": bool}. An error raised by on_event fails the resource; one raised by is_complete
is retried at the query interval until the total timeout, after which the resource fails ("Operation timed out").
source: aws-cdk-lib 2.275.0 custom-resources/lib/provider-framework/runtime/framework.js and waiter-state-machine.js
(in the installed package's jsii assembly, aws_cdk/_jsii/aws-cdk-lib@2.275.0.jsii.tgz).

Runs in AWS Lambda with only the standard library and boto3 (both present in the Lambda Python runtime).
"""

from __future__ import annotations

import logging
from typing import Any

import boto3
from botocore.exceptions import ClientError

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

FLEET_TAG = "aws:ec2spot:fleet-request-id"
GONE_FLEET_ERRORS = {"InvalidSpotFleetRequestId.NotFound", "InvalidSpotFleetRequestId.Malformed"}
GONE_FLEET_CANCEL_CODES = {"fleetRequestIdDoesNotExist", "fleetRequestIdMalformed", "fleetRequestNotInCancellableState"}
# An instance in these states is on its way out: terminating it again changes nothing.
ENDING_STATES = {"shutting-down", "terminated"}


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
        states |= _not_terminated(ec2.get_paginator("describe_instances").paginate(InstanceIds=sorted(untagged)))
    return states


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


def on_event(event: dict, context: Any, ec2: Any = None) -> dict:
    fleet_id = event["ResourceProperties"]["FleetRequestId"]
    if event["RequestType"] != "Delete":
        return {"PhysicalResourceId": physical_id(fleet_id)}
    ec2 = ec2 or boto3.client("ec2")
    known = fleet_instances(ec2, fleet_id)
    cancel_fleet(ec2, fleet_id)
    # Cancelling with TerminateInstances should end them all; whatever still runs (a fleet that was already
    # cancelled without terminating, say) is terminated here, and is_complete waits for all of them.
    if known:
        states = _not_terminated(ec2.get_paginator("describe_instances").paginate(InstanceIds=sorted(known)))
        terminate_survivors(ec2, fleet_id, states)
    return {"PhysicalResourceId": event["PhysicalResourceId"]}


def is_complete(event: dict, context: Any, ec2: Any = None) -> dict:
    if event["RequestType"] != "Delete":
        return {"IsComplete": True}
    fleet_id = event["ResourceProperties"]["FleetRequestId"]
    ec2 = ec2 or boto3.client("ec2")
    alive = fleet_instances(ec2, fleet_id)
    if not alive:
        LOGGER.info("every instance of %s is terminated", fleet_id)
        return {"IsComplete": True}
    LOGGER.info("instances of %s not terminated yet: %s", fleet_id, sorted(alive.items()))
    terminate_survivors(ec2, fleet_id, alive)
    return {"IsComplete": False}
