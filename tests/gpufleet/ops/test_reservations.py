"""Preflight of capacity sources (gpufleet.ops.reservations) with botocore's Stubber: moto implements neither
DescribeCapacityReservations nor Capacity Blocks. The responses follow botocore's ec2 and resource-groups models
(Stubber checks them against the models); the values are what EC2 reports for a p4d reservation and a p5 block."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from gpufleet.environment import Environment
from gpufleet.loading import environments_dir
from gpufleet.ops.reservations import capacity_source_checks
from tests.stacks.constructs.conftest import ENVIRONMENT

NOW = dt.datetime(2026, 11, 23, 6, 0, tzinfo=dt.UTC)
RESERVATION_ID = "cr-0123456789abcdef0"
OTHER_ID = "cr-0fedcba9876543210"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-reservations"


def environment(**capacity: Any) -> Environment:
    document = yaml.safe_load(ENVIRONMENT)
    return Environment.model_validate({**document, "capacity": {"target": 2, "on_demand": 2, **capacity}})


def reservation(reservation_id: str = RESERVATION_ID, **changes: Any) -> dict[str, Any]:
    """A DescribeCapacityReservations item: an active targeted p4d reservation for 4 instances, 3 free."""
    return {
        "CapacityReservationId": reservation_id,
        "OwnerId": "123456789012",
        "CapacityReservationArn": f"arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{reservation_id}",
        "AvailabilityZoneId": "use1-az6",
        "InstanceType": "p4d.24xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-1a",
        "Tenancy": "default",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 3,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": "active",
        "StartDate": dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
        "EndDateType": "unlimited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
        "Tags": [],
        "CapacityAllocations": [{"AllocationType": "used", "Count": 1}],
        "ReservationType": "default",
        **changes,
    }


def block(**changes: Any) -> dict[str, Any]:
    """A Capacity Block of 2 p5.48xlarge: active from 11:30 UTC on the 20th, ending 11:30 UTC on the 27th."""
    return reservation(
        **{
            "InstanceType": "p5.48xlarge",
            "TotalInstanceCount": 2,
            "AvailableInstanceCount": 2,
            "StartDate": BLOCK_START,
            "EndDate": BLOCK_END,
            "EndDateType": "limited",
            "ReservationType": "capacity-block",
            "CapacityAllocations": [],
            **changes,
        }
    )


def run(env: Environment, described: list[dict] | None = None, group: list[str] | None = None, error: str = ""):
    """capacity_source_checks with DescribeCapacityReservations answering `described` (or failing with `error`)
    and, for a resource group, ListGroupResources answering the ids in `group`."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    resource_groups = boto3.client("resource-groups", region_name="us-east-1")
    with Stubber(ec2) as ec2_stub, Stubber(resource_groups) as groups_stub:
        if group is not None:
            groups_stub.add_response(
                "list_group_resources",
                {
                    "Resources": [
                        {
                            "Identifier": {
                                "ResourceArn": f"arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{rid}",
                                "ResourceType": "AWS::EC2::CapacityReservation",
                            }
                        }
                        for rid in group
                    ]
                },
                {
                    "Group": GROUP_ARN,
                    "Filters": [{"Name": "resource-type", "Values": ["AWS::EC2::CapacityReservation"]}],
                },
            )
        ids = group if group is not None else None
        if error:
            ec2_stub.add_client_error("describe_capacity_reservations", error, "The capacity reservation ID is unknown")
        elif described is not None:
            ec2_stub.add_response(
                "describe_capacity_reservations",
                {"CapacityReservations": described},
                {"CapacityReservationIds": ids or [item["CapacityReservationId"] for item in described]},
            )
        checks = capacity_source_checks(ec2, resource_groups, env, NOW)
        ec2_stub.assert_no_pending_responses()
        groups_stub.assert_no_pending_responses()
    return [(check.name, check.status, check.detail) for check in checks]


def test_no_capacity_source_calls_nothing():
    assert run(environment()) == []


def test_a_usable_reservation_with_room_passes():
    env = environment(reservation={"ids": [RESERVATION_ID]})
    assert run(env, [reservation()]) == [
        (
            "reservation",
            "pass",
            f"1 of 1 reservations usable ({RESERVATION_ID}), 3 free for 2 on-demand x p4d.24xlarge in us-east-1a",
        )
    ]


def test_a_reservation_for_another_type_and_zone_fails_with_only():
    env = environment(reservation={"ids": [RESERVATION_ID]})
    other = reservation(InstanceType="p5.48xlarge", AvailabilityZone="us-east-1b")
    assert run(env, [other]) == [
        (
            "reservation",
            "fail",
            f"0 of 1 reservations usable ({RESERVATION_ID}), 0 free for 2 on-demand x p4d.24xlarge in us-east-1a; "
            f"{RESERVATION_ID} unusable: for p5.48xlarge, not p4d.24xlarge; in us-east-1b, not us-east-1a: "
            "preference only launches no node outside them",
        )
    ]


