"""The custom-resource handler that gives a Capacity Block's Auto Scaling group its schedule at deploy time, for CDK's
custom_resources.Provider (stacks/constructs/block_capacity/infrastructure.py says why not in the template).

on_event, on Create, and on an Update that changes the group, the target or the block's dates, computes the schedule
from the time it runs (gpufleet.block_schedule.block_schedule): it puts the scheduled actions still ahead
(PutScheduledUpdateGroupAction "Creates or updates a scheduled scaling action", so a second deploy rewrites them),
deletes those of its own (SCALE_OUT, SCALE_IN) that are no longer due (a start already past, a window over), and sets
the group's desired capacity when it is not what the schedule says. An Update that changes none of these (a new
ServiceToken, say) sends nothing, so what an operator or a scheduled action set stays. Delete deletes its own
actions, when the group is still there (CloudFormation deletes this resource before the group it references; a
removed block leaves the group behind). Scheduled actions of other names are left alone.

Every call is answered or raises: an error still standing after botocore's retries (client_config: throttling and
server errors, ResourceContention's 500 among them) fails the resource with AWS's message, which the Provider hands
CloudFormation as the reason, and the deploy rolls back. A rollback is an Update with the old properties
("The rollback update will have ResourceProperties=OLD and OldResourceProperties=NEW", aws-cdk docs/CLOUDFORMATION.md),
which computes the old schedule anew at its own time.

Protocol (aws-cdk-lib custom_resources.Provider, 2.275): on_event returns {"PhysicalResourceId": ...}; "If an error is
thrown, the framework will submit a "FAILED" response to AWS CloudFormation" (custom-resources/README.md). Property
values arrive as strings ("Boolean properties are stringified"; that numbers are too is (unconfirmed)): Target is
read with int(), Start and End with datetime.fromisoformat.

Lambda environment: ENVIRONMENT_NAME (for the physical id).

Runs in AWS Lambda with the standard library and boto3 (both present in the Lambda Python runtime) and
gpufleet/block_schedule.py, gpufleet/constants.py and gpufleet/aws_faults.py, which the asset carries
(runtime/gpufleet/).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

import boto3

from gpufleet.aws_faults import client_config
from gpufleet.block_schedule import SCALE_IN, SCALE_OUT, BlockSchedule, block_schedule

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

# Five attempts: a throttled call waits at most 1 + 2 + 4 + 8 = 15 seconds between them (botocore's standard mode
# backs off rand(0, 1) * 2 ** (try - 1) seconds, botocore/retries/standard.py ExponentialBackoff), inside the
# handler's one-minute timeout.
CLIENT_CONFIG = client_config(5)
OWN_ACTIONS = (SCALE_OUT, SCALE_IN)
# What makes a schedule: an Update that changes none of these sends nothing.
SCHEDULE_PROPERTIES = ("AutoScalingGroupName", "Target", "Start", "End")


def physical_id() -> str:
    return f"gpufleet-{os.environ['ENVIRONMENT_NAME']}-block-capacity"


def described_group(autoscaling: Any, name: str) -> dict | None:
    """The group as DescribeAutoScalingGroups gives it; None when there is none of that name (it lists only the groups
    it finds)."""
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    return groups[0] if groups else None


def own_actions(autoscaling: Any, name: str) -> set[str]:
    """The names of the group's scheduled actions that are this handler's ("If you specify an unknown scheduled
    action, it is ignored with no error": DescribeScheduledActions ScheduledActionNames, botocore's model); an action
    that has run is no longer listed ("Gets information about the scheduled actions that haven't run")."""
    pages = autoscaling.get_paginator("describe_scheduled_actions").paginate(
        AutoScalingGroupName=name, ScheduledActionNames=list(OWN_ACTIONS)
    )
    return {action["ScheduledActionName"] for page in pages for action in page["ScheduledUpdateGroupActions"]}


def delete_actions(autoscaling: Any, name: str, action_names: set[str]) -> None:
    for action_name in sorted(action_names):
        LOGGER.info("%s: deleting scheduled action %s", name, action_name)
        autoscaling.delete_scheduled_action(AutoScalingGroupName=name, ScheduledActionName=action_name)


def schedule_changed(event: dict) -> bool:
    new, old = event["ResourceProperties"], event.get("OldResourceProperties", {})
    return any(str(new.get(key)) != str(old.get(key)) for key in SCHEDULE_PROPERTIES)


def schedule_of(properties: dict, now: dt.datetime) -> BlockSchedule:
    return block_schedule(
        start=dt.datetime.fromisoformat(properties["Start"]),
        end=dt.datetime.fromisoformat(properties["End"]),
        target=int(properties["Target"]),
        now=now,
    )


def on_event(event: dict, context: Any, autoscaling: Any = None, now: dt.datetime | None = None) -> dict:
    result = {"PhysicalResourceId": event.get("PhysicalResourceId") or physical_id()}
    request = event["RequestType"]
    if request == "Update" and not schedule_changed(event):
        return result
    name = event["ResourceProperties"]["AutoScalingGroupName"]
    autoscaling = autoscaling or boto3.client("autoscaling", config=CLIENT_CONFIG)
    group = described_group(autoscaling, name)
    if request == "Delete":
        if group is not None:
            delete_actions(autoscaling, name, own_actions(autoscaling, name))
        return result
    if group is None:
        raise RuntimeError(f"Auto Scaling group {name} not found")
    # Read after the describe calls, just before the calls the time matters to (block_schedule.ACTION_LEAD).
    schedule = schedule_of(event["ResourceProperties"], now or dt.datetime.now(dt.UTC))
    for action in schedule.actions:
        LOGGER.info("%s: %s at %s, desired capacity %d", name, action.name, action.at, action.desired_capacity)
        autoscaling.put_scheduled_update_group_action(
            AutoScalingGroupName=name,
            ScheduledActionName=action.name,
            StartTime=action.at,
            DesiredCapacity=action.desired_capacity,
        )
    due = set(OWN_ACTIONS) - {action.name for action in schedule.actions}
    if due:
        delete_actions(autoscaling, name, own_actions(autoscaling, name) & due)
    if group["DesiredCapacity"] != schedule.desired_capacity:
        LOGGER.info("%s: desired capacity %d -> %d", name, group["DesiredCapacity"], schedule.desired_capacity)
        autoscaling.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=schedule.desired_capacity)
    return result
