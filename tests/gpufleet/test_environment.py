"""The environment model's rules about one field alone, each bound on both sides and each message word for word."""

from __future__ import annotations

import re
from typing import Annotated

import botocore.session
import pytest
from pydantic import TypeAdapter

from gpufleet import environment
from gpufleet.loading import load_environment
from tests.gpufleet.environment_files import ALL_ON_DEMAND, changed, problems_of, with_change, with_fallback, write

# The rules about one field alone (gpufleet/environment.py): each bound on both sides, each message word for word.
TAG_PROBLEM = "not a usable tag (keys 1-128 characters, not starting with aws:, values at most 256 characters)"
NAME_PROBLEM = "is not a valid name (lower-case letters, digits and '-', starting with a letter, at most 24 characters)"
SIZES = "the VPC holds a node subnet, endpoint addresses and, with NAT, a public subnet"
ROOT_VOLUME = "GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)"
ROOT_DEVICE = "is not a root device name (/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)"
KEY_PAIR_PROBLEM = "is not an EC2 key pair name (1 to 255 ASCII characters)"
# The regions of partition aws in botocore 1.44.5's partitions.json (botocore/data/partitions.json).
AWS_REGIONS = (
    "af-south-1, ap-east-1, ap-east-2, ap-northeast-1, ap-northeast-2, ap-northeast-3, ap-south-1, ap-south-2, "
    "ap-southeast-1, ap-southeast-2, ap-southeast-3, ap-southeast-4, ap-southeast-5, ap-southeast-6, ap-southeast-7, "
    "ca-central-1, ca-west-1, eu-central-1, eu-central-2, eu-north-1, eu-south-1, eu-south-2, eu-west-1, eu-west-2, "
    "eu-west-3, il-central-1, me-central-1, me-south-1, me-west-1, mx-central-1, sa-east-1, sa-west-1, us-east-1, "
    "us-east-2, us-west-1, us-west-2"
)
FIELD_RULES = [
    (environment._name_problem, "a", None),
    (environment._name_problem, "a23456789012345678901234", None),
    (environment._name_problem, "a234567890123456789012345", f"'a234567890123456789012345' {NAME_PROBLEM}"),
    (environment._name_problem, "9lab", f"'9lab' {NAME_PROBLEM}"),
    (environment._name_problem, "Lab", f"'Lab' {NAME_PROBLEM}"),
    (environment._cidr_problem, "10.40.0.0/16", None),
    (environment._cidr_problem, "10.40.0.0/24", None),
    (environment._cidr_problem, "10.40.0.0/15", f"/15 is outside the sizes allowed (/16 to /24: {SIZES})"),
    (environment._cidr_problem, "10.40.0.0/25", f"/25 is outside the sizes allowed (/16 to /24: {SIZES})"),
    (
        environment._cidr_problem,
        "10.40.0.1/16",
        "'10.40.0.1/16' is not an IPv4 network in CIDR notation (10.40.0.1/16 has host bits set; e.g. 10.40.0.0/16)",
    ),
    (environment._target_problem, 1, None),
    (environment._target_problem, 0, "0 nodes is too few (at least 1)"),
    (environment._termination_delay_problem, 119, "119 is out of range (120 to 7200)"),
    (environment._termination_delay_problem, 120, None),
    (environment._termination_delay_problem, 7200, None),
    (environment._termination_delay_problem, 7201, "7201 is out of range (120 to 7200)"),
    (environment._ssm_parameter_problem, "/gpufleet/ami/p4d-ubuntu2204", None),
    (
        environment._ssm_parameter_problem,
        "gpufleet/ami",
        "'gpufleet/ami' is not an SSM parameter name (a path such as /gpufleet/ami/p4d-ubuntu2204)",
    ),
    (environment._root_device_problem, "/dev/sda1", None),
    (environment._root_device_problem, "/dev/xvda", None),
    (environment._root_device_problem, "/dev/nvme0n1", None),
    (environment._root_device_problem, "/dev/sdb", f"'/dev/sdb' {ROOT_DEVICE}"),
    (environment._root_device_problem, "/dev/SDA1", f"'/dev/SDA1' {ROOT_DEVICE}"),
    (environment._root_volume_problem, 49, f"49 {ROOT_VOLUME}"),
    (environment._root_volume_problem, 50, None),
    (environment._root_volume_problem, 16384, None),
    (environment._root_volume_problem, 16385, f"16385 {ROOT_VOLUME}"),
    (environment._scratch_mount_problem, "/scratch", None),
    (environment._scratch_mount_problem, "scratch", "'scratch' is not an absolute path (e.g. /scratch)"),
    (environment._fallback_minutes_problem, 5, None),
    (
        environment._fallback_minutes_problem,
        4,
        "4 is shorter than the fallback's check interval (at least 5: the fleet is checked every 5 minutes)",
    ),
    (environment._tag_key_problem, "k", None),
    (environment._tag_key_problem, "team", None),
    (environment._tag_key_problem, "k" * 128, None),
    (environment._tag_key_problem, "k" * 129, TAG_PROBLEM),
    (environment._tag_key_problem, "", TAG_PROBLEM),
    (environment._tag_key_problem, "aws:team", TAG_PROBLEM),
    (environment._tag_key_problem, "AWS:team", TAG_PROBLEM),
    (environment._key_pair_problem, "k", None),
    (environment._key_pair_problem, "k" * 255, None),
    (environment._key_pair_problem, "k" * 256, f"'{'k' * 256}' {KEY_PAIR_PROBLEM}"),
    (environment._key_pair_problem, "", f"'' {KEY_PAIR_PROBLEM}"),
    (environment._key_pair_problem, "clé", f"'clé' {KEY_PAIR_PROBLEM}"),
    (environment._tag_value_problem, "", None),
    (environment._tag_value_problem, "v" * 256, None),
    (environment._tag_value_problem, "v" * 257, TAG_PROBLEM),
]


