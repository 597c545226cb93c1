"""Capacity sources: the on-demand part, On-Demand Capacity Reservations and Capacity Blocks."""

from __future__ import annotations

import datetime as dt

from gpufleet.block_schedule import scale_in_lead, scale_in_time
from gpufleet.catalog import load_catalog
from gpufleet.constants import (
    BACKEND_SPOT_FLEET,
    CAPACITY_BLOCK_USAGE_CLASS,
    FLAVOUR_EKS,
    FLAVOUR_FLEET,
    RESERVATION_PREFERENCE_FIRST,
    RESERVATION_PREFERENCE_ONLY,
    ROLLOUT_REPLACE_ALL,
)
from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import EnvironmentValidator, FleetFlavourValidator, ValidationContext


class OnDemandCapacityValidator(EnvironmentValidator):
    field = "capacity.on_demand"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if not 0 <= env.capacity.on_demand <= env.capacity.target:
            return self.problem(
                f"{env.capacity.on_demand} is outside the target capacity "
                f"(0 to capacity.target, which is {env.capacity.target})"
            )
        return []


class ReservationTargetValidator(EnvironmentValidator):
    """Exactly one target: the EC2 API's CapacityReservationTarget takes an id or a resource group ARN, and
    AWS::AutoScaling::AutoScalingGroup's takes reservation ids or resource group ARNs (cfn-lint's bundled schemas)."""

    field = "capacity.reservation"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        reservation = env.capacity.reservation
        if reservation is None:
            return []
        if (reservation.ids is None) == (reservation.resource_group_arn is None):
            return self.problem("set exactly one of ids and resource_group_arn (e.g. ids: [cr-0123456789abcdef0])")
        if reservation.ids is not None and not reservation.ids:
            return [Problem(f"{self.field}.ids", "is empty (list at least one Capacity Reservation id)")]
        if reservation.ids is not None and len(set(reservation.ids)) != len(reservation.ids):
            return [Problem(f"{self.field}.ids", "lists an id twice (list each reservation once)")]
        return []


class ReservationIdsBackendValidator(EnvironmentValidator):
    """With the spot-fleet backend, and on the eks flavour (a managed node group launches from its launch template),
    the reservation is targeted by the launch template, whose CapacityReservationTarget holds one
    CapacityReservationId (EC2 API reference, API_CapacityReservationTarget; cfn-lint's AWS::EC2::LaunchTemplate
    schema). An Auto Scaling group's target takes a list (CapacityReservationIds)."""

    field = "capacity.reservation.ids"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        reservation = env.capacity.reservation
        distinct = len(set(reservation.ids or ())) if reservation is not None else 0
        if distinct > 1 and env.flavour == FLAVOUR_EKS:
            return self.problem(
                f"{distinct} reservations, but an EKS managed node group's launch template targets one (list one id, "
                "or put the reservations in a resource group and set resource_group_arn)"
            )
        if distinct > 1 and env.fleet.backend == BACKEND_SPOT_FLEET:
            return self.problem(
                f"{distinct} reservations, but a launch template targets one (list one id, put the "
                "reservations in a resource group and set resource_group_arn, or set fleet.backend: auto-scaling)"
            )
        return []


class ReservationGroupRegionValidator(EnvironmentValidator):
    """A resource group holds resources of its own region only (AWS Resource Groups user guide: "a logical grouping
    of AWS resources that are all in the same AWS Region"; EC2 user guide, create-cr-group)."""

    field = "capacity.reservation.resource_group_arn"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        reservation = env.capacity.reservation
        if reservation is None or reservation.resource_group_arn is None:
            return []
        region = reservation.resource_group_arn.split(":")[3]
        if region != env.region:
            return self.problem(
                f"the group is in {region}, but the cluster is in {env.region} (a resource group holds the "
                f"reservations of its own region: use a group in {env.region})"
            )
        return []


class ReservationPreferenceValidator(EnvironmentValidator):
    field = "capacity.reservation.preference"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        reservation = env.capacity.reservation
        if reservation is None:
            return []
        if reservation.preference == RESERVATION_PREFERENCE_ONLY and env.capacity.spot > 0:
            # Our meaning of only: every node runs in the reservations, and a Capacity Reservation reserves
            # On-Demand capacity (EC2 user guide, ec2-capacity-reservations.html).
            return self.problem(
                f"only puts every node in the reservations, but {env.capacity.spot} of the {env.capacity.target} "
                f"nodes are spot (set capacity.on_demand to {env.capacity.target}, or preference: first)"
            )
        if reservation.preference == RESERVATION_PREFERENCE_FIRST and env.flavour == FLAVOUR_EKS:
            # The reservation settings of a managed node group come from its launch template alone, as on the
            # spot-fleet backend below (the EKS CreateNodegroup API has none of its own) (unconfirmed).
            return self.problem(
                "first needs an Auto Scaling group of gpufleet's own: an EKS managed node group launches from a "
                "launch template, which cannot launch into reservations first and then into plain on-demand "
                "capacity (set preference: only)"
            )
        if reservation.preference == RESERVATION_PREFERENCE_FIRST and env.fleet.backend == BACKEND_SPOT_FLEET:
            # A launch template cannot say "reservations, then on-demand" for a targeted reservation (its
            # preference is capacity-reservations-only | open | none: cfn-lint's AWS::EC2::LaunchTemplate schema);
            # an Auto Scaling group can (capacity-reservations-first). Spot Fleet has no capacity reservation option
            # of its own (SpotFleetRequestConfigData in the same schemas); EC2 Fleet's use-capacity-reservations-first
            # works for instant fleets only. Whether Spot Fleet honours a launch template's reservation targeting
            # for its on-demand part is (unconfirmed): AWS documents none.
            return self.problem(
                "first needs an Auto Scaling group: a Spot Fleet cannot launch into reservations first and then "
                "into plain on-demand capacity (set fleet.backend: auto-scaling, or preference: only)"
            )
        return []


