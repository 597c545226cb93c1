"""One small validator per rule an environment must satisfy that needs more than one field or outside knowledge
(the instance catalog, the AMI pipeline, the node scripts, the clock).

Each validator returns Problems naming the field and saying what is wrong and what is allowed; the caller
prefixes the file name. validate_environment runs them all so a user sees every problem at once, once the file
parses (gpufleet.environment checks types and every rule about one field alone while parsing, with the same kind of
message).

A problem is an error or a warning. Errors stop synthesis. Warnings are rules about launching capacity that a file
can come to break with no edit, by the clock alone: synthesis goes on, because `cdk destroy` synthesizes first and
the teardown of an existing cluster must stay possible. `gpufleet validate` prints warnings and `gpufleet preflight`
fails on them. The one such rule is fleet.valid_until in the past: every other rule judges the file against itself,
the instance catalog, ami/pipeline.yaml or the node scripts, which change only when someone edits them (the
capacity and subnet-size rules included: a file that passed at deploy passes at teardown).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.ami import published_profile
from gpufleet.catalog import load_catalog
from gpufleet.errors import GpufleetError
from gpufleet.rules import Problem, Validator, choice_problem
from gpufleet.user_data import user_data_size_problem

if TYPE_CHECKING:
    from gpufleet.ami.pipeline import Pipeline
    from gpufleet.environment import Environment

FLEET_TYPES = ("maintain", "request")
# What keeps the nodes running (fleet.backend): an EC2 Spot Fleet request or an EC2 Auto Scaling group.
BACKEND_SPOT_FLEET = "spot-fleet"
BACKEND_AUTO_SCALING = "auto-scaling"
FLEET_BACKENDS = (BACKEND_SPOT_FLEET, BACKEND_AUTO_SCALING)
ALLOCATION_STRATEGIES = (
    "priceCapacityOptimized",
    "capacityOptimized",
    "capacityOptimizedPrioritized",
    "diversified",
    "lowestPrice",
)
ON_DEMAND_ALLOCATION_STRATEGIES = ("lowestPrice", "prioritized")
# The same strategies as an Auto Scaling group's InstancesDistribution spells them; Spot Fleet's diversified has no
# counterpart. source: cfn-lint 1.58's bundled AWS::AutoScaling::AutoScalingGroup schema (cfnlint.schema
# PROVIDER_SCHEMA_MANAGER, definitions.InstancesDistribution): SpotAllocationStrategy "capacity-optimized",
# "capacity-optimized-prioritized", "lowest-price", "price-capacity-optimized"; OnDemandAllocationStrategy
# "lowest-price", "prioritized" (tests/gpufleet/test_validators.py reads the schema).
AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES = {
    "priceCapacityOptimized": "price-capacity-optimized",
    "capacityOptimized": "capacity-optimized",
    "capacityOptimizedPrioritized": "capacity-optimized-prioritized",
    "lowestPrice": "lowest-price",
}
AUTO_SCALING_ON_DEMAND_ALLOCATION_STRATEGIES = {"lowestPrice": "lowest-price", "prioritized": "prioritized"}
REPLACEMENT_STRATEGIES = ("launch", "launch-before-terminate")
# What a new node image does to a maintain fleet (fleet.rollout; gpufleet.environment.Fleet.image_rollout).
ROLLOUT_MANUAL = "manual"
ROLLOUT_REPLACE_ALL = "replace-all"
ROLLOUTS = (ROLLOUT_MANUAL, ROLLOUT_REPLACE_ALL)
# What MIG nodes may be for: work that stays inside one MIG instance. NVIDIA MIG user guide, "Deployment
# Considerations" (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/deployment-considerations.html): "NCCL is
# currently not supported with MIG"; "P2P between MIG instances on different GPUs, or between MIG instances to
# non-MIG mode GPU devices are not supported".
MIG_PURPOSES = ("single-node-inference", "independent-jobs")
RESERVATION_PREFERENCE_ONLY = "only"
RESERVATION_PREFERENCE_FIRST = "first"
RESERVATION_PREFERENCES = (RESERVATION_PREFERENCE_ONLY, RESERVATION_PREFERENCE_FIRST)
# DescribeInstanceTypes' SupportedUsageClasses value of a type that Capacity Blocks sell (gpufleet/instance_types.yaml).
CAPACITY_BLOCK_USAGE_CLASS = "capacity-block"


@dataclass(frozen=True)
class ValidationContext:
    path: Path
    now: dt.datetime
    # The AMI pipeline (ami/pipeline.yaml) that publishes /gpufleet/ami/PROFILE; None: not checked against it.
    ami_pipeline: Pipeline | None = None


class EnvironmentValidator(Validator["Environment", ValidationContext]):
    """A rule of an environment file."""


class EnvironmentNameValidator(EnvironmentValidator):
    field = "name"

    def check(self, env, context):
        if env.name != context.path.stem:
            return self.problem(
                f"'{env.name}' differs from the file name (name it '{context.path.stem}' "
                f"or rename the file to {env.name}.yaml)"
            )
        return []


class AvailabilityZoneValidator(EnvironmentValidator):
    field = "availability_zone"

    def check(self, env, context):
        if not re.fullmatch(re.escape(env.region) + r"[a-z]", env.availability_zone):
            return self.problem(
                f"'{env.availability_zone}' is not an availability zone of {env.region} "
                f"(the region name followed by one letter, e.g. {env.region}a)"
            )
        return []


class NetworkChoiceValidator(EnvironmentValidator):
    field = "network"

    def check(self, env, context):
        network = env.network
        existing = (network.vpc_id, network.subnet_id)
        if network.cidr is None and None in existing:
            return self.problem("no network chosen (set cidr for a new VPC, or both vpc_id and subnet_id)")
        if network.cidr is not None and any(existing):
            return self.problem(
                "cidr and vpc_id/subnet_id both set (cidr creates a VPC; vpc_id and subnet_id "
                "import one: keep one of the two)"
            )
        if network.nat_gateway and network.cidr is None:
            return [Problem("network.nat_gateway", "only a new VPC gets a NAT gateway (remove it, or use cidr)")]
        return []


class NodeSubnetCapacityValidator(EnvironmentValidator):
    """Every interface with an ENA device takes a private address (`efa-only` interfaces take none: see
    InstanceType.interface_types); the node subnet also loses the 5 addresses AWS reserves and one per interface
    endpoint."""

    field = "network.cidr"
    reserved_per_subnet = 5
    interface_endpoints = 9

    def check(self, env, context):
        instance = load_catalog().get(env.instance_type)
        if instance is None or env.network.cidr is None:
            return []
        per_node = instance.addresses_per_node(env.efa)
        # Capacity rebalance launches replacements for spot nodes before the old ones go.
        peak_nodes = env.capacity.target + (env.capacity.spot if env.fleet.capacity_rebalance else 0)
        needed = peak_nodes * per_node + self.interface_endpoints
        available = self.addresses(env.network.node_subnet_prefix)
        if needed <= available:
            return []
        vpc_prefix = env.network.node_subnet_prefix - 1
        fitting = next(p for p in range(vpc_prefix, 0, -1) if self.addresses(p + 1) >= needed)
        return self.problem(
            f"/{vpc_prefix} leaves {available} addresses in the node subnet, but {peak_nodes} nodes "
            f"({env.instance_type}, {per_node} per node) and {self.interface_endpoints} VPC endpoints need {needed} "
            f"(use /{fitting} or larger)"
        )

    def addresses(self, subnet_prefix: int) -> int:
        return 2 ** (32 - subnet_prefix) - self.reserved_per_subnet


class InstanceTypeValidator(EnvironmentValidator):
    field = "instance_type"

    def check(self, env, context):
        catalog = load_catalog()
        if env.instance_type not in catalog:
            return self.problem(
                f"'{env.instance_type}' is not in the instance catalog "
                f"(allowed: {', '.join(catalog)}; add it to gpufleet/instance_types.yaml)"
            )
        return []


class EfaSupportValidator(EnvironmentValidator):
    field = "efa"

    def check(self, env, context):
        instance = load_catalog().get(env.instance_type)
        if env.efa and instance is not None and not instance.efa_supported:
            return self.problem(
                f"EFA requested but {env.instance_type} has no EFA (set efa: false or choose an EFA instance type)"
            )
        return []


class OnDemandCapacityValidator(EnvironmentValidator):
    field = "capacity.on_demand"

    def check(self, env, context):
        if not 0 <= env.capacity.on_demand <= env.capacity.target:
            return self.problem(
                f"{env.capacity.on_demand} is outside the target capacity "
                f"(0 to capacity.target, which is {env.capacity.target})"
            )
        return []


class RolloutValidator(EnvironmentValidator):
    field = "fleet.rollout"

    def check(self, env, context):
        if env.fleet.type == "request" and env.fleet.rollout == ROLLOUT_MANUAL:
            # source: EC2 API reference, ModifySpotFleetRequest: "You can only modify a Spot Fleet request of type
            # maintain." (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifySpotFleetRequest.html)
            return self.problem(
                "a request fleet cannot be modified, so every change replaces it, a new image included "
                f"(remove rollout, or set it to {ROLLOUT_REPLACE_ALL})"
            )
        return []


class CapacityRebalanceValidator(EnvironmentValidator):
    field = "fleet.capacity_rebalance"

    def check(self, env, context):
        rebalance = env.fleet.capacity_rebalance
        if rebalance is None:
            return []
        if env.fleet.type != "maintain":
            return self.problem(
                "capacity rebalance needs a fleet that maintains capacity (set fleet.type: maintain "
                "or remove capacity_rebalance)"
            )
        delay = rebalance.termination_delay_seconds
        if delay is not None and rebalance.replacement_strategy != "launch-before-terminate":
            return [
                Problem(
                    f"{self.field}.termination_delay_seconds",
                    "only applies to replacement_strategy: launch-before-terminate (remove it)",
                )
            ]
        return []


class ReservationTargetValidator(EnvironmentValidator):
    """Exactly one target: the EC2 API's CapacityReservationTarget takes an id or a resource group ARN, and
    AWS::AutoScaling::AutoScalingGroup's takes reservation ids or resource group ARNs (cfn-lint's bundled schemas)."""

    field = "capacity.reservation"

    def check(self, env, context):
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
    """With the spot-fleet backend the reservation is targeted by the launch template, whose
    CapacityReservationTarget holds one CapacityReservationId (EC2 API reference, API_CapacityReservationTarget;
    cfn-lint's AWS::EC2::LaunchTemplate schema). An Auto Scaling group's target takes a list
    (CapacityReservationIds)."""

    field = "capacity.reservation.ids"

    def check(self, env, context):
        reservation = env.capacity.reservation
        distinct = len(set(reservation.ids or ())) if reservation is not None else 0
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

    def check(self, env, context):
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

    def check(self, env, context):
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

    def check(self, env, context):
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
        if env.fleet.backend == BACKEND_SPOT_FLEET:
            return self.problem(
                "a Spot Fleet cannot launch into a Capacity Block (AWS documents RunInstances, EC2 Fleets of type "
                "instant and Auto Scaling groups for them): set fleet.backend: auto-scaling"
            )
        return []


class ReservedInstanceTypeValidator(EnvironmentValidator):
    """Capacity Blocks sell a few instance types only: those whose DescribeInstanceTypes SupportedUsageClasses lists
    capacity-block (the catalog's usage_classes, checked against the data moto bundles)."""

    field = "instance_type"

    def check(self, env, context):
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


class FallbackNeedsSpotValidator(EnvironmentValidator):
    field = "fleet.fallback"

    def check(self, env, context):
        if env.fleet.fallback is not None and env.capacity.spot < 1:
            return self.problem(
                f"there is no spot part to fall back from: capacity.on_demand ({env.capacity.on_demand}) is the whole "
                f"target ({env.capacity.target}) (lower capacity.on_demand, or remove fallback)"
            )
        return []


class FallbackNeedsMaintainValidator(EnvironmentValidator):
    field = "fleet.fallback"

    def check(self, env, context):
        fallback_on_spot_fleet = env.fleet.fallback is not None and env.fleet.backend == BACKEND_SPOT_FLEET
        if fallback_on_spot_fleet and env.fleet.type != "maintain":
            # source: EC2 API reference, ModifySpotFleetRequest: "You can only modify a Spot Fleet request of type
            # maintain." (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifySpotFleetRequest.html)
            return self.problem(
                "the fallback changes the fleet's on-demand part, and only a maintain fleet can be modified "
                "(set fleet.type: maintain, or remove fallback)"
            )
        return []


class FallbackCeilingValidator(EnvironmentValidator):
    field = "fleet.fallback.max_extra_on_demand"

    def check(self, env, context):
        fallback = env.fleet.fallback
        if fallback is None or env.capacity.spot < 1:
            return []
        extra, spot = fallback.max_extra_on_demand, env.capacity.spot
        if not 1 <= extra <= spot:
            return self.problem(
                f"{extra} is out of range (1 to the spot part, capacity.target - capacity.on_demand = {spot}: more "
                "extra on-demand nodes than spot nodes would never be used)"
            )
        return []


class FallbackCapacityBlockValidator(EnvironmentValidator):
    field = "fleet.fallback"

    def check(self, env, context):
        if env.fleet.fallback is not None and env.capacity.capacity_block is not None:
            return self.problem(
                "a Capacity Block has no spot nodes to fall back from, and its nodes are not on-demand ones "
                "(remove fallback, or capacity.capacity_block)"
            )
        return []


def valid_until_problem(valid_until: dt.datetime | None, now: dt.datetime) -> str | None:
    """A fleet.valid_until that has passed (a time equal to now has): a fleet requested with it ends before it
    starts. A time without zone is UTC."""
    if valid_until is None:
        return None
    if valid_until.tzinfo is None:
        valid_until = valid_until.replace(tzinfo=dt.UTC)
    if valid_until <= now:
        return f"{valid_until.isoformat()} has passed (set a future UTC time, or remove it, before launching nodes)"
    return None


class ValidUntilValidator(EnvironmentValidator):
    """A warning: the date passes with no edit to the file, and the cluster must still be possible to destroy."""

    field = "fleet.valid_until"
    severity = "warning"

    def check(self, env, context):
        return self.problem_if(valid_until_problem(env.fleet.valid_until, context.now))


class AutoScalingValidator(EnvironmentValidator):
    """A rule of fleet.backend auto-scaling: what a Spot Fleet offers and an Auto Scaling group does not."""

    def check(self, env, context):
        if env.fleet.backend != BACKEND_AUTO_SCALING:
            return []
        return self.problem_if(self.auto_scaling_problem(env.fleet))

    def auto_scaling_problem(self, fleet) -> str | None:
        raise NotImplementedError


class AutoScalingFleetTypeValidator(AutoScalingValidator):
    field = "fleet.type"

    def auto_scaling_problem(self, fleet):
        if fleet.type == "request":
            return (
                "an Auto Scaling group always maintains its desired capacity; it has no one-shot request "
                "(remove type, or set backend: spot-fleet)"
            )
        return None


class AutoScalingValidUntilValidator(AutoScalingValidator):
    field = "fleet.valid_until"

    def auto_scaling_problem(self, fleet):
        if fleet.valid_until is not None:
            return (
                "an Auto Scaling group has no end time; its nodes run until the stack is deleted "
                "(remove valid_until, or set backend: spot-fleet)"
            )
        return None


class AutoScalingReplaceUnhealthyValidator(AutoScalingValidator):
    """An Auto Scaling group replaces instances that fail their health checks; CloudFormation offers no property to
    stop it (AWS::AutoScaling::AutoScalingGroup has no SuspendedProcesses)."""

    field = "fleet.replace_unhealthy_instances"

    def auto_scaling_problem(self, fleet):
        if not fleet.replace_unhealthy_instances:
            return (
                "an Auto Scaling group always replaces nodes that fail EC2 status checks "
                "(remove replace_unhealthy_instances, or set backend: spot-fleet)"
            )
        return None


class AutoScalingReplacementStrategyValidator(EnvironmentValidator):
    """An Auto Scaling group's CapacityRebalance is on or off: it launches the replacement, then terminates the old
    node itself, with no launch-before-terminate strategy and no termination delay. source: cfn-lint 1.58's bundled
    AWS::AutoScaling::AutoScalingGroup schema, properties.CapacityRebalance ("type": "boolean": "After launching a
    new instance, it then terminates an old instance")."""

    field = "fleet.capacity_rebalance"

    def check(self, env, context):
        rebalance = env.fleet.capacity_rebalance
        if env.fleet.backend != BACKEND_AUTO_SCALING or rebalance is None:
            return []
        problems = []
        if rebalance.replacement_strategy != "launch":
            problems.append(
                Problem(
                    f"{self.field}.replacement_strategy",
                    f"'{rebalance.replacement_strategy}' is not available with an Auto Scaling group, whose capacity "
                    "rebalancing launches a replacement and then terminates the old node (remove "
                    "replacement_strategy, or set backend: spot-fleet)",
                )
            )
        if rebalance.termination_delay_seconds is not None:
            problems.append(
                Problem(
                    f"{self.field}.termination_delay_seconds",
                    "an Auto Scaling group has no termination delay; its termination lifecycle hook gives the node "
                    "time to checkpoint (remove termination_delay_seconds, or set backend: spot-fleet)",
                )
            )
        return problems


class AutoScalingAllocationStrategyValidator(AutoScalingValidator):
    field = "fleet.allocation_strategy"

    def auto_scaling_problem(self, fleet):
        if fleet.allocation_strategy not in AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES:
            return (
                f"'{fleet.allocation_strategy}' has no Auto Scaling counterpart (allowed with backend: auto-scaling: "
                f"{', '.join(AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES)}; or set backend: spot-fleet)"
            )
        return None


class AmiSourceValidator(EnvironmentValidator):
    field = "ami"

    def check(self, env, context):
        ami = env.ami
        if (ami.ssm_parameter is None) == (ami.id is None):
            return self.problem(
                "set exactly one of ssm_parameter and id (e.g. ssm_parameter: /gpufleet/ami/p4d-ubuntu2204)"
            )
        return []


class PublishedImageValidator(EnvironmentValidator):
    """An environment that reads /gpufleet/ami/PROFILE needs that parameter, and the image it names, in its own
    account and region: SSM parameters and AMIs are regional. The AMI pipeline builds its profiles in its region and
    copies each new image to the region of every environment in environments/ that reads the profile
    (gpufleet.ami.pipeline.publish_regions), so the region follows from the environment itself; what the environment
    can get wrong is a profile the pipeline does not build, or another account (an account also fixes the partition,
    and CopyImage does not cross partitions)."""

    field = "ami.ssm_parameter"

    def check(self, env, context):
        pipeline = context.ami_pipeline
        profile = published_profile(env.ami.ssm_parameter)
        if pipeline is None or profile is None:
            return []
        if profile not in pipeline.profiles:
            return self.problem(
                f"{env.ami.ssm_parameter} is not published in {env.region}: the AMI pipeline builds "
                f"{', '.join(pipeline.profiles)} (add {profile} to profiles in ami/pipeline.yaml)"
            )
        if env.account != pipeline.account:
            return self.problem(
                f"{env.ami.ssm_parameter} is published in account {pipeline.account}, not in {env.account} "
                f"(deploy in {pipeline.account}, or set ami.id to an image shared with {env.account})"
            )
        return []


class MigProfileValidator(EnvironmentValidator):
    field = "node.mig_profile"

    def check(self, env, context):
        profile = env.node.mig_profile
        instance = load_catalog().get(env.instance_type)
        if profile is None or instance is None:
            return []
        if not instance.mig_profiles:
            return self.problem(f"{instance.gpu.model} GPUs of {instance.name} do not support MIG (remove mig_profile)")
        if profile not in instance.mig_profiles:
            return self.problem(
                f"'{profile}' is not a MIG profile of the {instance.gpu.model} "
                f"{instance.gpu.memory_gib} GB (allowed: {', '.join(instance.mig_profiles)})"
            )
        if env.efa and env.node.mig_purpose is None:
            return self.problem(
                "MIG on an EFA cluster: NCCL, what EFA clusters are for, is not supported with MIG (remove "
                "mig_profile, set efa: false, or state that each MIG instance works alone: "
                f"node.mig_purpose: {' or '.join(MIG_PURPOSES)})"
            )
        return []


class MigPurposeValidator(EnvironmentValidator):
    field = "node.mig_purpose"

    def check(self, env, context):
        if env.node.mig_purpose is None:
            return []
        if env.node.mig_profile is None:
            return self.problem("only applies with node.mig_profile (remove it, or set mig_profile)")
        return self.problem_if(choice_problem(env.node.mig_purpose, "a MIG purpose", MIG_PURPOSES))


class UserDataSizeValidator(EnvironmentValidator):
    """EC2's user-data limit, checked on the compressed user data this environment's nodes get, so that
    `gpufleet validate` refuses what a deploy would."""

    field = "node"

    def check(self, env, context):
        instance = load_catalog().get(env.instance_type)
        if instance is None:
            return []
        try:
            return self.problem_if(user_data_size_problem(env, instance))
        except GpufleetError as error:
            return [Problem(self.field, line) for line in error.problems]


VALIDATORS: tuple[Validator, ...] = (
    EnvironmentNameValidator(),
    AvailabilityZoneValidator(),
    NetworkChoiceValidator(),
    NodeSubnetCapacityValidator(),
    InstanceTypeValidator(),
    EfaSupportValidator(),
    OnDemandCapacityValidator(),
    RolloutValidator(),
    CapacityRebalanceValidator(),
    ReservationTargetValidator(),
    ReservationIdsBackendValidator(),
    ReservationGroupRegionValidator(),
    ReservationPreferenceValidator(),
    CapacityBlockValidator(),
    ReservedInstanceTypeValidator(),
    ValidUntilValidator(),
    AutoScalingFleetTypeValidator(),
    AutoScalingValidUntilValidator(),
    AutoScalingReplaceUnhealthyValidator(),
    AutoScalingReplacementStrategyValidator(),
    AutoScalingAllocationStrategyValidator(),
    AmiSourceValidator(),
    PublishedImageValidator(),
    MigProfileValidator(),
    MigPurposeValidator(),
    UserDataSizeValidator(),
    FallbackNeedsSpotValidator(),
    FallbackNeedsMaintainValidator(),
    FallbackCeilingValidator(),
    FallbackCapacityBlockValidator(),
)


def validate_environment(
    env: Environment, path: Path, now: dt.datetime | None = None, ami_pipeline: Pipeline | None = None
) -> list[Problem]:
    context = ValidationContext(path=path, now=now or dt.datetime.now(dt.UTC), ami_pipeline=ami_pipeline)
    return [problem for validator in VALIDATORS for problem in validator.check(env, context)]
