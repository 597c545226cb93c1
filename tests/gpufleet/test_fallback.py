"""The capacity fallback's decision over fleet histories: each history is a list of checks, fed to decide one after
the other with the state each leaves; the last decision is compared with literals. (How the fleets answer the
decisions is tests/fallback_model/'s part.)"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from gpufleet.fallback import (
    ALIGN,
    CORRECT,
    HAND_BACK,
    HAND_BACK_BY_FALLBACK,
    HOLD,
    KEEP_EXCESS,
    LOWER,
    NO_CAPACITY,
    PRICE,
    PROBE,
    RAISE,
    REAPPLY,
    RETRY,
    REVERT,
    SETTLE,
    TERMINATE_EXCESS,
    WITHDRAW,
    FallbackSettings,
    FallbackState,
    LaunchFailure,
    Observation,
    carried_out,
    decide,
    parameter_name,
)

START = dt.datetime(2026, 11, 23, 6, 0, tzinfo=dt.UTC)
# dev-like: 8 nodes, 2 on demand, raise after 15 min, restore after 30, at most 2 extra on-demand nodes.
GROUP = FallbackSettings(
    floor=2, after=dt.timedelta(minutes=15), restore_after=dt.timedelta(minutes=30), max_extra=2, target=8
)
FLEET = replace(GROUP, hands_back=HAND_BACK_BY_FALLBACK)


def at(minute: float) -> dt.datetime:
    return START + dt.timedelta(minutes=minute)


def check(minute, part, spot, on_demand=None, *, target=8, failures=(), nodes=(), max_size=8, **busy):
    """One look: the on-demand part, live spot and on-demand nodes (default: the part), launch failures as
    (minute, kind), the fleet's on-demand node ids, newest first (Spot Fleet), its total as set (target) and, for a
    group, its MaxSize."""
    return Observation(
        at=at(minute),
        target=target,
        on_demand_target=part,
        spot_running=spot,
        on_demand_running=part if on_demand is None else on_demand,
        failures=tuple(LaunchFailure(at(m), kind, "probe") for m, kind in failures),
        on_demand_nodes=tuple(nodes),
        max_size=max_size,
        **busy,
    )


def run(history, settings=GROUP, state=None):
    state = state or FallbackState(node_group_id="sfr-1")
    decision = None
    for observation in history:
        decision = decide(settings, observation, state)
        state = decision.state
    return decision


def outcome(decision):
    return decision.action, decision.on_demand, decision.reason


SHORT = [check(0, 2, 4, failures=[(0, NO_CAPACITY)])]


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(
            [check(0, 2, 6)],
            (HOLD, 2, "fleet full (6 spot + 2 on-demand of 8, on-demand part 2); on-demand part at its floor 2"),
            id="full-at-the-floor",
        ),
        pytest.param(
            [*SHORT, check(14.99, 2, 4)],
            (
                HOLD,
                2,
                "2 node(s) missing for 14.99 min (4 spot + 2 on-demand of 8, on-demand part 2; launch failures: "
                "no-capacity x1); on-demand part 2 rises after 15 min",
            ),
            id="missing-just-under-after-holds",
        ),
        pytest.param(
            [*SHORT, check(5, 2, 4, failures=[(4, PRICE)]), check(15, 2, 4)],
            (
                RAISE,
                4,
                "2 node(s) missing for 15 min (4 spot + 2 on-demand of 8, on-demand part 2; launch failures: "
                "no-capacity x1, price x1): on-demand part 2 -> 4",
            ),
            id="missing-exactly-after-raises-by-the-missing-spot-nodes",
        ),
        pytest.param(
            [check(0, 2, 5), check(15, 2, 5)],
            (
                RAISE,
                3,
                "1 node(s) missing for 15 min (5 spot + 2 on-demand of 8, on-demand part 2; the history reports no "
                "launch failure): on-demand part 2 -> 3",
            ),
            id="missing-without-failure-raises-too",
        ),
        pytest.param(
            [check(0, 2, 3), check(15, 2, 3)],
            (
                RAISE,
                4,
                "3 node(s) missing for 15 min (3 spot + 2 on-demand of 8, on-demand part 2; the history reports no "
                "launch failure): on-demand part 2 -> 4 (capped at the ceiling)",
            ),
            id="raise-capped-at-the-ceiling",
        ),
        pytest.param(
            [check(0, 4, 3), check(15, 4, 3)],
            (
                HOLD,
                4,
                "1 node(s) missing for 15 min (3 spot + 4 on-demand of 8, on-demand part 4; the history reports no "
                "launch failure); on-demand part 4 is at its ceiling (capacity.on_demand 2 + max_extra_on_demand 2, "
                "at most the target 8)",
            ),
            id="at-the-ceiling-holds",
        ),
        pytest.param(
            [check(0, 2, 6, 1), check(30, 2, 6, 1)],
            (
                HOLD,
                2,
                "1 node(s) missing for 30 min (6 spot + 1 on-demand of 8, on-demand part 2; the history reports no "
                "launch failure); the missing nodes are on-demand ones: the fleet launches them when on-demand "
                "capacity allows",
            ),
            id="on-demand-missing-at-the-floor-is-the-fleets-own",
        ),
        pytest.param(
            [check(0, 2, 4), check(5, 2, 6), check(10, 2, 4), check(20, 2, 4)],
            (
                HOLD,
                2,
                "2 node(s) missing for 10 min (4 spot + 2 on-demand of 8, on-demand part 2; the history reports no "
                "launch failure); on-demand part 2 rises after 15 min",
            ),
            id="a-full-check-restarts-the-shortfall-clock",
        ),
        pytest.param(
            [check(0, 2, 4, 3), check(15, 2, 4, 3)],
            (
                RAISE,
                4,
                "1 node(s) missing for 15 min (4 spot + 3 on-demand of 8, on-demand part 2; the history reports no "
                "launch failure): on-demand part 2 -> 4",
            ),
            id="a-part-below-the-live-on-demand-nodes-is-raised-from-them",
        ),
        pytest.param(
            [check(0, 2, 3, 4), check(15, 2, 3, 4)],
            (
                HOLD,
                2,
                "1 node(s) missing for 15 min (3 spot + 4 on-demand of 8, on-demand part 2; the history reports no "
                "launch failure); on-demand part 2 is at its ceiling (capacity.on_demand 2 + max_extra_on_demand 2, at "
                "most the target 8)",
            ),
            id="live-on-demand-nodes-at-the-ceiling-hold",
        ),
    ],
)
def test_missing_nodes(history, expected):
    assert outcome(run(history)) == expected


RAISED = [check(0, 2, 3), check(15, 2, 3)]  # raised to 4 at minute 15 (3 spot missing, capped)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(
            [*RAISED, check(29.99, 4, 4, 3)],
            (
                HOLD,
                4,
                "1 node(s) missing for 0 min (4 spot + 3 on-demand of 8, on-demand part 4; the history reports no "
                "launch failure); the missing nodes are on-demand ones: the fleet launches them when on-demand "
                "capacity allows, and those above the floor 2 go back to spot 15 min after the fallback's last change "
                "if they do not come",
            ),
            id="on-demand-not-there-just-under-after",
        ),
        pytest.param(
            [*RAISED, check(30, 4, 4, 3)],
            (
                REVERT,
                3,
                "1 on-demand node(s) of the part 4 are not there and on-demand capacity has not filled them for 15 min "
                "(4 spot + 3 on-demand of 8, on-demand part 4; the history reports no launch failure): 4 -> 3, spot "
                "asked again",
            ),
            id="on-demand-not-there-after-after-reverts-to-the-nodes-there",
        ),
        pytest.param(
            [*RAISED, check(30, 4, 3, 1)],
            (
                REVERT,
                2,
                "3 on-demand node(s) of the part 4 are not there and on-demand capacity has not filled them for 15 min "
                "(3 spot + 1 on-demand of 8, on-demand part 4; the history reports no launch failure): 4 -> 2, spot "
                "asked again",
            ),
            id="a-revert-never-goes-below-the-floor",
        ),
        pytest.param(
            [*RAISED, check(20, 4, 5, 3)],
            (
                REVERT,
                3,
                "1 on-demand node(s) of the part 4 are not there and the fleet is full without them (5 spot + 3 "
                "on-demand of 8, on-demand part 4; the history reports no launch failure): 4 -> 3, spot asked again",
            ),
            id="a-full-fleet-reverts-the-unfilled-part-at-once",
        ),
        pytest.param(
            [*RAISED, check(30, 4, 3, 3), check(44.99, 3, 3, 3)],
            (
                HOLD,
                3,
                "2 node(s) missing for 14.99 min (3 spot + 3 on-demand of 8, on-demand part 3; the history reports no "
                "launch failure); on-demand part 3 rises after 15 min",
            ),
            id="after-a-revert-spot-gets-after-again",
        ),
        pytest.param(
            [*RAISED, check(30, 4, 3, 3), check(45, 3, 3, 3)],
            (
                RAISE,
                4,
                "2 node(s) missing for 15 min (3 spot + 3 on-demand of 8, on-demand part 3; the history reports no "
                "launch failure): on-demand part 3 -> 4 (capped at the ceiling)",
            ),
            id="both-short-the-requests-alternate-one-change-per-after",
        ),
    ],
)
def test_a_raise_on_demand_cannot_fill_goes_back_to_spot(history, expected):
    assert outcome(run(history)) == expected


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(
            [check(0, 4, 4), check(29.99, 4, 4)],
            (
                HOLD,
                4,
                "fleet full (4 spot + 4 on-demand of 8, on-demand part 4), spot back for 29.99 min; 2 extra on-demand "
                "node(s) go back to spot after 30 min",
            ),
            id="spot-back-just-under-restore-after",
        ),
        pytest.param(
            [check(0, 4, 4), check(30, 4, 4)],
            (
                LOWER,
                2,
                "spot back for 30 min: on-demand base 4 -> 2, MaxSize 8 -> 9; the group replaces the extra on-demand "
                "nodes by spot ones as spot allows, launching each before it terminates one (through its lifecycle "
                "hook)",
            ),
            id="a-group-lowers-to-the-floor-at-restore-after",
        ),
        pytest.param(
            [check(0, 4, 4), check(10, 4, 4, failures=[(12, NO_CAPACITY)]), check(41.99, 4, 4)],
            (
                HOLD,
                4,
                "fleet full (4 spot + 4 on-demand of 8, on-demand part 4), spot back for 29.99 min; 2 extra on-demand "
                "node(s) go back to spot after 30 min",
            ),
            id="a-failure-restarts-the-restore-clock",
        ),
        pytest.param(
            [check(0, 4, 4), check(20, 4, 3), check(30, 4, 4), check(59, 4, 4)],
            (
                HOLD,
                4,
                "fleet full (4 spot + 4 on-demand of 8, on-demand part 4), spot back for 29 min; 2 extra on-demand "
                "node(s) go back to spot after 30 min",
            ),
            id="missing-nodes-restart-the-restore-clock",
        ),
        pytest.param(
            [check(0, 2, 6, 4), check(30, 2, 6, 4, max_size=9)],
            (HOLD, 2, "fleet full (6 spot + 4 on-demand of 8, on-demand part 2); on-demand part at its floor 2"),
            id="a-group-below-its-live-on-demand-nodes-replaces-them-itself",
        ),
    ],
)
def test_an_auto_scaling_group_gets_its_extra_nodes_back_to_spot(history, expected):
    assert outcome(run(history)) == expected


NODES = ("i-new", "i-mid", "i-old", "i-floor")  # newest first


def test_a_spot_fleet_probes_for_spot_without_a_hook_on_any_node():
    decision = run([check(0, 4, 4, nodes=NODES), check(30, 4, 4, nodes=NODES)], FLEET)
    assert (decision.action, decision.on_demand, decision.total, decision.end, decision.excess_policy) == (
        PROBE,
        4,
        10,
        (),
        TERMINATE_EXCESS,
    )
    assert decision.reason == (
        "spot back for 30 min: asking for 2 spot node(s) beyond the target (8 -> 10) to replace as many on-demand "
        "nodes; they end, after their checkpoint hook, once the spot nodes are there (at most 15 min)"
    )
    state = decision.state
    assert (state.probe_total, state.probe_extra, state.probe_started) == (10, 2, at(30))
    # Recorded before it is made: what the fleet is to show, and what it showed.
    assert state.intent == {
        "total": 10,
        "on_demand": 4,
        "max_size": None,
        "excess_policy": TERMINATE_EXCESS,
        "from_total": 8,
        "from_on_demand": 4,
        "from_max_size": None,
    }


def test_a_probe_asks_for_at_most_max_extra_nodes_beyond_the_target():
    """A part raised outside the fallback above the ceiling: the probe still stays within target + max_extra."""
    nodes = ("i-1", "i-2", "i-3", "i-4", "i-5", "i-6")
    decision = run([check(0, 6, 2, nodes=nodes), check(30, 6, 2, nodes=nodes)], FLEET)
    assert (decision.action, decision.total, decision.state.probe_extra) == (PROBE, 10, 2)


PROBING = [check(0, 4, 4, nodes=NODES), check(30, 4, 4, nodes=NODES)]


def probe(minute, spot, *, missing=0, nodes=NODES, target=10):
    return check(minute, 4, spot, 4 - missing, target=target, nodes=nodes)


@pytest.mark.parametrize(
    ("after_probe", "expected"),
    [
        pytest.param(
            [probe(35, 5)],
            (
                HOLD,
                4,
                10,
                (),
                "probe under way for 5 min: 1 of 2 extra spot node(s) there (5 spot + 4 on-demand of 8, on-demand "
                "part 4); waiting up to 15 min for them",
            ),
            id="waits-for-the-spot-nodes",
        ),
        pytest.param(
            [probe(35, 6)],
            (
                HAND_BACK,
                2,
                8,
                ("i-new", "i-mid"),
                "probe over after 5 min: 2 of 2 extra spot node(s) came (6 spot + 4 on-demand of 8, on-demand part 4): "
                "the checkpoint hook runs on i-new, i-mid, which then end(s); total 10 -> 8, on-demand part 4 -> 2",
            ),
            id="hooks-and-ends-exactly-the-newest-on-demand-nodes-spot-came-for",
        ),
        pytest.param(
            [probe(44.99, 5)],
            (
                HOLD,
                4,
                10,
                (),
                "probe under way for 14.99 min: 1 of 2 extra spot node(s) there (5 spot + 4 on-demand of 8, on-demand "
                "part 4); waiting up to 15 min for them",
            ),
            id="waits-just-under-after",
        ),
        pytest.param(
            [probe(45, 5)],
            (
                HAND_BACK,
                3,
                8,
                ("i-new",),
                "probe over after 15 min: 1 of 2 extra spot node(s) came (5 spot + 4 on-demand of 8, on-demand part "
                "4): the checkpoint hook runs on i-new, which then end(s); total 10 -> 8, on-demand part 4 -> 3; next "
                "hand-back not before 07:45:00Z",
            ),
            id="after-after-hands-back-what-came-and-backs-off",
        ),
        pytest.param(
            [probe(45, 4)],
            (
                WITHDRAW,
                4,
                8,
                (),
                "probe over after 15 min: no extra spot node came (4 spot + 4 on-demand of 8, on-demand part 4); the "
                "probe is withdrawn (total 10 -> 8), the on-demand nodes stay, no hook runs; next hand-back not before "
                "07:45:00Z",
            ),
            id="no-spot-withdraws-without-a-hook",
        ),
        pytest.param(
            [probe(35, 3)],
            (
                WITHDRAW,
                4,
                8,
                (),
                "probe over after 5 min: no extra spot node came (3 spot + 4 on-demand of 8, on-demand part 4); the "
                "probe is withdrawn (total 10 -> 8), the on-demand nodes stay, no hook runs; next hand-back not before "
                "07:35:00Z",
            ),
            id="missing-nodes-end-the-probe-at-once",
        ),
        pytest.param(
            [probe(35, 6, missing=2, nodes=("i-old", "i-floor"))],
            (
                HAND_BACK,
                4,
                8,
                (),
                "probe over after 5 min: 2 of 2 extra spot node(s) came (6 spot + 2 on-demand of 8, on-demand part 4): "
                "the checkpoint hook runs on no node, which then end(s); total 10 -> 8, on-demand part 4 -> 4",
            ),
            id="never-below-the-floor",
        ),
    ],
)
def test_a_spot_fleet_hand_back(after_probe, expected):
    decision = run([*PROBING, *after_probe], FLEET)
    assert (decision.action, decision.on_demand, decision.total, decision.end, decision.reason) == expected
    if decision.action == HAND_BACK:
        assert decision.excess_policy == KEEP_EXCESS


def test_a_hand_back_forgets_its_probe():
    decision = run([*PROBING, probe(35, 6)], FLEET)
    state = decision.state
    assert (state.probe_total, state.probe_extra, state.probe_started) == (None, 0, None)
    assert (state.hand_back_misses, state.next_hand_back) == (0, None)


def test_hand_backs_that_find_spot_short_back_off_doubling_up_to_the_cap():
    assert [FLEET.hand_back_wait(misses) for misses in (0, 1, 2, 3, 4, 10)] == [
        dt.timedelta(minutes=minutes) for minutes in (30, 60, 120, 240, 240, 240)
    ]
    withdrawn = [*PROBING, probe(45, 4)]
    # The next probe waits until 07:45 (06:45 + 60 min), then finds spot short again: 120 min more.
    assert outcome(run([*withdrawn, check(104.99, 4, 4, nodes=NODES)], FLEET)) == (
        HOLD,
        4,
        "fleet full (4 spot + 4 on-demand of 8, on-demand part 4); 1 hand-back(s) in a row found spot short: the "
        "next one starts at 07:45:00Z",
    )
    again = [*withdrawn, check(105, 4, 4, nodes=NODES)]
    assert run(again, FLEET).action == PROBE
    second = run([*again, probe(120, 4)], FLEET)
    assert (second.action, second.state.hand_back_misses, second.state.next_hand_back) == (WITHDRAW, 2, at(240))


def test_a_raise_or_a_full_hand_back_ends_the_back_off():
    backing_off = FallbackState(node_group_id="sfr-1", hand_back_misses=2, next_hand_back=at(200))
    raised = run([check(0, 2, 4, nodes=NODES[2:]), check(15, 2, 4, nodes=NODES[2:])], FLEET, backing_off)
    assert (raised.action, raised.state.hand_back_misses, raised.state.next_hand_back) == (RAISE, 0, None)
    withdrawn = [*PROBING, probe(45, 4)]
    handed_back = run([*withdrawn, check(105, 4, 4, nodes=NODES), probe(110, 6)], FLEET)
    assert (handed_back.action, handed_back.state.hand_back_misses, handed_back.state.next_hand_back) == (
        HAND_BACK,
        0,
        None,
    )


def test_a_target_changed_outside_the_fallback_drops_the_probe():
    decision = run(
        [*PROBING, probe(35, 5), check(40, 4, 5, target=8, nodes=NODES, failures=[(39, NO_CAPACITY)])], FLEET
    )
    assert outcome(decision) == (
        HOLD,
        4,
        "the fleet's total is 8, not the 10 the probe asked for: changed outside the fallback, the probe is dropped; "
        "fleet full (5 spot + 4 on-demand of 8, on-demand part 4), spot back for 1 min; 2 extra on-demand node(s) go "
        "back to spot after 30 min",
    )
    assert decision.state.probe_total is None


def test_the_target_is_the_configured_one_and_a_total_set_outside_is_set_back_at_the_second_check():
    """Issue 31, problem 2: a probe's total left on the fleet with no record of it (a lost state write) is not the
    next run's target: the first check holds (a deploy may be under way), the second sets the target back."""
    first = run([check(0, 4, 6, 4, target=10, nodes=NODES)], FLEET)
    assert outcome(first) == (
        HOLD,
        4,
        "the fleet's TargetCapacity is 10, not capacity.target 8 (the function's configuration): set outside the "
        "fallback, or a deploy under way; set back at the next check if it stays",
    )
    assert first.state.outside_since == at(0)
    second = run([check(0, 4, 6, 4, target=10, nodes=NODES), check(5, 4, 6, 4, target=10, nodes=NODES)], FLEET)
    assert (second.action, second.total, second.on_demand, second.reason) == (
        CORRECT,
        8,
        4,
        "the fleet's TargetCapacity 10 is still not capacity.target 8 (seen since 06:00:00Z): set back to 8",
    )
    settled = run([check(0, 4, 6, 4, target=10, nodes=NODES), check(5, 4, 6, 4, target=8, nodes=NODES)], FLEET)
    assert (settled.action, settled.state.outside_since) == (HOLD, None)


