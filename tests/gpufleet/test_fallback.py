"""The capacity fallback's decision over fleet histories: each history is a list of checks, fed to decide one after
the other with the state each leaves; the last decision is compared with literals. (How the fleets answer the
decisions is tests/fallback_model/'s part.)"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from gpufleet.fallback import (
    ALIGN,
    CHECKPOINT_DONE,
    CHECKPOINT_RUNNING,
    HAND_BACK,
    HAND_BACK_BY_FALLBACK,
    HOLD,
    LOWER,
    NO_CAPACITY,
    PRICE,
    PROBE,
    RAISE,
    REAPPLY,
    REVERT,
    FallbackSettings,
    FallbackState,
    LaunchFailure,
    Observation,
    decide,
    parameter_name,
)

START = dt.datetime(2026, 11, 23, 6, 0, tzinfo=dt.UTC)
# dev-like: 8 nodes, 2 on demand, raise after 15 min, restore after 30, at most 2 extra on-demand nodes.
GROUP = FallbackSettings(floor=2, after=dt.timedelta(minutes=15), restore_after=dt.timedelta(minutes=30), max_extra=2)
FLEET = replace(GROUP, hands_back=HAND_BACK_BY_FALLBACK)


def at(minute: float) -> dt.datetime:
    return START + dt.timedelta(minutes=minute)


def check(minute, part, spot, on_demand=None, *, target=8, failures=(), nodes=(), checkpoints=None, **busy):
    """One look: the on-demand part, live spot and on-demand nodes (default: the part), launch failures as
    (minute, kind), the fleet's on-demand node ids, newest first (Spot Fleet), and its checkpoint hooks."""
    return Observation(
        at=at(minute),
        target=target,
        on_demand_target=part,
        spot_running=spot,
        on_demand_running=part if on_demand is None else on_demand,
        failures=tuple(LaunchFailure(at(m), kind, "probe") for m, kind in failures),
        on_demand_nodes=tuple(nodes),
        checkpoints=checkpoints or {},
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
                "spot back for 30 min: on-demand base 4 -> 2; the group replaces the extra on-demand nodes by spot "
                "ones as spot allows, launching each before it terminates one (through its lifecycle hook)",
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
            [check(0, 2, 6, 4), check(30, 2, 6, 4)],
            (HOLD, 2, "fleet full (6 spot + 4 on-demand of 8, on-demand part 2); on-demand part at its floor 2"),
            id="a-group-below-its-live-on-demand-nodes-replaces-them-itself",
        ),
    ],
)
def test_an_auto_scaling_group_gets_its_extra_nodes_back_to_spot(history, expected):
    assert outcome(run(history)) == expected


NODES = ("i-new", "i-mid", "i-old", "i-floor")  # newest first


def test_a_spot_fleet_probes_for_spot_and_checkpoints_every_on_demand_node():
    decision = run([check(0, 4, 4, nodes=NODES), check(30, 4, 4, nodes=NODES)], FLEET)
    assert (decision.action, decision.on_demand, decision.total, decision.checkpoint, decision.terminate) == (
        PROBE,
        4,
        10,
        NODES,
        (),
    )
    assert decision.reason == (
        "spot back for 30 min: asking for 2 spot node(s) beyond the target (8 -> 10) to replace on-demand node(s) "
        "i-new, i-mid; the checkpoint hook runs on every on-demand node (i-new, i-mid, i-old, i-floor)"
    )
    assert (
        decision.state.probe_total,
        decision.state.probe_extra,
        decision.state.probe_nodes,
        decision.state.probe_checkpointed,
        decision.state.probe_lowered,
        decision.state.probe_started,
    ) == (10, 2, ("i-new", "i-mid"), NODES, False, at(30))


PROBING = [check(0, 4, 4, nodes=NODES), check(30, 4, 4, nodes=NODES)]
DONE = {node: CHECKPOINT_DONE for node in NODES}


