"""The capacity fallback (fleet.fallback), run by an EventBridge schedule: observe, decide, apply, remember, log.

Each run reads the fleet (a Spot Fleet request, or an Auto Scaling group with a mixed instances policy), the launch
failures its history reports since the previous run, and the state the previous run left in an SSM parameter;
gpufleet.fallback.decide says what to do (its module doc has the rules); the change is applied, the new state written
back, and one JSON line logged per run (the decision with its reason). Sources of the API behaviour below are botocore's
service models (the documentation strings of the operations and shapes named) unless another is given; the model in
tests/fallback_model/ answers these same calls through botocore.

- Spot Fleet: the part is OnDemandTargetCapacity, changed with ModifySpotFleetRequest ("You can only modify a Spot Fleet
  request of type maintain"); every modification names TargetCapacity too: EC2 checks the pair ("TargetCapacity (0)
  cannot be less than OnDemandTargetCapacity (1)", jenkinsci/ec2-fleet-plugin#130), and a hand-back changes both.
  Its nodes: DescribeSpotFleetInstances ("The running instances. This list is refreshed periodically and might be
  out of date"), a spot node has a SpotInstanceRequestId; their state and launch time come from DescribeInstances.
  The modification also names ExcessCapacityTerminationPolicy (noTermination for a hand-back's, the template's
  default otherwise: gpufleet.fallback says why). A hand-back ends on-demand nodes with TerminateInstances right after
  their checkpoint hook ran through SSM Run Command (AWS-RunShellScript, sent and read with
  gpufleet.checkpoint_hook's send_hook and hook_finished; GetCommandInvocation says when it is over), waiting at most
  gpufleet.fallback.HAND_BACK_HOOK_WAIT; a node whose hook SSM would not start is not ended.
- Auto Scaling group: the part is the mixed instances policy's OnDemandBaseCapacity, changed with
  UpdateAutoScalingGroup, which also sets MaxSize to the target + 1 while the group replaces on-demand nodes by spot
  ones and back to the target after (gpufleet.fallback). The update sends the base with the fields the template sets
  (OnDemandAllocationStrategy, OnDemandPercentageAboveBaseCapacity, SpotAllocationStrategy;
  stacks/constructs/gpu_auto_scaling_group.py), as the group describes them, and nothing else: "Any properties that you
  don't specify are not changed by this update request" (UpdateAutoScalingGroup), whether that reaches into the
  InstancesDistribution is (unconfirmed), and with those fields the result is the same either way; fields valid only
  with some strategies ("SpotInstancePools ... Valid only when the SpotAllocationStrategy is lowest-price",
  InstancesDistribution) and DistributionSegments are never echoed back. The group stands aside while it is being
  deleted (AutoScalingGroup.Status: "The current state of the Auto Scaling group when the DeleteAutoScalingGroup
  operation is in progress") or refreshed (DescribeInstanceRefreshes, the statuses in ACTIVE_REFRESH).
- History read since the previous run only: a Spot Fleet's from its LastEvaluatedTime ("Spot Fleet events are delayed
  by up to 30 seconds before they can be described. This ensures that you can query by the last evaluated time and
  not miss a recorded event", DescribeSpotFleetRequestHistory); a group's scaling activities through the
  StartTimeLowerBound filter ("Scaling activities with a start time earlier than this value are not included",
  DescribeScalingActivities, in the form its documentation shows: ACTIVITY_TIME_FORMAT), both with at most MAX_PAGES
  pages; a history with more is read on by the next run and counts as a launch failure now. "If an attempt to launch
  instances failed, the StatusCode value is Failed or Cancelled" (DescribeScalingActivities): both count.
- Eventual consistency: instances are described through the instance-id filter, never by id ("If you specify an
  instance ID that is not valid, an error is returned", DescribeInstances), so a node launched a moment ago cannot
  fail the run with InvalidInstanceID.NotFound; a node the fleet or group lists and EC2 does not describe yet counts
  as pending.
- Calls retry in botocore's standard mode (CLIENT_CONFIG, from gpufleet.aws_faults); the function's timeout
  (infrastructure.py) is shorter than the schedule's period, and a failed run is not retried by Lambda, so two runs
  never overlap. Every change is written to the state before it is made (run): a run that fails midway leaves the
  change for the next run to finish.
- The target is capacity.target from the function's configuration (TARGET), never the fleet's live value.
- State: the parameter belongs to this function (PutParameter, not the stack), so no deploy can write it back; it
  names the fleet or group it is about, so a replaced fleet starts afresh (FallbackState.for_node_group).

Runs in AWS Lambda with the standard library and boto3 (both in the Lambda Python runtime) and gpufleet/fallback.py,
gpufleet/constants.py, gpufleet/aws_faults.py and gpufleet/checkpoint_hook.py (how the hook is sent and read, one
rule with the other callers), which the asset carries (runtime/gpufleet/).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import boto3
from botocore.exceptions import ClientError

from gpufleet.aws_faults import client_config
from gpufleet.checkpoint_hook import POLL_SECONDS, hook_finished, send_hook
from gpufleet.constants import BACKEND_AUTO_SCALING, BACKEND_SPOT_FLEET
from gpufleet.fallback import (
    ERROR,
    HAND_BACK_BY_FALLBACK,
    HAND_BACK_BY_GROUP,
    HAND_BACK_HOOK_WAIT,
    NO_CAPACITY,
    PRICE,
    SETTLE,
    TERMINATE_EXCESS,
    Decision,
    FallbackSettings,
    FallbackState,
    LaunchFailure,
    Observation,
    carried_out,
    decide,
)

# Six attempts: a throttled call waits at most 1 + 2 + 4 + 8 + 16 = 31 seconds between them (botocore's
# standard mode backs off rand(0, 1) * 2 ** (try - 1) seconds on throttling, botocore/retries/standard.py
# ExponentialBackoff), a quarter of the function's two-minute budget for its calls (infrastructure.py: the timeout adds
# the hand-back's hook wait); a run that fails is finished by the next one (gpufleet.fallback: the recorded intent).
CLIENT_CONFIG = client_config(6)
# How far back the first run (no state yet) reads the history.
FIRST_LOOK_BACK = dt.timedelta(hours=1)
# An activity that started before the previous run may end after it: activities are asked for from this much earlier
# and counted by the time they ended.
ACTIVITY_SLACK = dt.timedelta(minutes=10)
# Pages read of any one list per run: the history of five minutes fits in the first. A history with more is read on
# from where this run stopped, and the run counts it as a launch failure now (Observation.history_complete).
MAX_PAGES = 10
# StartTimeLowerBound as the DescribeScalingActivities Filters documentation writes its first example
# ("2000-01-18T08:15:00Z": "StartTimeLowerBound and StartTimeUpperBound accept ISO 8601 formatted timestamps"), whole
# seconds in UTC; its examples show no fraction of a second, which datetime.isoformat() would add.
ACTIVITY_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
LIVE_STATES = ("pending", "running")  # InstanceStateName: the other four are on their way out or stopped
# LifecycleState of the group's instances that count as its nodes: launching or in service.
LIVE_LIFECYCLE_STATES = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")
# InstanceRefreshStatus values of a refresh that is replacing (or about to replace, or rolling back) instances.
ACTIVE_REFRESH = ("Pending", "InProgress", "Cancelling", "RollbackInProgress", "Baking")
FAILED_ACTIVITIES = ("Failed", "Cancelled")  # ScalingActivityStatusCode
SENT_DISTRIBUTION_FIELDS = (
    "OnDemandAllocationStrategy",
    "OnDemandPercentageAboveBaseCapacity",
    "SpotAllocationStrategy",
)
# Spot Fleet history events that mean a launch did not happen (EventInformation.EventSubType): the error events, and
# the information events about prices and unusable launch specifications.
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
HAND_BACK_COMMENT = "gpufleet capacity fallback: checkpoint before the node goes back to spot"
# The clock and sleep of the hand-back's hook wait: the model (tests/fallback_model/) sets its own.
clock: Callable[[], float] = time.monotonic
sleep: Callable[[float], None] = time.sleep


def failure_kind(default: str, text: str) -> str:
    lowered = text.lower()
    if any(word in lowered for word in CAPACITY_WORDS):
        return NO_CAPACITY
    if any(word in lowered for word in PRICE_WORDS):
        return PRICE
    return default


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class NodeGroup:
    """A fleet or group as observed, and where the next run reads its history from."""

    observation: Observation
    history_read_until: dt.datetime


def describe_instances(ec2: Any, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The instances EC2 describes among instance_ids, by id (through the instance-id filter: an id EC2 does not
    know yet is left out, not an error)."""
    found: dict[str, dict[str, Any]] = {}
    if not instance_ids:
        return found
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "instance-id", "Values": instance_ids}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = instance
    return found


