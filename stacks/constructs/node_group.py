"""The one seam for "the thing that keeps N nodes running": node_group builds the environment's fleet.backend.

Each backend brings its teardown guarantee and names its CloudFormation output, which the operator commands read
(gpufleet.constants.NODE_GROUP_OUTPUTS):
- spot-fleet: the Spot Fleet (stacks/constructs/gpu_spot_fleet.py) and the FleetTeardown custom resource that
  cancels it and waits for its nodes before the resources they sit in are deleted;
- auto-scaling: the Auto Scaling group (stacks/constructs/gpu_auto_scaling_group.py), whose own deletion terminates
  its nodes; it depends on those resources directly. It comes with the custom resource that sets its desired
  capacity: GroupCapacity (stacks/constructs/group_capacity/), or with a Capacity Block BlockCapacity, which
  schedules it (stacks/constructs/block_capacity/).
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.constants import BACKEND_AUTO_SCALING, BACKEND_SPOT_FLEET, ENVIRONMENT_TAG_KEY, NODE_GROUP_OUTPUTS
from gpufleet.environment import Capacity, Fleet
from stacks.constructs.fleet_teardown.infrastructure import FleetTeardown
from stacks.constructs.gpu_auto_scaling_group import GpuAutoScalingGroup
from stacks.constructs.gpu_spot_fleet import GpuSpotFleet
from stacks.constructs.node_launch_template import NodeLaunchTemplate


@dataclass(frozen=True)
class NodeGroup:
    kind: str  # the fleet.backend that built it
    resource: cdk.CfnResource
    id: str  # a token: the fleet request id or the group name

    @property
    def output_key(self) -> str:
        return NODE_GROUP_OUTPUTS[self.kind]


def node_group(
    scope: Construct,
    *,
    environment_name: str,
    instance_type: str,
    capacity: Capacity,
    fleet: Fleet,
    group_name_prefix: str,
    launch_template: NodeLaunchTemplate,
    subnet_id: str,
    checkpoint_hook: bool,
    guarded: list[Construct],
) -> NodeGroup:
    """The environment's node group, by fleet.backend; group_name_prefix: the Auto Scaling group's name or prefix;
    guarded: the resources its nodes sit in,
    deleted only after the nodes are gone; checkpoint_hook: the nodes have one, which a Spot Fleet's teardown runs
    first (an Auto Scaling group's termination lifecycle hook does as much)."""
    backend = fleet.backend
    if backend == BACKEND_AUTO_SCALING:
        group = GpuAutoScalingGroup(
            scope,
            "NodeGroup",
            environment_name=environment_name,
            name_prefix=group_name_prefix,
            instance_type=instance_type,
            target=capacity.target,
            on_demand=capacity.on_demand,
            fleet=fleet,
            reservation=capacity.reservation,
            capacity_block=capacity.capacity_block,
            launch_template=launch_template,
            subnet_id=subnet_id,
            log_retention=logs.RetentionDays.ONE_MONTH,
        )
        for construct in guarded:
            group.group.node.add_dependency(construct)
        return NodeGroup(backend, group.group, group.group.ref)
    assert backend == BACKEND_SPOT_FLEET, f"fleet.backend {backend}: the environment's parsing allows no other"
    spot_fleet = GpuSpotFleet(
        scope,
        "Fleet",
        environment_name=environment_name,
        instance_type=instance_type,
        target=capacity.target,
        on_demand=capacity.on_demand,
        fleet=fleet,
        launch_template=launch_template.launch_template,
        image_id=launch_template.image_id,
    )
    FleetTeardown(
        scope,
        "FleetTeardown",
        fleet=spot_fleet.spot_fleet,
        environment_tag=(ENVIRONMENT_TAG_KEY, environment_name),
        checkpoint_hook=checkpoint_hook,
        guarded=guarded,
        log_retention=logs.RetentionDays.ONE_MONTH,
    )
    return NodeGroup(backend, spot_fleet.spot_fleet, spot_fleet.spot_fleet.ref)