def test_a_group_desired_capacity_is_not_the_fallbacks_to_set_back():
    decision = run([check(0, 2, 8, target=10)])
    assert (decision.action, decision.total) == (HOLD, 10)


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        pytest.param(
            probe(35, 4, target=8),
            (
                RETRY,
                10,
                "the change recorded at 06:30:00Z (probe: total 8 -> 10, on-demand part 4 -> 4) is not on the fleet "
                "(the run that made it failed): made again",
            ),
            id="not-made-made-again",
        ),
        pytest.param(
            probe(35, 5),
            (
                HOLD,
                10,
                "probe under way for 5 min: 1 of 2 extra spot node(s) there (5 spot + 4 on-demand of 8, on-demand "
                "part 4); waiting up to 15 min for them",
            ),
            id="made-forgotten",
        ),
        pytest.param(
            check(35, 3, 5, 4, target=9, nodes=NODES),
            (
                HOLD,
                9,
                "the fleet shows total 9, on-demand part 3, neither what the fallback's probe started from nor what it "
                "set: changed outside the fallback; the fleet's total is 9, not the 10 the probe asked for: changed "
                "outside the fallback, the probe is dropped; the fleet's TargetCapacity is 9, not capacity.target 8 "
                "(the function's configuration): set outside the fallback, or a deploy under way; set back at the next "
                "check if it stays",
            ),
            id="changed-outside-dropped",
        ),
    ],
)
def test_a_recorded_change_is_made_again_until_the_fleet_shows_it(shown, expected):
    decision = run([*PROBING, shown], FLEET)
    assert (decision.action, decision.total, decision.reason) == expected
    assert decision.state.intent == ({} if decision.action == HOLD else decision.state.intent)