def _live(described: dict[str, Any] | None) -> bool:
    return described is None or described["State"]["Name"] in LIVE_STATES


@dataclass(frozen=True)
class History:
    """Launch failures read from a fleet's or group's history, where the next run reads on from, and whether the run
    read it all."""

    failures: list[LaunchFailure]
    read_until: dt.datetime
    complete: bool


class SpotFleet:
    def __init__(self, ec2: Any, ssm: Any, request_id: str, checkpoint_command: str) -> None:
        self.ec2, self.ssm, self.request_id, self.checkpoint_command = ec2, ssm, request_id, checkpoint_command

    def observe(self, state: FallbackState, since: dt.datetime, now: dt.datetime) -> NodeGroup:
        try:
            configs = self.ec2.describe_spot_fleet_requests(SpotFleetRequestIds=[self.request_id])[
                "SpotFleetRequestConfigs"
            ]
        except ClientError as error:
            if not error_code(error).startswith("InvalidSpotFleetRequestId"):
                raise
            configs = []
        if not configs:
            return NodeGroup(Observation(now, 0, 0, 0, 0, busy="fleet request not found", replacing=True), since)
        request = configs[0]
        config = request["SpotFleetRequestConfig"]
        active = self._active_instances()
        described = describe_instances(self.ec2, list(active))
        spot = on_demand = 0
        on_demand_nodes: list[tuple[dt.datetime, str]] = []
        for instance_id, spot_request in active.items():
            instance = described.get(instance_id)
            if not _live(instance):
                continue
            is_spot = instance.get("InstanceLifecycle") == "spot" if instance else bool(spot_request)
            if is_spot:
                spot += 1
            else:
                on_demand += 1
                # Not described yet: launched a moment ago, so the newest.
                launched = instance["LaunchTime"] if instance else dt.datetime.max.replace(tzinfo=dt.UTC)
                on_demand_nodes.append((launched, instance_id))
        history = self._failures(since)
        fleet_state = request["SpotFleetRequestState"]
        return NodeGroup(
            Observation(
                at=now,
                target=int(config["TargetCapacity"]),
                on_demand_target=int(config.get("OnDemandTargetCapacity", 0)),
                spot_running=spot,
                on_demand_running=on_demand,
                failures=tuple(history.failures),
                busy="" if fleet_state == "active" else f"fleet request is {fleet_state}",
                # Cancelled, failed or still submitted: its nodes are not the fleet's to keep now.
                replacing=fleet_state not in ("active", "modifying"),
                on_demand_nodes=tuple(instance_id for _, instance_id in sorted(on_demand_nodes, reverse=True)),
                excess_policy=config.get("ExcessCapacityTerminationPolicy", TERMINATE_EXCESS),
                history_complete=history.complete,
            ),
            history.read_until,
        )

    def _active_instances(self) -> dict[str, str]:
        """The fleet's instances: id -> spot request id ("" for an on-demand node)."""
        found: dict[str, str] = {}
        arguments: dict[str, Any] = {"SpotFleetRequestId": self.request_id}
        for _ in range(MAX_PAGES):
            page = self.ec2.describe_spot_fleet_instances(**arguments)
            for active in page["ActiveInstances"]:
                found[active["InstanceId"]] = active.get("SpotInstanceRequestId", "")
            if not page.get("NextToken"):
                break
            arguments["NextToken"] = page["NextToken"]
        return found

    def _failures(self, since: dt.datetime) -> History:
        """The failures recorded since `since`. A history read to its end goes on from its LastEvaluatedTime ("All
        records up to this time were retrieved"); one with more than MAX_PAGES pages, from the latest record read
        ("If nextToken indicates that there are more items, this value is not present"; in which order the records
        come is not documented: from the latest one read, nothing later is lost whichever it is)."""
        failures = []
        arguments: dict[str, Any] = {"SpotFleetRequestId": self.request_id, "StartTime": since}
        latest = since
        for _ in range(MAX_PAGES):
            page = self.ec2.describe_spot_fleet_request_history(**arguments)
            for record in page.get("HistoryRecords", []):
                latest = max(latest, record["Timestamp"])
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
            if not page.get("NextToken"):
                return History(failures, page.get("LastEvaluatedTime", latest), True)
            arguments["NextToken"] = page["NextToken"]
        return History(failures, latest, False)

    def apply(self, decision: Decision) -> tuple[str, ...]:
        """Make the change: end the decision's nodes after their checkpoint hook (a node the hook could not start on
        stays, and the part drops only by the nodes ended), then modify the request. Returns the nodes ended."""
        ended = self._end_after_hook(decision.end) if decision.end else ()
        if decision.modifies:
            self.ec2.modify_spot_fleet_request(
                SpotFleetRequestId=self.request_id,
                TargetCapacity=decision.total,
                OnDemandTargetCapacity=decision.on_demand + len(decision.end) - len(ended),
                ExcessCapacityTerminationPolicy=decision.excess_policy,
            )
        return ended

    def _end_after_hook(self, nodes: tuple[str, ...]) -> tuple[str, ...]:
        """Start the checkpoint hook on NODES, wait until it is over on each or HAND_BACK_HOOK_WAIT has passed, and
        end the nodes it started on (all of them without a hook configured); return those."""
        if self.checkpoint_command:
            commands, _ = send_hook(self.ssm, list(nodes), self.checkpoint_command, HAND_BACK_COMMENT)
            deadline = clock() + HAND_BACK_HOOK_WAIT.total_seconds()
            running = dict(commands)
            while running:
                running = {node: command for node, command in running.items() if not self._hook_over(command, node)}
                left = deadline - clock()
                if not running or left <= 0:
                    break
                sleep(min(POLL_SECONDS, left))
            nodes = tuple(node for node in nodes if node in commands)
        if nodes:
            self.ec2.terminate_instances(InstanceIds=list(nodes))
        return nodes

    def _hook_over(self, command_id: str, node: str) -> bool:
        """Whether the hook's run is over; a run SSM will not say anything of (an error past the client's retries)
        is awaited to the deadline like a running one: the node ends then all the same, as it would after its spot
        notice."""
        try:
            return hook_finished(self.ssm, command_id, node)
        except ClientError:
            return False


