"""The fleet rules (gpufleet/validators/fleet.py): image rollout, capacity rebalancing, valid_until, and what an Auto
Scaling group cannot do; each with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import datetime as dt

import pytest

from gpufleet.loading import load_environment, parse_environment
from gpufleet.rules import Problem
from gpufleet.validators import validate_environment
from tests.gpufleet.environment_files import changed, problems_of, with_change, write

RULES = [
    (
        "fleet.capacity_rebalance",
        {"termination_delay_seconds": 300},
        "fleet.capacity_rebalance."
        "termination_delay_seconds: only applies to replacement_strategy: launch-before-terminate (remove it)",
    ),
]


@pytest.mark.parametrize(("field", "value", "expected"), RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in RULES])
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"fleet.type": "request", "fleet.capacity_rebalance": {"replacement_strategy": "launch"}},
            "fleet.capacity_rebalance: capacity rebalance needs a fleet that maintains capacity (set fleet.type: "
            "maintain or remove capacity_rebalance)",
        ),
        (
            {"fleet.type": "request", "fleet.rollout": "manual"},
            "fleet.rollout: a request fleet cannot be modified, so every change replaces it, a new image included "
            "(remove rollout, or set it to replace-all)",
        ),
    ],
)
def test_rules_that_combine_fields(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


VALID_UNTIL = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
PASSED = Problem(
    "fleet.valid_until",
    "2027-01-01T00:00:00+00:00 has passed (set a future UTC time, or remove it, before launching nodes)",
    "warning",
)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (VALID_UNTIL - dt.timedelta(seconds=1), []),
        (VALID_UNTIL, [PASSED]),
        (VALID_UNTIL + dt.timedelta(days=31), [PASSED]),
    ],
    ids=["a-second-before", "the-moment-itself", "a-month-after"],
)
def test_valid_until_warns_from_the_moment_it_comes(tmp_path, now, expected):
    environment = parse_environment(write(tmp_path, with_change("fleet.valid_until", "2027-01-01T00:00:00Z")))
    assert validate_environment(environment, tmp_path / "lab.yaml", now=now) == expected


def test_a_time_without_zone_is_utc(tmp_path):
    environment = parse_environment(write(tmp_path, with_change("fleet.valid_until", "2027-01-01T00:00:00")))
    assert validate_environment(environment, tmp_path / "lab.yaml", now=VALID_UNTIL) == [PASSED]


@pytest.mark.parametrize(
    ("changes", "rollout"),
    [
        ({}, "manual"),
        ({"fleet.rollout": "replace-all"}, "replace-all"),
        ({"fleet.type": "request"}, "replace-all"),
        ({"fleet.type": "request", "fleet.rollout": "replace-all"}, "replace-all"),
    ],
)
def test_image_rollout_of_a_fleet(tmp_path, changes, rollout):
    assert load_environment(write(tmp_path, changed(changes))).fleet.image_rollout == rollout


AUTO_SCALING = {"fleet.backend": "auto-scaling"}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"fleet.type": "request"},
            [
                "fleet.type: an Auto Scaling group always maintains its desired capacity; it has no one-shot request "
                "(remove type, or set backend: spot-fleet)"
            ],
        ),
        (
            {"fleet.valid_until": "2099-01-01T00:00:00Z"},
            [
                "fleet.valid_until: an Auto Scaling group has no end time; its nodes run until the stack is deleted "
                "(remove valid_until, or set backend: spot-fleet)"
            ],
        ),
        (
            {"fleet.replace_unhealthy_instances": False},
            [
                "fleet.replace_unhealthy_instances: an Auto Scaling group always replaces nodes that fail EC2 status "
                "checks (remove replace_unhealthy_instances, or set backend: spot-fleet)"
            ],
        ),
        (
            {
                "fleet.capacity_rebalance": {
                    "replacement_strategy": "launch-before-terminate",
                    "termination_delay_seconds": 300,
                }
            },
            [
                "fleet.capacity_rebalance.replacement_strategy: 'launch-before-terminate' is not available with an "
                "Auto Scaling group, whose capacity rebalancing launches a replacement and then terminates the old "
                "node (remove replacement_strategy, or set backend: spot-fleet)",
                "fleet.capacity_rebalance.termination_delay_seconds: an Auto Scaling group has no termination delay; "
                "its termination lifecycle hook gives the node time to checkpoint (remove termination_delay_seconds, "
                "or set backend: spot-fleet)",
            ],
        ),
        (
            {"fleet.allocation_strategy": "diversified"},
            [
                "fleet.allocation_strategy: 'diversified' has no Auto Scaling counterpart (allowed with backend: "
                "auto-scaling: priceCapacityOptimized, capacityOptimized, capacityOptimizedPrioritized, lowestPrice; "
                "or set backend: spot-fleet)"
            ],
        ),
    ],
)
def test_what_an_auto_scaling_group_cannot_do_is_refused(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(AUTO_SCALING | changes)) == expected


@pytest.mark.parametrize(
    "changes",
    [
        {"fleet.type": "request"},
        {"fleet.valid_until": "2099-01-01T00:00:00Z"},
        {"fleet.replace_unhealthy_instances": False},
        {"fleet.capacity_rebalance": {"replacement_strategy": "launch-before-terminate"}},
        {"fleet.allocation_strategy": "diversified"},
    ],
)
def test_the_same_settings_are_valid_for_a_spot_fleet(tmp_path, changes):
    assert load_environment(write(tmp_path, changed(changes))).fleet.backend == "spot-fleet"


def test_an_auto_scaling_environment_with_rebalancing_is_valid(tmp_path):
    document = changed(AUTO_SCALING | {"fleet.capacity_rebalance": {"replacement_strategy": "launch"}})
    assert load_environment(write(tmp_path, document)).fleet.backend == "auto-scaling"
