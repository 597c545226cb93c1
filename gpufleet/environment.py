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

from gpufleet.block_schedule import EKS_SCALE_IN_LEAD, SCALE_IN_LEAD
from gpufleet.constants import (
    ALLOCATION_STRATEGIES,
    BACKEND_SPOT_FLEET,
    DATA_REPOSITORY_EVENTS,
    EKS_KUBERNETES_VERSIONS,
    ENVIRONMENT_TAG_KEY,
    FALLBACK_CHECK_INTERVAL_MINUTES,
    FLAVOUR_FLEET,
    FLAVOURS,
    FLEET_BACKENDS,
    FLEET_TYPE_MAINTAIN,
    FLEET_TYPE_REQUEST,
    FLEET_TYPES,
    LUSTRE_COMPRESSIONS,
    LUSTRE_DEPLOYMENT_TYPES,
    LUSTRE_PERSISTENT_2,
    ON_DEMAND_ALLOCATION_STRATEGIES,
    REPLACEMENT_LAUNCH,
    REPLACEMENT_STRATEGIES,
    RESERVATION_PREFERENCE_ONLY,
    RESERVATION_PREFERENCES,
    ROLLOUT_MANUAL,
    ROLLOUT_REPLACE_ALL,
    ROLLOUTS,
    STORAGE_ON_DESTROY,
    STORAGE_RETAIN,
)
from gpufleet.deep_learning_ami import (
    DEEP_LEARNING_AMI_NAMES,
    DEEP_LEARNING_AMIS,
    DeepLearningAmi,
    deep_learning_ami_problem,
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


def _lustre_capacity_problem(gib: int) -> str | None:
    # source: botocore's fsx model, CreateFileSystem StorageCapacity: "For SCRATCH_2, PERSISTENT_2, and PERSISTENT_1
    # deployment types using SSD storage type, the valid values are 1200 GiB, 2400 GiB, and increments of 2400 GiB."
    if gib == 1200 or (gib >= 2400 and gib % 2400 == 0):
        return None
    if gib < 1200:
        return f"{gib} GiB is below the smallest FSx for Lustre file system, 1200 GiB"
    lower, upper = (1200, 2400) if gib < 2400 else (gib // 2400 * 2400, (gib // 2400 + 1) * 2400)
    return f"{gib} GiB is not a size FSx for Lustre takes (1200, 2400 or a multiple of 2400: {lower} or {upper})"


def _bucket_name_problem(name: str) -> str | None:
    """General purpose bucket names (S3 user guide, "General purpose bucket naming rules",
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html): 3-63 characters of lower-case
    letters, digits, dots and hyphens, beginning and ending with a letter or digit, no two adjacent dots, not an IP
    address, and none of the prefixes and suffixes S3 reserves."""
    reserved = ("xn--", "sthree-", "amzn-s3-demo-"), ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
    if (
        not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name)
        or ".." in name
        or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name)
        or name.startswith(reserved[0])
        or name.endswith(reserved[1])
    ):
        return (
            f"'{name}' is not an S3 bucket name (3-63 lower-case letters, digits, dots and hyphens, starting and "
            "ending with a letter or digit; no '..', no IP address, no reserved prefix or suffix such as xn-- or "
            "-s3alias)"
        )
    return None


# A key prefix of S3's "safe" characters (S3 user guide, "Naming Amazon S3 objects": 0-9 a-z A-Z ! - _ . ' ( ) and
# "/" as the delimiter; "*" is left out, since the node role's policy names the prefix in a resource ARN, where "*"
# and "?" are wildcards), in segments that are neither empty nor "." or "..".
_PREFIX_SEGMENT = r"(?!\.{1,2}(/|$))[A-Za-z0-9!_.'()-]+"
S3_PREFIX = re.compile(rf"{_PREFIX_SEGMENT}(/{_PREFIX_SEGMENT})*")


