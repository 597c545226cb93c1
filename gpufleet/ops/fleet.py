"""The cluster's node group, whatever fleet.backend keeps the nodes running (a Spot Fleet request or an Auto Scaling
group): found from the cluster stack output, its capacity, instances and recent events, one describe function per
backend behind find_node_group and node_group_events; and a Capacity Block group's schedule (capacity_block_status)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import describe_failure, error_code, is_unavailable
from gpufleet.block_schedule import TERMINATION_LEAD
from gpufleet.constants import (
    BACKEND_AUTO_SCALING,
    BACKEND_SPOT_FLEET,
    NODE_GROUP_OUTPUTS,
    READINESS_READY,
    READINESS_TAG_KEY,
)
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.ops.reservations import describe_reservations

EVENT_WINDOW = dt.timedelta(hours=24)
# The instance lifecycles whose nodes EC2 may take back while a job runs (DescribeInstances InstanceLifecycle; values
# from botocore 1.44.5's ec2 InstanceLifecycleType: spot, scheduled, capacity-block,
# interruptible-capacity-reservation): spot, and an interruptible Capacity Reservation, whose instances "are terminated"
# when its owner reclaims the capacity (EC2 user guide, interruptible-capacity-reservations). A Capacity Block's end is
# known in advance (gpufleet status shows it), and an on-demand node has no lifecycle.
RECLAIMABLE_LIFECYCLES = ("spot", "interruptible-capacity-reservation")


@dataclass(frozen=True)
class FleetInstance:
    instance_id: str
    lifecycle: str
    availability_zone: str
    placement_group: str
    private_ip: str
    launch_time: dt.datetime
    state: str
    image_id: str
    # The node's own word on whether it can take jobs (its READINESS_TAG_KEY tag, set by scripts/node/node-ready.sh);
    # empty when it has set none yet.
    readiness: str = ""

    @property
    def ready(self) -> bool:
        return self.readiness == READINESS_READY

    @property
    def reclaimable(self) -> bool:
        return self.lifecycle in RECLAIMABLE_LIFECYCLES

    def as_dict(self) -> dict[str, str]:
        return {**vars(self), "launch_time": self.launch_time.isoformat()}


def job_order(instance: FleetInstance) -> tuple:
    """The order nodes are handed to launchers, whose first node is rank 0 and the rendezvous host: ready nodes first,
    then those EC2 cannot reclaim (on-demand) before those it can (spot), then by launch time, then by private IP
    (numerically), so that every listing of the same nodes agrees."""
    address = ipaddress.ip_address(instance.private_ip) if instance.private_ip else ipaddress.ip_address(0)
    return (not instance.ready, instance.reclaimable, instance.launch_time, address, instance.instance_id)


@dataclass(frozen=True)
class FleetEvent:
    timestamp: dt.datetime
    event_type: str
    sub_type: str
    instance_id: str
    description: str

    def as_dict(self) -> dict[str, str]:
        return {**vars(self), "timestamp": self.timestamp.isoformat()}


@dataclass(frozen=True)
class NodeGroup:
    id: str  # the fleet request id, or the group name
    state: str
    activity_status: str
    target_capacity: int
    fulfilled_capacity: float
    on_demand_target_capacity: int
    on_demand_fulfilled_capacity: float
    instances: tuple[FleetInstance, ...]
    kind: str = BACKEND_SPOT_FLEET  # the fleet.backend

    @property
    def label(self) -> str:
        return f"{NODE_GROUP_WORDS[self.kind]} {self.id}"

    @property
    def running(self) -> list[FleetInstance]:
        """Running instances with an address, in job order."""
        running = [instance for instance in self.instances if instance.state == "running" and instance.private_ip]
        return sorted(running, key=job_order)

    @property
    def ready(self) -> list[FleetInstance]:
        """The running instances that say they are ready for jobs, in job order."""
        return [instance for instance in self.running if instance.ready]

    @property
    def images(self) -> list[str]:
        """The images the fleet's pending and running nodes were launched from; more than one after a new image
        reached a fleet in place (fleet.rollout: manual) and only some nodes were replaced since."""
        live = {instance.image_id for instance in self.instances if instance.state in ("pending", "running")}
        return sorted(live)


# How a node group is named in messages, and the command-line option that names one instead of the stack output.
NODE_GROUP_WORDS = {BACKEND_SPOT_FLEET: "fleet", BACKEND_AUTO_SCALING: "group"}
NODE_GROUP_OPTIONS = {BACKEND_SPOT_FLEET: "--fleet-id", BACKEND_AUTO_SCALING: "--group-name"}
# The key of the node group's id in the JSON of gpufleet status and hosts.
NODE_GROUP_ID_KEYS = {BACKEND_SPOT_FLEET: "fleet_request_id", BACKEND_AUTO_SCALING: "auto_scaling_group_name"}


def cluster_stack_name(env: Environment) -> str:
    return f"{env.stack_prefix}-cluster"


def node_group_id(cloudformation: Any, env: Environment) -> str:
    """The output of the environment's cluster stack that names its node group (FleetRequestId or
    AutoScalingGroupName, by fleet.backend)."""
    output_key = NODE_GROUP_OUTPUTS[env.fleet.backend]
    option = NODE_GROUP_OPTIONS[env.fleet.backend]
    stack_name = cluster_stack_name(env)
    try:
        stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    except ClientError as error:
        if error_code(error) == "ValidationError" and "does not exist" in str(error):
            raise GpufleetError(
                f"stack {stack_name} not found in {env.region}: deploy the cluster (cdk deploy) or pass {option}"
            ) from None
        raise
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}
    if output_key not in outputs:
        raise GpufleetError(
            f"stack {stack_name} ({stack['StackStatus']}) has no {output_key} output: "
            f"wait for the deployment to finish or pass {option}"
        )
    return outputs[output_key]


def describe_fleet(ec2: Any, request_id: str, region: str) -> NodeGroup:
    not_found = GpufleetError(f"fleet request {request_id} not found in {region}: check --fleet-id or the stack")
    try:
        configs = ec2.describe_spot_fleet_requests(SpotFleetRequestIds=[request_id])["SpotFleetRequestConfigs"]
    except ClientError as error:
        if error_code(error).startswith("InvalidSpotFleetRequestId"):
            raise not_found from None
        raise
    if not configs:
        raise not_found
    request = configs[0]
    config = request["SpotFleetRequestConfig"]
    pages = ec2.get_paginator("describe_spot_fleet_instances").paginate(SpotFleetRequestId=request_id)
    instance_ids = [active["InstanceId"] for page in pages for active in page["ActiveInstances"]]
    return NodeGroup(
        id=request_id,
        state=request["SpotFleetRequestState"],
        activity_status=request.get("ActivityStatus", "-"),
        target_capacity=int(config["TargetCapacity"]),
        fulfilled_capacity=float(config.get("FulfilledCapacity", 0)),
        on_demand_target_capacity=int(config.get("OnDemandTargetCapacity", 0)),
        on_demand_fulfilled_capacity=float(config.get("OnDemandFulfilledCapacity", 0)),
        instances=tuple(_describe_instances(ec2, instance_ids)),
    )


def _describe_instances(ec2: Any, instance_ids: list[str]) -> list[FleetInstance]:
    if not instance_ids:
        return []
    pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=instance_ids)
    return [
        FleetInstance(
            instance_id=instance["InstanceId"],
            lifecycle=instance.get("InstanceLifecycle", "on-demand"),
            availability_zone=instance["Placement"]["AvailabilityZone"],
            placement_group=instance["Placement"].get("GroupName") or "-",
            private_ip=instance.get("PrivateIpAddress", ""),
            launch_time=instance["LaunchTime"],
            state=instance["State"]["Name"],
            image_id=instance["ImageId"],
            readiness=next((tag["Value"] for tag in instance.get("Tags", []) if tag["Key"] == READINESS_TAG_KEY), ""),
        )
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    ]


def recent_events(ec2: Any, request_id: str, now: dt.datetime) -> list[FleetEvent]:
    """Fleet history of the last 24 hours (interruptions, replacements, errors), oldest first."""
    events: list[FleetEvent] = []
    arguments = {"SpotFleetRequestId": request_id, "StartTime": now - EVENT_WINDOW}
    while True:
        page = ec2.describe_spot_fleet_request_history(**arguments)
        for record in page.get("HistoryRecords", []):
            information = record.get("EventInformation", {})
            events.append(
                FleetEvent(
                    timestamp=record["Timestamp"],
                    event_type=record.get("EventType", "-"),
                    sub_type=information.get("EventSubType", "-"),
                    instance_id=information.get("InstanceId", "-"),
                    description=information.get("EventDescription", ""),
                )
            )
        if not page.get("NextToken"):
            return sorted(events, key=lambda event: event.timestamp)
        arguments["NextToken"] = page["NextToken"]


def describe_auto_scaling_group(autoscaling: Any, ec2: Any, name: str, region: str) -> NodeGroup:
    """The group's capacity and instances. Every instance the group holds counts, whatever its lifecycle state
    (InService, Pending, Terminating:Wait...); fulfilled counts only InService ones."""
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    if not groups:
        raise GpufleetError(f"Auto Scaling group {name} not found in {region}: check --group-name or the stack")
    group = groups[0]
    distribution = group.get("MixedInstancesPolicy", {}).get("InstancesDistribution", {})
    in_service = {i["InstanceId"] for i in group.get("Instances", []) if i["LifecycleState"] == "InService"}
    instances = tuple(_describe_instances(ec2, [i["InstanceId"] for i in group.get("Instances", [])]))
    desired = int(group["DesiredCapacity"])
    return NodeGroup(
        id=name,
        # Status is set only while the group is being deleted ("Delete in progress").
        state=group.get("Status", "active"),
        activity_status="fulfilled" if len(in_service) >= desired else "pending_fulfillment",
        target_capacity=desired,
        fulfilled_capacity=float(len(in_service)),
        on_demand_target_capacity=int(distribution.get("OnDemandBaseCapacity", 0)),
        on_demand_fulfilled_capacity=float(
            sum(1 for i in instances if i.instance_id in in_service and i.lifecycle == "on-demand")
        ),
        instances=instances,
        kind=BACKEND_AUTO_SCALING,
    )


def recent_activities(autoscaling: Any, name: str, now: dt.datetime) -> list[FleetEvent]:
    """The group's scaling activities of the last 24 hours (launches, terminations, failures), oldest first."""
    since = now - EVENT_WINDOW
    events = [
        FleetEvent(
            timestamp=activity["StartTime"],
            event_type="activity",
            sub_type=activity.get("StatusCode", "-"),
            instance_id=_activity_instance(activity.get("Description", "")),
            description=" ".join(filter(None, (activity.get("Description"), activity.get("StatusMessage")))),
        )
        for page in autoscaling.get_paginator("describe_scaling_activities").paginate(AutoScalingGroupName=name)
        for activity in page["Activities"]
        if activity["StartTime"] >= since
    ]
    return sorted(events, key=lambda event: event.timestamp)


