"""Pre-deployment checks of one environment against its AWS account: one function per check, each returning a Check.

A check that cannot run for this caller (access denied, API or quota not offered in the partition) is a warn
with the reason, never a crash; credentials, throttling and other failures propagate to aws_errors.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import ClientError

from gpufleet.aws import (
    EXPIRED_CODES,
    INVALID_CREDENTIAL_CODES,
    THROTTLING_CODES,
    error_code,
    error_message,
    is_unavailable,
)
from gpufleet.catalog import InstanceType
from gpufleet.constants import (
    BACKEND_AUTO_SCALING,
    BACKEND_SPOT_FLEET,
    ENVIRONMENT_TAG_KEY,
    FLAVOUR_EKS,
    FLEET_TYPE_MAINTAIN,
    FLEET_TYPE_REQUEST,
    NODE_METADATA_HOP_LIMIT,
    NODE_METADATA_HTTP_ENDPOINT,
    NODE_METADATA_HTTP_TOKENS,
    NODE_ROOT_VOLUME_ENCRYPTED,
    NODE_ROOT_VOLUME_TYPE,
    ROLLOUT_REPLACE_ALL,
)
from gpufleet.environment import Environment
from gpufleet.fallback import FallbackSettings
from gpufleet.ops.checks import Check, unavailable
from gpufleet.ops.eks_preflight import run_eks_checks
from gpufleet.ops.reachability_preflight import check_reachability
from gpufleet.ops.reservations import capacity_source_checks
from gpufleet.rules import partition_of
from gpufleet.validators.fleet import valid_until_problem

Lifecycle = Literal["on-demand", "spot"]


@dataclass(frozen=True)
class VcpuQuota:
    """One Service Quotas vCPU quota (service code "ec2") and the instance types whose vCPUs count against it."""

    code: str
    name: str
    lifecycle: Lifecycle
    instance_types: tuple[str, ...]  # fnmatch patterns

    def covers(self, instance_type: str) -> bool:
        return any(fnmatch.fnmatchcase(instance_type, pattern) for pattern in self.instance_types)


# On-Demand and Spot vCPU quotas are separate: running on-demand instances use up the on-demand quota, running Spot
# Instances (and open Spot requests) the spot quota. Spot P has two quotas: P5 apart from P4, P3 and P2.
# source (names, P5 spot apart, spot quotas count running and requested Spot Instances in vCPUs):
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html
# source (codes): Amazon EC2 Instance Types guide, "Amazon EC2 instance type quotas"
#   (https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html), which links each quota's name to
#   its page in the Service Quotas console, .../servicequotas/home/services/ec2/quotas/CODE.
VCPU_QUOTAS = (
    VcpuQuota("L-417A185B", "Running On-Demand P instances", "on-demand", ("p*",)),
    VcpuQuota("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests", "spot", ("p2*", "p3*", "p4*")),
    VcpuQuota("L-C4BD4855", "All P5 Spot Instance Requests", "spot", ("p5*",)),
    VcpuQuota("L-DB2E81BA", "Running On-Demand G and VT instances", "on-demand", ("g*", "vt*")),
    VcpuQuota("L-3819A6DF", "All G and VT Spot Instance Requests", "spot", ("g*", "vt*")),
)
# DescribeInstances' InstanceLifecycle: absent for on-demand; spot | scheduled | capacity-block |
# interruptible-capacity-reservation otherwise (botocore/data/ec2/2016-11-15/service-2.json, InstanceLifecycleType).
# "Instances in a Capacity Block don't count against your On-Demand Instances limits" (EC2 user guide,
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html, "Considerations"): Capacity Blocks have
# vCPU quotas of their own ("Concurrent P5 Capacity Blocks per account" and the like, on the instance type quotas
# page above), which bound buying a block, not launching into one bought. Which quota scheduled and
# interruptible-capacity-reservation instances use is not documented (unconfirmed): they count as on-demand, so that
# preflight errs towards too much use rather than too little.
LIFECYCLE_OF_INSTANCE: dict[str | None, Lifecycle | None] = {"spot": "spot", "capacity-block": None}
CAPACITY_BLOCK_APART = "instances in a Capacity Block don't count against On-Demand Instances limits (EC2 user guide)"
# A pending instance is about to run. Whether instances on their way out (shutting-down, stopping) still count is not
# documented (unconfirmed); they do not here.
ACTIVE_STATES = ["pending", "running"]

# source: EC2 API reference, GetSpotPlacementScores, InstanceTypes (botocore/data/ec2/2016-11-15/service-2.json):
# "We recommend that you specify at least three instance types. If you specify one or two instance types, [...] the
# returned placement score will always be low." A cluster launches one type, so its score is no absolute verdict;
# what it can say is how the region's AZs compare for that type. Scores run 1 (not likely) to 10 (highly likely), for
# the top 10 AZs only.
SINGLE_TYPE_CAVEAT = "one instance type always scores low (AWS recommends 3 or more), so only the AZ comparison counts"
PRICE_WINDOW = dt.timedelta(hours=24)
LINUX_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


@dataclass(frozen=True)
class ServiceLinkedRole:
    name: str
    service: str

    @property
    def create_command(self) -> str:
        return f"aws iam create-service-linked-role --aws-service-name {self.service}"


# The service-linked roles each fleet.backend launches nodes with.
# Spot Fleet: the EC2 console creates these on first use; a fleet requested through the API (CloudFormation included)
# fails until they exist. The Spot Fleet role is needed by every fleet, the Spot role only where the fleet asks for
# spot.
# source (names, "If you use the AWS CLI or an API, you must ensure that these roles exist"):
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-fleet-prerequisites.html
# source (create commands, service names spotfleet.amazonaws.com / spot.amazonaws.com): the same page, section
#   #service-linked-roles-spot-fleet-requests ("Ensure that this role exists before you use the AWS CLI or an API to
#   create a Spot Fleet"), and
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/service-linked-roles-spot-instance-requests.html
SPOT_FLEET_ROLE = ServiceLinkedRole("AWSServiceRoleForEC2SpotFleet", "spotfleet.amazonaws.com")
SPOT_ROLE = ServiceLinkedRole("AWSServiceRoleForEC2Spot", "spot.amazonaws.com")
# Auto Scaling group: no Spot Fleet role. The group runs as AWSServiceRoleForAutoScaling, which "Amazon EC2 Auto Scaling
# creates ... for you the first time that you create an Auto Scaling group but do not specify a different
# service-linked role" (EC2 Auto Scaling user guide, autoscaling-service-linked-role.html), when the creating
# principal may iam:CreateServiceLinkedRole: missing, it warns. Its policy requests the spot nodes itself
# (ec2:RequestSpotInstances, ec2:RunInstances) and may create the Spot role (statement EC2SpotManagement:
# iam:CreateServiceLinkedRole for spot.amazonaws.com; AWS managed policy reference, AutoScalingServiceRolePolicy), so
# the Spot role is not asked for.
AUTO_SCALING_ROLE = ServiceLinkedRole("AWSServiceRoleForAutoScaling", "autoscaling.amazonaws.com")


@dataclass(frozen=True)
class ZoneSuggestion:
    zone: str
    zone_id: str
    placement_score: int | None
    spot_price: float | None


def check_offering(ec2: Any, env: Environment) -> Check:
    offered = _zones_offering(ec2, env.instance_type)
    if env.availability_zone in offered:
        return Check("offering", "pass", f"{env.instance_type} is offered in {env.availability_zone}")
    elsewhere = ", ".join(sorted(offered)) or f"no AZ of {env.region}"
    return Check(
        "offering",
        "fail",
        f"{env.instance_type} is not offered in {env.availability_zone} (offered in: {elsewhere}); "
        "change availability_zone (see --suggest-az)",
    )


def check_efa(ec2: Any, env: Environment, spec: InstanceType) -> Check:
    described = ec2.describe_instance_types(InstanceTypes=[env.instance_type])["InstanceTypes"][0]
    network = described["NetworkInfo"]
    actual = (
        bool(network.get("EfaSupported", False)),
        int(network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)),
        int(network.get("MaximumNetworkCards", 1)),
    )
    expected = (spec.efa_supported, spec.max_efa_interfaces, spec.network_cards)
    described_text = f"EFA supported={actual[0]}, {actual[1]} EFA interfaces, {actual[2]} network cards"
    if actual != expected:
        return Check(
            "efa",
            "fail",
            f"EC2 reports {described_text} but the catalog says EFA supported={expected[0]}, "
            f"{expected[1]} EFA interfaces, {expected[2]} network cards: fix gpufleet/instance_types.yaml",
        )
    if env.efa and not actual[0]:
        return Check("efa", "fail", f"efa: true but {env.instance_type} does not support EFA: set efa: false")
    return Check("efa", "pass", f"{described_text} (matches the catalog)")


def vcpu_quota_for(instance_type: str, lifecycle: Lifecycle) -> VcpuQuota | None:
    return next((q for q in VCPU_QUOTAS if q.lifecycle == lifecycle and q.covers(instance_type)), None)


@dataclass(frozen=True)
class QuotaDemand:
    """The most nodes of one lifecycle the environment asks for at once: per node group (why: of what), and how many
    node groups run at once (why_groups: what makes it two)."""

    per_group: int
    why: str
    groups: int = 1
    why_groups: str = ""


# A new node group next to the old one: CloudFormation creates the replacement Spot Fleet or Auto Scaling group before
# it deletes the old one, which keeps its nodes until then (stacks/constructs/gpu_spot_fleet.py,
# stacks/constructs/gpu_auto_scaling_group.py); an Auto Scaling deploy waits up to 45 minutes for the new group's
# nodes first (stacks/constructs/group_capacity/infrastructure.py, WAIT).
TWO_GROUPS = {
    FLEET_TYPE_REQUEST: "a request fleet is replaced by a new one on every change, the old one ending last",
    FLEET_TYPE_MAINTAIN: "fleet.rollout replace-all runs the new node group next to the old one while it rolls",
}


def quota_demand(env: Environment, lifecycle: Lifecycle) -> QuotaDemand:
    """What the environment can ask of its LIFECYCLE quota at once, beyond its capacity:
    - fleet.fallback raises the on-demand part up to its ceiling (gpufleet.fallback, FallbackSettings.ceiling), and
      hands the extra nodes back by launching spot before the on-demand nodes end, the total staying within target +
      max_extra with at least the floor on-demand: so up to max_extra more spot than the spot part;
    - a new node group next to the old one (TWO_GROUPS), each of which may be in a fallback: twice that.
    """
    capacity, fallback = env.capacity, env.fleet.fallback
    if lifecycle == "on-demand":
        nodes, why = capacity.on_demand, f"capacity.on_demand {capacity.on_demand}"
        if fallback is not None:
            settings = FallbackSettings(
                floor=capacity.on_demand,
                after=dt.timedelta(minutes=fallback.after_minutes),
                restore_after=dt.timedelta(minutes=fallback.restore_after_minutes),
                max_extra=fallback.max_extra_on_demand,
            )
            ceiling = settings.ceiling(capacity.target)
            nodes, why = ceiling, f"{why} + {ceiling - nodes} fleet.fallback.max_extra_on_demand"
    else:
        nodes, why = capacity.spot, f"{capacity.spot} spot"
        if fallback is not None:
            extra = fallback.max_extra_on_demand
            nodes, why = nodes + extra, f"{why} + {extra} while fleet.fallback hands its extra nodes back"
    if env.fleet.image_rollout == ROLLOUT_REPLACE_ALL:
        return QuotaDemand(nodes, why, 2, TWO_GROUPS[env.fleet.type])
    return QuotaDemand(nodes, why)


@dataclass(frozen=True)
class QuotaUsage:
    """The region's pending and running instances that count against one quota: this environment's own nodes (its
    environment tag, which every node launch template gives the instance: Environment.resource_tags) and everyone
    else's."""

    own: int
    own_vcpus: int
    others: int
    others_vcpus: int