def _prefix_problem(prefix: str) -> str | None:
    if len(prefix) > 512 or not S3_PREFIX.fullmatch(prefix):
        return (
            f"'{prefix}' is not a key prefix gpufleet takes (segments of letters, digits and ! - _ . ' ( ) joined by "
            "'/', no leading or trailing '/', no '.' or '..' segment, at most 512 characters; e.g. training/dev)"
        )
    return None


def _events_problem(events: tuple[str, ...]) -> str | None:
    unknown = [event for event in events if event not in DATA_REPOSITORY_EVENTS]
    if unknown or len(set(events)) != len(events):
        return (
            f"{list(events)} is not a list of distinct data repository events (allowed: "
            f"{', '.join(DATA_REPOSITORY_EVENTS)}; [] for none)"
        )
    return None


def _mount_path_problem(path: str) -> str | None:
    return None if PATH_PATTERN.fullmatch(path) else f"'{path}' is not an absolute path (e.g. /fsx)"


def _matching(what: str, pattern: re.Pattern[str], example: str) -> AfterValidator:
    def problem(value: str) -> str | None:
        return None if pattern.fullmatch(value) else f"'{value}' is not {what} (e.g. {example})"

    return checked(problem)


DataRepositoryEvents = Annotated[tuple[StrictStr, ...], checked(_events_problem)]
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
        description="The Capacity Block's reservation id (cr-...); on the fleet flavour it needs fleet.backend: "
        "auto-scaling; on eks a new id makes a new GPU node group."
    )
    start: UtcTime = Field(
        description="When the block starts, with its time zone (its StartDate in DescribeCapacityReservations, e.g. "
        "2027-01-11T11:30:00Z): the nodes launch then."
    )
    end: UtcTime = Field(
        description="When the block ends, with its time zone (its EndDate, e.g. 2027-01-18T11:30:00Z; set the new one "
        f"after extending the block): the group scales in to zero {SCALE_IN_LEAD // dt.timedelta(minutes=1)} minutes "
        f"before (on eks, EKS scales its node group in {EKS_SCALE_IN_LEAD // dt.timedelta(minutes=1)} minutes before)."
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
    """The node image: exactly one of ssm_parameter, id and deep_learning_ami."""

    ssm_parameter: Annotated[StrictStr, checked(_ssm_parameter_problem)] | None = Field(
        None, description="SSM parameter holding the AMI id, resolved by CloudFormation at deploy time."
    )
    id: Annotated[StrictStr, checked(_resource_id_problem("ami"))] | None = Field(
        None, description="A fixed AMI id (ami-...)."
    )
    deep_learning_ami: Annotated[StrictStr, checked(deep_learning_ami_problem)] | None = Field(
        None,
        description="An AWS Deep Learning AMI, for a first job without the AMI pipeline: "
        f"{' | '.join(DEEP_LEARNING_AMI_NAMES)}. Its public SSM parameter "
        "(/aws/service/deeplearning/ami/x86_64/TYPE/latest/ami-id) is resolved by CloudFormation at deploy time, so "
        "a deploy after AWS publishes a release boots the new one; its PyTorch venv (/opt/pytorch) is the runs' "
        "Python. The AMI pipeline's images stay the production path.",
    )
    root_device_name: Annotated[StrictStr, checked(_root_device_problem)] = Field(
        "/dev/sda1", description="Root device of the AMI: /dev/sda1 (Ubuntu) or /dev/xvda (Amazon Linux)."
    )

    @property
    def deep_learning(self) -> DeepLearningAmi | None:
        """The Deep Learning AMI variant the image is, None for any other image."""
        return DEEP_LEARNING_AMIS.get(self.deep_learning_ami or "")

    @property
    def parameter(self) -> str | None:
        """The SSM parameter CloudFormation reads the image id from at deploy time: ssm_parameter, or the Deep
        Learning AMI's public one; None for an ami.id."""
        deep_learning = self.deep_learning
        return deep_learning.parameter if deep_learning is not None else self.ssm_parameter


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


class Monitoring(_Section):
    log_retention_days: LogRetentionDays = Field(
        30,
        description="Days CloudWatch Logs keeps the nodes' journals (the gpufleet units, the kernel's GPU Xid lines) "
        "in the environment's log group, /gpufleet/NAME/nodes.",
    )


# FSx ids and names as botocore's fsx model patterns them: FileSystemId "^(fs-[0-9a-f]{8,})$" (11-21 characters),
# DNSName "^((fs|fc)i?-[0-9a-f]{8,}\..{4,253})$", LustreFileSystemMountName "^([A-Za-z0-9_-]{1,8})$"; a key ARN as the
# KMS API reference gives one (arn:aws:kms:REGION:ACCOUNT:key/KEY-ID).
FILE_SYSTEM_ID = re.compile(r"fs-[0-9a-f]{8,17}")
FILE_SYSTEM_DNS_NAME = re.compile(r"fs-[0-9a-f]{8,17}\.[a-z0-9.-]{4,253}")
LUSTRE_MOUNT_NAME = re.compile(r"[A-Za-z0-9_-]{1,8}")
KMS_KEY_ARN = re.compile(r"arn:aws(-[a-z]+)*:kms:[a-z]{2}(-[a-z]+)+-\d:\d{12}:key/(mrk-)?[0-9a-f-]{32,36}")


class LustreFileSystem(_Section):
    """A new FSx for Lustre file system, in a stack of its own (gpufleet-NAME-storage)."""

    # FSx cannot change a file system's deployment type (botocore's fsx model: UpdateFileSystemLustreConfiguration
    # has no DeploymentType), but cfn-lint's bundled resource schema does not list it among AWS::FSx::FileSystem's
    # createOnlyProperties, so gpufleet plan cannot say what a deploy of a new one does: whether CloudFormation
    # replaces the file system or fails the update is (unconfirmed).
    deployment_type: Annotated[StrictStr, one_of("a Lustre deployment type", LUSTRE_DEPLOYMENT_TYPES)] = Field(
        LUSTRE_PERSISTENT_2,
        description="PERSISTENT_2 (replicated file servers, the lowest latency) | PERSISTENT_1 | SCRATCH_2 (no "
        "replication: a failed file server loses its files; the cheapest). FSx cannot change it in place: choose it "
        "before the first deploy.",
    )
    storage_capacity_gib: Annotated[StrictInt, checked(_lustre_capacity_problem)] = Field(
        1200, description="1200, 2400 or a multiple of 2400 GiB; it can grow in place, never shrink."
    )
    throughput_mb_per_tib: StrictInt | None = Field(
        None,
        description="Throughput per TiB of storage, required for the persistent types: PERSISTENT_1 50, 100 or "
        "200; PERSISTENT_2 125, 250, 500 or 1000 (MB/s/TiB). SCRATCH_2 takes none (200 MB/s/TiB baseline).",
    )
    compression: Annotated[StrictStr, one_of("a Lustre data compression", LUSTRE_COMPRESSIONS)] = Field(
        "LZ4", description="LZ4 | NONE: data compression on the file servers."
    )
    kms_key_arn: (
        Annotated[
            StrictStr,
            _matching(
                "a KMS key ARN",
                KMS_KEY_ARN,
                "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            ),
        ]
        | None
    ) = Field(
        None,
        description="A customer managed KMS key for the persistent types (the default is the FSx-managed key; "
        "SCRATCH_2 always uses it). Data is encrypted at rest either way. Changing it replaces the file system.",
    )


class DataRepository(_Section):
    """An S3 data repository association: the whole file system is linked to s3://BUCKET/PREFIX/."""

    bucket: Annotated[StrictStr, checked(_bucket_name_problem)] | None = Field(
        None,
        description="An existing bucket in the environment's region; without it the storage stack creates "
        "gpufleet-NAME-ACCOUNT-REGION (encrypted, public access blocked, TLS only, kept when the stack is deleted).",
    )
    prefix: Annotated[StrictStr, checked(_prefix_problem)] | None = Field(
        None,
        description="Key prefix in the bucket, e.g. training/dev (default: the environment's name): the file "
        "system's data folder (MOUNT/data) maps to PREFIX/data/; the node role may read and write under PREFIX only.",
    )
    import_events: DataRepositoryEvents = Field(
        DATA_REPOSITORY_EVENTS,
        description="Changes in S3 the file system takes in automatically: any of NEW, CHANGED, DELETED ([]: none).",
    )
    export_events: DataRepositoryEvents = Field(
        DATA_REPOSITORY_EVENTS,
        description="Changes on the file system written back to S3 automatically: any of NEW, CHANGED, DELETED "
        "([]: none).",
    )


class ExistingFileSystem(_Section):
    """An FSx for Lustre file system made outside gpufleet, mounted as it is; gpufleet never changes or deletes it."""

    file_system_id: Annotated[StrictStr, _matching("an FSx file system id", FILE_SYSTEM_ID, "fs-0123456789abcdef0")] = (
        Field(description="Its id (fs-...).")
    )
    dns_name: Annotated[
        StrictStr,
        _matching(
            "an FSx file system DNS name", FILE_SYSTEM_DNS_NAME, "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
        ),
    ] = Field(description="Its DNSName (aws fsx describe-file-systems).")
    mount_name: Annotated[StrictStr, _matching("a Lustre mount name", LUSTRE_MOUNT_NAME, "abcdefgh")] = Field(
        description="Its LustreConfiguration.MountName (aws fsx describe-file-systems)."
    )
    security_group_id: Annotated[StrictStr, checked(_resource_id_problem("sg"))] = Field(
        description="A security group of the file system: the cluster stack adds a rule to it that admits the "
        "Lustre ports from the node security group, and removes that rule when the cluster is destroyed."
    )


class Storage(_Section):
    """Shared storage every node mounts at boot: a new FSx for Lustre file system (lustre, optionally linked to S3 by
    data_repository) or an existing one (existing)."""

    mount_path: Annotated[StrictStr, checked(_mount_path_problem)] = Field(
        "/fsx",
        description="Where every node mounts it (GPUFLEET_SHARED_DIR in /etc/gpufleet/node.env): the place for "
        "checkpoints and anything every node must see.",
    )
    on_destroy: Annotated[StrictStr, one_of("a storage deletion policy", STORAGE_ON_DESTROY)] = Field(
        STORAGE_RETAIN,
        description="retain: the storage stack has termination protection and its file system, association and "
        "security group are kept even when the stack is deleted | delete: deleting the storage stack deletes the "
        "file system and its data. A bucket gpufleet creates is always kept.",
    )
    lustre: LustreFileSystem | None = Field(None, description="A new FSx for Lustre file system.")
    data_repository: DataRepository | None = Field(
        None, description="Link the new file system to S3 (import and export); without it S3 holds no copy."
    )
    existing: ExistingFileSystem | None = Field(None, description="An existing file system instead of lustre.")


# An IAM role or user ARN, as an EKS access entry takes one (EKS API reference, CreateAccessEntry principalArn: "The
# ARN of the IAM principal for the AccessEntry"; IAM user guide, reference_identifiers, for the name characters).
# An assumed-role session ARN (arn:aws:sts::...) names no principal an access entry can hold (unconfirmed).
IAM_PRINCIPAL_ARN = re.compile(r"arn:aws(-[a-z]+)*:iam::\d{12}:(role|user)/[A-Za-z0-9+=,.@_/-]{1,512}")
# A node group's instance type, as EC2 spells one (family, generation and options, a dot, a size), e.g. m6i.large.
INSTANCE_TYPE_NAME = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
# Nodes in one managed node group: EKS's quota "Nodes per managed node group", 450 (EKS user guide, service-quotas)
# (unconfirmed).
MANAGED_NODE_GROUP_MAX_NODES = 450


def _admin_principals_problem(arns: tuple[str, ...]) -> str | None:
    # The cluster is made without the creator's admin entry (aws_eks_v2 access entries only), so these principals are
    # the only way in; CreateAccessEntry refuses a principal that already has an entry (EKS API reference).
    if not arns:
        return "no principal (name at least one IAM role or user ARN: without one no one can reach the cluster)"
    if len(set(arns)) != len(arns):
        return f"{list(arns)} names a principal twice (an access entry per principal: list each once)"
    return None


# The public endpoint's allow-list (ResourcesVpcConfig publicAccessCidrs): at most 40 blocks, "Public endpoint access
# CIDR ranges per cluster", quota L-93A74D60, not adjustable (EKS user guide, service-quotas); a block "cannot include
# reserved addresses" (EKS user guide, config-cluster-endpoint); IPv4 only, since "You can't add IPv6 CIDR blocks to
# IPv4 clusters" (EKS API reference, VpcConfigRequest publicAccessCidrs) and aws_eks_v2 2.275 makes IPv4 clusters
# unless told otherwise (cluster.js: ipFamily defaults to IpFamily.IP_V4).
PUBLIC_ACCESS_CIDRS_MAX = 40
# No network wider than a /8 is one organisation's: IANA hands out IPv4 space in /8 blocks (IANA IPv4 Address Space
# Registry) (unconfirmed: not read this round). A wider block is the internet, which the allow-list exists to keep out.
PUBLIC_ACCESS_WIDEST_PREFIX = 8


def _public_access_cidr_problem(cidr: str) -> str | None:
    try:
        network = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError as error:
        return (
            f"'{cidr}' is not an IPv4 network in CIDR notation ({error}; an address and a prefix length, /32 for one "
            "address)"
        )
    if network.prefixlen < PUBLIC_ACCESS_WIDEST_PREFIX:
        return (
            f"'{cidr}' opens the API to much of the internet (at most /{PUBLIC_ACCESS_WIDEST_PREFIX} wide: name the "
            "networks kubectl runs from, e.g. your offices' or VPN's egress addresses)"
        )
    if not network.is_global or network.is_multicast:
        return (
            f"'{cidr}' is a private or reserved range, which EKS refuses on the public endpoint (the nodes and hosts "
            "in the VPC reach the private endpoint anyway: name public egress addresses)"
        )
    return None


def _public_access_cidrs_problem(cidrs: tuple[str, ...]) -> str | None:
    if len(cidrs) > PUBLIC_ACCESS_CIDRS_MAX:
        return (
            f"{len(cidrs)} networks, but EKS allows at most {PUBLIC_ACCESS_CIDRS_MAX} on a cluster's public endpoint "
            "(a quota it does not raise: merge neighbouring networks)"
        )
    repeated = sorted({cidr for cidr in cidrs if cidrs.count(cidr) > 1})
    if repeated:
        return f"{', '.join(repeated)} listed twice (list each network once)"
    return None


def _system_node_count_problem(count: int) -> str | None:
    if not 1 <= count <= MANAGED_NODE_GROUP_MAX_NODES:
        return (
            f"{count} is out of range (1 to {MANAGED_NODE_GROUP_MAX_NODES}: CoreDNS and the operators need a node, and "
            f"a managed node group holds at most {MANAGED_NODE_GROUP_MAX_NODES})"
        )
    return None


IamPrincipalArn = Annotated[
    StrictStr, _matching("an IAM role or user ARN", IAM_PRINCIPAL_ARN, "arn:aws:iam::123456789012:role/Admin")
]
SubnetId = Annotated[StrictStr, checked(_resource_id_problem("subnet"))]
PublicAccessCidr = Annotated[StrictStr, checked(_public_access_cidr_problem)]


class SystemNodes(_Section):
    """The small managed node group that runs what is not a GPU job: CoreDNS, the MPI operator, the controllers."""

    instance_type: Annotated[StrictStr, _matching("an EC2 instance type", INSTANCE_TYPE_NAME, "m6i.large")] = Field(
        "m6i.large", description="Instance type of the system nodes."
    )
    count: Annotated[StrictInt, checked(_system_node_count_problem)] = Field(
        2, description=f"How many system nodes (1 to {MANAGED_NODE_GROUP_MAX_NODES})."
    )


class EksAddOns(_Section):
    """What gpufleet installs into the cluster, each at a pinned version."""

    efa_device_plugin: StrictBool = Field(
        True, description="The AWS EFA Kubernetes device plugin: the GPU nodes advertise vpc.amazonaws.com/efa."
    )
    nvidia_device_plugin: StrictBool = Field(
        True, description="The NVIDIA device plugin (MOFED off, so it leaves the EFA devices to the EFA plugin)."
    )
    mpi_operator: StrictBool = Field(True, description="The Kubeflow MPI operator, which runs MPIJobs.")
    fsx_csi_driver: StrictBool = Field(
        True, description="The FSx for Lustre CSI driver, where the environment has storage."
    )


class Eks(_Section):
    """The EKS cluster of an environment with flavour: eks."""

    kubernetes_version: Annotated[StrictStr, one_of("a Kubernetes version gpufleet pins", EKS_KUBERNETES_VERSIONS)] = (
        Field(
            description='The cluster\'s Kubernetes version, quoted ("1.35"); written in the file because EKS upgrades '
            "a cluster one way only."
        )
    )
    admin_principal_arns: Annotated[tuple[IamPrincipalArn, ...], checked(_admin_principals_problem)] = Field(
        description="IAM roles or users that get a cluster-admin access entry (at least one)."
    )
    control_plane_availability_zones: tuple[StrictStr, ...] | None = Field(
        None,
        description="A new VPC (network.cidr): two or more availability zones of the region; the network stack adds "
        "a small control-plane subnet in each (EKS needs subnets in two AZs).",
    )
    control_plane_subnet_ids: tuple[SubnetId, ...] | None = Field(
        None,
        description="An existing VPC (network.vpc_id): two or more subnets in different availability zones for the "
        "control plane's network interfaces.",
    )
    endpoint_public_cidrs: Annotated[tuple[PublicAccessCidr, ...], checked(_public_access_cidrs_problem)] = Field(
        (),
        description="Public IPv4 networks (at most 40, none wider than /8) that may reach the Kubernetes API over the "
        "internet, e.g. your offices' egress addresses; the endpoint then is public and private, the public side "
        "limited to them. Empty: private only (reachable from inside the VPC).",
    )
    control_plane_log_retention_days: LogRetentionDays = Field(
        30,
        description="Days CloudWatch Logs keeps the control plane's logs (/aws/eks/gpufleet-NAME/cluster, which the "
        "stack creates and deletes).",
    )
    system_nodes: SystemNodes = Field(SystemNodes(), description="The node group for everything but GPU jobs.")
    add_ons: EksAddOns = Field(EksAddOns(), description="What gpufleet installs into the cluster.")


class Environment(_Section):
    name: Annotated[StrictStr, checked(_name_problem)] = Field(
        description="Environment name; must equal the file name without .yaml."
    )
    flavour: Annotated[StrictStr, one_of("a flavour", FLAVOURS)] = Field(
        FLAVOUR_FLEET,
        description="fleet: gpufleet's own node group booting a gpufleet image | eks: an EKS cluster with GPU managed "
        "node groups on EKS's NVIDIA image (the eks section).",
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
        Fleet(),
        description="How the node group (a Spot Fleet or an Auto Scaling group) keeps the nodes running (fleet "
        "flavour).",
    )
    ami: Ami | None = Field(
        None,
        description="The node image, required by the fleet flavour: exactly one of ssm_parameter, id and "
        "deep_learning_ami.",
    )
    root_volume_gib: Annotated[StrictInt, checked(_root_volume_problem)] = Field(
        200, description="Size of the encrypted gp3 root volume."
    )
    key_pair: Annotated[StrictStr, checked(_key_pair_problem)] | None = Field(
        None, description="EC2 key pair name (1 to 255 ASCII characters); nodes are reached with SSM without one."
    )
    tags: dict[Annotated[StrictStr, checked(_tag_key_problem)], Annotated[StrictStr, checked(_tag_value_problem)]] = (
        Field(default_factory=dict, description="Tags on every resource and node.")
    )
    node: Node = Field(
        Node(), description="What the node does at boot (user data; on the eks flavour only raid0_nvme, by nodeadm)."
    )
    monitoring: Monitoring = Field(
        Monitoring(),
        description="The CloudWatch agent on every node: its log group, metrics and dashboard (fleet flavour).",
    )
    storage: Storage | None = Field(
        None, description="Shared storage every node mounts at boot (FSx for Lustre), kept apart from the cluster."
    )
    eks: Eks | None = Field(None, description="The EKS cluster, required by the eks flavour.")

    @property
    def fleet_ami(self) -> Ami:
        """The fleet flavour's node image (gpufleet.validators.image.AmiSourceValidator makes it required there)."""
        assert self.ami is not None, "the environment's validation: the fleet flavour has ami"
        return self.ami

    @property
    def image_parameter(self) -> str | None:
        """The SSM parameter the nodes' image id comes from (ami.ssm_parameter, or a Deep Learning AMI's public one);
        None for an ami.id, and on the eks flavour (EKS's own image)."""
        return self.ami.parameter if self.ami is not None else None

    @property
    def stack_prefix(self) -> str:
        return f"gpufleet-{self.name}"

    @property
    def eks_cluster_name(self) -> str:
        """The eks flavour's cluster: gpufleet-NAME, which EKS takes as it is (letters, digits, hyphens and
        underscores, starting with a letter or digit, at most 100 characters, unique in the account's region: EKS API
        reference, CreateCluster name; NAME has at most 24 characters and its stacks are unique there already)."""
        return self.stack_prefix

    @property
    def auto_scaling_group_prefix(self) -> str:
        """The name of the environment's Auto Scaling group; under fleet.rollout replace-all followed by "-" and the
        node image id (stacks/constructs/gpu_auto_scaling_group.py says why)."""
        return f"{self.stack_prefix}-nodes"

    @property
    def data_repository_location(self) -> tuple[str, str] | None:
        """The bucket and key prefix the shared file system is linked to (storage.data_repository), None without
        one: the named bucket or the one the storage stack creates, named gpufleet-NAME-ACCOUNT-REGION (at most 61
        characters: S3 takes 63), and the named prefix or the environment's name."""
        repository = self.storage.data_repository if self.storage else None
        if repository is None:
            return None
        bucket = repository.bucket or f"{self.stack_prefix}-{self.account}-{self.region}"
        return bucket, repository.prefix or self.name

    @property
    def cluster_user_key_secret_name(self) -> str:
        """The Secrets Manager secret that holds the cluster user's private SSH key (stacks/constructs/cluster_user/),
        which the nodes read by this name at boot (scripts/node/cluster-user.sh)."""
        return f"{self.stack_prefix}-cluster-user-key"

    @property
    def cluster_shell_document_name(self) -> str:
        """The Session Manager document that opens a shell as the cluster user on one of the environment's nodes."""
        return f"{self.stack_prefix}-cluster-shell"

    @property
    def resource_tags(self) -> dict[str, str]:
        """The tags every resource of the environment carries: the file's tags and the environment tag."""
        return {**self.tags, ENVIRONMENT_TAG_KEY: self.name}