def test_a_hand_back_made_again_keeps_its_excess_policy():
    handed_back = run([*PROBING, probe(35, 6)], FLEET)
    assert handed_back.state.intent["excess_policy"] == KEEP_EXCESS
    retried = decide(FLEET, probe(40, 6), handed_back.state)
    assert (retried.action, retried.total, retried.on_demand, retried.excess_policy) == (RETRY, 8, 2, KEEP_EXCESS)


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        pytest.param(
            check(70, 2, 6, 4, nodes=NODES, excess_policy=KEEP_EXCESS),
            (
                SETTLE,
                ("i-new", "i-mid"),
                False,
                "2 on-demand node(s) above the part and the target (6 spot + 4 on-demand of 8, on-demand part 2), "
                "launched while the hand-back ended others: the checkpoint hook runs on i-new, i-mid, which then "
                "end(s)",
            ),
            id="ends-nodes-launched-between-the-hand-backs-calls",
        ),
        pytest.param(
            check(70, 2, 7, 2, nodes=NODES[2:], excess_policy=KEEP_EXCESS),
            (
                SETTLE,
                (),
                True,
                "hand-back done (7 spot + 2 on-demand of 8, on-demand part 2): ExcessCapacityTerminationPolicy "
                "noTermination -> default, the template's",
            ),
            id="then-the-templates-policy-ends-extra-spot-with-a-notice",
        ),
    ],
)
def test_after_a_hand_back_the_fleet_settles(observed, expected):
    decision = run([observed], FLEET)
    assert (decision.action, decision.end, decision.modifies, decision.reason) == expected
    assert decision.excess_policy == (TERMINATE_EXCESS if decision.modifies else KEEP_EXCESS)
    assert bool(decision.state.intent) == decision.modifies