class AutoScalingGroup:
    def __init__(self, autoscaling: Any, ec2: Any, name: str) -> None:
        self.autoscaling, self.ec2, self.name = autoscaling, ec2, name
        self._distribution: dict[str, Any] = {}

    def observe(self, state: FallbackState, since: dt.datetime, now: dt.datetime) -> NodeGroup:
        groups = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[self.name])["AutoScalingGroups"]
        if not groups:
            return NodeGroup(Observation(now, 0, 0, 0, 0, busy="group not found", replacing=True), now)
        group = groups[0]
        self._distribution = group.get("MixedInstancesPolicy", {}).get("InstancesDistribution", {})
        base = int(self._distribution.get("OnDemandBaseCapacity", 0))
        members = [
            instance["InstanceId"]
            for instance in group.get("Instances", [])
            if instance["LifecycleState"] in LIVE_LIFECYCLE_STATES
        ]
        described = describe_instances(self.ec2, members)
        spot = sum(1 for i in members if i in described and described[i].get("InstanceLifecycle") == "spot")
        on_demand = sum(1 for i in members if i in described and described[i].get("InstanceLifecycle") != "spot")
        # The group lists them, EC2 does not describe them yet: launched a moment ago, into the part that has room
        # (the base first, as the group launches it first: InstancesDistribution.OnDemandBaseCapacity).
        unseen = len([i for i in members if i not in described])
        to_on_demand = min(unseen, max(base - on_demand, 0))
        # The group's Status is set only "when the DeleteAutoScalingGroup operation is in progress".
        busy = f"group is {group['Status']}" if group.get("Status") else ""
        history = self._failures(since, now)
        return NodeGroup(
            Observation(
                at=now,
                target=int(group["DesiredCapacity"]),
                on_demand_target=base,
                spot_running=spot + unseen - to_on_demand,
                on_demand_running=on_demand + to_on_demand,
                failures=tuple(history.failures),
                busy=busy,
                replacing=bool(busy),
                refresh="" if busy else self._refresh(),
                max_size=int(group["MaxSize"]),
                history_complete=history.complete,
            ),
            history.read_until,
        )

    def _refresh(self) -> str:
        """The instance refresh under way, as a phrase ("" when none)."""
        refreshes = self.autoscaling.describe_instance_refreshes(AutoScalingGroupName=self.name)["InstanceRefreshes"]
        for refresh in refreshes:
            if refresh["Status"] in ACTIVE_REFRESH:
                return f"instance refresh {refresh['InstanceRefreshId']} is {refresh['Status']}"
        return ""

    def _failures(self, since: dt.datetime, now: dt.datetime) -> History:
        """Launches that failed or were cancelled and ended after `since`; with more than MAX_PAGES pages, those of
        the pages read (the history is complete when the last page read has no NextToken)."""
        bound = (since - ACTIVITY_SLACK).astimezone(dt.UTC).strftime(ACTIVITY_TIME_FORMAT)
        arguments: dict[str, Any] = {
            "AutoScalingGroupName": self.name,
            "MaxRecords": 100,
            "Filters": [{"Name": "StartTimeLowerBound", "Values": [bound]}],
        }
        failures = []
        for _ in range(MAX_PAGES):
            page = self.autoscaling.describe_scaling_activities(**arguments)
            for activity in page["Activities"]:
                ended = activity.get("EndTime") or activity["StartTime"]
                if activity["StatusCode"] in FAILED_ACTIVITIES and since < ended <= now:
                    text = f"{activity.get('StatusMessage', '')} {activity.get('Description', '')}"
                    failures.append(
                        LaunchFailure(
                            ended,
                            failure_kind(ERROR, text),
                            f"{activity['StatusCode']}: "
                            + (activity.get("StatusMessage", "") or activity.get("Description", "")),
                        )
                    )
            if not page.get("NextToken"):
                return History(failures, now, True)
            arguments["NextToken"] = page["NextToken"]
        return History(failures, now, False)

    def apply(self, decision: Decision) -> tuple[str, ...]:
        """UpdateAutoScalingGroup with the on-demand base (except for a SETTLE, which only sets MaxSize) and the
        MaxSize the decision names. Ends no node itself."""
        arguments: dict[str, Any] = {"AutoScalingGroupName": self.name}
        if decision.max_size is not None:
            arguments["MaxSize"] = decision.max_size
        if decision.action != SETTLE:
            distribution = {
                name: self._distribution[name] for name in SENT_DISTRIBUTION_FIELDS if name in self._distribution
            }
            arguments["MixedInstancesPolicy"] = {
                "InstancesDistribution": {**distribution, "OnDemandBaseCapacity": decision.on_demand}
            }
        self.autoscaling.update_auto_scaling_group(**arguments)
        return ()