def test_too_little_room_in_the_group_warns_with_first():
    env = environment(reservation={"resource_group_arn": GROUP_ARN, "preference": "first"}, target=4, on_demand=4)
    assert run(env, [reservation(), reservation(OTHER_ID, State="scheduled")], group=[RESERVATION_ID, OTHER_ID]) == [
        (
            "reservation",
            "warn",
            f"1 of 2 reservations usable ({GROUP_ARN}), 3 free for 4 on-demand x p4d.24xlarge in us-east-1a; "
            f"{OTHER_ID} unusable: state scheduled, starts 2026-11-01 00:00 UTC: 1 launch as plain on-demand "
            "(preference first)",
        )
    ]


def test_a_group_without_reservations_fails_with_only():
    env = environment(reservation={"resource_group_arn": GROUP_ARN})
    assert run(env, group=[]) == [
        (
            "reservation",
            "fail",
            f"0 of 0 reservations usable ({GROUP_ARN}), 0 free for 2 on-demand x p4d.24xlarge in us-east-1a: "
            "preference only launches no node outside them",
        )
    ]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"InstancePlatform": "Windows"}, "platform Windows, not Linux/UNIX"),
        ({"Tenancy": "dedicated"}, "tenancy dedicated, not default"),
        (
            {"PlacementGroupArn": "arn:aws:ec2:us-east-1:123456789012:placement-group/training"},
            "reserved in placement group training",
        ),
        (
            {"EndDateType": "limited", "EndDate": NOW - dt.timedelta(hours=1), "State": "expired"},
            "state expired; ended 2026-11-23 05:00 UTC",
        ),
        ({"ReservationType": "capacity-block"}, "it is a Capacity Block (name it in capacity.capacity_block instead)"),
    ],
)
def test_what_makes_a_reservation_unusable(changes, why):
    (check,) = run(environment(reservation={"ids": [RESERVATION_ID]}), [reservation(**changes)])
    assert check[1] == "fail"
    assert f"{RESERVATION_ID} unusable: {why}:" in check[2]


def test_a_reservation_ending_within_a_day_warns():
    env = environment(reservation={"ids": [RESERVATION_ID]})
    ending = reservation(EndDateType="limited", EndDate=NOW + dt.timedelta(hours=5))
    assert run(env, [ending])[0][1:] == (
        "warn",
        f"1 of 1 reservations usable ({RESERVATION_ID}), 3 free for 2 on-demand x p4d.24xlarge in us-east-1a; "
        f"{RESERVATION_ID} ends 2026-11-23 11:00 UTC",
    )


def test_an_unknown_reservation_fails():
    env = environment(reservation={"ids": [RESERVATION_ID]})
    assert run(env, error="InvalidCapacityReservationId.NotFound") == [
        (
            "reservation",
            "fail",
            f"{RESERVATION_ID}: InvalidCapacityReservationId.NotFound: The capacity reservation ID is unknown",
        )
    ]


BLOCK_START = dt.datetime(2026, 11, 20, 11, 30, tzinfo=dt.UTC)
BLOCK_END = dt.datetime(2026, 11, 27, 11, 30, tzinfo=dt.UTC)


def block_environment(start: dt.datetime = BLOCK_START, end: dt.datetime = BLOCK_END) -> Environment:
    """p5-like environment of 2 nodes in the block, whose file says it runs from START to END (block()'s dates)."""
    document = {**yaml.safe_load(ENVIRONMENT), "instance_type": "p5.48xlarge"}
    block_of_file = {"reservation_id": RESERVATION_ID, "start": start, "end": end}
    capacity = {"target": 2, "on_demand": 2, "capacity_block": block_of_file}
    return Environment.model_validate({**document, "capacity": capacity})


BLOCK = f"{RESERVATION_ID} (2 x p5.48xlarge in us-east-1a)"
WINDOW = "ends 2026-11-27 11:30 UTC, instances terminated from 2026-11-27 11:00 UTC"


def test_an_active_block_with_room_passes():
    assert run(block_environment(), [block()]) == [("capacity-block", "pass", f"{BLOCK}: active; {WINDOW}")]


def test_a_scheduled_block_says_when_it_starts():
    starts = dt.datetime(2026, 11, 24, 11, 30, tzinfo=dt.UTC)
    scheduled = block(State="scheduled", StartDate=starts)
    assert run(block_environment(start=starts), [scheduled]) == [
        (
            "capacity-block",
            "warn",
            f"{BLOCK}: scheduled, starts 2026-11-24 11:30 UTC; nodes launch from then on; {WINDOW}",
        )
    ]


