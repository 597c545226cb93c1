"""Custom-resource handler that guarantees no node outlives its stack.

On Delete it cancels the Spot Fleet request with TerminateInstances, terminates any instance of the fleet that is
still alive (on-demand ones included), and waits until all of them are terminated, so the placement group and
security group deleted after it are free. A fleet that is already gone counts as torn down. Create and Update do
nothing but name the resource after the fleet: when a stack update replaces the fleet, the physical id changes
and CloudFormation sends a Delete for the old fleet during cleanup.

Runs in AWS Lambda with only the standard library and boto3 (both present in the Lambda Python runtime).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import ClientError

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

FLEET_TAG = "aws:ec2spot:fleet-request-id"
GONE_FLEET_ERRORS = {"InvalidSpotFleetRequestId.NotFound", "InvalidSpotFleetRequestId.Malformed"}
GONE_FLEET_CANCEL_CODES = {"fleetRequestIdDoesNotExist", "fleetRequestIdMalformed", "fleetRequestNotInCancellableState"}
ENDED_STATES = {"terminated"}
POLL_SECONDS = 10
RESPONSE_MARGIN_SECONDS = 30


class TeardownIncomplete(Exception):
    """Instances were still running when the time ran out."""


def fleet_instance_ids(ec2: Any, fleet_id: str) -> set[str]:
    """Every instance the fleet launched that is not terminated yet: the fleet's own list and the fleet tag."""
    instance_ids: set[str] = set()
    try:
        for page in ec2.get_paginator("describe_spot_fleet_instances").paginate(SpotFleetRequestId=fleet_id):
            instance_ids.update(item["InstanceId"] for item in page.get("ActiveInstances", []))
    except ClientError as error:
        if error.response["Error"]["Code"] not in GONE_FLEET_ERRORS:
            raise
    tag_filter = [{"Name": f"tag:{FLEET_TAG}", "Values": [fleet_id]}]
    tagged = ec2.get_paginator("describe_instances").paginate(Filters=tag_filter)
    return instance_ids | _not_terminated(tagged)


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


def alive_instances(ec2: Any, instance_ids: set[str]) -> set[str]:
    return _not_terminated(ec2.get_paginator("describe_instances").paginate(InstanceIds=sorted(instance_ids)))


def _not_terminated(pages: Any) -> set[str]:
    return {
        instance["InstanceId"]
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
        if instance["State"]["Name"] not in ENDED_STATES
    }


def teardown_fleet(
    ec2: Any,
    fleet_id: str,
    *,
    seconds_left: Callable[[], float],
    sleep: Callable[[float], None] = time.sleep,
) -> set[str]:
    """Cancel the fleet, terminate its instances and wait for them; return the ids that were terminated."""
    instance_ids = fleet_instance_ids(ec2, fleet_id)
    cancel_fleet(ec2, fleet_id)
    if not instance_ids:
        return instance_ids
    # Cancelling with TerminateInstances should end them all; whatever is still alive (a fleet that was already
    # cancelled without terminating, say) is terminated here.
    if survivors := alive_instances(ec2, instance_ids):
        LOGGER.info("terminating %d instance(s) of %s: %s", len(survivors), fleet_id, sorted(survivors))
        ec2.terminate_instances(InstanceIds=sorted(survivors))
    while alive := alive_instances(ec2, instance_ids):
        if seconds_left() < POLL_SECONDS + RESPONSE_MARGIN_SECONDS:
            raise TeardownIncomplete(f"instances of {fleet_id} still shutting down: {', '.join(sorted(alive))}")
        sleep(POLL_SECONDS)
    return instance_ids


def send_response(event: dict, status: str, reason: str, physical_id: str) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:3000],
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (the pre-signed CloudFormation URL)
        LOGGER.info("CloudFormation response sent: %s", response.status)


def handle(event: dict, context: Any, ec2: Any = None, sleep: Callable[[float], None] = time.sleep) -> None:
    fleet_id = event["ResourceProperties"]["FleetRequestId"]
    deleting = event["RequestType"] == "Delete"
    physical_id = event["PhysicalResourceId"] if deleting else f"teardown-{fleet_id}"
    try:
        if deleting:
            terminated = teardown_fleet(
                ec2 or boto3.client("ec2"),
                fleet_id,
                seconds_left=lambda: context.get_remaining_time_in_millis() / 1000,
                sleep=sleep,
            )
            reason = f"fleet {fleet_id} cancelled; {len(terminated)} instance(s) terminated"
        else:
            reason = f"watching fleet {fleet_id}"
    except Exception as error:  # noqa: BLE001 (CloudFormation waits an hour for a handler that never answers)
        LOGGER.exception("fleet teardown failed")
        send_response(event, "FAILED", f"{type(error).__name__}: {error}", physical_id)
        return
    send_response(event, "SUCCESS", reason, physical_id)


def lambda_handler(event: dict, context: Any) -> None:
    handle(event, context)
