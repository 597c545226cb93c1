"""Problems 3 to 7 of issue 19, each as the model shows it: every test here failed against the fallback as it was
(main before issue 19; the report of the change has the output) and passes now. The Lambda handler runs in the loop
(tests/fallback_model/simulation.py); the expected values are written out from the scenario, not from the code."""

from __future__ import annotations

import datetime as dt

import pytest

from stacks.constructs.capacity_fallback.runtime import handler
from tests.fallback_model.model import HOOK_SECONDS, ON_DEMAND, Availability, Unknowns, at
from tests.fallback_model.simulation import Simulation

BACKENDS = ("spot-fleet", "auto-scaling")
PLENTY = ((0, 20),)


@pytest.mark.parametrize("backend", BACKENDS)
def test_problem_3_with_both_markets_short_the_missing_nodes_go_to_whichever_market_returns(backend):
    """The issue's simulation: target 8, floor 2; spot holds 3 nodes from minute 5 and 8 from minute 50; on-demand
    has the floor and two more. The raise asks for three on-demand nodes and gets two; the third request goes back to
    spot, which fills it when it returns, and the two extra on-demand nodes go back to spot after restore_after."""
    sim = Simulation(backend, Availability(spot=((0, 6), (5, 3), (50, 8)), on_demand=((0, 4),)), max_extra=3).run(120)
    assert sim.violations == []
    first_raise, revert = sim.changes()[:2]
    assert (first_raise[1:], revert[1:]) == (("raise", 2, 5), ("revert", 5, 4))
    # Spot returned at minute 50: the fleet is whole from the next minute (its request was spot's again).
    assert [(s.spot, s.on_demand) for s in sim.timeline[49:52]] == [(3, 4), (4, 4), (4, 4)]
    assert (sim.at_minute(120).spot, sim.at_minute(120).on_demand) == (6, 2)


@pytest.mark.parametrize("decrease", ["keep", "swap"])
def test_problem_4_a_spot_fleet_hands_on_demand_nodes_back_whatever_ec2_does_with_a_lower_part(decrease):
    """Spot gone from minute 5 to 60. Lowering only OnDemandTargetCapacity left the nodes where they were (keep: the
    next runs raised again) or let EC2 end on-demand nodes without their hook (swap); the hand-back works under both
    and ends each on-demand node after its hook, right before it ends (issue 31: at most two minutes before)."""
    sim = Simulation(
        "spot-fleet",
        Availability(spot=((0, 6), (5, 4), (60, 6)), on_demand=PLENTY),
        unknowns=Unknowns(spot_fleet_on_demand_decrease=decrease),
    ).run(180)
    assert sim.violations == []
    assert [change[1] for change in sim.changes()] == ["raise", "probe", "hand-back", "settle"]
    assert (sim.at_minute(180).spot, sim.at_minute(180).on_demand, sim.at_minute(180).on_demand_part) == (6, 2, 2)
    ended = [i for i in sim.world.instances.values() if i.market == ON_DEMAND and i.ended_at is not None]
    assert len(ended) == 2
    assert all(i.hook_started_at is not None and i.ended_at - i.hook_started_at == HOOK_SECONDS / 60 for i in ended)


def test_problem_5_a_redeploy_after_a_raise_does_not_swap_the_nodes_back_and_forth():
    """An Auto Scaling group raised to 4 while spot was short; spot is back from minute 45 and a deploy writes the
    template's base (2) back at minute 50. The group replaces the two extra on-demand nodes by spot ones, launching
    first; applying the raise again made it replace them the other way again. (Issue 31: the fallback gives the group
    room above MaxSize for it at 50, and takes it back once the nodes are replaced, at 55.)"""
    sim = Simulation(
        "auto-scaling",
        Availability(spot=((0, 6), (5, 4), (45, 6)), on_demand=PLENTY),
        events={50: [Simulation.redeploy]},
    ).run(120)
    assert sim.violations == []
    assert [change[:2] for change in sim.changes()] == [(20, "raise"), (50, "settle"), (55, "settle")]
    ended = sorted(i.market for i in sim.world.instances.values() if i.ended_at is not None and i.ended_at >= 50)
    assert ended == ["on-demand", "on-demand"]


def test_problem_5_an_instance_refresh_is_not_a_spot_shortage():
    """A refresh replaces every node of a full group, one at a time, from minute 30: the fallback changes nothing
    while it runs, and says why."""
    sim = Simulation(
        "auto-scaling", Availability(spot=((0, 6),), on_demand=PLENTY), events={30: [Simulation.refresh]}
    ).run(120)
    assert sim.violations == []
    assert sim.changes() == []
    during = [s.run["reason"] for s in sim.timeline[35:70:5]]
    assert all(reason.startswith("instance refresh ") and " is InProgress: " in reason for reason in during)