def vcpus_in_use(ec2: Any, quota: VcpuQuota, environment_name: str) -> QuotaUsage:
    """The family is matched here, not in the request: EC2 filters accept wildcards but moto's instance filters do not.
    vCPUs are the type's default (DescribeInstanceTypes), which is what the quota counts."""
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ACTIVE_STATES}]
    )
    own_tag = {"Key": ENVIRONMENT_TAG_KEY, "Value": environment_name}
    counted: Counter[tuple[bool, str]] = Counter(
        (own_tag in instance.get("Tags", []), instance["InstanceType"])
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
        if LIFECYCLE_OF_INSTANCE.get(instance.get("InstanceLifecycle"), "on-demand") == quota.lifecycle
        and quota.covers(instance["InstanceType"])
    )
    if not counted:
        return QuotaUsage(0, 0, 0, 0)
    described = ec2.describe_instance_types(InstanceTypes=sorted({name for _, name in counted}))["InstanceTypes"]
    vcpus = {item["InstanceType"]: int(item["VCpuInfo"]["DefaultVCpus"]) for item in described}

    def total(own: bool) -> tuple[int, int]:
        mine = [(name, count) for (is_own, name), count in counted.items() if is_own == own]
        return sum(count for _, count in mine), sum(count * vcpus[name] for name, count in mine)

    return QuotaUsage(*total(True), *total(False))