def test_a_group_lowers_its_base_with_room_above_max_size_and_gives_it_back_after():
    lowered = run([*RAISED, check(20, 4, 4), check(50, 4, 4)])
    assert (lowered.action, lowered.on_demand, lowered.max_size) == (LOWER, 2, 9)
    assert lowered.reason == (
        "spot back for 30 min: on-demand base 4 -> 2, MaxSize 8 -> 9; the group replaces the extra on-demand nodes by "
        "spot ones as spot allows, launching each before it terminates one (through its lifecycle hook)"
    )
    replacing = run([check(0, 2, 6, 3, max_size=9)])
    assert (replacing.action, replacing.max_size) == (HOLD, None)
    done = run([check(0, 2, 6, 2, max_size=9)])
    assert (done.action, done.max_size, done.reason) == (
        SETTLE,
        8,
        "no on-demand node above the base 2 is left to replace (6 spot + 2 on-demand of 8, on-demand part 2): MaxSize "
        "9 -> 8",
    )
    reset = run([check(0, 2, 6, 4, max_size=8)])
    assert (reset.action, reset.max_size, reset.reason) == (
        SETTLE,
        9,
        "the group replaces 2 on-demand node(s) above its base (6 spot + 4 on-demand of 8, on-demand part 2): MaxSize "
        "8 -> 9, room to launch each spot node before it terminates one",
    )


