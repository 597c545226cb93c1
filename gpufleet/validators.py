"""One small validator per rule an environment must satisfy beyond its types.

Each validator returns Problems naming the field and saying what is wrong and what is allowed; the caller
prefixes the file name. validate_environment runs them all so a user sees every problem at once, once the file
parses (gpufleet.environment checks types and the values of choice fields, such as fleet.type, while parsing).

A problem is an error or a warning. Errors stop synthesis. Warnings are rules about launching capacity that a file
can come to break with no edit, by the clock alone: synthesis goes on, because `cdk destroy` synthesizes first and
the teardown of an existing cluster must stay possible. `gpufleet validate` prints warnings and `gpufleet preflight`
fails on them. The one such rule is fleet.valid_until in the past: every other rule judges the file against itself,
the instance catalog, ami/pipeline.yaml or the node scripts, which change only when someone edits them (the
capacity and subnet-size rules included: a file that passed at deploy passes at teardown).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.catalog import load_catalog
from gpufleet.errors import GpufleetError
from gpufleet.fallback import CHECK_INTERVAL_MINUTES, SPOT_FLEET
from gpufleet.rules import (
    Problem,
    Validator,
    account_id_problem,
    choice_problem,
    log_retention_problem,
    region_problem,
)
from gpufleet.user_data import user_data_size_problem

if TYPE_CHECKING:
    from gpufleet.ami.pipeline import Pipeline
    from gpufleet.environment import Environment

FLEET_TYPES = ("maintain", "request")
ALLOCATION_STRATEGIES = (
    "priceCapacityOptimized",
    "capacityOptimized",
    "capacityOptimizedPrioritized",
    "diversified",
    "lowestPrice",
)
ON_DEMAND_ALLOCATION_STRATEGIES = ("lowestPrice", "prioritized")
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
SMALLEST_VPC_PREFIX = 24
LARGEST_VPC_PREFIX = 16


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
    pattern = re.compile(r"^[a-z][a-z0-9-]{0,23}$")

    def check(self, env, context):
        if not self.pattern.match(env.name):
            return self.problem(
                f"'{env.name}' is not a valid name (lower-case letters, digits and '-', "
                "starting with a letter, at most 24 characters)"
            )
        if env.name != context.path.stem:
            return self.problem(
                f"'{env.name}' differs from the file name (name it '{context.path.stem}' "
                f"or rename the file to {env.name}.yaml)"
            )
        return []


class AccountIdValidator(EnvironmentValidator):
    field = "account"

    def check(self, env, context):
        return self.problem_if(account_id_problem(env.account))


class RegionValidator(EnvironmentValidator):
    field = "region"

    def check(self, env, context):
        return self.problem_if(region_problem(env.region))


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


class CidrValidator(EnvironmentValidator):
    field = "network.cidr"

    def check(self, env, context):
        if env.network.cidr is None:
            return []
        try:
            network = ipaddress.IPv4Network(env.network.cidr, strict=True)
        except ValueError as error:
            return self.problem(
                f"'{env.network.cidr}' is not an IPv4 network in CIDR notation ({error}; e.g. 10.40.0.0/16)"
            )
        if not LARGEST_VPC_PREFIX <= network.prefixlen <= SMALLEST_VPC_PREFIX:
            return self.problem(
                f"/{network.prefixlen} is outside the sizes allowed "
                f"(/{LARGEST_VPC_PREFIX} to /{SMALLEST_VPC_PREFIX}: the VPC holds a node subnet, "
                "endpoint addresses and, with NAT, a public subnet)"
            )
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
        if instance is None or CidrValidator().check(env, context) or env.network.cidr is None:
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


class ExistingNetworkIdsValidator(EnvironmentValidator):
    field = "network"

    def check(self, env, context):
        problems = []
        for key, prefix in (("vpc_id", "vpc"), ("subnet_id", "subnet")):
            value = getattr(env.network, key)
            if value is not None and not re.fullmatch(prefix + r"-[0-9a-f]{8}([0-9a-f]{9})?", value):
                problems.append(
                    Problem(
                        f"network.{key}", f"'{value}' is not a {prefix} id ({prefix}- followed by 8 or 17 hex digits)"
                    )
                )
        return problems


class FlowLogRetentionValidator(EnvironmentValidator):
    field = "network.flow_log_retention_days"

    def check(self, env, context):
        return self.problem_if(log_retention_problem(env.network.flow_log_retention_days))


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


class TargetCapacityValidator(EnvironmentValidator):
    field = "capacity.target"

    def check(self, env, context):
        if env.capacity.target < 1:
            return self.problem(f"{env.capacity.target} nodes is too few (at least 1)")
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
        if delay is not None and not 120 <= delay <= 7200:
            return [Problem(f"{self.field}.termination_delay_seconds", f"{delay} is out of range (120 to 7200)")]
        return []


def fleet_backend(env: Environment) -> str:
    """fleet.backend arrives with the auto-scaling backend (issue 11); until it is merged every fleet is a Spot
    Fleet."""
    return getattr(env.fleet, "backend", SPOT_FLEET)


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
        fallback_on_spot_fleet = env.fleet.fallback is not None and fleet_backend(env) == SPOT_FLEET
        if fallback_on_spot_fleet and env.fleet.type != "maintain":
            # source: EC2 API reference, ModifySpotFleetRequest: "You can only modify a Spot Fleet request of type
            # maintain." (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifySpotFleetRequest.html)
            return self.problem(
                "the fallback changes the fleet's on-demand part, and only a maintain fleet can be modified "
                "(set fleet.type: maintain, or remove fallback)"
            )
        return []


class FallbackMinutesValidator(EnvironmentValidator):
    """A time bound shorter than the fallback's check interval (gpufleet.fallback.CHECK_INTERVAL_MINUTES, the
    EventBridge schedule) cannot be honoured: the function sees the fleet once per interval."""

    field = "fleet.fallback"

    def check(self, env, context):
        fallback = env.fleet.fallback
        if fallback is None:
            return []
        return [
            Problem(
                f"{self.field}.{name}",
                f"{value} is shorter than the fallback's check interval (at least {CHECK_INTERVAL_MINUTES}: the "
                f"fleet is checked every {CHECK_INTERVAL_MINUTES} minutes)",
            )
            for name, value in (
                ("after_minutes", fallback.after_minutes),
                ("restore_after_minutes", fallback.restore_after_minutes),
            )
            if value < CHECK_INTERVAL_MINUTES
        ]


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
    """capacity.capacity_block arrives with the reservations work (issue 11); read with getattr until it is merged."""

    field = "fleet.fallback"

    def check(self, env, context):
        if env.fleet.fallback is not None and getattr(env.capacity, "capacity_block", None) is not None:
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


class AmiSourceValidator(EnvironmentValidator):
    field = "ami"

    def check(self, env, context):
        ami = env.ami
        if (ami.ssm_parameter is None) == (ami.id is None):
            return self.problem(
                "set exactly one of ssm_parameter and id (e.g. ssm_parameter: /gpufleet/ami/p4d-ubuntu2204)"
            )
        if ami.id is not None and not re.fullmatch(r"ami-[0-9a-f]{8}([0-9a-f]{9})?", ami.id):
            return [Problem("ami.id", f"'{ami.id}' is not an AMI id (ami- followed by 8 or 17 hex digits)")]
        if ami.ssm_parameter is not None and not re.fullmatch(r"(/[A-Za-z0-9_.\-]+)+", ami.ssm_parameter):
            return [
                Problem(
                    "ami.ssm_parameter",
                    f"'{ami.ssm_parameter}' is not an SSM parameter name (a path such as /gpufleet/ami/p4d-ubuntu2204)",
                )
            ]
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
        from gpufleet.ami.pipeline import published_profile

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


class RootDeviceValidator(EnvironmentValidator):
    field = "ami.root_device_name"

    def check(self, env, context):
        if not re.fullmatch(r"/dev/(sda1|xvda|nvme0n1)", env.ami.root_device_name):
            return self.problem(
                f"'{env.ami.root_device_name}' is not a root device name "
                "(/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)"
            )
        return []


class RootVolumeValidator(EnvironmentValidator):
    field = "root_volume_gib"

    def check(self, env, context):
        if not 50 <= env.root_volume_gib <= 16384:
            return self.problem(
                f"{env.root_volume_gib} GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)"
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


class ScratchMountValidator(EnvironmentValidator):
    field = "node.scratch_mount"

    def check(self, env, context):
        if not re.fullmatch(r"(/[A-Za-z0-9_.\-]+)+", env.node.scratch_mount):
            return self.problem(f"'{env.node.scratch_mount}' is not an absolute path (e.g. /scratch)")
        return []


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


class TagsValidator(EnvironmentValidator):
    field = "tags"

    def check(self, env, context):
        problems = []
        for key, value in env.tags.items():
            if key.lower().startswith("aws:") or not 1 <= len(key) <= 128 or len(value) > 256:
                problems.append(
                    Problem(
                        f"tags.{key}",
                        "not a usable tag (keys 1-128 characters, not starting "
                        "with aws:, values at most 256 characters)",
                    )
                )
        return problems


VALIDATORS: tuple[Validator, ...] = (
    EnvironmentNameValidator(),
    AccountIdValidator(),
    RegionValidator(),
    AvailabilityZoneValidator(),
    NetworkChoiceValidator(),
    CidrValidator(),
    NodeSubnetCapacityValidator(),
    ExistingNetworkIdsValidator(),
    FlowLogRetentionValidator(),
    InstanceTypeValidator(),
    EfaSupportValidator(),
    TargetCapacityValidator(),
    OnDemandCapacityValidator(),
    RolloutValidator(),
    CapacityRebalanceValidator(),
    ValidUntilValidator(),
    AmiSourceValidator(),
    PublishedImageValidator(),
    RootDeviceValidator(),
    RootVolumeValidator(),
    MigProfileValidator(),
    MigPurposeValidator(),
    ScratchMountValidator(),
    UserDataSizeValidator(),
    TagsValidator(),
    FallbackNeedsSpotValidator(),
    FallbackNeedsMaintainValidator(),
    FallbackMinutesValidator(),
    FallbackCeilingValidator(),
    FallbackCapacityBlockValidator(),
)


def validate_environment(
    env: Environment, path: Path, now: dt.datetime | None = None, ami_pipeline: Pipeline | None = None
) -> list[Problem]:
    context = ValidationContext(path=path, now=now or dt.datetime.now(dt.UTC), ami_pipeline=ami_pipeline)
    return [problem for validator in VALIDATORS for problem in validator.check(env, context)]