def check_vcpu_quota(ec2: Any, quotas: Any, env: Environment, spec: InstanceType, lifecycle: Lifecycle) -> Check:
    """The family's vCPU quota must cover the most the environment can ask for at once (quota_demand) plus what
    everyone else runs in the region. The environment's own running nodes are part of its demand, not of the others'
    use: when they are more than one group's worth (a lowered target not yet deployed) they take that group's place."""
    name = f"quota-{lifecycle}"
    if lifecycle == "on-demand" and env.capacity.capacity_block is not None:
        # A block takes neither a fallback nor replace-all (gpufleet.validators.capacity, .fallback).
        return Check(name, "pass", f"skipped: {CAPACITY_BLOCK_APART}")
    demand = quota_demand(env, lifecycle)
    if demand.per_group == 0:
        return Check(name, "pass", f"skipped: no {lifecycle} nodes")
    quota = vcpu_quota_for(env.instance_type, lifecycle)
    if quota is None:
        return Check(name, "warn", f"no {lifecycle} vCPU quota known for {env.instance_type}: check it by hand")
    try:
        described = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=quota.code)["Quota"]
        usage = vcpus_in_use(ec2, quota, env.name)
    except ClientError as error:
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    limit = float(described["Value"])
    group_vcpus = demand.per_group * spec.vcpus
    needed = max(usage.own_vcpus, group_vcpus) + (demand.groups - 1) * group_vcpus
    why = [f"{demand.per_group} x {spec.vcpus}: {demand.why}"]
    if demand.groups > 1:
        why.append(f"x {demand.groups}: {demand.why_groups}")
    if usage.own:
        place = "in place of one group" if usage.own_vcpus > group_vcpus else "within it"
        why.append(f"its {usage.own} running ({usage.own_vcpus} vCPUs) {place}")
    total = needed + usage.others_vcpus
    text = (
        f"{described.get('QuotaName', quota.name)} ({quota.code}): quota {limit:g} vCPUs; need {needed} "
        f"({'; '.join(why)}) + {usage.others_vcpus} in use by others ({usage.others} running) = {total}"
    )
    if total > limit:
        return Check(name, "fail", f"{text}: {total - limit:g} over; request an increase in the Service Quotas console")
    return Check(name, "pass", text)


