"""The cluster's Spot Fleet request: found from the cluster stack output, its capacity, instances and recent events."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import error_code
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.validators import BACKEND_AUTO_SCALING, BACKEND_SPOT_FLEET

FLEET_OUTPUT_KEY = "FleetRequestId"
AUTO_SCALING_GROUP_OUTPUT_KEY = "AutoScalingGroupName"
# The cluster stack output that names the node group, by fleet.backend (stacks/constructs/node_group.py writes it).
NODE_GROUP_OUTPUTS = {BACKEND_SPOT_FLEET: FLEET_OUTPUT_KEY, BACKEND_AUTO_SCALING: AUTO_SCALING_GROUP_OUTPUT_KEY}
EVENT_WINDOW = dt.timedelta(hours=24)


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

    def as_dict(self) -> dict[str, str]:
        return {**vars(self), "launch_time": self.launch_time.isoformat()}


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
class Fleet:
    request_id: str
    state: str
    activity_status: str
    target_capacity: int
    fulfilled_capacity: float
    on_demand_target_capacity: int
    on_demand_fulfilled_capacity: float
    instances: tuple[FleetInstance, ...]

    @property
    def running(self) -> list[FleetInstance]:
        """Running instances in a deterministic order: launch time, then private IP (numerically)."""
        running = [instance for instance in self.instances if instance.state == "running" and instance.private_ip]
        return sorted(running, key=lambda i: (i.launch_time, ipaddress.ip_address(i.private_ip)))

    @property
    def images(self) -> list[str]:
        """The images the fleet's pending and running nodes were launched from; more than one after a new image
        reached a fleet in place (fleet.rollout: manual) and only some nodes were replaced since."""
        live = {instance.image_id for instance in self.instances if instance.state in ("pending", "running")}
        return sorted(live)


def cluster_stack_name(env: Environment) -> str:
    return f"{env.stack_prefix}-cluster"


def fleet_request_id(cloudformation: Any, env: Environment) -> str:
    """The FleetRequestId output of the environment's cluster stack."""
    stack_name = cluster_stack_name(env)
    try:
        stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    except ClientError as error:
        if error_code(error) == "ValidationError" and "does not exist" in str(error):
            raise GpufleetError(
                f"stack {stack_name} not found in {env.region}: deploy the cluster (cdk deploy) or pass --fleet-id"
            ) from None
        raise
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}
    if FLEET_OUTPUT_KEY not in outputs:
        raise GpufleetError(
            f"stack {stack_name} ({stack['StackStatus']}) has no {FLEET_OUTPUT_KEY} output: "
            "wait for the deployment to finish or pass --fleet-id"
        )
    return outputs[FLEET_OUTPUT_KEY]


def describe_fleet(ec2: Any, request_id: str, region: str) -> Fleet:
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
    return Fleet(
        request_id=request_id,
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


def find_fleet(aws: Any, env: Environment, fleet_id: str | None) -> Fleet:
    """The fleet given by --fleet-id, else the one named by the cluster stack's output."""
    request_id = fleet_id or fleet_request_id(aws.client("cloudformation"), env)
    return describe_fleet(aws.client("ec2"), request_id, env.region)