def _activity_instance(description: str) -> str:
    """The instance an activity names ("Launching a new EC2 instance: i-0abc..."), else "-"."""
    match = re.search(r"\bi-[0-9a-f]+\b", description)
    return match.group(0) if match else "-"


def find_node_group(aws: Any, env: Environment, group_id: str | None) -> NodeGroup:
    """The node group given on the command line (--fleet-id, --group-name), else the one the stack output names."""
    group_id = group_id or node_group_id(aws.client("cloudformation"), env)
    if env.fleet.backend == BACKEND_AUTO_SCALING:
        return describe_auto_scaling_group(aws.client("autoscaling"), aws.client("ec2"), group_id, env.region)
    return describe_fleet(aws.client("ec2"), group_id, env.region)


def node_group_events(aws: Any, group: NodeGroup, now: dt.datetime) -> list[FleetEvent]:
    if group.kind == BACKEND_AUTO_SCALING:
        return recent_activities(aws.client("autoscaling"), group.id, now)
    return recent_events(aws.client("ec2"), group.id, now)


def group_id_option(args: Any, env: Environment) -> str | None:
    """The node group named on the command line: --fleet-id for a Spot Fleet, --group-name for an Auto Scaling
    group; the other one is refused."""
    wanted = NODE_GROUP_OPTIONS[env.fleet.backend]
    for option, value in (("--fleet-id", args.fleet_id), ("--group-name", args.group_name)):
        if value is not None and option != wanted:
            raise GpufleetError(f"{option}: {env.name} uses fleet.backend {env.fleet.backend}; pass {wanted} instead")
    return args.fleet_id or args.group_name