def check_ami(ssm: Any, ec2: Any, env: Environment) -> Check:
    """The image exists, is available and fits the root volume: a fixed ami.id, or the id its SSM parameter holds
    (ami.ssm_parameter, or a Deep Learning AMI's public parameter, gpufleet/deep_learning_ami.py)."""
    source = ""
    ami = env.fleet_ami
    image_id = ami.id
    parameter = ami.parameter
    try:
        if parameter:
            source = f" (from {parameter})"
            image_id = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        images = ec2.describe_images(ImageIds=[image_id])["Images"]
    except ClientError as error:
        code = error_code(error)
        if code == "ParameterNotFound":
            if ami.deep_learning is not None:
                return Check(
                    "ami",
                    "fail",
                    f"AWS publishes no {ami.deep_learning.name} Deep Learning AMI in {env.region} ({parameter} not "
                    "found): choose another ami.deep_learning_ami, or another region",
                )
            return Check(
                "ami",
                "fail",
                f"SSM parameter {parameter} not found in {env.region}: build the image (AMI pipeline) or fix "
                "ami.ssm_parameter",
            )
        if code.startswith("InvalidAMIID"):
            return Check("ami", "fail", f"image {image_id}{source} not found in {env.region} ({code})")
        if is_unavailable(error):
            return unavailable("ami", error)
        raise
    if not images:
        return Check("ami", "fail", f"image {image_id}{source} not found in {env.region}")
    image = images[0]
    if image["State"] != "available":
        return Check("ami", "fail", f"image {image_id}{source} is {image['State']}, not available")
    # The launch template's root volume replaces the image's root mapping, and EC2 refuses a volume smaller than the
    # mapping's snapshot (aws-cdk-lib's EbsDeviceSnapshotOptions.volumeSize: "it must be equal or greater than the size
    # of the snapshot"; the launch fails with InvalidBlockDeviceMapping "Volume of size ... is smaller than snapshot",
    # gitlab-runner issue 28953). A Deep Learning AMI's root snapshot is large, and AWS may grow it in a release.
    root: dict[str, Any] = next(
        (
            mapping.get("Ebs", {})
            for mapping in image.get("BlockDeviceMappings", [])
            if mapping.get("DeviceName") == image.get("RootDeviceName")
        ),
        {},
    )
    snapshot_gib = root.get("VolumeSize")
    if isinstance(snapshot_gib, int) and snapshot_gib > env.root_volume_gib:
        return Check(
            "ami",
            "fail",
            f"image {image_id}{source} has a {snapshot_gib} GiB root snapshot, larger than root_volume_gib "
            f"{env.root_volume_gib}: set root_volume_gib to at least {snapshot_gib}",
        )
    return Check("ami", "pass", f"{image_id} ({image.get('Name', 'no name')}){source} is available")


def zone_ids(ec2: Any) -> dict[str, str]:
    """AZ name -> AZ id; placement scores are reported per AZ id, which differs between accounts."""
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    return {zone["ZoneName"]: zone["ZoneId"] for zone in zones}


def placement_scores(ec2: Any, instance_type: str, region: str, target_capacity: int) -> dict[str, int]:
    """AZ id -> spot placement score (1-10) for target_capacity instances in a single AZ."""
    pages = ec2.get_paginator("get_spot_placement_scores").paginate(
        InstanceTypes=[instance_type],
        TargetCapacity=target_capacity,
        TargetCapacityUnitType="units",
        SingleAvailabilityZone=True,
        RegionNames=[region],
    )
    return {
        score["AvailabilityZoneId"]: int(score["Score"])
        for page in pages
        for score in page.get("SpotPlacementScores", [])
        if "AvailabilityZoneId" in score
    }


def latest_spot_prices(ec2: Any, instance_type: str, zones: list[str], now: dt.datetime) -> dict[str, float]:
    """AZ name -> most recent Linux spot price (USD per hour) of the last 24 hours."""
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=[instance_type],
        ProductDescriptions=LINUX_PRODUCTS,
        StartTime=now - PRICE_WINDOW,
        EndTime=now,
        Filters=[{"Name": "availability-zone", "Values": zones}],
    )
    latest: dict[str, tuple[dt.datetime, float]] = {}
    for page in pages:
        for point in page.get("SpotPriceHistory", []):
            zone, when = point["AvailabilityZone"], point["Timestamp"]
            if zone not in latest or when > latest[zone][0]:
                latest[zone] = (when, float(point["SpotPrice"]))
    return {zone: price for zone, (_, price) in latest.items()}