def test_a_history_read_short_of_its_end_keeps_spot_from_counting_as_back():
    decision = run([check(0, 4, 4), check(30, 4, 4, history_complete=False)])
    assert outcome(decision) == (
        HOLD,
        4,
        "fleet full (4 spot + 4 on-demand of 8, on-demand part 4), spot back for 0 min (the history had more than a "
        "run reads: counted as a failure now); 2 extra on-demand node(s) go back to spot after 30 min",
    )


def test_decide_needs_the_configured_target():
    with pytest.raises(ValueError, match="FallbackSettings.target is 0: capacity.target"):
        decide(replace(GROUP, target=0), check(0, 2, 6), FallbackState())


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(
            [*RAISED, check(17, 4, 3, 4), check(20, 2, 3, 4)],
            (
                REAPPLY,
                4,
                "on-demand part 2 was set outside the fallback (a deploy writes the template's value back) below its 4 "
                "while 1 node(s) are missing (3 spot + 4 on-demand of 8, on-demand part 2): 2 -> 4 again",
            ),
            id="a-reset-while-nodes-are-missing-is-applied-again-at-once",
        ),
        pytest.param(
            [*RAISED, check(20, 4, 4), check(25, 2, 4, 4)],
            (
                SETTLE,
                2,
                "the group replaces 2 on-demand node(s) above its base (4 spot + 4 on-demand of 8, on-demand part 2): "
                "MaxSize 8 -> 9, room to launch each spot node before it terminates one",
            ),
            id="a-group-reset-with-nothing-missing-stands-and-gets-room-to-replace",
        ),
        pytest.param(
            [check(0, 3, 5), check(5, 2, 5, 3, max_size=9)],
            (
                HOLD,
                2,
                "fleet full (5 spot + 3 on-demand of 8, on-demand part 2); on-demand part at its floor 2",
            ),
            id="a-part-raised-by-hand-is-followed-when-lowered-by-hand",
        ),
    ],
)
def test_changes_made_outside_the_fallback(history, expected):
    assert outcome(run(history)) == expected