def test_a_block_whose_termination_has_begun_fails():
    ending = block(EndDate=NOW + dt.timedelta(minutes=20))
    assert run(block_environment(end=NOW + dt.timedelta(minutes=20)), [ending]) == [
        (
            "capacity-block",
            "fail",
            f"{BLOCK}: ends 2026-11-23 06:20 UTC: EC2 terminates its instances from 2026-11-23 05:50 UTC",
        )
    ]


def test_a_block_ending_within_a_day_warns():
    ending = block(EndDate=NOW + dt.timedelta(hours=3))
    assert run(block_environment(end=NOW + dt.timedelta(hours=3)), [ending])[0][1:] == (
        "warn",
        f"{BLOCK}: active; ends 2026-11-23 09:00 UTC, instances terminated from 2026-11-23 08:30 UTC, "
        "in less than a day",
    )


def test_a_block_for_another_type_zone_and_size_fails():
    other = block(InstanceType="p4d.24xlarge", AvailabilityZone="us-east-2a", TotalInstanceCount=1)
    assert run(block_environment(), [other]) == [
        (
            "capacity-block",
            "fail",
            f"{BLOCK}: for p4d.24xlarge, not p5.48xlarge; in us-east-2a, not us-east-1a; holds 1 instances, not "
            "the 2 nodes",
        )
    ]


def test_a_plain_reservation_named_as_a_block_fails():
    plain = block(ReservationType="default")
    assert run(block_environment(), [plain])[0][1:] == (
        "fail",
        f"{BLOCK}: not a Capacity Block (name it in capacity.reservation instead)",
    )


def test_an_expired_block_fails():
    expired = block(State="expired", EndDate=NOW - dt.timedelta(days=1))
    assert run(block_environment(end=NOW - dt.timedelta(days=1)), [expired])[0][1:] == (
        "fail",
        f"{BLOCK}: state expired",
    )


@pytest.mark.parametrize(
    ("described", "why"),
    [
        pytest.param(
            {"EndDate": dt.datetime(2026, 12, 4, 11, 30, tzinfo=dt.UTC)},
            "ends 2026-12-04 11:30 UTC, not 2026-11-27 11:30 UTC (set capacity.capacity_block.end to it)",
            id="extended",
        ),
        pytest.param(
            {"StartDate": dt.datetime(2026, 11, 20, 12, 30, tzinfo=dt.UTC)},
            "starts 2026-11-20 12:30 UTC, not 2026-11-20 11:30 UTC (set capacity.capacity_block.start to it)",
            id="an-hour-off",
        ),
    ],
)
def test_a_block_whose_dates_are_not_the_files_fails(described, why):
    """The group scales out and in on the file's dates: wrong ones launch nodes too late or leave them to EC2's
    terminations."""
    assert run(block_environment(), [block(**described)]) == [("capacity-block", "fail", f"{BLOCK}: {why}")]


def test_the_same_moment_in_another_time_zone_is_the_same_date():
    in_ohio = BLOCK_END.astimezone(dt.timezone(dt.timedelta(hours=-5)))
    assert run(block_environment(end=in_ohio), [block()])[0][1] == "pass"


def test_a_block_partly_in_use_warns():
    busy = block(AvailableInstanceCount=1)
    assert run(block_environment(), [busy])[0][1:] == (
        "warn",
        f"{BLOCK}: active, 1 of 2 free (instances already in it, this cluster's included, take the rest); {WINDOW}",
    )


def test_gpufleet_preflight_reports_the_reservation(moto, node_image_id, monkeypatch, run_json):
    """The command end to end against moto; only DescribeCapacityReservations, which moto lacks, is served here."""
    document = {
        **yaml.safe_load(ENVIRONMENT),
        "name": "reserved",
        "ami": {"id": node_image_id},
        "capacity": {"target": 2, "on_demand": 2, "reservation": {"ids": [RESERVATION_ID]}},
    }
    (environments_dir() / "reserved.yaml").write_text(yaml.safe_dump(document))
    monkeypatch.setattr("gpufleet.ops.reservations.describe_reservations", lambda ec2, ids: [reservation()])

    code, result = run_json("preflight", "reserved")

    (check,) = [check for check in result["checks"] if check["name"] == "reservation"]
    assert check == {
        "name": "reservation",
        "status": "pass",
        "detail": f"1 of 1 reservations usable ({RESERVATION_ID}), 3 free for 2 on-demand x p4d.24xlarge in us-east-1a",
    }
