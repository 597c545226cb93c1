"""The capacity fallback (fleet.fallback), run by an EventBridge schedule: observe, decide, apply, remember, log.

Each run reads the fleet (a Spot Fleet request, or an Auto Scaling group with a mixed instances policy), the spot
launch failures its history reports since the previous run, and the state the previous run left in an SSM parameter;
gpufleet.fallback.decide says raise, lower or hold; a raise or lower is applied to the on-demand part; the new state
is written back; one JSON line is logged per run (the decision with its reason).

- Spot Fleet: the on-demand part is OnDemandTargetCapacity, changed with ModifySpotFleetRequest ("You can only modify a
  Spot Fleet request of type maintain", EC2 API reference, ModifySpotFleetRequest; botocore's ec2 service model). The
  request names TargetCapacity too, as read in this run: EC2 checks the pair ("TargetCapacity (0) cannot be less than
  OnDemandTargetCapacity (1)", jenkinsci/ec2-fleet-plugin#130).
- Auto Scaling group: the on-demand part is the mixed instances policy's OnDemandBaseCapacity (0 % on-demand above
  base), changed with UpdateAutoScalingGroup; the group's whole InstancesDistribution is sent back with the new base.
  "An update to this setting means a gradual replacement of instances to adjust the current On-Demand Instance levels.
  When replacing instances, Amazon EC2 Auto Scaling launches new instances before terminating the previous ones."
  (AWS::AutoScaling::AutoScalingGroup InstancesDistribution.OnDemandBaseCapacity, cfn-lint 1.58's bundled schema.)
- State: the parameter belongs to this function (PutParameter, not the stack), so no deploy can write it back; it
  names the fleet or group it is about, so a replaced fleet starts afresh (FallbackState.for_node_group).

Runs in AWS Lambda with the standard library and boto3 (both in the Lambda Python runtime) and gpufleet/fallback.py,
which the asset carries as gpufleet.fallback.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, replace
from typing import Any

import boto3
from botocore.exceptions import ClientError

from gpufleet.constants import BACKEND_AUTO_SCALING, BACKEND_SPOT_FLEET
from gpufleet.fallback import (
    ERROR,
    HOLD,
    NO_CAPACITY,
    PRICE,
    Decision,
    FallbackSettings,
    FallbackState,
    LaunchFailure,
    Observation,
    decide,
)

# How far back the first run (no state yet) reads the history.
FIRST_LOOK_BACK = dt.timedelta(hours=1)
LIVE_STATES = ("pending", "running")
# Spot Fleet history events that mean a spot launch did not happen (EventInformation.EventSubType, botocore's ec2
# service model): the error events, and the information events about prices and unusable launch specifications.
FLEET_FAILURE_KINDS = {
    "iamFleetRoleInvalid": ERROR,
    "allLaunchSpecsTemporarilyBlacklisted": ERROR,
    "spotInstanceCountLimitExceeded": ERROR,
    "spotFleetRequestConfigurationInvalid": ERROR,
    "launchSpecTemporarilyBlacklisted": ERROR,
    "launchSpecUnusable": PRICE,  # "The price specified in a launch specification is not valid because it is below
    "fleetProgressHalted": PRICE,  # the Spot price" / "The price in every launch specification is not valid"
}
# Which words in a failure's text name a capacity shortage (e.g. EC2's InsufficientInstanceCapacity; the exact
# wording of fleet history descriptions and scaling activity messages is not documented: unconfirmed).
CAPACITY_WORDS = ("capacity",)
PRICE_WORDS = ("price",)
FAILED_ACTIVITY = "Failed"  # ScalingActivityStatusCode (botocore's autoscaling service model)


def failure_kind(default: str, text: str) -> str:
    lowered = text.lower()
    if any(word in lowered for word in CAPACITY_WORDS):
        return NO_CAPACITY
    if any(word in lowered for word in PRICE_WORDS):
        return PRICE
    return default


@dataclass(frozen=True)
class NodeGroup:
    """A fleet or group as observed: its target, its on-demand part, and whether it can be changed now."""

    target: int
    observation: Observation
    history_read_until: dt.datetime  # where the next run reads the history from
    busy: str = ""  # why it cannot be changed now ("" when it can)


def _live_lifecycles(ec2: Any, instance_ids: list[str]) -> tuple[int, int]:
    """(spot, on-demand) counts of the instances that are pending or running."""
    if not instance_ids:
        return 0, 0
    spot = on_demand = 0
    for page in ec2.get_paginator("describe_instances").paginate(InstanceIds=instance_ids):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                if instance["State"]["Name"] not in LIVE_STATES:
                    continue
                if instance.get("InstanceLifecycle") == "spot":
                    spot += 1
                else:
                    on_demand += 1
    return spot, on_demand


class SpotFleet:
    def __init__(self, ec2: Any, request_id: str) -> None:
        self.ec2, self.request_id = ec2, request_id

    def observe(self, since: dt.datetime, now: dt.datetime) -> NodeGroup:
        request = self.ec2.describe_spot_fleet_requests(SpotFleetRequestIds=[self.request_id])[
            "SpotFleetRequestConfigs"
        ][0]
        config = request["SpotFleetRequestConfig"]
        pages = self.ec2.get_paginator("describe_spot_fleet_instances").paginate(SpotFleetRequestId=self.request_id)
        instance_ids = [active["InstanceId"] for page in pages for active in page["ActiveInstances"]]
        spot, on_demand = _live_lifecycles(self.ec2, instance_ids)
        state = request["SpotFleetRequestState"]
        failures, read_until = self._failures(since)
        return NodeGroup(
            target=int(config["TargetCapacity"]),
            observation=Observation(
                at=now,
                on_demand_target=int(config.get("OnDemandTargetCapacity", 0)),
                spot_running=spot,
                on_demand_running=on_demand,
                failures=tuple(failures),
            ),
            history_read_until=read_until or since,
            busy="" if state == "active" else f"fleet request is {state}",
        )

    def _failures(self, since: dt.datetime) -> tuple[list[LaunchFailure], dt.datetime | None]:
        """The failures recorded since `since`, and the time up to which the history was read. "Spot Fleet events
        are delayed by up to 30 seconds before they can be described. This ensures that you can query by the last
        evaluated time and not miss a recorded event. Spot Fleet events are available for 48 hours."
        (DescribeSpotFleetRequestHistory, botocore's ec2 service model): the next run starts at LastEvaluatedTime."""
        failures = []
        read_until = None
        arguments: dict[str, Any] = {"SpotFleetRequestId": self.request_id, "StartTime": since}
        while True:
            page = self.ec2.describe_spot_fleet_request_history(**arguments)
            for record in page.get("HistoryRecords", []):
                information = record.get("EventInformation", {})
                default = FLEET_FAILURE_KINDS.get(information.get("EventSubType", ""))
                if record.get("EventType") in ("error", "information") and default:
                    description = information.get("EventDescription", "")
                    failures.append(
                        LaunchFailure(
                            record["Timestamp"],
                            failure_kind(default, description),
                            f"{information['EventSubType']}: {description}",
                        )
                    )
            read_until = page.get("LastEvaluatedTime", read_until)
            if not page.get("NextToken"):
                return failures, read_until
            arguments["NextToken"] = page["NextToken"]

    def apply(self, target: int, on_demand: int) -> None:
        self.ec2.modify_spot_fleet_request(
            SpotFleetRequestId=self.request_id, TargetCapacity=target, OnDemandTargetCapacity=on_demand
        )


class AutoScalingGroup:
    def __init__(self, autoscaling: Any, ec2: Any, name: str) -> None:
        self.autoscaling, self.ec2, self.name = autoscaling, ec2, name
        self._distribution: dict[str, Any] = {}

    def observe(self, since: dt.datetime, now: dt.datetime) -> NodeGroup:
        group = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[self.name])["AutoScalingGroups"][0]
        self._distribution = group.get("MixedInstancesPolicy", {}).get("InstancesDistribution", {})
        instance_ids = [instance["InstanceId"] for instance in group.get("Instances", [])]
        spot, on_demand = _live_lifecycles(self.ec2, instance_ids)
        return NodeGroup(
            target=int(group["DesiredCapacity"]),
            observation=Observation(
                at=now,
                on_demand_target=int(self._distribution.get("OnDemandBaseCapacity", 0)),
                spot_running=spot,
                on_demand_running=on_demand,
                failures=tuple(self._failures(since)),
            ),
            history_read_until=now,
        )

    def _failures(self, since: dt.datetime) -> list[LaunchFailure]:
        pages = self.autoscaling.get_paginator("describe_scaling_activities").paginate(AutoScalingGroupName=self.name)
        return [
            LaunchFailure(
                activity["StartTime"],
                failure_kind(ERROR, f"{activity.get('StatusMessage', '')} {activity.get('Description', '')}"),
                activity.get("StatusMessage", "") or activity.get("Description", ""),
            )
            for page in pages
            for activity in page["Activities"]
            if activity.get("StatusCode") == FAILED_ACTIVITY and activity["StartTime"] > since
        ]

    def apply(self, target: int, on_demand: int) -> None:
        self.autoscaling.update_auto_scaling_group(
            AutoScalingGroupName=self.name,
            MixedInstancesPolicy={"InstancesDistribution": {**self._distribution, "OnDemandBaseCapacity": on_demand}},
        )