def check_placement_score(ec2: Any, env: Environment) -> Check:
    """Where the environment's AZ stands among the region's AZs for its one instance type (see SINGLE_TYPE_CAVEAT).

    Warns when another AZ scores higher; the absolute score of a single type says nothing and sets no threshold.
    """
    if env.capacity.spot == 0:
        return Check("spot-score", "pass", "skipped: every node is on-demand")
    try:
        scores = placement_scores(ec2, env.instance_type, env.region, env.capacity.spot)
        ids = zone_ids(ec2)
    except ClientError as error:
        if is_unavailable(error):
            return unavailable("spot-score", error)
        raise
    zone_id = ids.get(env.availability_zone, "")
    score = scores.get(zone_id)
    if score is None:
        return Check(
            "spot-score",
            "warn",
            f"no spot placement score for {env.availability_zone} ({zone_id or '?'}) among the {len(scores)} "
            f"scored AZs of {env.region}; see --suggest-az",
        )
    names = {identifier: zone for zone, identifier in ids.items()}
    higher = sorted(
        ((names.get(identifier, identifier), other) for identifier, other in scores.items() if other > score),
        key=lambda pair: (-pair[1], pair[0]),
    )
    text = f"spot placement score {score}/10 for {env.capacity.spot} x {env.instance_type} in {env.availability_zone}"
    if higher:
        better = ", ".join(f"{zone} {other}/10" for zone, other in higher)
        return Check("spot-score", "warn", f"{text}, lower than {better}; {SINGLE_TYPE_CAVEAT}; see --suggest-az")
    return Check(
        "spot-score", "pass", f"{text}, no AZ of {env.region} higher ({len(scores)} scored); {SINGLE_TYPE_CAVEAT}"
    )


def check_spot_price(ec2: Any, env: Environment, now: dt.datetime) -> Check:
    if env.capacity.spot == 0:
        return Check("spot-price", "pass", "skipped: every node is on-demand")
    try:
        prices = latest_spot_prices(ec2, env.instance_type, [env.availability_zone], now)
    except ClientError as error:
        if is_unavailable(error):
            return unavailable("spot-price", error)
        raise
    price = prices.get(env.availability_zone)
    if price is None:
        return Check("spot-price", "warn", f"no spot price for {env.instance_type} in {env.availability_zone} (24h)")
    return Check("spot-price", "pass", f"latest spot price ${price:.4f}/h in {env.availability_zone}")


def check_service_roles(iam: Any, env: Environment) -> Check:
    """The service-linked roles the environment's fleet.backend launches nodes with, by iam:GetRole: Spot Fleet's
    (always) and Spot's (with spot capacity) for a Spot Fleet, which fail when missing; Auto Scaling's for a group,
    which warns (the group's creation makes it)."""
    name = "service-roles"
    if env.fleet.backend == BACKEND_AUTO_SCALING:
        needed = [AUTO_SCALING_ROLE]
    else:
        needed = [SPOT_FLEET_ROLE] + ([SPOT_ROLE] if env.capacity.spot > 0 else [])
    missing: list[ServiceLinkedRole] = []
    unchecked: list[str] = []
    for role in needed:
        try:
            iam.get_role(RoleName=role.name)
        except ClientError as error:
            if error_code(error) == "NoSuchEntity":
                missing.append(role)
            elif is_unavailable(error):
                unchecked.append(f"{role.name}: {error.operation_name} {error_code(error)}: {error_message(error)}")
            else:
                raise
    if missing and env.fleet.backend == BACKEND_AUTO_SCALING:
        return Check(
            name,
            "warn",
            f"{AUTO_SCALING_ROLE.name} is missing: creating the group creates it if the deploying principal may "
            f"iam:CreateServiceLinkedRole; otherwise run `{AUTO_SCALING_ROLE.create_command}`",
        )
    if missing:
        commands = "; ".join(f"{role.name} is missing: run `{role.create_command}`" for role in missing)
        return Check(name, "fail", commands + "".join(f"; could not check {text}" for text in unchecked))
    if unchecked:
        return Check(name, "warn", "could not check " + "; ".join(unchecked))
    found = " and ".join(role.name for role in needed)
    if env.fleet.backend == BACKEND_AUTO_SCALING:
        return Check(
            name,
            "pass",
            f"{found} exists (an Auto Scaling group needs no {SPOT_FLEET_ROLE.name}, and its role may create "
            f"{SPOT_ROLE.name} itself)",
        )
    if env.capacity.spot == 0:
        return Check(name, "pass", f"{found} exists ({SPOT_ROLE.name} not needed: every node is on-demand)")
    return Check(name, "pass", f"{found} exist")


def check_valid_until(env: Environment, now: dt.datetime) -> Check:
    """A fleet.valid_until that has passed only warns in `gpufleet validate` (the stacks must still synthesize for
    `cdk destroy`); launching with it is what fails."""
    problem = valid_until_problem(env.fleet.valid_until, now)
    if problem:
        return Check("valid-until", "fail", f"fleet.valid_until {problem}")
    if env.fleet.valid_until is None:
        return Check("valid-until", "pass", "not set: the fleet runs until its stack is deleted")
    return Check("valid-until", "pass", f"the fleet stops at {env.fleet.valid_until.isoformat()}")


# --- The account's rules (issue 11 item 5): is the call that keeps the nodes running allowed at all? ---

