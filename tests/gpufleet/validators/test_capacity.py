"""The capacity rules (gpufleet/validators/capacity.py): on-demand nodes within the target, and the capacity sources
(capacity.reservation, capacity.capacity_block), each with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import datetime as dt

import pytest

from gpufleet.constants import BACKEND_AUTO_SCALING
from gpufleet.loading import load_environment, parse_environment
from gpufleet.rules import Problem
from gpufleet.validators import validate_environment
from tests.gpufleet.environment_files import ALL_ON_DEMAND, changed, problems_of, with_change, write

RESERVATION_ID = "cr-0123456789abcdef0"
OTHER_RESERVATION_ID = "cr-0fedcba9876543210"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-reservations"


AUTO_SCALING = {"fleet.backend": BACKEND_AUTO_SCALING}
# A week's block, far enough ahead that no clock the tests run under has reached it.
BLOCK = {"reservation_id": RESERVATION_ID, "start": "2099-01-05T11:30:00Z", "end": "2099-01-12T11:30:00Z"}


RULES = [
    (
        "capacity.on_demand",
        3,
        "capacity.on_demand: 3 is outside the target capacity (0 to capacity.target, which is 2)",
    ),
    (
        "capacity.on_demand",
        -1,
        "capacity.on_demand: -1 is outside the target capacity (0 to capacity.target, which is 2)",
    ),
]


@pytest.mark.parametrize(("field", "value", "expected"), RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in RULES])
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


def test_a_reservation_by_id_with_every_node_on_demand_is_accepted(tmp_path):
    document = changed({**ALL_ON_DEMAND, "capacity.reservation": {"ids": [RESERVATION_ID], "preference": "only"}})
    reservation = load_environment(write(tmp_path, document)).capacity.reservation
    assert (reservation.ids, reservation.resource_group_arn, reservation.preference) == (
        (RESERVATION_ID,),
        None,
        "only",
    )


def test_preference_defaults_to_only(tmp_path):
    document = changed({**ALL_ON_DEMAND, "capacity.reservation": {"resource_group_arn": GROUP_ARN}})
    assert load_environment(write(tmp_path, document)).capacity.reservation.preference == "only"


@pytest.mark.parametrize(
    ("reservation", "expected"),
    [
        (
            {"preference": "only"},
            "capacity.reservation: set exactly one of ids and resource_group_arn (e.g. ids: [cr-0123456789abcdef0])",
        ),
        (
            {"ids": [RESERVATION_ID], "resource_group_arn": GROUP_ARN},
            "capacity.reservation: set exactly one of ids and resource_group_arn (e.g. ids: [cr-0123456789abcdef0])",
        ),
        ({"ids": []}, "capacity.reservation.ids: is empty (list at least one Capacity Reservation id)"),
        (
            {"ids": [RESERVATION_ID, RESERVATION_ID]},
            "capacity.reservation.ids: lists an id twice (list each reservation once)",
        ),
        (
            {"resource_group_arn": GROUP_ARN.replace("us-east-1", "us-west-2")},
            "capacity.reservation.resource_group_arn: the group is in us-west-2, but the cluster is in us-east-1 "
            "(a resource group holds the reservations of its own region: use a group in us-east-1)",
        ),
    ],
)
def test_reservation_targets_refused(tmp_path, reservation, expected):
    assert problems_of(tmp_path, changed({**ALL_ON_DEMAND, "capacity.reservation": reservation})) == [expected]


def test_several_ids_need_the_auto_scaling_backend(tmp_path):
    document = changed({**ALL_ON_DEMAND, "capacity.reservation": {"ids": [RESERVATION_ID, OTHER_RESERVATION_ID]}})
    assert problems_of(tmp_path, document) == [
        "capacity.reservation.ids: 2 reservations, but a launch template targets one (list one id, put the "
        "reservations in a resource group and set resource_group_arn, or set fleet.backend: auto-scaling)"
    ]


def test_several_ids_with_the_auto_scaling_backend(tmp_path):
    document = changed(
        {**AUTO_SCALING, **ALL_ON_DEMAND, "capacity.reservation": {"ids": [RESERVATION_ID, OTHER_RESERVATION_ID]}}
    )
    assert load_environment(write(tmp_path, document)).capacity.reservation.ids == (
        RESERVATION_ID,
        OTHER_RESERVATION_ID,
    )


def test_only_refuses_spot_nodes(tmp_path):
    document = changed(
        {
            **AUTO_SCALING,
            "capacity.target": 3,
            "capacity.on_demand": 1,
            "capacity.reservation": {"ids": [RESERVATION_ID]},
        }
    )
    assert problems_of(tmp_path, document) == [
        "capacity.reservation.preference: only puts every node in the reservations, but 2 of the 3 nodes are spot "
        "(set capacity.on_demand to 3, or preference: first)"
    ]


def test_only_refuses_a_single_spot_node(tmp_path):
    document = changed({**AUTO_SCALING, **{"capacity.target": 2, "capacity.on_demand": 1}})
    document["capacity"]["reservation"] = {"ids": [RESERVATION_ID]}
    assert problems_of(tmp_path, document) == [
        "capacity.reservation.preference: only puts every node in the reservations, but 1 of the 2 nodes are spot "
        "(set capacity.on_demand to 2, or preference: first)"
    ]


def test_first_is_refused_with_a_spot_fleet(tmp_path):
    document = changed({"capacity.reservation": {"ids": [RESERVATION_ID], "preference": "first"}})
    assert problems_of(tmp_path, document) == [
        "capacity.reservation.preference: first needs an Auto Scaling group: a Spot Fleet cannot launch into "
        "reservations first and then into plain on-demand capacity (set fleet.backend: auto-scaling, or "
        "preference: only)"
    ]


def test_first_with_spot_nodes_and_the_auto_scaling_backend(tmp_path):
    document = changed(
        {**AUTO_SCALING, "capacity.reservation": {"resource_group_arn": GROUP_ARN, "preference": "first"}}
    )
    assert load_environment(write(tmp_path, document)).capacity.spot == 1


def test_a_capacity_block_with_the_auto_scaling_backend(tmp_path):
    document = changed({**AUTO_SCALING, **ALL_ON_DEMAND, "capacity.capacity_block": BLOCK})
    assert load_environment(write(tmp_path, document)).capacity.capacity_block.reservation_id == RESERVATION_ID


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"capacity.reservation": {"ids": [OTHER_RESERVATION_ID]}},
            "capacity.capacity_block: a Capacity Block and capacity.reservation both set (an instance launches "
            "into one reservation target: keep one of the two)",
        ),
        (
            {"capacity.on_demand": 1},
            "capacity.capacity_block: 1 of the 2 nodes are spot, but every node in a Capacity Block is a "
            "capacity-block instance (set capacity.on_demand to 2)",
        ),
        (
            {"instance_type": "g5.48xlarge"},
            "instance_type: Capacity Blocks do not sell g5.48xlarge (in the catalog they sell p4d.24xlarge, "
            "p4de.24xlarge, p5.48xlarge; choose one of those, or remove capacity.capacity_block)",
        ),
    ],
)
def test_capacity_blocks_refused(tmp_path, changes, expected):
    document = changed({**AUTO_SCALING, **ALL_ON_DEMAND, "capacity.capacity_block": BLOCK, **changes})
    assert problems_of(tmp_path, document) == [expected]


def test_a_capacity_block_is_refused_with_a_spot_fleet(tmp_path):
    document = changed({**ALL_ON_DEMAND, "capacity.capacity_block": BLOCK})
    assert problems_of(tmp_path, document) == [
        "capacity.capacity_block: a Spot Fleet cannot launch into a Capacity Block (AWS documents RunInstances, "
        "EC2 Fleets of type instant and Auto Scaling groups for them): set fleet.backend: auto-scaling"
    ]


def test_a_capacity_block_keeps_its_start_and_end_in_utc(tmp_path):
    document = changed(
        {**AUTO_SCALING, **ALL_ON_DEMAND, "capacity.capacity_block": {**BLOCK, "start": "2099-01-05T12:30:00+01:00"}}
    )
    block = load_environment(write(tmp_path, document)).capacity.capacity_block
    assert (block.start.astimezone(dt.UTC), block.end) == (
        dt.datetime(2099, 1, 5, 11, 30, tzinfo=dt.UTC),
        dt.datetime(2099, 1, 12, 11, 30, tzinfo=dt.UTC),
    )


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        pytest.param(
            "2099-01-05T12:20:00Z",
            [
                "capacity.capacity_block.end: 2099-01-05 12:20 UTC leaves no time after the start, 2099-01-05 11:30 "
                "UTC: the nodes are scaled in 50 minutes before the end (copy StartDate and EndDate from "
                "DescribeCapacityReservations, with their time zone)"
            ],
            id="scale-in-at-the-start",
        ),
        pytest.param(
            "2099-01-04T11:30:00Z",
            [
                "capacity.capacity_block.end: 2099-01-04 11:30 UTC leaves no time after the start, 2099-01-05 11:30 "
                "UTC: the nodes are scaled in 50 minutes before the end (copy StartDate and EndDate from "
                "DescribeCapacityReservations, with their time zone)"
            ],
            id="end-before-start",
        ),
        pytest.param("2099-01-05T12:20:01Z", [], id="one-second-of-nodes"),
    ],
)
def test_a_block_must_leave_the_nodes_time_between_its_start_and_its_scale_in(tmp_path, end, expected):
    document = changed({**AUTO_SCALING, **ALL_ON_DEMAND, "capacity.capacity_block": {**BLOCK, "end": end}})
    if expected:
        assert problems_of(tmp_path, document) == expected
    else:
        assert load_environment(write(tmp_path, document)).capacity.capacity_block.end.minute == 20


ENDED = (
    "the block's nodes were scaled in at 2099-01-12 10:40 UTC, 50 minutes before it ends (2099-01-12 11:30 UTC): a "
    "deploy launches no node (set the reservation_id, start and end of a new block, or tear the cluster down)"
)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param(dt.datetime(2099, 1, 12, 10, 39, 59, tzinfo=dt.UTC), [], id="just-before-the-scale-in"),
        pytest.param(
            dt.datetime(2099, 1, 12, 10, 40, tzinfo=dt.UTC),
            [Problem("capacity.capacity_block.end", ENDED, "warning")],
            id="at-the-scale-in",
        ),
        pytest.param(
            dt.datetime(2099, 2, 1, tzinfo=dt.UTC),
            [Problem("capacity.capacity_block.end", ENDED, "warning")],
            id="weeks-after",
        ),
    ],
)
def test_a_block_past_its_scale_in_warns_so_that_the_cluster_can_still_be_destroyed(tmp_path, now, expected):
    """By the clock alone: a warning, like a fleet.valid_until that has passed (synthesis goes on)."""
    path = write(tmp_path, changed({**AUTO_SCALING, **ALL_ON_DEMAND, "capacity.capacity_block": BLOCK}))
    assert validate_environment(parse_environment(path), path, now=now) == expected


def test_a_capacity_block_group_cannot_replace_all(tmp_path):
    document = changed(
        {**AUTO_SCALING, **ALL_ON_DEMAND, "capacity.capacity_block": BLOCK, "fleet.rollout": "replace-all"}
    )
    assert problems_of(tmp_path, document) == [
        "fleet.rollout: replace-all makes a new group next to the old one, but the old group's nodes hold the "
        "Capacity Block (remove rollout, or set it to manual: new nodes take the new image)"
    ]