@pytest.mark.parametrize(("rule", "value", "problem"), FIELD_RULES)
def test_field_rule(rule, value, problem):
    assert rule(value) == problem


@pytest.mark.parametrize(
    ("prefix", "value", "problem"),
    [
        ("ami", "ami-0123abcd", None),
        ("ami", "ami-0123456789abcdef0", None),
        ("ami", "ami-0123ABCD", "'ami-0123ABCD' is not an AMI id (ami- followed by 8 or 17 hex digits)"),
        ("ami", "ami-0123abc", "'ami-0123abc' is not an AMI id (ami- followed by 8 or 17 hex digits)"),
        ("vpc", "vpc-0123abcd", None),
        ("vpc", "subnet-0123abcd", "'subnet-0123abcd' is not a vpc id (vpc- followed by 8 or 17 hex digits)"),
    ],
)
def test_an_ec2_resource_id_is_its_prefix_and_8_or_17_hex_digits(prefix, value, problem):
    """The rule is built in the test, not while collecting: mutmut sets its mutant only when the test runs."""
    assert environment._resource_id_problem(prefix)(value) == problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [("cr-0123456789abcdef0", None), ("cr-x", "'cr-x' is not a Capacity Reservation id (e.g. cr-0123456789abcdef0)")],
)
def test_a_pattern_rule_names_what_was_expected_and_an_example(value, problem):
    rule = environment._matching(
        "a Capacity Reservation id", environment.CAPACITY_RESERVATION_ID, "cr-0123456789abcdef0"
    )
    adapter = TypeAdapter(Annotated[str, rule])
    if problem is None:
        assert adapter.validate_python(value) == value
    else:
        with pytest.raises(ValueError, match=re.escape(problem)):
            adapter.validate_python(value)