def test_a_spot_fleet_part_below_its_live_on_demand_nodes_is_aligned():
    decision = run([check(0, 4, 4, nodes=NODES), check(5, 2, 4, 4, nodes=NODES)], FLEET)
    assert outcome(decision) == (
        ALIGN,
        4,
        "on-demand part 2 is below the 4 live on-demand nodes (set outside the fallback; what EC2 does with the "
        "surplus is undocumented): 2 -> 4, the surplus goes back to spot through a hand-back",
    )


def test_an_alignment_due_for_a_hand_back_starts_it_with_the_aligned_part():
    decision = run([check(0, 4, 4, nodes=NODES), check(30, 2, 4, 4, nodes=NODES)], FLEET)
    assert (decision.action, decision.on_demand, decision.total) == (PROBE, 4, 10)


def test_the_ceiling_is_at_most_the_target():
    small = replace(GROUP, max_extra=5, target=3)
    assert small.ceiling(4) == 4 and small.ceiling(8) == 7
    decision = run([check(0, 2, 0, target=3, max_size=3), check(15, 2, 0, target=3, max_size=3)], small)
    assert (decision.action, decision.on_demand) == (RAISE, 3)


@pytest.mark.parametrize(
    ("busy", "clocks"),
    [
        pytest.param({"busy": "fleet request is modifying"}, (at(0), None), id="modifying-keeps-the-clocks"),
        pytest.param({"busy": "group is Delete in progress", "replacing": True}, (None, None), id="deletion-clears"),
    ],
)
def test_a_busy_fleet_is_left_alone(busy, clocks):
    decision = run([*SHORT, check(10, 0, 0, target=0, **busy)])
    assert (decision.action, decision.reason) == (HOLD, f"{busy['busy']}: nothing changes until it is over")
    assert (decision.state.short_since, decision.state.healthy_since, decision.state.on_demand) == (*clocks, 2)


