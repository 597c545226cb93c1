"""A Capacity Block's schedule as the group gets it (gpufleet.block_schedule), at every time of synthesis that matters:
before the block, at each bound, inside the window and after the scale-in. Expected times are written out."""

from __future__ import annotations

import datetime as dt

import pytest

from gpufleet.block_schedule import (
    BlockSchedule,
    ScheduledCapacity,
    block_schedule,
    eks_block_desired_size,
    scale_in_time,
)

START = dt.datetime(2027, 1, 11, 11, 30, tzinfo=dt.UTC)
END = dt.datetime(2027, 1, 18, 11, 30, tzinfo=dt.UTC)
SCALE_OUT = ScheduledCapacity("ScaleOut", START, 4)
# 50 minutes before the end: EC2's 30, the termination hook's 10 and 10 of margin.
SCALE_IN = ScheduledCapacity("ScaleIn", dt.datetime(2027, 1, 18, 10, 40, tzinfo=dt.UTC), 0)


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param("2026-11-26 12:00", BlockSchedule(0, (SCALE_OUT, SCALE_IN)), id="weeks-before"),
        # The start exactly 15 minutes and one second ahead: still scheduled.
        pytest.param("2027-01-11 11:14:59", BlockSchedule(0, (SCALE_OUT, SCALE_IN)), id="start-just-far-enough"),
        # The start exactly 15 minutes ahead, or closer: the deploy may reach the action after it, so the group wants
        # the nodes at once (launches fail and are retried until the block is active).
        pytest.param("2027-01-11 11:15", BlockSchedule(4, (SCALE_IN,)), id="start-too-close"),
        pytest.param("2027-01-11 11:30", BlockSchedule(4, (SCALE_IN,)), id="at-the-start"),
        pytest.param("2027-01-14 00:00", BlockSchedule(4, (SCALE_IN,)), id="inside"),
        pytest.param("2027-01-18 10:24:59", BlockSchedule(4, (SCALE_IN,)), id="scale-in-just-far-enough"),
        pytest.param("2027-01-18 10:25", BlockSchedule(0, ()), id="scale-in-too-close"),
        pytest.param("2027-01-18 10:40", BlockSchedule(0, ()), id="at-the-scale-in"),
        pytest.param("2027-02-01 00:00", BlockSchedule(0, ()), id="block-over"),
    ],
)
def test_the_schedule_at_each_time_of_synthesis(now, expected):
    assert block_schedule(start=START, end=END, target=4, now=at(now)) == expected


def test_the_scale_in_leaves_the_termination_hook_its_time_before_ec2_terminates():
    """EC2 terminates what still runs 30 minutes before the end (EC2 user guide, capacity-blocks-using.html); a node
    the group terminates waits up to the hook's 600 seconds first (the group's LifecycleHookSpecification)."""
    ec2_terminates = END - dt.timedelta(minutes=30)
    hook_done = scale_in_time(END, "fleet") + dt.timedelta(seconds=600)
    assert ec2_terminates - hook_done == dt.timedelta(minutes=10)


def test_a_block_ending_at_another_time_of_day_scales_in_50_minutes_before_it():
    assert scale_in_time(at("2027-03-01 00:05"), "fleet") == at("2027-02-28 23:15")


def test_eks_scales_a_block_in_40_minutes_before_its_end():
    assert scale_in_time(at("2027-03-01 00:05"), "eks") == at("2027-02-28 23:25")


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        # Before the block too: EKS documents that the group launches the nodes once the block is active.
        pytest.param("2026-11-26 12:00", 4, id="weeks-before"),
        pytest.param("2027-01-14 00:00", 4, id="inside"),
        # EKS's scale-in at 10:50, 15 minutes and one second ahead: still the block's nodes.
        pytest.param("2027-01-18 10:34:59", 4, id="scale-in-just-far-enough"),
        pytest.param("2027-01-18 10:35", 0, id="scale-in-too-close"),
        pytest.param("2027-02-01 00:00", 0, id="block-over"),
    ],
)
def test_the_eks_node_groups_desired_size_at_each_time_of_synthesis(now, expected):
    assert eks_block_desired_size(end=END, target=4, now=at(now)) == expected