def read_state(ssm: Any, name: str) -> FallbackState:
    """The stored state; a fresh one when there is none, or when the parameter holds something else (it is logged,
    and the next write replaces it)."""
    try:
        text = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as error:
        if error.response["Error"]["Code"] == "ParameterNotFound":
            return FallbackState()
        raise
    try:
        return FallbackState.from_json(text)
    except ValueError as error:
        print(json.dumps({"event": "capacity-fallback", "parameter": name, "unreadable_state": str(error)}), flush=True)
        return FallbackState()


def write_state(ssm: Any, name: str, state: FallbackState) -> None:
    ssm.put_parameter(Name=name, Value=state.to_json(), Type="String", Overwrite=True)


def settings_from_environment(target: int) -> FallbackSettings:
    return FallbackSettings(
        target=target,
        floor=int(os.environ["FLOOR"]),
        after=dt.timedelta(minutes=int(os.environ["AFTER_MINUTES"])),
        restore_after=dt.timedelta(minutes=int(os.environ["RESTORE_AFTER_MINUTES"])),
        max_extra=int(os.environ["MAX_EXTRA_ON_DEMAND"]),
    )


def node_group(backend: str, node_group_id: str, clients: dict[str, Any]) -> SpotFleet | AutoScalingGroup:
    if backend == BACKEND_SPOT_FLEET:
        return SpotFleet(clients["ec2"], node_group_id)
    if backend == BACKEND_AUTO_SCALING:
        return AutoScalingGroup(clients["autoscaling"], clients["ec2"], node_group_id)
    raise ValueError(f"BACKEND is {backend!r}: {BACKEND_SPOT_FLEET} or {BACKEND_AUTO_SCALING}")