def _moment(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class ScheduledScaling:
    """A scheduled action of the group that has not run yet: at start_time its desired capacity becomes this."""

    start_time: dt.datetime
    desired_capacity: int | None

    def text(self) -> str:
        desired = "-" if self.desired_capacity is None else self.desired_capacity
        return f"{_moment(self.start_time)} desired {desired}"


@dataclass(frozen=True)
class CapacityBlockStatus:
    """A Capacity Block group's schedule: the block as EC2 describes it (state, start, end; None where it could not
    be read), the group's scheduled actions still ahead, and what the environment file gets wrong about them."""

    reservation_id: str
    state: str | None
    start: dt.datetime | None
    end: dt.datetime | None
    actions: tuple[ScheduledScaling, ...]
    notes: tuple[str, ...]

    def lines(self) -> list[str]:
        if self.state is None or self.start is None or self.end is None:
            block = f"Capacity Block {self.reservation_id}"
        else:
            block = (
                f"Capacity Block {self.reservation_id}: {self.state}, {_moment(self.start)} to {_moment(self.end)} "
                f"(EC2 terminates its instances from {_moment(self.end - TERMINATION_LEAD)})"
            )
        scheduled = "; ".join(action.text() for action in self.actions) or "nothing left"
        return [block, f"Scheduled: {scheduled}", *self.notes]

    def as_dict(self) -> dict[str, Any]:
        return {
            "reservation_id": self.reservation_id,
            "state": self.state,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "scheduled_actions": [
                {"start_time": a.start_time.isoformat(), "desired_capacity": a.desired_capacity} for a in self.actions
            ],
            "notes": list(self.notes),
        }


def scheduled_actions(autoscaling: Any, group_name: str) -> tuple[ScheduledScaling, ...]:
    """The group's scheduled actions that have not run (DescribeScheduledActions returns only those), soonest first."""
    pages = autoscaling.get_paginator("describe_scheduled_actions").paginate(AutoScalingGroupName=group_name)
    actions = [
        ScheduledScaling(action["StartTime"], action.get("DesiredCapacity"))
        for page in pages
        for action in page["ScheduledUpdateGroupActions"]
    ]
    return tuple(sorted(actions, key=lambda action: action.start_time))


def capacity_block_status(aws: Any, env: Environment, group_name: str) -> CapacityBlockStatus | None:
    """The schedule of the environment's Capacity Block group; None without a block. The block's dates come from
    DescribeCapacityReservations (StartDate, EndDate) and are compared with capacity.capacity_block's, from which the
    deploy made the scheduled actions (gpufleet.block_schedule): a block extended since, or dates copied wrong, get a
    note saying what to set."""
    block = env.capacity.capacity_block
    if block is None:
        return None
    notes = []
    state = start = end = None
    try:
        found = describe_reservations(aws.client("ec2"), [block.reservation_id])
    except ClientError as error:
        if not (is_unavailable(error) or error_code(error).startswith("InvalidCapacityReservationId")):
            raise
        notes.append(f"block unavailable: {describe_failure(error, env.region)}")
    else:
        (reservation,) = found
        state, start, end = reservation["State"], reservation.get("StartDate"), reservation["EndDate"]
        for key, file_value, ec2_value in (("start", block.start, start), ("end", block.end, end)):
            if ec2_value is not None and ec2_value != file_value:
                notes.append(
                    f"the block's {key} is {_moment(ec2_value)}, but capacity.capacity_block.{key} says "
                    f"{_moment(file_value)}: set it to the block's and deploy, or the group scales at the wrong time"
                )
    return CapacityBlockStatus(
        reservation_id=block.reservation_id,
        state=state,
        start=start,
        end=end,
        actions=scheduled_actions(aws.client("autoscaling"), group_name),
        notes=tuple(notes),
    )
