"""Custom-resource handlers that give an Auto Scaling group its nodes after CloudFormation has created or updated it,
for CDK's custom_resources.Provider (stacks/constructs/group_capacity/infrastructure.py says why the template leaves
DesiredCapacity out).

on_event, on Create, and on an Update that names another group or another target, sets the group's desired capacity
to the target (SetDesiredCapacity); Delete does nothing (deleting the group terminates its nodes). It then decides
whether CloudFormation waits for the nodes:
- rollout manual: never. The deploy completes and the nodes launch as capacity allows.
- rollout replace-all: while an older group of the same environment (the environment tag) still has nodes
  InService, which is a deploy that swapped groups (a new image in the group's create-only name): the new group must
  have `target` nodes InService before CloudFormation deletes the old one. A first deploy has no older group, and a
  rollback returns to the older group itself, so neither waits.
is_complete then answers done once the group has `target` nodes InService, and past the wait's deadline raises an
error saying what is missing, so the deploy fails and CloudFormation rolls back: it deletes the new group and its
nodes, and the old group keeps its own. A fault that passes (gpufleet.aws_faults: throttling, a timeout, a server
error, an unreachable endpoint) still standing after botocore's retries makes is_complete answer "not yet", so the
next poll asks again; any other error (a denied call) fails the resource at once, with its message.

Protocol (aws-cdk-lib custom_resources.Provider, 2.275): on_event returns {"PhysicalResourceId": ...}; any other
field it returns "will be passed through to isComplete" (here WaitUntil and OlderGroup); is_complete returns
{"IsComplete": bool}. "If an error is thrown, the framework will submit a "FAILED" response to AWS CloudFormation",
with the error's message as the reason (custom-resources/README.md, "Asynchronous Providers: isComplete", and
lib/provider-framework/runtime/cfn-response.js safeHandler, in the installed package's jsii assembly,
aws_cdk/_jsii/aws-cdk-lib@2.275.0.jsii.tgz). "If an Update event fails, CloudFormation will issue an additional
Update with the previous properties" (the same README, "When there are errors"); "The rollback update will have
ResourceProperties=OLD and OldResourceProperties=NEW" (aws-cdk docs/CLOUDFORMATION.md): that is the rollback above.
"Boolean properties are stringified" (the same document); that numbers arrive as strings too is (unconfirmed), so
Target is read with int() and compared as text.

Lambda environment: ENVIRONMENT_NAME (the value of the environment tag every group of the environment carries),
WAIT_SECONDS (how long a replace-all deploy waits for the new group's nodes).

Runs in AWS Lambda with the standard library and boto3 (both present in the Lambda Python runtime) and
gpufleet/constants.py and gpufleet/aws_faults.py, which the asset carries (runtime/gpufleet/).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from gpufleet.aws_faults import client_config, passing
from gpufleet.constants import ENVIRONMENT_TAG_KEY, ROLLOUT_REPLACE_ALL

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

# Five attempts: a throttled call waits at most 1 + 2 + 4 + 8 = 15 seconds between them (botocore's standard
# mode backs off rand(0, 1) * 2 ** (try - 1) seconds on throttling, botocore/retries/standard.py ExponentialBackoff),
# well inside the handlers' one-minute timeout; is_complete's next poll, 30 seconds on, is the retry after that.
CLIENT_CONFIG = client_config(5)
IN_SERVICE = "InService"  # Instance.LifecycleState (botocore's autoscaling model)
# "If an attempt to launch instances failed, the StatusCode value is Failed or Cancelled and the StatusMessage element
# in the response indicates the cause of the failure" (DescribeScalingActivities, botocore's autoscaling model).
FAILED_LAUNCHES = ("Failed", "Cancelled")


def moment(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def physical_id() -> str:
    return f"gpufleet-{os.environ['ENVIRONMENT_NAME']}-group-capacity"


def describe_group(autoscaling: Any, name: str) -> dict:
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    if not groups:
        raise RuntimeError(f"Auto Scaling group {name} not found")
    return groups[0]


def in_service(group: dict) -> int:
    return sum(1 for instance in group.get("Instances", []) if instance["LifecycleState"] == IN_SERVICE)


def older_group_with_nodes(autoscaling: Any, group: dict) -> dict | None:
    """The environment's newest group created before GROUP that has nodes InService; None when there is none."""
    tag = {"Name": f"tag:{ENVIRONMENT_TAG_KEY}", "Values": [os.environ["ENVIRONMENT_NAME"]]}
    older = [
        other
        for page in autoscaling.get_paginator("describe_auto_scaling_groups").paginate(Filters=[tag])
        for other in page["AutoScalingGroups"]
        if other["AutoScalingGroupName"] != group["AutoScalingGroupName"]
        and other["CreatedTime"] < group["CreatedTime"]
        and in_service(other)
    ]
    return max(older, key=lambda other: other["CreatedTime"], default=None)