# AWS Control Tower's control CT.EC2.PV.6 is a service control policy that denies ec2:RequestSpotFleet and
# ec2:RequestSpotInstances to every IAM principal of the organisation's accounts.
# source: https://docs.aws.amazon.com/controltower/latest/controlreference/ct-ec2-pv-6.html
SPOT_FLEET_POLICY_HINT = (
    "a service control policy such as AWS Control Tower's CT.EC2.PV.6 denies it to every principal of the account, "
    "and then every deploy of this environment fails: set fleet.backend: auto-scaling (or, if only your own IAM "
    "policy lacks it, grant ec2:RequestSpotFleet)"
)
# DryRun: "Checks whether you have the required permissions for the action, without actually making the request [...]
# If you have the required permissions, the error response is DryRunOperation. Otherwise, it is UnauthorizedOperation."
# source: botocore/data/ec2/2016-11-15/service-2.json, RequestSpotFleetRequest.DryRun
DRY_RUN_ALLOWED = "DryRunOperation"
DRY_RUN_DENIED = "UnauthorizedOperation"
# The role a Spot Fleet made in the EC2 console uses ("a role named aws-ec2-spot-fleet-tagging-role");
# source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-fleet-prerequisites.html. Whether EC2 looks at the
# role (or at iam:PassRole) before it answers a dry run is (unconfirmed); any answer other than the two above is a warn.
DRY_RUN_FLEET_ROLE = "aws-ec2-spot-fleet-tagging-role"
# Auto Scaling has no DryRun. What the deploy of an Auto Scaling group needs: CreateAutoScalingGroup and
# UpdateAutoScalingGroup, and ec2:RunInstances, which Auto Scaling checks for the caller when a group with a launch
# template is created or updated.
# source: https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-launch-template-permissions.html
CREATE_GROUP = "autoscaling:CreateAutoScalingGroup"
UPDATE_GROUP = "autoscaling:UpdateAutoScalingGroup"
RUN_INSTANCES = "ec2:RunInstances"
AUTO_SCALING_ACTIONS = (CREATE_GROUP, UPDATE_GROUP, RUN_INSTANCES)
# iam:SimulatePrincipalPolicy sees the service control policies: "The IAM policy simulator evaluates statements in
# identity-based policies, service control policies (SCPs) including their condition keys and resource scoping";
# each result's OrganizationsDecisionDetail.AllowedByOrganizations says whether the SCPs allow the action.
# It evaluates conditions only with the context it is given (ContextEntries): a key it is not given is absent, and a
# negated condition on an absent key matches, so an SCP such as "deny unless aws:RequestedRegion is one of ours" or
# "deny unless ec2:MetadataHttpTokens is required" denies a simulation without context although it allows the deploy.
# Keys the caller's own policies needed and did not get come back in MissingContextValues (keys of SCPs do not:
# "This field doesn't include context keys referenced by service control policies").
# source: botocore/data/iam/2010-05-08/service-2.json (SimulatePrincipalPolicy, ContextEntry, EvaluationResult,
# OrganizationsDecisionDetail)
# "If the key that you specify in a policy condition is not present in the request context, the values do not match
# and the condition is false. If the policy condition requires that the key is not matched, such as StringNotLike or
# ArnNotLike, and the right key is not present, the condition is true." (IAM user guide,
# reference_policies_elements_condition_operators.html): so each action is simulated with the keys its deploy request
# carries and no others (a key given to an action whose request lacks it could turn such a condition around).
# A dry-run RunInstances would meet the SCPs as well, but only RunInstances: the autoscaling actions cannot be tried.
FAILURES_THAT_STOP_THE_COMMAND = EXPIRED_CODES | INVALID_CREDENTIAL_CODES | THROTTLING_CODES


def partition_name(region: str) -> str:
    """The ARN partition of a region the environment's parsing accepted (so botocore lists it)."""
    partition = partition_of(region)
    assert partition is not None, f"{region}: the environment's parsing accepts only regions botocore lists"
    return partition.name


def dry_run_spot_fleet_config(env: Environment) -> dict[str, Any]:
    """The smallest Spot Fleet request of the environment's type and AZ: one node, a one-shot request. It is only
    ever sent with DryRun=True (check_spot_fleet_policy)."""
    return {
        "IamFleetRole": f"arn:{partition_name(env.region)}:iam::{env.account}:role/{DRY_RUN_FLEET_ROLE}",
        "TargetCapacity": 1,
        "Type": "request",
        "AllocationStrategy": env.fleet.allocation_strategy,
        "LaunchSpecifications": [
            {"InstanceType": env.instance_type, "Placement": {"AvailabilityZone": env.availability_zone}}
        ],
    }


def check_spot_fleet_policy(ec2: Any, env: Environment) -> Check:
    """Dry-run RequestSpotFleet: an account whose policies deny it cannot deploy the spot-fleet backend."""
    name = "spot-fleet-api"
    if env.fleet.backend != BACKEND_SPOT_FLEET:
        return Check(name, "pass", f"skipped: fleet.backend is {env.fleet.backend}")
    try:
        answer = ec2.request_spot_fleet(DryRun=True, SpotFleetRequestConfig=dry_run_spot_fleet_config(env))
    except ClientError as error:
        code = error_code(error)
        if code == DRY_RUN_ALLOWED:
            return Check(name, "pass", "ec2:RequestSpotFleet is allowed (dry run)")
        if code == DRY_RUN_DENIED:
            return Check(
                name,
                "fail",
                f"ec2:RequestSpotFleet is denied to this caller ({code}): {SPOT_FLEET_POLICY_HINT}; "
                f"EC2 said: {error_message(error)}",
            )
        if code in FAILURES_THAT_STOP_THE_COMMAND:
            raise
        return unavailable(name, error)
    # EC2 made the request although it was asked for a dry run: say so, so that nobody pays for it unknowingly.
    request_id = answer.get("SpotFleetRequestId", "?")
    return Check(
        name,
        "fail",
        f"EC2 answered the dry run with Spot Fleet request {request_id}: cancel it with `aws ec2 "
        f"cancel-spot-fleet-requests --terminate-instances --spot-fleet-request-ids {request_id}`",
    )