def test_an_instance_refresh_without_launch_failures_is_no_shortage():
    decision = run([check(0, 2, 6), check(5, 2, 5, refresh="instance refresh r-1 is InProgress")])
    assert outcome(decision) == (
        HOLD,
        2,
        "instance refresh r-1 is InProgress: the nodes it replaces are not a spot shortage; the fallback acts only on "
        "missing nodes with launch failures (5 spot + 2 on-demand of 8, on-demand part 2)",
    )
    assert decision.state.short_since is None


def test_an_instance_refresh_short_of_spot_is_a_shortage():
    refresh = "instance refresh r-1 is InProgress"
    decision = run([check(0, 2, 5, failures=[(0, NO_CAPACITY)], refresh=refresh), check(15, 2, 5, refresh=refresh)])
    assert (decision.action, decision.on_demand) == (RAISE, 3)


STORED = FallbackState(
    node_group_id="sfr-1",
    on_demand=3,
    short_since=at(40),
    healthy_since=at(10),
    failures={"no-capacity": 2, "price": 1},
    changed_at=at(20),
    checked_at=at(45),
    history_read_until=at(44.5),
    probe_total=10,
    probe_extra=2,
    probe_started=at(41),
    hand_back_misses=1,
    next_hand_back=at(100),
    outside_since=at(43),
    intent={"total": 10, "on_demand": 3, "from_total": 8, "from_on_demand": 3},
    action=HOLD,
    reason="waiting",
)
STORED_JSON = (
    '{"action": "hold", "changed_at": "2026-11-23T06:20:00+00:00", "checked_at": "2026-11-23T06:45:00+00:00", '
    '"failures": {"no-capacity": 2, "price": 1}, "hand_back_misses": 1, "healthy_since": "2026-11-23T06:10:00+00:00", '
    '"history_read_until": "2026-11-23T06:44:30+00:00", "intent": {"from_on_demand": 3, "from_total": 8, '
    '"on_demand": 3, "total": 10}, "next_hand_back": "2026-11-23T07:40:00+00:00", "node_group_id": "sfr-1", '
    '"on_demand": 3, "outside_since": "2026-11-23T06:43:00+00:00", "probe_extra": 2, '
    '"probe_started": "2026-11-23T06:41:00+00:00", "probe_total": 10, "reason": "waiting", '
    '"short_since": "2026-11-23T06:40:00+00:00"}'
)