def read_state(ssm: Any, name: str) -> FallbackState:
    """The stored state; a fresh one when there is none, or when the parameter holds something else (it is logged,
    and the next write replaces it)."""
    try:
        text = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as error:
        if error_code(error) == "ParameterNotFound":
            return FallbackState()
        raise
    try:
        return FallbackState.from_json(text)
    except ValueError as error:
        print(json.dumps({"event": "capacity-fallback", "parameter": name, "unreadable_state": str(error)}), flush=True)
        return FallbackState()


def write_state(ssm: Any, name: str, state: FallbackState) -> None:
    ssm.put_parameter(Name=name, Value=state.to_json(), Type="String", Overwrite=True)


def settings_from_environment(backend: str) -> FallbackSettings:
    return FallbackSettings(
        floor=int(os.environ["FLOOR"]),
        after=dt.timedelta(minutes=int(os.environ["AFTER_MINUTES"])),
        restore_after=dt.timedelta(minutes=int(os.environ["RESTORE_AFTER_MINUTES"])),
        max_extra=int(os.environ["MAX_EXTRA_ON_DEMAND"]),
        hands_back=HAND_BACK_BY_FALLBACK if backend == BACKEND_SPOT_FLEET else HAND_BACK_BY_GROUP,
        target=int(os.environ["TARGET"]),
    )