def caller_principal_arn(sts: Any, iam: Any) -> str | None:
    """The IAM user or role behind the credentials, as SimulatePrincipalPolicy wants it; None for the root user.
    An assumed-role session (arn:...:sts::ACCOUNT:assumed-role/NAME/SESSION) is simulated as its role, whose ARN
    (with its path) comes from iam:GetRole."""
    arn = str(sts.get_caller_identity()["Arn"])
    resource = arn.split(":", 5)[5]
    if resource.startswith("assumed-role/"):
        return str(iam.get_role(RoleName=resource.split("/")[1])["Role"]["Arn"])
    if resource.startswith("user/"):
        return arn
    return None


ContextValue = str | int | bool
# ContextEntry.ContextKeyType by the Python type of the value (botocore/data/iam/2010-05-08/service-2.json,
# ContextKeyTypeEnum: string, numeric, boolean, ...); the Service Authorization Reference types the keys below String,
# Numeric and Bool.
CONTEXT_KEY_TYPES = {str: "string", int: "numeric", bool: "boolean"}


def deploy_request_context(env: Environment) -> dict[str, dict[str, ContextValue]]:
    """Action -> the condition keys, with their values, that the deploy's request for it carries and that are known
    before the deploy.

    Which keys each action has: the Service Authorization Reference (parliament 1.6.4 bundles it: iam_definition.json,
    service prefixes autoscaling and ec2). aws:RequestedRegion is a global key, in every request (IAM user guide,
    reference_policies_condition-keys.html). aws:RequestTag/KEY: the tags in the request; the environment's tags and
    the environment tag are on the group (stacks/environment_stacks.py tags every resource) and on the nodes, volumes
    and interfaces (the launch template's tag specifications); UpdateAutoScalingGroup carries no tags. The ec2 keys
    are RunInstances' for the instance (ec2:InstanceType, ec2:AvailabilityZone, ec2:Metadata*) and the volume
    (ec2:Encrypted, ec2:VolumeType) of the nodes' launch template, and ec2:Region. Left out, because their value is not
    known before the deploy or differs between the nodes of one environment: aws:TagKeys (CloudFormation may add tags
    of its own), ec2:InstanceMarketType (spot and on-demand nodes), ec2:InstanceProfile and ec2:LaunchTemplate (names
    made at deploy), ec2:Tenancy (an existing VPC's), and the group's sizes and subnets (autoscaling:MinSize,
    MaxSize, VPCZoneIdentifiers). What context Auto Scaling's own check of ec2:RunInstances for the caller carries is
    not documented (unconfirmed): it is given the context of the nodes' launch.
    """
    region: dict[str, ContextValue] = {"aws:RequestedRegion": env.region}
    tags: dict[str, ContextValue] = {f"aws:RequestTag/{key}": value for key, value in sorted(env.resource_tags.items())}
    launch: dict[str, ContextValue] = {
        "ec2:Region": env.region,
        "ec2:AvailabilityZone": env.availability_zone,
        "ec2:InstanceType": env.instance_type,
        "ec2:MetadataHttpEndpoint": NODE_METADATA_HTTP_ENDPOINT,
        "ec2:MetadataHttpTokens": NODE_METADATA_HTTP_TOKENS,
        "ec2:MetadataHttpPutResponseHopLimit": NODE_METADATA_HOP_LIMIT,
        "ec2:Encrypted": NODE_ROOT_VOLUME_ENCRYPTED,
        "ec2:VolumeType": NODE_ROOT_VOLUME_TYPE,
    }
    return {CREATE_GROUP: {**region, **tags}, UPDATE_GROUP: region, RUN_INSTANCES: {**region, **launch, **tags}}


def context_value_text(value: ContextValue) -> str:
    """A value as a policy writes it: a Bool true or false."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def context_entries(context: dict[str, ContextValue]) -> list[dict[str, Any]]:
    """SimulatePrincipalPolicy's ContextEntries."""
    return [
        {
            "ContextKeyName": key,
            "ContextKeyValues": [context_value_text(value)],
            "ContextKeyType": CONTEXT_KEY_TYPES[type(value)],
        }
        for key, value in context.items()
    ]


def context_text(context: dict[str, ContextValue]) -> str:
    return ", ".join(f"{key}={context_value_text(value)}" for key, value in context.items())