@pytest.mark.parametrize(
    ("reservation_id", "problem"),
    [
        ("cr-0123456789abcdef0", None),
        ("cr-0123456789abcdef", "'cr-0123456789abcdef' is not a Capacity Reservation id (e.g. cr-0123456789abcdef0)"),
    ],
)
def test_a_capacity_reservation_id_is_cr_and_17_hex_digits(reservation_id, problem):
    dates = {"start": "2099-01-05T11:30:00Z", "end": "2099-01-12T11:30:00Z"}
    if problem is None:
        assert environment.CapacityBlock(reservation_id=reservation_id, **dates).reservation_id == reservation_id
    else:
        with pytest.raises(ValueError, match=re.escape(problem)):
            environment.CapacityBlock(reservation_id=reservation_id, **dates)


# The same rules met in whole files, as loading reports them: the exact line `gpufleet validate` prints (less the
# file name). Parsing finds these problems before any rule of gpufleet/validators/ runs.
FILE_RULES = [
    (
        "name",
        "Lab",
        "name: 'Lab' is not a valid name (lower-case letters, digits and '-', starting with a letter, "
        "at most 24 characters)",
    ),
    ("account", "12345678901", "account: '12345678901' is not an AWS account id (exactly 12 digits, quoted)"),
    ("account", "12345678901a", "account: '12345678901a' is not an AWS account id (exactly 12 digits, quoted)"),
    (
        "network.cidr",
        "10.40.0.0/33",
        "network.cidr: '10.40.0.0/33' is not an IPv4 network in CIDR notation "
        "('33' is not a valid netmask; e.g. 10.40.0.0/16)",
    ),
    (
        "network.cidr",
        "10.40.0.1/16",
        "network.cidr: '10.40.0.1/16' is not an IPv4 network in CIDR notation "
        "(10.40.0.1/16 has host bits set; e.g. 10.40.0.0/16)",
    ),
    (
        "network.cidr",
        "10.40.0.0/25",
        "network.cidr: /25 is outside the sizes allowed (/16 to /24: the VPC holds a "
        "node subnet, endpoint addresses and, with NAT, a public subnet)",
    ),
    (
        "network.cidr",
        "10.0.0.0/8",
        "network.cidr: /8 is outside the sizes allowed (/16 to /24: the VPC holds a "
        "node subnet, endpoint addresses and, with NAT, a public subnet)",
    ),
    (
        "network.flow_log_retention_days",
        10,
        "network.flow_log_retention_days: 10 is not a CloudWatch Logs retention "
        "(allowed: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, "
        "3653)",
    ),
    ("fleet.type", "maintan", "fleet.type: 'maintan' is not a fleet type (allowed: maintain, request)"),
    (
        "fleet.allocation_strategy",
        "price-capacity-optimized",
        "fleet.allocation_strategy: 'price-capacity-optimized' "
        "is not a spot allocation strategy (allowed: priceCapacityOptimized, capacityOptimized, "
        "capacityOptimizedPrioritized, diversified, lowestPrice)",
    ),
    (
        "fleet.on_demand_allocation_strategy",
        "cheapest",
        "fleet.on_demand_allocation_strategy: 'cheapest' is not an "
        "on-demand allocation strategy (allowed: lowestPrice, prioritized)",
    ),
    (
        "fleet.rollout",
        "rolling",
        "fleet.rollout: 'rolling' is not an image rollout (allowed: manual, replace-all)",
    ),
    (
        "fleet.capacity_rebalance",
        {"replacement_strategy": "relaunch"},
        "fleet.capacity_rebalance.replacement_strategy:"
        " 'relaunch' is not a capacity rebalance replacement strategy (allowed: launch, launch-before-terminate)",
    ),
    (
        "fleet.capacity_rebalance",
        {"replacement_strategy": "launch-before-terminate", "termination_delay_seconds": 60},
        "fleet.capacity_rebalance.termination_delay_seconds: 60 is out of range (120 to 7200)",
    ),
    ("ami", {"id": "ami-12"}, "ami.id: 'ami-12' is not an AMI id (ami- followed by 8 or 17 hex digits)"),
    (
        "ami",
        {"ssm_parameter": "gpufleet/ami"},
        "ami.ssm_parameter: 'gpufleet/ami' is not an SSM parameter name (a path such as /gpufleet/ami/p4d-ubuntu2204)",
    ),
    (
        "ami.root_device_name",
        "/dev/sdb",
        "ami.root_device_name: '/dev/sdb' is not a root device name (/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)",
    ),
    (
        "root_volume_gib",
        20,
        "root_volume_gib: 20 GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)",
    ),
    ("node.scratch_mount", "scratch", "node.scratch_mount: 'scratch' is not an absolute path (e.g. /scratch)"),
    (
        "tags",
        {"aws:owner": "me"},
        "tags.aws:owner: not a usable tag (keys 1-128 characters, not starting with aws:, "
        "values at most 256 characters)",
    ),
]


