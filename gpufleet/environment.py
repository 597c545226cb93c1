"""The model of an environment file (environments/NAME.yaml): frozen, typed objects.

Parsing checks shape, types and every rule about one field alone (allowed values, ranges, id patterns; pydantic,
unknown keys rejected everywhere); the rules that need more than one field or outside knowledge live in the
gpufleet.validators package, one class per rule, and gpufleet.loading reads files and runs both.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from gpufleet.block_schedule import SCALE_IN_LEAD
from gpufleet.constants import (
    ALLOCATION_STRATEGIES,
    BACKEND_SPOT_FLEET,
    ENVIRONMENT_TAG_KEY,
    FALLBACK_CHECK_INTERVAL_MINUTES,
    FLEET_BACKENDS,
    FLEET_TYPE_MAINTAIN,
    FLEET_TYPE_REQUEST,
    FLEET_TYPES,
    ON_DEMAND_ALLOCATION_STRATEGIES,
    REPLACEMENT_LAUNCH,
    REPLACEMENT_STRATEGIES,
    RESERVATION_PREFERENCE_ONLY,
    RESERVATION_PREFERENCES,
    ROLLOUT_MANUAL,
    ROLLOUT_REPLACE_ALL,
    ROLLOUTS,
)
from gpufleet.rules import AccountId, LogRetentionDays, RegionName, checked, one_of

SMALLEST_VPC_PREFIX = 24
LARGEST_VPC_PREFIX = 16
PATH_PATTERN = re.compile(r"(/[A-Za-z0-9_.\-]+)+")
# source: "Tag naming limits and requirements" (https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html):
# keys 1-128 characters, values 0-256, the aws: prefix reserved for AWS.
UNUSABLE_TAG = "not a usable tag (keys 1-128 characters, not starting with aws:, values at most 256 characters)"
# A Capacity Reservation id is cr- and 17 hex digits (source: the ids in the EC2 API reference, e.g.
# API_CapacityReservation.html "cr-1234567890abcdef0"; botocore's model gives the shape no pattern). The resource group
# ARN pattern is botocore's resource-groups GroupArn shape (botocore/data/resource-groups/2017-11-27/service-2.json;
# tests/gpufleet/test_environment.py compares the two).
CAPACITY_RESERVATION_ID = re.compile(r"cr-[0-9a-f]{17}")
CAPACITY_RESERVATION_RESOURCE_GROUP_ARN = re.compile(
    r"arn:aws(-[a-z]+)*:resource-groups:[a-z]{2}(-[a-z]+)+-\d{1}:[0-9]{12}:group/"
    r"([a-zA-Z0-9_\.-]{1,300}|[a-zA-Z0-9_\.-]{1,150}/[a-z0-9]{26})"
)


# The rules about one field alone, checked while parsing (gpufleet.rules.checked): each returns the problem or None.


def _name_problem(name: str) -> str | None:
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,23}", name):
        return (
            f"'{name}' is not a valid name (lower-case letters, digits and '-', starting with a letter, "
            "at most 24 characters)"
        )
    return None


def _cidr_problem(cidr: str) -> str | None:
    try:
        network = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError as error:
        return f"'{cidr}' is not an IPv4 network in CIDR notation ({error}; e.g. 10.40.0.0/16)"
    if not LARGEST_VPC_PREFIX <= network.prefixlen <= SMALLEST_VPC_PREFIX:
        return (
            f"/{network.prefixlen} is outside the sizes allowed (/{LARGEST_VPC_PREFIX} to /{SMALLEST_VPC_PREFIX}: "
            "the VPC holds a node subnet, endpoint addresses and, with NAT, a public subnet)"
        )
    return None


def _resource_id_problem(prefix: str) -> Callable[[str], str | None]:
    """EC2 resource ids: the type's prefix and 8 or 17 hex digits
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html)."""
    what = {"ami": "an AMI id"}.get(prefix, f"a {prefix} id")

    def problem(value: str) -> str | None:
        if not re.fullmatch(prefix + r"-[0-9a-f]{8}([0-9a-f]{9})?", value):
            return f"'{value}' is not {what} ({prefix}- followed by 8 or 17 hex digits)"
        return None

    return problem


def _key_pair_problem(name: str) -> str | None:
    # source: EC2 API reference, CreateKeyPair KeyName: "Constraints: Up to 255 ASCII characters"
    # (botocore/data/ec2/2016-11-15/service-2.json). An empty name names no key pair: leave key_pair out instead.
    if not (1 <= len(name) <= 255 and name.isascii()):
        return f"'{name}' is not an EC2 key pair name (1 to 255 ASCII characters)"
    return None


def _target_problem(target: int) -> str | None:
    return f"{target} nodes is too few (at least 1)" if target < 1 else None


def _termination_delay_problem(delay: int) -> str | None:
    # source: EC2 API reference, SpotCapacityRebalance TerminationDelay: "Minimum value of 120 seconds. Maximum value
    # of 7200 seconds." (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SpotCapacityRebalance.html)
    return None if 120 <= delay <= 7200 else f"{delay} is out of range (120 to 7200)"


def _ssm_parameter_problem(name: str) -> str | None:
    if not PATH_PATTERN.fullmatch(name):
        return f"'{name}' is not an SSM parameter name (a path such as /gpufleet/ami/p4d-ubuntu2204)"
    return None


def _root_device_problem(device: str) -> str | None:
    if not re.fullmatch(r"/dev/(sda1|xvda|nvme0n1)", device):
        return f"'{device}' is not a root device name (/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)"
    return None


def _root_volume_problem(gib: int) -> str | None:
    # 16384 GiB: the largest gp3 volume, 16 TiB (https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html).
    if not 50 <= gib <= 16384:
        return f"{gib} GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)"
    return None


def _scratch_mount_problem(path: str) -> str | None:
    return None if PATH_PATTERN.fullmatch(path) else f"'{path}' is not an absolute path (e.g. /scratch)"


def _fallback_minutes_problem(minutes: int) -> str | None:
    """The function sees the fleet once per check interval (its EventBridge schedule): a shorter bound cannot hold."""
    interval = FALLBACK_CHECK_INTERVAL_MINUTES
    if minutes < interval:
        return (
            f"{minutes} is shorter than the fallback's check interval (at least {interval}: the fleet is checked every "
            f"{interval} minutes)"
        )
    return None


def _tag_key_problem(key: str) -> str | None:
    return UNUSABLE_TAG if key.lower().startswith("aws:") or not 1 <= len(key) <= 128 else None


def _tag_value_problem(value: str) -> str | None:
    return UNUSABLE_TAG if len(value) > 256 else None


def _matching(what: str, pattern: re.Pattern[str], example: str) -> AfterValidator:
    def problem(value: str) -> str | None:
        return None if pattern.fullmatch(value) else f"'{value}' is not {what} (e.g. {example})"

    return checked(problem)


CapacityReservationId = Annotated[
    StrictStr, _matching("a Capacity Reservation id", CAPACITY_RESERVATION_ID, "cr-0123456789abcdef0")
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Network(_Section):
    """Either a new VPC (cidr) or an existing VPC and subnet (vpc_id + subnet_id)."""

    cidr: Annotated[StrictStr, checked(_cidr_problem)] | None = Field(
        None, description="CIDR of a new VPC, e.g. 10.40.0.0/16 (at least /24)."
    )
    nat_gateway: StrictBool = Field(False, description="Add a public subnet and one NAT gateway for outbound internet.")
    flow_log_retention_days: LogRetentionDays = Field(90, description="Days to keep VPC flow logs in CloudWatch Logs.")
    vpc_id: Annotated[StrictStr, checked(_resource_id_problem("vpc"))] | None = Field(
        None, description="Existing VPC id (vpc-...), instead of cidr."
    )
    subnet_id: Annotated[StrictStr, checked(_resource_id_problem("subnet"))] | None = Field(
        None, description="Existing private subnet id (subnet-...) in the cluster AZ."
    )

    @property
    def creates_vpc(self) -> bool:
        return self.cidr is not None

    @property
    def node_subnet_prefix(self) -> int:
        """The node subnet takes half of a new VPC: every interface with an ENA device takes an address."""
        return ipaddress.IPv4Network(self.cidr).prefixlen + 1


class CapacityReservation(_Section):
    """On-Demand Capacity Reservations the on-demand nodes launch into: exactly one of ids and resource_group_arn."""

    ids: tuple[CapacityReservationId, ...] | None = Field(
        None, description="Capacity Reservation ids (cr-...); more than one needs fleet.backend: auto-scaling."
    )
    resource_group_arn: (
        Annotated[
            StrictStr,
            _matching(
                "a resource group ARN",
                CAPACITY_RESERVATION_RESOURCE_GROUP_ARN,
                "arn:aws:resource-groups:us-west-2:123456789012:group/NAME",
            ),
        ]
        | None
    ) = Field(None, description="ARN of a resource group of Capacity Reservations, in the environment's region.")
    preference: Annotated[StrictStr, one_of("a capacity reservation preference", RESERVATION_PREFERENCES)] = Field(
        RESERVATION_PREFERENCE_ONLY,
        description="only: every node launches into the reservations, or does not launch (no spot nodes) | first: "
        "the on-demand nodes go to the reservations while they have room, then to plain on-demand capacity "
        "(needs fleet.backend: auto-scaling).",
    )


def _utc_time_problem(moment: dt.datetime) -> str | None:
    if moment.tzinfo is None:
        return (
            f"{moment.isoformat(sep=' ')} has no time zone (write it as DescribeCapacityReservations gives it, in UTC, "
            "e.g. 2027-01-11T11:30:00Z)"
        )
    return None


UtcTime = Annotated[dt.datetime, checked(_utc_time_problem)]


class CapacityBlock(_Section):
    """An EC2 Capacity Block for ML: every node launches into it (market type capacity-block), from its start to
    shortly before its end (gpufleet.block_schedule)."""

    reservation_id: CapacityReservationId = Field(
        description="The Capacity Block's reservation id (cr-...); needs fleet.backend: auto-scaling."
    )
    start: UtcTime = Field(
        description="When the block starts, with its time zone (its StartDate in DescribeCapacityReservations, e.g. "
        "2027-01-11T11:30:00Z): the nodes launch then."
    )
    end: UtcTime = Field(
        description="When the block ends, with its time zone (its EndDate, e.g. 2027-01-18T11:30:00Z; set the new one "
        f"after extending the block): the group scales in to zero {SCALE_IN_LEAD // dt.timedelta(minutes=1)} minutes "
        "before."
    )


class Capacity(_Section):
    target: Annotated[StrictInt, checked(_target_problem)] = Field(
        description="Number of nodes the fleet keeps running."
    )
    on_demand: StrictInt = Field(0, description="How many of the target nodes are on-demand (the rest are spot).")
    reservation: CapacityReservation | None = Field(
        None, description="On-Demand Capacity Reservations the on-demand nodes launch into."
    )
    capacity_block: CapacityBlock | None = Field(
        None, description="An EC2 Capacity Block for ML that every node launches into (all on-demand)."
    )

    @property
    def spot(self) -> int:
        return self.target - self.on_demand


class CapacityRebalance(_Section):
    replacement_strategy: Annotated[
        StrictStr, one_of("a capacity rebalance replacement strategy", REPLACEMENT_STRATEGIES)
    ] = Field(REPLACEMENT_LAUNCH, description="launch | launch-before-terminate (as the EC2 API spells them).")
    termination_delay_seconds: Annotated[StrictInt, checked(_termination_delay_problem)] | None = Field(
        None, description="120-7200; only with launch-before-terminate."
    )


class Fallback(_Section):
    """Spot first, on-demand when spot is not there, spot again when it returns (gpufleet.fallback says how)."""

    after_minutes: Annotated[StrictInt, checked(_fallback_minutes_problem)] = Field(
        15, description="A spot shortfall lasting this long raises the on-demand part by the shortfall."
    )
    restore_after_minutes: Annotated[StrictInt, checked(_fallback_minutes_problem)] = Field(
        30,
        description="Spot capacity back this long gives one extra on-demand node back to spot; one node per period, "
        "down to capacity.on_demand.",
    )
    max_extra_on_demand: StrictInt = Field(2, description="Ceiling on the extra on-demand nodes.")


class Fleet(_Section):
    backend: Annotated[StrictStr, one_of("a fleet backend", FLEET_BACKENDS)] = Field(
        BACKEND_SPOT_FLEET,
        description="What keeps the nodes running: spot-fleet (an EC2 Spot Fleet request) | auto-scaling (an EC2 Auto "
        "Scaling group with a termination lifecycle hook; no request type, valid_until, launch-before-terminate or "
        "diversified strategy).",
    )
    type: Annotated[StrictStr, one_of("a fleet type", FLEET_TYPES)] = Field(
        FLEET_TYPE_MAINTAIN, description="maintain (replace interrupted nodes) | request (one-shot)."
    )
    allocation_strategy: Annotated[StrictStr, one_of("a spot allocation strategy", ALLOCATION_STRATEGIES)] = Field(
        "priceCapacityOptimized", description="Spot allocation strategy, spelled as the EC2 Spot Fleet API spells it."
    )
    on_demand_allocation_strategy: Annotated[
        StrictStr, one_of("an on-demand allocation strategy", ON_DEMAND_ALLOCATION_STRATEGIES)
    ] = Field("lowestPrice", description="lowestPrice | prioritized.")
    capacity_rebalance: CapacityRebalance | None = Field(
        None, description="Launch a replacement when EC2 signals an elevated interruption risk (maintain only)."
    )
    valid_until: dt.datetime | None = Field(
        None, description="Time (UTC) after which the fleet stops; its nodes are terminated."
    )
    replace_unhealthy_instances: StrictBool = Field(True, description="Replace nodes that fail EC2 status checks.")
    rollout: Annotated[StrictStr, one_of("an image rollout", ROLLOUTS)] | None = Field(
        None,
        description="What a new node image does to a maintain fleet: manual (the default: a new launch template "
        "version; running nodes keep their image until they are replaced) | replace-all (a deploy that resolves a "
        "new image replaces the whole fleet, new nodes before the old ones go). A request fleet cannot be modified: "
        "every change replaces it, a new image included (replace-all, the only value it takes).",
    )
    fallback: Fallback | None = Field(
        None,
        description="Move missing spot nodes to on-demand and back: a scheduled function raises the on-demand part "
        "when spot stays short and lowers it again when spot returns (maintain fleets with spot in the mix).",
    )

    @property
    def image_rollout(self) -> str:
        """manual or replace-all: what a deploy that resolves a new image does to this fleet."""
        if self.type == FLEET_TYPE_REQUEST:
            return ROLLOUT_REPLACE_ALL
        return self.rollout or ROLLOUT_MANUAL


class Ami(_Section):
    """The node image: exactly one of ssm_parameter and id."""

    ssm_parameter: Annotated[StrictStr, checked(_ssm_parameter_problem)] | None = Field(
        None, description="SSM parameter holding the AMI id, resolved by CloudFormation at deploy time."
    )
    id: Annotated[StrictStr, checked(_resource_id_problem("ami"))] | None = Field(
        None, description="A fixed AMI id (ami-...)."
    )
    root_device_name: Annotated[StrictStr, checked(_root_device_problem)] = Field(
        "/dev/sda1", description="Root device of the AMI: /dev/sda1 (Ubuntu) or /dev/xvda (Amazon Linux)."
    )


class Node(_Section):
    raid0_nvme: StrictBool = Field(True, description="Stripe all NVMe instance-store drives (RAID0, XFS).")
    scratch_mount: Annotated[StrictStr, checked(_scratch_mount_problem)] = Field(
        "/scratch", description="Where the RAID0 volume is mounted."
    )
    max_clocks: StrictBool = Field(True, description="Persistence mode and clocks locked at the highest supported.")
    mig_profile: StrictStr | None = Field(None, description="MIG profile applied to every GPU, e.g. 3g.20gb.")
    mig_purpose: StrictStr | None = Field(
        None,
        description="What the MIG instances are for: single-node-inference | independent-jobs. Required with "
        "mig_profile when efa is on: NCCL is not supported with MIG, so MIG nodes run no NCCL jobs, over EFA or not.",
    )
    checkpoint_hook: StrictStr | None = Field(
        None,
        description="Command run on a spot rebalance recommendation and again on the interruption notice "
        "(at most once per kind; not for a recommendation that comes with or after the interruption), on every node "
        "when one is warned, and before gpufleet ends a node. /usr/local/bin/save-checkpoint [--wait SECONDS] is "
        "installed by the user data; another program must be an absolute path on an image of your own (ami.id).",
    )


class Environment(_Section):
    name: Annotated[StrictStr, checked(_name_problem)] = Field(
        description="Environment name; must equal the file name without .yaml."
    )
    account: AccountId = Field(description='AWS account id, 12 digits, quoted ("123456789012").')
    region: RegionName = Field(description="AWS region (one the pinned botocore lists), e.g. us-east-1.")
    availability_zone: StrictStr = Field(description="The single AZ of the cluster (placement groups live in one AZ).")
    network: Network = Field(
        description="Where the nodes live: a new VPC (cidr) or an existing one (vpc_id, subnet_id)."
    )
    instance_type: StrictStr = Field(description="An instance type of the catalog (gpufleet/instance_types.yaml).")
    efa: StrictBool = Field(True, description="One EFA interface per network card.")
    capacity: Capacity = Field(description="How many nodes, and how many of them on-demand.")
    fleet: Fleet = Field(
        Fleet(), description="How the node group (a Spot Fleet or an Auto Scaling group) keeps the nodes running."
    )
    ami: Ami = Field(description="The node image: exactly one of ssm_parameter and id.")
    root_volume_gib: Annotated[StrictInt, checked(_root_volume_problem)] = Field(
        200, description="Size of the encrypted gp3 root volume."
    )
    key_pair: Annotated[StrictStr, checked(_key_pair_problem)] | None = Field(
        None, description="EC2 key pair name (1 to 255 ASCII characters); nodes are reached with SSM without one."
    )
    tags: dict[Annotated[StrictStr, checked(_tag_key_problem)], Annotated[StrictStr, checked(_tag_value_problem)]] = (
        Field(default_factory=dict, description="Tags on every resource and node.")
    )
    node: Node = Field(Node(), description="What the node does at boot (user data).")

    @property
    def stack_prefix(self) -> str:
        return f"gpufleet-{self.name}"

    @property
    def auto_scaling_group_prefix(self) -> str:
        """The name of the environment's Auto Scaling group; under fleet.rollout replace-all followed by "-" and the
        node image id (stacks/constructs/gpu_auto_scaling_group.py says why)."""
        return f"{self.stack_prefix}-nodes"

    @property
    def resource_tags(self) -> dict[str, str]:
        """The tags every resource of the environment carries: the file's tags and the environment tag."""
        return {**self.tags, ENVIRONMENT_TAG_KEY: self.name}