def node_group(backend: str, node_group_id: str, clients: dict[str, Any]) -> SpotFleet | AutoScalingGroup:
    if backend == BACKEND_SPOT_FLEET:
        return SpotFleet(clients["ec2"], clients["ssm"], node_group_id, os.environ.get("CHECKPOINT_COMMAND", ""))
    if backend == BACKEND_AUTO_SCALING:
        return AutoScalingGroup(clients["autoscaling"], clients["ec2"], node_group_id)
    raise ValueError(f"BACKEND is {backend!r}: {BACKEND_SPOT_FLEET} or {BACKEND_AUTO_SCALING}")


def run(backend: str, node_group_id: str, parameter: str, clients: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    group = node_group(backend, node_group_id, clients)
    settings = settings_from_environment(backend)
    stored = read_state(clients["ssm"], parameter)
    state = stored.for_node_group(node_group_id)
    observed = group.observe(state, since=state.history_read_until or now - FIRST_LOOK_BACK, now=now)
    observation = observed.observation
    decision = decide(settings, observation, state)
    if decision.changes:
        # The change is recorded before it is made: a run that fails after this write is finished by the next one
        # (gpufleet.fallback, RETRY), and one whose write fails changes nothing.
        write_state(clients["ssm"], parameter, replace(decision.state, history_read_until=observed.history_read_until))
        decision = carried_out(settings, decision, group.apply(decision), now)
    write_state(clients["ssm"], parameter, replace(decision.state, history_read_until=observed.history_read_until))
    line = {
        "event": "capacity-fallback",
        "backend": backend,
        "node_group": node_group_id,
        "action": decision.action,
        "new_node_group": stored.node_group_id not in ("", node_group_id),
        "on_demand_before": observation.on_demand_target,
        "on_demand_after": decision.on_demand,
        "floor": settings.floor,
        "target": settings.target,
        "target_before": observation.target,
        "target_after": decision.total,
        "spot_running": observation.spot_running,
        "on_demand_running": observation.on_demand_running,
        "ended": list(decision.end),
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
    clients = clients or {
        service: boto3.client(service, config=CLIENT_CONFIG) for service in ("ec2", "autoscaling", "ssm")
    }
    return run(
        os.environ["BACKEND"],
        os.environ["NODE_GROUP_ID"],
        os.environ["PARAMETER_NAME"],
        clients,
        dt.datetime.now(dt.UTC),
    )