def test_state_json_text_names_every_field_with_iso_times():
    assert STORED.to_json() == STORED_JSON


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(STORED_JSON, STORED, id="every-field"),
        pytest.param("", FallbackState(), id="empty-text-is-fresh"),
        pytest.param("{}", FallbackState(), id="empty-document-is-fresh"),
        pytest.param(
            '{"on_demand": 3, "short_since": null, "retired_field": 1}',
            FallbackState(on_demand=3),
            id="unknown-names-ignored-null-times-stay-none",
        ),
    ],
)
def test_state_from_its_json_text(text, expected):
    assert FallbackState.from_json(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("not json", "not a fallback state (Expecting value: line 1 column 1 (char 0))", id="not-json"),
        pytest.param("[]", "not a fallback state ('list' object has no attribute 'items')", id="not-a-document"),
        pytest.param(
            '{"probe_started": "yesterday"}',
            "not a fallback state (Invalid isoformat string: 'yesterday')",
            id="not-a-time",
        ),
        pytest.param(
            '{"checked_at": 5}', "not a fallback state (fromisoformat: argument must be str)", id="a-number-for-a-time"
        ),
        pytest.param(
            '{"intent": [1]}', "not a fallback state (intent is not a document)", id="an-intent-not-a-document"
        ),
    ],
)
def test_text_that_is_not_a_state_is_one_value_error(text, message):
    with pytest.raises(ValueError) as raised:
        FallbackState.from_json(text)
    assert str(raised.value) == message


def test_a_state_about_another_fleet_starts_afresh():
    assert STORED.for_node_group("sfr-1") is STORED
    assert STORED.for_node_group("sfr-2") == FallbackState(node_group_id="sfr-2")


def test_the_state_parameter_is_named_after_the_environment():
    assert parameter_name("prod") == "/gpufleet/prod/fallback"


def test_a_hand_back_made_again_ends_first_the_nodes_the_fleet_put_back():
    """The hand-back's run ended its two nodes and failed before lowering the part; the fleet replaced them. Made
    again, the change ends the replacements first (after their hook): the part never drops below the live on-demand
    nodes, which would leave EC2 to pick which end."""
    handed_back = run([*PROBING, probe(35, 6)], FLEET)
    replaced = ("i-new2", "i-new1", "i-old", "i-floor")
    retried = decide(FLEET, probe(40, 6, nodes=replaced), handed_back.state)
    assert (retried.action, retried.on_demand, retried.total, retried.end) == (RETRY, 2, 8, ("i-new2", "i-new1"))
    assert retried.reason.endswith("made again; first the checkpoint hook runs on i-new2, i-new1, which then end(s)")


def test_what_the_handler_carried_out_when_a_hook_could_not_start():
    handed_back = run([*PROBING, probe(35, 6)], FLEET)
    carried = carried_out(FLEET, handed_back, ("i-mid",), at(35))
    assert (carried.on_demand, carried.end, carried.state.on_demand, carried.state.intent["on_demand"]) == (
        3,
        ("i-mid",),
        3,
        3,
    )
    assert carried.reason.endswith("; i-new kept: no checkpoint hook could start there")
    assert (carried.state.hand_back_misses, carried.state.next_hand_back) == (1, at(95))
    assert carried_out(FLEET, handed_back, ("i-new", "i-mid"), at(35)) == replace(handed_back, end=("i-new", "i-mid"))