@pytest.mark.parametrize(
    ("field", "value", "expected"), FILE_RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in FILE_RULES]
)
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"capacity.target": 0, "capacity.on_demand": 0}, "capacity.target: 0 nodes is too few (at least 1)"),
        (
            {"region": "useast1", "availability_zone": "useast1a"},
            "region: 'useast1' is not a region name (for example us-east-1, eu-west-2)",
        ),
        (
            {
                "network.cidr": None,
                "network.nat_gateway": None,
                "network.vpc_id": "vpc-0a1b2c3d",
                "network.subnet_id": "subnet-123",
            },
            "network.subnet_id: 'subnet-123' is not a subnet id (subnet- followed by 8 or 17 hex digits)",
        ),
    ],
)
def test_one_field_rules_with_the_fields_that_follow_them_changed_too(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


DELAY_OUT_OF_RANGE = "fleet.capacity_rebalance.termination_delay_seconds: {} is out of range (120 to 7200)"
REBALANCE = "fleet.capacity_rebalance"
BEFORE_TERMINATE = "launch-before-terminate"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"name": "a" * 24},
            "name: 'aaaaaaaaaaaaaaaaaaaaaaaa' differs from the file name (name it 'lab' or rename "
            "the file to aaaaaaaaaaaaaaaaaaaaaaaa.yaml)",
        ),
        (
            {"name": "a" * 25},
            "name: 'aaaaaaaaaaaaaaaaaaaaaaaaa' is not a valid name (lower-case letters, digits and "
            "'-', starting with a letter, at most 24 characters)",
        ),
        (
            {"name": "9lab"},
            "name: '9lab' is not a valid name (lower-case letters, digits and '-', starting with a "
            "letter, at most 24 characters)",
        ),
        ({"region": "useast1"}, "region: 'useast1' is not a region name (for example us-east-1, eu-west-2)"),
        (
            {"region": "us-east-3", "availability_zone": "us-east-3a"},
            f"region: 'us-east-3' is not a region of partition aws (allowed, as the pinned botocore lists them: "
            f"{AWS_REGIONS}; a region opened since needs newer boto3 and botocore pins)",
        ),
        ({"region": "us-west-2", "availability_zone": "us-west-2a"}, None),
        ({"key_pair": "k" * 255}, None),
        ({"key_pair": "k" * 256}, f"key_pair: '{'k' * 256}' {KEY_PAIR_PROBLEM}"),
        ({"key_pair": ""}, f"key_pair: '' {KEY_PAIR_PROBLEM}"),
        ({"capacity.target": 1, "capacity.on_demand": 0}, None),
        ({"capacity.target": 0, "capacity.on_demand": 0}, "capacity.target: 0 nodes is too few (at least 1)"),
        ({REBALANCE: {"replacement_strategy": BEFORE_TERMINATE, "termination_delay_seconds": 120}}, None),
        (
            {REBALANCE: {"replacement_strategy": BEFORE_TERMINATE, "termination_delay_seconds": 119}},
            DELAY_OUT_OF_RANGE.format(119),
        ),
        ({REBALANCE: {"replacement_strategy": BEFORE_TERMINATE, "termination_delay_seconds": 7200}}, None),
        (
            {REBALANCE: {"replacement_strategy": BEFORE_TERMINATE, "termination_delay_seconds": 7201}},
            DELAY_OUT_OF_RANGE.format(7201),
        ),
        ({"root_volume_gib": 50}, None),
        (
            {"root_volume_gib": 49},
            "root_volume_gib: 49 GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)",
        ),
        ({"root_volume_gib": 16384}, None),
        (
            {"root_volume_gib": 16385},
            "root_volume_gib: 16385 GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)",
        ),
        ({"network.cidr": "10.40.0.0/16"}, None),
        (
            {"network.cidr": "10.40.0.0/15"},
            "network.cidr: /15 is outside the sizes allowed (/16 to /24: the VPC holds "
            "a node subnet, endpoint addresses and, with NAT, a public subnet)",
        ),
        ({"network.cidr": "10.40.0.0/24", "capacity.target": 1}, None),
        ({"ami": {"id": "ami-0123456789abcdef0"}}, None),
        (
            {"ami": {"id": "ami-0123456789abcdef"}},
            "ami.id: 'ami-0123456789abcdef' is not an AMI id (ami- followed by 8 or 17 hex digits)",
        ),
        (
            {"ami": {"id": "ami-0A1B2C3D"}},
            "ami.id: 'ami-0A1B2C3D' is not an AMI id (ami- followed by 8 or 17 hex digits)",
        ),
        (
            {
                "network.cidr": None,
                "network.nat_gateway": None,
                "network.vpc_id": "vpc-0a1b2c3d4e5f60718",
                "network.subnet_id": "subnet-0a1b2c3d",
            },
            None,
        ),
        (
            {
                "network.cidr": None,
                "network.nat_gateway": None,
                "network.vpc_id": "vpc-0a1b2c3",
                "network.subnet_id": "subnet-0a1b2c3d",
            },
            "network.vpc_id: 'vpc-0a1b2c3' is not a vpc id (vpc- followed by 8 or 17 hex digits)",
        ),
        ({"ami.root_device_name": "/dev/xvda"}, None),
        ({"node.scratch_mount": "/mnt/scratch-1"}, None),
        ({"node.scratch_mount": "/"}, "node.scratch_mount: '/' is not an absolute path (e.g. /scratch)"),
        ({"tags": {"k" * 128: "v" * 256}}, None),
        ({"tags": {"k" * 129: "v"}}, f"tags.{'k' * 129}: {TAG_PROBLEM}"),
        ({"tags": {"owner": "v" * 257}}, f"tags.owner: {TAG_PROBLEM}"),
        ({"tags": {"AWS:owner": "me"}}, f"tags.AWS:owner: {TAG_PROBLEM}"),
    ],
)
def test_one_field_rules_on_both_sides_of_their_bounds(tmp_path, changes, expected):
    path = write(tmp_path, changed(changes), name=changes.get("name", "lab"))
    if expected is None:
        load_environment(path)
    else:
        assert problems_of(tmp_path, changed(changes), name="lab") == [expected]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "colour",
            "blue",
            "colour: unknown key (allowed here: name, flavour, account, region, availability_zone, network, "
            "instance_type, efa, capacity, fleet, ami, root_volume_gib, key_pair, tags, node, monitoring, storage, "
            "eks)",
        ),
        (
            "capacity.spot",
            1,
            "capacity.spot: unknown key (allowed here: target, on_demand, reservation, capacity_block)",
        ),
        (
            "fleet.capacity_rebalance",
            {"strategy": "launch"},
            "fleet.capacity_rebalance.strategy: unknown key "
            "(allowed here: replacement_strategy, termination_delay_seconds)",
        ),
        (
            "node.raid",
            True,
            "node.raid: unknown key (allowed here: raid0_nvme, scratch_mount, max_clocks, mig_profile, "
            "mig_purpose, checkpoint_hook)",
        ),
        ("capacity.target", "two", "capacity.target: input should be a valid integer, got 'two'"),
        ("account", 123456789012, "account: input should be a valid string, got 123456789012 (put it in quotes)"),
        ("capacity", None, "capacity: required key is missing"),
    ],
)
def test_shape_errors_name_the_field(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


def test_an_unknown_backend_is_refused_while_parsing(tmp_path):
    assert problems_of(tmp_path, with_change("fleet.backend", "ec2-fleet")) == [
        "fleet.backend: 'ec2-fleet' is not a fleet backend (allowed: spot-fleet, auto-scaling)"
    ]


def test_resource_group_arn_pattern_is_botocores():
    shape = botocore.session.get_session().get_service_model("resource-groups").shape_for("GroupArn")
    assert environment.CAPACITY_RESERVATION_RESOURCE_GROUP_ARN.pattern == shape.metadata["pattern"]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "capacity.reservation.ids",
            ["cr-123"],
            "capacity.reservation.ids.0: 'cr-123' is not a Capacity Reservation id (e.g. cr-0123456789abcdef0)",
        ),
        (
            "capacity.reservation.resource_group_arn",
            "arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0123456789abcdef0",
            "capacity.reservation.resource_group_arn: 'arn:aws:ec2:us-east-1:123456789012:capacity-reservation/"
            "cr-0123456789abcdef0' is not a resource group ARN "
            "(e.g. arn:aws:resource-groups:us-west-2:123456789012:group/NAME)",
        ),
        (
            "capacity.reservation.preference",
            "open",
            "capacity.reservation.preference: 'open' is not a capacity reservation preference (allowed: only, first)",
        ),
        (
            "capacity.reservation.zone",
            "us-east-1a",
            "capacity.reservation.zone: unknown key (allowed here: ids, resource_group_arn, preference)",
        ),
        (
            "capacity.capacity_block.reservation_id",
            "cb-0123456789abcdef0",
            "capacity.capacity_block.reservation_id: 'cb-0123456789abcdef0' is not a Capacity Reservation id "
            "(e.g. cr-0123456789abcdef0)",
        ),
        (
            "capacity.capacity_block.zone",
            "us-east-1a",
            "capacity.capacity_block.zone: unknown key (allowed here: reservation_id, start, end)",
        ),
        (
            "capacity.capacity_block.end",
            "2027-01-18 11:30",
            "capacity.capacity_block.end: 2027-01-18 11:30:00 has no time zone (write it as "
            "DescribeCapacityReservations gives it, in UTC, e.g. 2027-01-11T11:30:00Z)",
        ),
        (
            "capacity.capacity_block.start",
            "next monday",
            "capacity.capacity_block.start: input should be a valid datetime or date, invalid character in year, "
            "got 'next monday'",
        ),
    ],
)
def test_capacity_source_shapes_refused_while_parsing(tmp_path, field, value, expected):
    assert expected in problems_of(tmp_path, changed({**ALL_ON_DEMAND, field: value}))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param(
            {"fleet.fallback.after_minutes": 4},
            [
                "fleet.fallback.after_minutes: 4 is shorter than the fallback's check interval (at least 5: the fleet "
                "is checked every 5 minutes)"
            ],
            id="after-below-interval",
        ),
        pytest.param(
            {"fleet.fallback.restore_after_minutes": 4},
            [
                "fleet.fallback.restore_after_minutes: 4 is shorter than the fallback's check interval (at least 5: "
                "the fleet is checked every 5 minutes)"
            ],
            id="restore-below-interval",
        ),
    ],
)
def test_fallback_intervals_refused(tmp_path, changes, expected):
    assert problems_of(tmp_path, with_fallback(**changes)) == expected


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"fleet.fallback.after_minutes": 5}, id="after-at-interval"),
        pytest.param({"fleet.fallback.restore_after_minutes": 5}, id="restore-at-interval"),
    ],
)
def test_fallback_intervals_accepted(tmp_path, changes):
    assert load_environment(write(tmp_path, with_fallback(**changes))).fleet.fallback is not None