def test_problem_5_a_refresh_that_finds_spot_short_is_helped_after_launch_failures():
    """The refresh's replacements find spot short (one node fewer from minute 30): a shortage the refresh cannot end
    by itself, so the fallback raises after `after` as for any other."""
    sim = Simulation(
        "auto-scaling", Availability(spot=((0, 6), (30, 5)), on_demand=PLENTY), events={30: [Simulation.refresh]}
    ).run(120)
    assert sim.violations == []
    assert sim.changes()[0] == (45, "raise", 2, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_problem_6_a_node_ec2_does_not_describe_yet_counts_as_pending_and_fails_nothing(backend):
    """Minute 0: the fleet has just launched its eight nodes, which DescribeInstances does not know yet; by id that
    is InvalidInstanceID.NotFound."""
    sim = Simulation(backend, Availability(spot=((0, 6),), on_demand=PLENTY)).run(0)
    run = sim.at_minute(0).run
    assert (run["spot_running"], run["on_demand_running"], run["action"]) == (6, 2, "hold")


def group_with_old_activities(count: int) -> Simulation:
    sim = Simulation("auto-scaling", Availability(spot=((0, 6),), on_demand=PLENTY)).run(10)
    old = sim.fleet.activities[0]
    sim.fleet.activities[:0] = [
        {**old, "ActivityId": f"old-{n}", "StartTime": at(-60 * 24 * 40 + n), "EndTime": at(-60 * 24 * 40 + n)}
        for n in range(count)
    ]
    return sim


def test_problem_6_scaling_activity_is_read_from_the_last_run_on_with_cancelled_launches_counted():
    sim = group_with_old_activities(250)
    sim.fleet.activities.append(
        {
            **sim.fleet.activities[-1],
            "ActivityId": "cancelled",
            "StatusCode": "Cancelled",
            "StatusMessage": "Launch cancelled: InsufficientInstanceCapacity - there is no Spot capacity",
            "StartTime": at(12),
            "EndTime": at(13),
        }
    )
    sim.world.minute = 15
    pages_before = len(sim.world.operations)
    line = sim.check_now()
    pages = [op for _, op in sim.world.operations[pages_before:] if op == "autoscaling:DescribeScalingActivities"]
    # From the run at minute 10 less ten minutes' slack: the eight launches of minute 0 and the cancelled launch, two
    # a page (the model's page size), and none of the 250 activities of six weeks ago.
    assert len(pages) == 5
    assert line["failures"] == [
        {
            "at": "2026-11-23T06:13:00+00:00",
            "kind": "no-capacity",
            "description": "Cancelled: Launch cancelled: InsufficientInstanceCapacity - there is no Spot capacity",
        }
    ]


def test_problem_6_calls_retry_in_standard_mode_with_timeouts():
    assert handler.CLIENT_CONFIG.retries == {"mode": "standard", "total_max_attempts": 6}
    assert (handler.CLIENT_CONFIG.connect_timeout, handler.CLIENT_CONFIG.read_timeout) == (5, 20)


@pytest.mark.parametrize("update", ["merge", "replace"])
def test_problem_7_the_update_sends_back_only_what_the_template_sets(update):
    """Describe shows SpotInstancePools (valid only with lowest-price, refused otherwise); the raise sends the
    template's fields, so the group ends up as the template has it whether AWS merges or replaces the rest."""
    sim = Simulation(
        "auto-scaling",
        Availability(spot=((0, 6), (5, 4)), on_demand=PLENTY),
        unknowns=Unknowns(distribution_update=update, describes_spot_instance_pools=True),
    ).run(30)
    assert sim.violations == []
    ((minute, caller, operation, params),) = [call for call in sim.world.calls if call[1] == "fallback"]
    assert (minute, operation) == (20, "UpdateAutoScalingGroup")
    assert params == {
        "AutoScalingGroupName": "gpufleet-probe-nodes",
        "MixedInstancesPolicy": {
            "InstancesDistribution": {
                "OnDemandAllocationStrategy": "lowest-price",
                "OnDemandPercentageAboveBaseCapacity": 0,
                "SpotAllocationStrategy": "price-capacity-optimized",
                "OnDemandBaseCapacity": 4,
            }
        },
    }
    assert sim.fleet.distribution == {
        "OnDemandAllocationStrategy": "lowest-price",
        "OnDemandBaseCapacity": 4,
        "OnDemandPercentageAboveBaseCapacity": 0,
        "SpotAllocationStrategy": "price-capacity-optimized",
    }


def test_the_history_of_a_first_run_goes_back_an_hour():
    assert handler.FIRST_LOOK_BACK == dt.timedelta(hours=1)
