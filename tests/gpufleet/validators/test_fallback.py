"""The rules of fleet.fallback, each on both sides of its bound, with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import pytest

from gpufleet.environment import Fallback
from gpufleet.loading import load_environment
from tests.gpufleet.environment_files import FALLBACK, changed, problems_of, with_fallback, write


def test_the_fallback_example_is_valid(tmp_path):
    environment = load_environment(write(tmp_path, with_fallback()))
    assert environment.fleet.fallback == Fallback(after_minutes=15, restore_after_minutes=30, max_extra_on_demand=2)


def test_fallback_defaults(tmp_path):
    environment = load_environment(write(tmp_path, with_fallback(**{"fleet.fallback": {}})))
    assert environment.fleet.fallback == Fallback(after_minutes=15, restore_after_minutes=30, max_extra_on_demand=2)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param(
            {"capacity.on_demand": 4},
            [
                "fleet.fallback: there is no spot part to fall back from: capacity.on_demand (4) is the whole target "
                "(4) (lower capacity.on_demand, or remove fallback)"
            ],
            id="all-on-demand",
        ),
        pytest.param(
            {"fleet.type": "request"},
            [
                "fleet.fallback: the fallback changes the fleet's on-demand part, and only a maintain fleet can be "
                "modified (set fleet.type: maintain, or remove fallback)"
            ],
            id="request-fleet",
        ),
        pytest.param(
            {"fleet.fallback.max_extra_on_demand": 0},
            [
                "fleet.fallback.max_extra_on_demand: 0 is out of range (1 to the spot part, capacity.target - "
                "capacity.on_demand = 3: more extra on-demand nodes than spot nodes would never be used)"
            ],
            id="ceiling-zero",
        ),
        pytest.param(
            {"fleet.fallback.max_extra_on_demand": 4},
            [
                "fleet.fallback.max_extra_on_demand: 4 is out of range (1 to the spot part, capacity.target - "
                "capacity.on_demand = 3: more extra on-demand nodes than spot nodes would never be used)"
            ],
            id="ceiling-above-spot",
        ),
        pytest.param(
            {"capacity.on_demand": 3, "fleet.fallback.max_extra_on_demand": 2},
            [
                "fleet.fallback.max_extra_on_demand: 2 is out of range (1 to the spot part, capacity.target - "
                "capacity.on_demand = 1: more extra on-demand nodes than spot nodes would never be used)"
            ],
            id="ceiling-above-one-spot-node",
        ),
    ],
)
def test_refused(tmp_path, changes, expected):
    assert problems_of(tmp_path, with_fallback(**changes)) == expected


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"capacity.on_demand": 3, "fleet.fallback.max_extra_on_demand": 1}, id="one-spot-node"),
        pytest.param({"fleet.fallback.max_extra_on_demand": 1}, id="ceiling-one"),
        pytest.param({"fleet.fallback.max_extra_on_demand": 3}, id="ceiling-at-spot"),
        pytest.param({"capacity.on_demand": 0, "fleet.fallback.max_extra_on_demand": 4}, id="all-spot"),
    ],
)
def test_accepted(tmp_path, changes):
    assert load_environment(write(tmp_path, with_fallback(**changes))).fleet.fallback is not None


def test_rules_stay_quiet_without_fallback(tmp_path):
    document = changed({"capacity.target": 2, "capacity.on_demand": 2, "fleet.type": "request"})
    assert load_environment(write(tmp_path, document)).fleet.fallback is None


def test_a_capacity_block_refuses_fallback(tmp_path):
    document = changed(
        {
            "instance_type": "p5.48xlarge",
            "fleet.backend": "auto-scaling",
            "fleet.fallback": {**FALLBACK, "max_extra_on_demand": 1},
            "capacity.capacity_block": {
                "reservation_id": "cr-0123456789abcdef0",
                "start": "2099-01-05T11:30:00Z",
                "end": "2099-01-12T11:30:00Z",
            },
        }
    )
    assert problems_of(tmp_path, document) == [
        "capacity.capacity_block: 1 of the 2 nodes are spot, but every node in a Capacity Block is a "
        "capacity-block instance (set capacity.on_demand to 2)",
        "fleet.fallback: a Capacity Block has no spot nodes to fall back from, and its nodes are not on-demand ones "
        "(remove fallback, or capacity.capacity_block)",
    ]