class CapacityBlockValidator(EnvironmentValidator):
    """An EC2 Capacity Block for ML. Sources: EC2 user guide, capacity-blocks-launch.html (launch with market type
    capacity-block and the reservation id), capacity-blocks-using.html; "Tutorial: Configure your EC2 Fleet to launch
    instances into Capacity Blocks" ("Only EC2 Fleet requests of type instant are supported"); EC2 Auto Scaling user
    guide, launch-template-capacity-blocks.html. AWS documents no Spot Fleet support for Capacity Blocks."""

    field = "capacity.capacity_block"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        capacity = env.capacity
        if capacity.capacity_block is None:
            return []
        if capacity.reservation is not None:
            return self.problem(
                "a Capacity Block and capacity.reservation both set (an instance launches into one reservation "
                "target: keep one of the two)"
            )
        if capacity.spot > 0:
            return self.problem(
                f"{capacity.spot} of the {capacity.target} nodes are spot, but every node in a Capacity Block is a "
                f"capacity-block instance (set capacity.on_demand to {capacity.target})"
            )
        # An EKS managed node group takes a Capacity Block (capacity type CAPACITY_BLOCK: aws_eks_v2.CapacityType in
        # aws-cdk-lib 2.275; EKS user guide capacity-blocks-mng).
        if env.flavour == FLAVOUR_FLEET and env.fleet.backend == BACKEND_SPOT_FLEET:
            return self.problem(
                "a Spot Fleet cannot launch into a Capacity Block (AWS documents RunInstances, EC2 Fleets of type "
                "instant and Auto Scaling groups for them): set fleet.backend: auto-scaling"
            )
        return []


class ReservedInstanceTypeValidator(EnvironmentValidator):
    """Capacity Blocks sell a few instance types only: those whose DescribeInstanceTypes SupportedUsageClasses lists
    capacity-block (the catalog's usage_classes, checked against the data moto bundles)."""

    field = "instance_type"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        instance = load_catalog().get(env.instance_type)
        if env.capacity.capacity_block is None or instance is None:
            return []
        if CAPACITY_BLOCK_USAGE_CLASS not in instance.usage_classes:
            sold = [name for name, other in load_catalog().items() if CAPACITY_BLOCK_USAGE_CLASS in other.usage_classes]
            return self.problem(
                f"Capacity Blocks do not sell {env.instance_type} (in the catalog they sell {', '.join(sold)}; "
                "choose one of those, or remove capacity.capacity_block)"
            )
        return []


def _moment(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _minutes(duration: dt.timedelta) -> int:
    return duration // dt.timedelta(minutes=1)


class CapacityBlockWindowValidator(EnvironmentValidator):
    """The nodes run from the block's start until the scale-in lead before its end (gpufleet.block_schedule: gpufleet's
    on the fleet flavour, EKS's on eks): a block whose end comes sooner than that after its start leaves them no time,
    whatever the two dates were meant to be."""

    field = "capacity.capacity_block.end"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        block = env.capacity.capacity_block
        if block is None or scale_in_time(block.end, env.flavour) > block.start:
            return []
        return self.problem(
            f"{_moment(block.end)} leaves no time after the start, {_moment(block.start)}: the nodes are scaled in "
            f"{_minutes(scale_in_lead(env.flavour))} minutes before the end (copy StartDate and EndDate from "
            "DescribeCapacityReservations, with their time zone)"
        )


class CapacityBlockEndedValidator(EnvironmentValidator):
    """A warning: the block ends with no edit to the file, and the cluster must still be possible to destroy. Once
    its scale-in time has passed, a deploy gives the group no node and no scheduled action (gpufleet.block_schedule)."""

    field = "capacity.capacity_block.end"
    severity = "warning"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        block = env.capacity.capacity_block
        if block is None or scale_in_time(block.end, env.flavour) > context.now:
            return []
        scale_in = scale_in_time(block.end, env.flavour)
        return self.problem(
            f"the block's nodes were scaled in at {_moment(scale_in)}, {_minutes(scale_in_lead(env.flavour))} "
            f"minutes before it ends ({_moment(block.end)}): a deploy launches no node (set the reservation_id, start "
            "and end of a new block, or tear the cluster down)"
        )


class CapacityBlockRolloutValidator(FleetFlavourValidator):
    """Under replace-all a new image makes a new group, which CloudFormation creates before it deletes the old one:
    the new group would wait for capacity that the old group's nodes hold in the block."""

    field = "fleet.rollout"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.capacity.capacity_block is None or env.fleet.image_rollout != ROLLOUT_REPLACE_ALL:
            return []
        return self.problem(
            "replace-all makes a new group next to the old one, but the old group's nodes hold the Capacity Block "
            "(remove rollout, or set it to manual: new nodes take the new image)"
        )