def sizing_changed(event: dict) -> bool:
    """Create, or an Update that names another group or another target."""
    if event["RequestType"] == "Create":
        return True
    new, old = event["ResourceProperties"], event.get("OldResourceProperties", {})
    sized = (new["AutoScalingGroupName"], str(new["Target"]))
    return sized != (old.get("AutoScalingGroupName"), str(old.get("Target")))


def on_event(event: dict, context: Any, autoscaling: Any = None, now: dt.datetime | None = None) -> dict:
    result: dict[str, Any] = {"PhysicalResourceId": event.get("PhysicalResourceId") or physical_id()}
    if event["RequestType"] == "Delete" or not sizing_changed(event):
        return result
    properties = event["ResourceProperties"]
    name, target = properties["AutoScalingGroupName"], int(properties["Target"])
    autoscaling = autoscaling or boto3.client("autoscaling", config=CLIENT_CONFIG)
    group = describe_group(autoscaling, name)
    if group["DesiredCapacity"] != target:
        LOGGER.info("%s: desired capacity %d -> %d", name, group["DesiredCapacity"], target)
        autoscaling.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=target)
    if properties.get("Rollout") != ROLLOUT_REPLACE_ALL:
        return result
    older = older_group_with_nodes(autoscaling, group)
    if older is not None:
        now = now or dt.datetime.now(dt.UTC)
        result["WaitUntil"] = (now + dt.timedelta(seconds=int(os.environ["WAIT_SECONDS"]))).isoformat()
        result["OlderGroup"] = older["AutoScalingGroupName"]
        LOGGER.info("%s replaces %s: waiting for %d nodes InService", name, older["AutoScalingGroupName"], target)
    return result


def last_launch_failure(autoscaling: Any, name: str, since: dt.datetime) -> str:
    """The cause of the group's latest failed or cancelled launch since SINCE, as a clause ("" when none)."""
    try:
        failures = [
            activity
            for page in autoscaling.get_paginator("describe_scaling_activities").paginate(AutoScalingGroupName=name)
            for activity in page["Activities"]
            if activity.get("StatusCode") in FAILED_LAUNCHES and activity["StartTime"] >= since
        ]
    except ClientError as error:
        return f"; its scaling activities could not be read ({error.response['Error']['Code']})"
    if not failures:
        return "; no launch has failed yet"
    latest = max(failures, key=lambda activity: activity["StartTime"])
    cause = latest.get("StatusMessage") or latest.get("Description", "")
    return f"; last launch failure at {moment(latest['StartTime'])}: {cause.rstrip('.')}"


def is_complete(event: dict, context: Any, autoscaling: Any = None, now: dt.datetime | None = None) -> dict:
    if "WaitUntil" not in event:
        return {"IsComplete": True}
    properties = event["ResourceProperties"]
    name, target = properties["AutoScalingGroupName"], int(properties["Target"])
    autoscaling = autoscaling or boto3.client("autoscaling", config=CLIENT_CONFIG)
    try:
        count = in_service(describe_group(autoscaling, name))
    except (BotoCoreError, ClientError) as error:
        if not passing(error):
            raise
        LOGGER.warning("%s; asking again at the next poll", error)
        return {"IsComplete": False}
    if count >= target:
        LOGGER.info("%s has %d of %d nodes InService", name, count, target)
        return {"IsComplete": True}
    deadline = dt.datetime.fromisoformat(event["WaitUntil"])
    now = now or dt.datetime.now(dt.UTC)
    if now < deadline:
        LOGGER.info("%s has %d of %d nodes InService; waiting until %s", name, count, target, moment(deadline))
        return {"IsComplete": False}
    waited = dt.timedelta(seconds=int(os.environ["WAIT_SECONDS"]))
    older = event["OlderGroup"]
    raise RuntimeError(
        f"{name} has {count} of {target} nodes InService after {waited.total_seconds() / 60:g} minutes"
        f"{last_launch_failure(autoscaling, name, deadline - waited)}. The deploy fails so that CloudFormation "
        f"rolls back: it deletes {name} with its nodes, and {older} keeps its nodes. Deploy again when capacity is "
        "back, or take the image in place with fleet.rollout manual."
    )