def run(backend: str, node_group_id: str, parameter: str, clients: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    stored = read_state(clients["ssm"], parameter)
    state = stored.for_node_group(node_group_id)
    group = node_group(backend, node_group_id, clients)
    observed = group.observe(since=state.history_read_until or now - FIRST_LOOK_BACK, now=now)
    observation = observed.observation
    settings = settings_from_environment(observed.target)
    if observed.busy:
        # The state stays as it was: the next run reads this run's history again and decides on it.
        reason = f"{observed.busy}: nothing changes until it is active"
        decision = Decision(HOLD, observation.on_demand_target, reason, state)
    else:
        decision = decide(settings, observation, state)
        if decision.action != HOLD:
            group.apply(observed.target, decision.on_demand)
        write_state(clients["ssm"], parameter, replace(decision.state, history_read_until=observed.history_read_until))
    line = {
        "event": "capacity-fallback",
        "backend": backend,
        "node_group": node_group_id,
        "action": decision.action,
        "reapplied": decision.reapplied,
        "new_node_group": stored.node_group_id not in ("", node_group_id),
        "on_demand_before": observation.on_demand_target,
        "on_demand_after": decision.on_demand,
        "floor": settings.floor,
        "ceiling": settings.ceiling,
        "target": observed.target,
        "spot_running": observation.spot_running,
        "on_demand_running": observation.on_demand_running,
        "failures": [
            {"at": failure.at.isoformat(), "kind": failure.kind, "description": failure.description}
            for failure in observation.failures
        ],
        "reason": decision.reason,
    }
    # Printed, not logged: Lambda sends stdout to the log group line by line, without the logging module's prefix,
    # so every line is one JSON document for CloudWatch Logs Insights.
    print(json.dumps(line, sort_keys=True), flush=True)
    return line


def on_schedule(event: dict, context: Any, clients: dict[str, Any] | None = None) -> dict[str, Any]:
    clients = clients or {service: boto3.client(service) for service in ("ec2", "autoscaling", "ssm")}
    return run(
        os.environ["BACKEND"],
        os.environ["NODE_GROUP_ID"],
        os.environ["PARAMETER_NAME"],
        clients,
        dt.datetime.now(dt.UTC),
    )
