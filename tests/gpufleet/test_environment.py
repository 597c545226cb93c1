"""The environment model's rules about one field alone, each bound on both sides and each message word for word."""

from __future__ import annotations

import re
from typing import Annotated

import pytest
from pydantic import TypeAdapter

from gpufleet import environment

# The rules about one field alone (gpufleet/environment.py): each bound on both sides, each message word for word.
TAG_PROBLEM = "not a usable tag (keys 1-128 characters, not starting with aws:, values at most 256 characters)"
NAME_PROBLEM = "is not a valid name (lower-case letters, digits and '-', starting with a letter, at most 24 characters)"
SIZES = "the VPC holds a node subnet, endpoint addresses and, with NAT, a public subnet"
ROOT_VOLUME = "GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)"
ROOT_DEVICE = "is not a root device name (/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)"
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
    if problem is None:
        assert environment.CapacityBlock(reservation_id=reservation_id).reservation_id == reservation_id
    else:
        with pytest.raises(ValueError, match=re.escape(problem)):
            environment.CapacityBlock(reservation_id=reservation_id)