def check_auto_scaling_policy(iam: Any, sts: Any, env: Environment) -> Check:
    """Simulate the Auto Scaling deploy's actions for the caller, each with the context its request carries
    (deploy_request_context). A denial by a service control policy fails (it denies every principal, the deploy's
    too); a result that needed context keys the simulation could not be given warns, naming them (it may not hold);
    a denial by the caller's own IAM policies warns (the deploy may run under another role, CloudFormation's)."""
    name = "autoscaling-api"
    if env.fleet.backend != BACKEND_AUTO_SCALING:
        return Check(name, "pass", f"skipped: fleet.backend is {env.fleet.backend}")
    contexts = deploy_request_context(env)
    try:
        principal = caller_principal_arn(sts, iam)
        if principal is None:
            return Check(name, "warn", "could not check: the root user cannot be simulated; run preflight as a role")
        results = [
            result
            for action, context in contexts.items()
            for page in iam.get_paginator("simulate_principal_policy").paginate(
                PolicySourceArn=principal, ActionNames=[action], ContextEntries=context_entries(context)
            )
            for result in page["EvaluationResults"]
        ]
    except ClientError as error:
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    by_organizations = [
        r["EvalActionName"]
        for r in results
        if not r.get("OrganizationsDecisionDetail", {}).get("AllowedByOrganizations", True)
    ]
    if by_organizations:
        simulated = "; ".join(f"{action} with {context_text(contexts[action])}" for action in by_organizations)
        return Check(
            name,
            "fail",
            f"a service control policy denies {', '.join(by_organizations)} in account {env.account}: the "
            f"auto-scaling backend cannot deploy here; ask the organisation's administrators (simulated {simulated})",
        )
    # Only the caller's own policies' keys come back here: the simulation of those results is not to be trusted.
    unjudged = [r for r in results if r.get("MissingContextValues")]
    problems = [
        f"{r['EvalActionName']} came out {r['EvalDecision']} without {', '.join(r['MissingContextValues'])}, which "
        "its request carries but preflight cannot know: check the conditions on those keys by hand"
        for r in unjudged
    ]
    by_iam = [r["EvalActionName"] for r in results if r["EvalDecision"] != "allowed" and r not in unjudged]
    if by_iam:
        problems.append(
            f"{principal} may not call {', '.join(by_iam)} (its IAM policies); fine if the deploy runs under a role "
            "that may (CloudFormation's execution role)"
        )
    if problems:
        return Check(name, "warn", "; ".join(problems))
    return Check(
        name,
        "pass",
        f"{', '.join(AUTO_SCALING_ACTIONS)} allowed for {principal} (policy simulation with the deploy's request "
        "context, SCPs included)",
    )


def run_checks(aws: Any, env: Environment, spec: InstanceType, now: dt.datetime) -> list[Check]:
    # Imported here: gpufleet.ops.reservations builds on this module's Check.
    ec2, quotas, ssm, iam = aws.client("ec2"), aws.client("service-quotas"), aws.client("ssm"), aws.client("iam")
    sts = aws.client("sts")
    nodes = [
        check_offering(ec2, env),
        check_efa(ec2, env, spec),
        check_vcpu_quota(ec2, quotas, env, spec, "on-demand"),
        check_vcpu_quota(ec2, quotas, env, spec, "spot"),
    ]
    spot = [check_placement_score(ec2, env), check_spot_price(ec2, env, now)]
    capacity_sources = capacity_source_checks(ec2, aws.client("resource-groups"), env, now)
    if env.flavour == FLAVOUR_EKS:
        # The eks flavour's nodes boot EKS's image in managed node groups: no gpufleet image, no fleet.backend (its
        # roles, API policies and valid_until), and EKS's own needs instead.
        return [*nodes, *spot, *run_eks_checks(aws, env, now), check_reachability(ec2, env, spec), *capacity_sources]
    return [
        *nodes,
        check_ami(ssm, ec2, env),
        check_reachability(ec2, env, spec),
        *spot,
        check_service_roles(iam, env),
        check_valid_until(env, now),
        check_spot_fleet_policy(ec2, env),
        check_auto_scaling_policy(iam, sts, env),
        *capacity_sources,
    ]


def _zones_offering(ec2: Any, instance_type: str) -> set[str]:
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )
    return {offering["Location"] for page in pages for offering in page["InstanceTypeOfferings"]}


def suggest_zones(ec2: Any, env: Environment, now: dt.datetime) -> tuple[list[ZoneSuggestion], str]:
    """The region's AZs offering the type, best first (placement score high to low, then price low to high).

    Returns the ranking and a note: the single-type caveat when scores rank the AZs, and any input that was
    unavailable (then the ranking works without it).
    """
    offered = sorted(_zones_offering(ec2, env.instance_type))
    if not offered:
        return [], f"{env.instance_type} is not offered in any AZ of {env.region}"
    ids = zone_ids(ec2)
    notes: list[str] = []
    scores: dict[str, int] = {}
    prices: dict[str, float] = {}
    try:
        scores = placement_scores(ec2, env.instance_type, env.region, max(env.capacity.spot, 1))
        if scores:
            notes.append(f"spot scores: {SINGLE_TYPE_CAVEAT}")
    except ClientError as error:
        if not is_unavailable(error):
            raise
        notes.append(f"placement scores unavailable ({error_code(error)})")
    try:
        prices = latest_spot_prices(ec2, env.instance_type, offered, now)
    except ClientError as error:
        if not is_unavailable(error):
            raise
        notes.append(f"spot prices unavailable ({error_code(error)})")
    suggestions = [
        ZoneSuggestion(zone, ids.get(zone, ""), scores.get(ids.get(zone, "")), prices.get(zone)) for zone in offered
    ]
    suggestions.sort(
        key=lambda s: (
            -(s.placement_score or 0),
            s.spot_price if s.spot_price is not None else float("inf"),
            s.zone,
        )
    )
    return suggestions, "; ".join(notes)