def probe(minute, spot, *, checkpoints=DONE, missing=0, nodes=NODES, target=10):
    return check(minute, 4, spot, 4 - missing, target=target, nodes=nodes, checkpoints=checkpoints)


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
                "hand-back under way for 5 min: 1 of 2 extra spot node(s) there (5 spot + 4 on-demand of 8, on-demand "
                "part 4); waiting up to 15 min for them",
            ),
            id="waits-for-the-spot-nodes",
        ),
        pytest.param(
            [probe(35, 6, checkpoints={**DONE, "i-floor": CHECKPOINT_RUNNING})],
            (
                HOLD,
                4,
                10,
                (),
                "hand-back under way for 5 min: 2 of 2 extra spot node(s) there (6 spot + 4 on-demand of 8, on-demand "
                "part 4); checkpoint hook(s) still running on i-floor",
            ),
            id="waits-for-every-hook",
        ),
        pytest.param(
            [probe(40, 6, checkpoints={"i-floor": CHECKPOINT_RUNNING})],
            (
                LOWER,
                2,
                10,
                (),
                "hand-back after 10 min: 2 of 2 extra spot node(s) came (6 spot + 4 on-demand of 8, on-demand part 4), "
                "checkpoint hooks done: on-demand part 4 -> 2; the on-demand node(s) end at the next check",
            ),
            id="a-hook-past-its-timeout-counts-as-done",
        ),
        pytest.param(
            [probe(35, 6)],
            (
                LOWER,
                2,
                10,
                (),
                "hand-back after 5 min: 2 of 2 extra spot node(s) came (6 spot + 4 on-demand of 8, on-demand part 4), "
                "checkpoint hooks done: on-demand part 4 -> 2; the on-demand node(s) end at the next check",
            ),
            id="lowers-the-part-once-spot-came-and-the-hooks-ran",
        ),
        pytest.param(
            [probe(45, 5)],
            (
                LOWER,
                3,
                9,
                (),
                "hand-back after 15 min: 1 of 2 extra spot node(s) came (5 spot + 4 on-demand of 8, on-demand part 4), "
                "checkpoint hooks done: on-demand part 4 -> 3, target 10 -> 9 (the requests that did not come "
                "withdrawn); the on-demand node(s) end at the next check",
            ),
            id="after-after-hands-back-what-came-and-withdraws-the-rest",
        ),
        pytest.param(
            [probe(45, 4)],
            (
                HAND_BACK,
                4,
                8,
                (),
                "hand-back after 15 min: no extra spot node came (4 spot + 4 on-demand of 8, on-demand part 4); the "
                "extra request is withdrawn (target 10 -> 8), the on-demand nodes stay",
            ),
            id="no-spot-withdraws-the-request",
        ),
        pytest.param(
            [probe(35, 3)],
            (
                HAND_BACK,
                4,
                8,
                (),
                "hand-back after 5 min: no extra spot node came (3 spot + 4 on-demand of 8, on-demand part 4); the "
                "extra request is withdrawn (target 10 -> 8), the on-demand nodes stay",
            ),
            id="missing-nodes-end-the-probe-at-once",
        ),
        pytest.param(
            [probe(35, 6), check(40, 2, 6, 4, target=10, nodes=NODES)],
            (
                HAND_BACK,
                2,
                8,
                ("i-new", "i-mid"),
                "hand-back after 10 min: ending on-demand node(s) i-new, i-mid (6 spot + 4 on-demand of 8, on-demand "
                "part 2), target 10 -> 8",
            ),
            id="ends-the-newest-checkpointed-nodes-above-the-part",
        ),
        pytest.param(
            [probe(35, 6), check(40, 2, 6, 3, target=10, nodes=("i-mid", "i-old", "i-floor"))],
            (
                HAND_BACK,
                2,
                8,
                ("i-mid",),
                "hand-back after 10 min: ending on-demand node(s) i-mid (6 spot + 3 on-demand of 8, on-demand part 2), "
                "target 10 -> 8",
            ),
            id="ends-only-what-ec2-left-above-the-part",
        ),
        pytest.param(
            [probe(35, 6), check(40, 2, 6, 2, target=10, nodes=("i-old", "i-floor"))],
            (
                HAND_BACK,
                2,
                8,
                (),
                "hand-back after 10 min: no on-demand node left to end (6 spot + 2 on-demand of 8, on-demand part 2), "
                "target 10 -> 8",
            ),
            id="ends-nothing-when-ec2-swapped-them",
        ),
    ],
)
def test_a_spot_fleet_hand_back(after_probe, expected):
    decision = run([*PROBING, *after_probe], FLEET)
    assert (decision.action, decision.on_demand, decision.total, decision.terminate, decision.reason) == expected


def test_a_hand_back_forgets_its_probe_and_restarts_the_restore_clock():
    decision = run([*PROBING, probe(35, 6), check(40, 2, 6, 4, target=10, nodes=NODES)], FLEET)
    assert decision.state == replace(
        decision.state,
        probe_total=None,
        probe_extra=0,
        probe_nodes=(),
        probe_checkpointed=(),
        probe_commands={},
        probe_lowered=False,
        probe_started=None,
        healthy_since=at(40),
        changed_at=at(40),
    )
    assert decision.state.probe_total is None and decision.state.healthy_since == at(40)


def test_a_target_changed_outside_the_fallback_drops_the_hand_back():
    decision = run([*PROBING, check(35, 4, 5, target=8, nodes=NODES, failures=[(34, NO_CAPACITY)])], FLEET)
    assert outcome(decision) == (
        HOLD,
        4,
        "the fleet's target is 8, not the 10 the hand-back asked for: changed outside the fallback, the hand-back is "
        "dropped; fleet full (5 spot + 4 on-demand of 8, on-demand part 4), spot back for 1 min; 2 extra on-demand "
        "node(s) go back to spot after 30 min",
    )
    assert decision.state.probe_total is None


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(
            [*RAISED, check(20, 2, 3, 4)],
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
                HOLD,
                2,
                "fleet full (4 spot + 4 on-demand of 8, on-demand part 2); on-demand part at its floor 2",
            ),
            id="a-group-reset-with-nothing-missing-stands",
        ),
        pytest.param(
            [check(0, 3, 5), check(5, 2, 5, 3)],
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
    small = replace(GROUP, max_extra=5)
    assert small.ceiling(4) == 4 and small.ceiling(8) == 7
    decision = run([check(0, 2, 0, target=3), check(15, 2, 0, target=3)], small)
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
    probe_nodes=("i-1", "i-2"),
    probe_checkpointed=("i-1", "i-2", "i-3"),
    probe_commands={"i-1": "c-1"},
    probe_lowered=True,
    probe_started=at(41),
    action=HOLD,
    reason="waiting",
)
STORED_JSON = (
    '{"action": "hold", "changed_at": "2026-11-23T06:20:00+00:00", "checked_at": "2026-11-23T06:45:00+00:00", '
    '"failures": {"no-capacity": 2, "price": 1}, "healthy_since": "2026-11-23T06:10:00+00:00", '
    '"history_read_until": "2026-11-23T06:44:30+00:00", "node_group_id": "sfr-1", "on_demand": 3, '
    '"probe_checkpointed": ["i-1", "i-2", "i-3"], "probe_commands": {"i-1": "c-1"}, "probe_extra": 2, '
    '"probe_lowered": true, "probe_nodes": ["i-1", "i-2"], "probe_started": "2026-11-23T06:41:00+00:00", '
    '"probe_total": 10, "reason": "waiting", "short_since": "2026-11-23T06:40:00+00:00"}'
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
