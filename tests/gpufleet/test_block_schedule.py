"""A Capacity Block's schedule as the BlockCapacity handler makes it at deploy time (gpufleet.block_schedule), at every
time of the deploy that matters: before the block, at each bound, inside the window and after the scale-in. Expected
times are written out."""

from __future__ import annotations

import datetime as dt

import pytest

from gpufleet.block_schedule import (
    ACTION_LEAD,
    BlockSchedule,
    ScheduledCapacity,
    block_schedule,
    eks_block_desired_size,
    scale_in_time,
)

START = dt.datetime(2027, 1, 11, 11, 30, tzinfo=dt.UTC)
END = dt.datetime(2027, 1, 18, 11, 30, tzinfo=dt.UTC)
SCALE_OUT = ScheduledCapacity("gpufleet-block-scale-out", START, 4)
# 50 minutes before the end: EC2's 30, the termination hook's 10 and 10 of margin.
SCALE_IN = ScheduledCapacity("gpufleet-block-scale-in", dt.datetime(2027, 1, 18, 10, 40, tzinfo=dt.UTC), 0)


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def scale_out_at(text: str) -> ScheduledCapacity:
    return ScheduledCapacity("gpufleet-block-scale-out", at(text), 4)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param("2026-11-26 12:00", BlockSchedule(0, (SCALE_OUT, SCALE_IN)), id="weeks-before"),
        # The start five minutes (ACTION_LEAD) ahead or more: scheduled at the start.
        pytest.param("2027-01-11 11:24:59", BlockSchedule(0, (SCALE_OUT, SCALE_IN)), id="start-well-ahead"),
        pytest.param("2027-01-11 11:25", BlockSchedule(0, (SCALE_OUT, SCALE_IN)), id="start-just-far-enough"),
        # Closer: scheduled five minutes on, after the start (a launch before the block is active fails).
        pytest.param(
            "2027-01-11 11:25:01", BlockSchedule(0, (scale_out_at("2027-01-11 11:30:01"), SCALE_IN)), id="start-close"
        ),
        pytest.param(
            "2027-01-11 11:29:59", BlockSchedule(0, (scale_out_at("2027-01-11 11:34:59"), SCALE_IN)), id="start-next"
        ),
        # From the start on, the group wants the nodes at once.
        pytest.param("2027-01-11 11:30", BlockSchedule(4, (SCALE_IN,)), id="at-the-start"),
        pytest.param("2027-01-14 00:00", BlockSchedule(4, (SCALE_IN,)), id="inside"),
        pytest.param("2027-01-18 10:34:59", BlockSchedule(4, (SCALE_IN,)), id="scale-in-just-far-enough"),
        # The scale-in five minutes ahead or closer: done at once (the nodes go up to five minutes early).
        pytest.param("2027-01-18 10:35", BlockSchedule(0, ()), id="scale-in-too-close"),
        pytest.param("2027-01-18 10:40", BlockSchedule(0, ()), id="at-the-scale-in"),
        pytest.param("2027-02-01 00:00", BlockSchedule(0, ()), id="block-over"),
    ],
)
def test_the_schedule_at_each_time_of_the_deploy(now, expected):
    assert block_schedule(start=START, end=END, target=4, now=at(now)) == expected


def test_a_window_shorter_than_the_lead_gets_no_node():
    """A block whose scale-in comes within five minutes of the deploy, its start not yet come (a file `gpufleet
    validate` accepts: the end after the start's scale-in lead): no node, no action."""
    end = at("2027-01-11 11:30") + dt.timedelta(minutes=52)  # scale-in at 11:32
    assert block_schedule(start=START, end=end, target=4, now=at("2027-01-11 11:28")) == BlockSchedule(0, ())


def test_whatever_the_time_of_the_deploy_no_action_is_due_within_the_lead():
    """Every minute from a day before the block to a day after it: each action it puts is at least ACTION_LEAD ahead
    (Auto Scaling refuses an action in the past), the scale-out never before the start, the scale-in at its time, and
    the group wants the nodes exactly while the window is open."""
    now = START - dt.timedelta(days=1)
    while now < END + dt.timedelta(days=1):
        schedule = block_schedule(start=START, end=END, target=4, now=now)
        assert all(action.at >= now + ACTION_LEAD for action in schedule.actions), now
        times = {action.name: action.at for action in schedule.actions}
        assert times.get("gpufleet-block-scale-out", START) >= START
        assert times.get("gpufleet-block-scale-in", SCALE_IN.at) == SCALE_IN.at
        assert schedule.desired_capacity == (4 if START <= now < SCALE_IN.at - ACTION_LEAD else 0), now
        now += dt.timedelta(minutes=1)


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
