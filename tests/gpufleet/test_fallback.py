"""The capacity fallback's decision over fleet histories: each history is a list of checks, fed to decide one after
the other with the state each leaves; the last decision is compared with a literal."""

from __future__ import annotations

import datetime as dt

import pytest

from gpufleet.fallback import (
    ERROR,
    HOLD,
    LOWER,
    NO_CAPACITY,
    PRICE,
    RAISE,
    FallbackSettings,
    FallbackState,
    LaunchFailure,
    Observation,
    decide,
)

START = dt.datetime(2026, 11, 23, 6, 0, tzinfo=dt.UTC)
# dev-like: 8 nodes, 2 on demand, raise after 15 min, restore after 30, at most 2 extra on-demand nodes.
SETTINGS = FallbackSettings(
    target=8,
    floor=2,
    after=dt.timedelta(minutes=15),
    restore_after=dt.timedelta(minutes=30),
    max_extra=2,
)


def at(minute: float) -> dt.datetime:
    return START + dt.timedelta(minutes=minute)


def check(minute, on_demand, spot, on_demand_running=None, failures=()):
    """One check: the fleet's on-demand part, its live spot nodes and on-demand nodes (default: the on-demand part)."""
    return Observation(
        at=at(minute),
        on_demand_target=on_demand,
        spot_running=spot,
        on_demand_running=on_demand if on_demand_running is None else on_demand_running,
        failures=tuple(LaunchFailure(at(m), kind, "probe") for m, kind in failures),
    )


def run(history, settings=SETTINGS, state=None):
    state = state or FallbackState(node_group_id="sfr-1")
    decision = None
    for observation in history:
        decision = decide(settings, observation, state)
        state = decision.state
    return decision


HISTORIES = [
    pytest.param([check(0, 2, 6)], (HOLD, 2, "spot part full (6 of 6); on-demand part at its floor 2"), id="full"),
    pytest.param(
        [check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(14, 2, 4)],
        (
            HOLD,
            2,
            "2 of 6 spot nodes missing for 14 min (launch failures: no-capacity x1); on-demand part 2 rises after "
            "15 min",
        ),
        id="short-14-minutes",
    ),
    pytest.param(
        [check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(14.99, 2, 4)],
        (
            HOLD,
            2,
            "2 of 6 spot nodes missing for 14.99 min (launch failures: no-capacity x1); on-demand part 2 rises after "
            "15 min",
        ),
        id="short-just-under-after",
    ),
    pytest.param(
        [check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(5, 2, 4, failures=[(4, PRICE)]), check(15, 2, 4)],
        (
            RAISE,
            4,
            "2 of 6 spot nodes missing for 15 min (launch failures: no-capacity x1, price x1): on-demand part 2 -> 4",
        ),
        id="short-exactly-after-raises-by-shortfall",
    ),
    pytest.param(
        [check(0, 2, 5), check(15, 2, 5)],
        (
            RAISE,
            3,
            "1 of 6 spot nodes missing for 15 min (the history reports no launch failure): on-demand part 2 -> 3",
        ),
        id="shortfall-without-failure-raises-too",
    ),
    pytest.param(
        [check(0, 2, 3, failures=[(0, ERROR)]), check(15, 2, 3)],
        (
            RAISE,
            4,
            "3 of 6 spot nodes missing for 15 min (launch failures: error x1): on-demand part 2 -> 4 (capped at the "
            "ceiling)",
        ),
        id="raise-capped-at-ceiling",
    ),
    pytest.param(
        [check(0, 4, 3), check(15, 4, 3)],
        (
            HOLD,
            4,
            "1 of 4 spot nodes missing for 15 min (the history reports no launch failure); on-demand part 4 is at its "
            "ceiling (capacity.on_demand 2 + max_extra_on_demand 2, at most the target 8)",
        ),
        id="at-ceiling-holds",
    ),
    pytest.param(
        [check(0, 2, 4), check(5, 2, 6), check(10, 2, 4), check(20, 2, 4)],
        (
            HOLD,
            2,
            "2 of 6 spot nodes missing for 10 min (the history reports no launch failure); on-demand part 2 rises "
            "after 15 min",
        ),
        id="a-full-check-restarts-the-shortfall-clock",
    ),
    pytest.param(
        [check(0, 2, 5), check(15, 2, 5), check(20, 3, 4), check(34, 3, 4)],
        (
            HOLD,
            3,
            "1 of 5 spot nodes missing for 14 min (the history reports no launch failure); on-demand part 3 rises "
            "after 15 min",
        ),
        id="after-a-raise-a-new-shortfall-waits-again",
    ),
    pytest.param(
        [check(0, 4, 4), check(29, 4, 4)],
        (HOLD, 4, "spot back for 29 min; one of 2 extra on-demand node(s) goes after 30 min"),
        id="restore-just-before",
    ),
    pytest.param(
        [check(0, 4, 4), check(30, 4, 4)],
        (LOWER, 3, "spot back for 30 min: on-demand part 4 -> 3, one node for spot (floor 2)"),
        id="restore-exactly-lowers-one",
    ),
    pytest.param(
        [check(0, 4, 4), check(30, 4, 4), check(35, 3, 5), check(59, 3, 5)],
        (HOLD, 3, "spot back for 29 min; one of 1 extra on-demand node(s) goes after 30 min"),
        id="each-step-waits-restore-after-again",
    ),
    pytest.param(
        [check(0, 4, 4), check(30, 4, 4), check(35, 3, 5), check(60, 3, 5)],
        (LOWER, 2, "spot back for 30 min: on-demand part 3 -> 2, one node for spot (floor 2)"),
        id="second-step-reaches-the-floor",
    ),
    pytest.param(
        [check(0, 4, 4), check(10, 4, 4, failures=[(12, NO_CAPACITY)]), check(40, 4, 4)],
        (HOLD, 4, "spot back for 28 min; one of 2 extra on-demand node(s) goes after 30 min"),
        id="a-failure-restarts-the-restore-clock",
    ),
    pytest.param(
        [check(0, 4, 4), check(10, 4, 4, failures=[(12, NO_CAPACITY)]), check(42, 4, 4)],
        (LOWER, 3, "spot back for 30 min: on-demand part 4 -> 3, one node for spot (floor 2)"),
        id="restore-counted-from-the-last-failure",
    ),
    pytest.param(
        [check(0, 4, 4), check(30, 4, 4, on_demand_running=3)],
        (
            HOLD,
            4,
            "2 extra on-demand node(s); waiting for the fleet to reach its target (7 of 8) before replacing one",
        ),
        id="never-lowers-below-target",
    ),
    pytest.param(
        [check(0, 4, 4), check(20, 4, 3), check(30, 4, 4), check(59, 4, 4)],
        (HOLD, 4, "spot back for 29 min; one of 2 extra on-demand node(s) goes after 30 min"),
        id="a-shortfall-restarts-the-restore-clock",
    ),
    pytest.param(
        [check(0, 3, 3, failures=[(0, NO_CAPACITY)]), check(5, 3, 5), check(10, 3, 3), check(20, 3, 3)],
        (
            HOLD,
            3,
            "2 of 5 spot nodes missing for 10 min (the history reports no launch failure); on-demand part 3 rises "
            "after 15 min",
        ),
        id="a-full-check-above-the-floor-restarts-the-shortfall-clock-and-its-failures",
    ),
    pytest.param(
        [
            check(0, 3, 3, failures=[(0, NO_CAPACITY)]),
            check(5, 3, 5, on_demand_running=2),
            check(10, 3, 3),
            check(20, 3, 3),
        ],
        (
            HOLD,
            3,
            "2 of 5 spot nodes missing for 10 min (the history reports no launch failure); on-demand part 3 rises "
            "after 15 min",
        ),
        id="a-full-spot-part-below-target-restarts-the-shortfall-clock-and-its-failures",
    ),
    pytest.param(
        [check(0, 5, 1), check(15, 5, 1)],
        (
            HOLD,
            5,
            "2 of 3 spot nodes missing for 15 min (the history reports no launch failure); on-demand part 5 is at its "
            "ceiling (capacity.on_demand 2 + max_extra_on_demand 2, at most the target 8)",
        ),
        id="above-the-ceiling-a-shortfall-never-lowers",
    ),
    pytest.param(
        [check(0, 1, 7), check(30, 1, 7)],
        (HOLD, 1, "spot part full (7 of 7); on-demand part at its floor 1"),
        id="below-the-floor-never-lowers",
    ),
    pytest.param(
        [check(0, 4, 4), check(20, 4, 3), check(30, 4, 4)],
        (HOLD, 4, "spot back for 0 min; one of 2 extra on-demand node(s) goes after 30 min"),
        id="spot-back-after-a-shortfall-counts-from-then",
    ),
    pytest.param(
        [check(0, 4, 3, failures=[(0, NO_CAPACITY)]), check(15, 4, 3, failures=[(14, PRICE)]), check(20, 4, 3)],
        (
            HOLD,
            4,
            "1 of 4 spot nodes missing for 20 min (launch failures: no-capacity x1, price x1); on-demand part 4 is at "
            "its ceiling (capacity.on_demand 2 + max_extra_on_demand 2, at most the target 8)",
        ),
        id="at-the-ceiling-the-shortfall-clock-and-its-failures-go-on",
    ),
    pytest.param(
        [check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(5, 2, 6), check(10, 2, 4), check(20, 2, 4)],
        (
            HOLD,
            2,
            "2 of 6 spot nodes missing for 10 min (the history reports no launch failure); on-demand part 2 rises "
            "after 15 min",
        ),
        id="a-full-check-at-the-floor-forgets-the-failures",
    ),
    pytest.param(
        [check(0, 2, 6), check(30, 3, 5)],
        (LOWER, 2, "spot back for 30 min: on-demand part 3 -> 2, one node for spot (floor 2)"),
        id="a-raise-set-by-hand-is-given-back-counting-from-the-first-full-check",
    ),
    pytest.param(
        [check(0, 4, 4), check(20, 4, 4, on_demand_running=3, failures=[(18, NO_CAPACITY)]), check(30, 4, 4)],
        (HOLD, 4, "spot back for 12 min; one of 2 extra on-demand node(s) goes after 30 min"),
        id="a-failure-while-waiting-for-the-target-restarts-the-restore-clock",
    ),
    pytest.param(
        [check(0, 4, 4), check(20, 4, 4, on_demand_running=3), check(30, 4, 4)],
        (LOWER, 3, "spot back for 30 min: on-demand part 4 -> 3, one node for spot (floor 2)"),
        id="waiting-for-the-target-keeps-the-restore-clock",
    ),
]


@pytest.mark.parametrize(("history", "expected"), HISTORIES)
def test_decision_over_a_fleet_history(history, expected):
    decision = run(history)
    assert (decision.action, decision.on_demand, decision.reason) == expected


SMALL = FallbackSettings(
    target=3, floor=2, after=dt.timedelta(minutes=15), restore_after=dt.timedelta(minutes=30), max_extra=2
)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(
            [check(0, 2, 0), check(15, 2, 0)],
            (
                RAISE,
                3,
                "1 of 1 spot nodes missing for 15 min (the history reports no launch failure): on-demand part 2 -> 3",
            ),
            id="ceiling-is-at-most-the-target",
        ),
        pytest.param(
            [check(0, 2, 0), check(15, 2, 0), check(20, 3, 0), check(50, 3, 0)],
            (LOWER, 2, "spot back for 30 min: on-demand part 3 -> 2, one node for spot (floor 2)"),
            id="at-the-target-no-spot-is-wanted-so-none-is-missing",
        ),
    ],
)
def test_the_ceiling_never_passes_the_target(history, expected):
    decision = run(history, settings=SMALL)
    assert (decision.action, decision.on_demand, decision.reason) == expected
    assert SMALL.ceiling == 3


def test_a_deploy_that_resets_the_on_demand_part_is_noticed_and_the_raise_applied_again():
    raised = run([check(0, 2, 4), check(15, 2, 4)])
    assert (raised.action, raised.on_demand) == (RAISE, 4)
    # The deploy wrote OnDemandTargetCapacity 2 back; the fleet still runs 4 on-demand and 4 spot nodes.
    decision = decide(SETTINGS, check(20, 2, 4, on_demand_running=4), raised.state)
    assert (decision.action, decision.on_demand, decision.reapplied) == (RAISE, 4, True)
    assert decision.reason == (
        "on-demand part is 2, the template's value, but the fallback had raised it to 4: a deploy reset it; "
        "raising it to 4 again"
    )
    assert decision.state.short_since is None and decision.state.changed_at == at(20)


def test_a_reset_is_raised_again_only_up_to_the_ceiling_of_the_new_settings():
    raised = run([check(0, 2, 4), check(15, 2, 4)])
    one_extra = FallbackSettings(
        target=8, floor=2, after=dt.timedelta(minutes=15), restore_after=dt.timedelta(minutes=30), max_extra=1
    )
    decision = decide(one_extra, check(20, 2, 4, on_demand_running=4), raised.state)
    assert (decision.action, decision.on_demand, decision.reapplied) == (RAISE, 3, True)
    assert decision.reason == (
        "on-demand part is 2, the template's value, but the fallback had raised it to 4: a deploy reset it; "
        "raising it to 3 again"
    )
    assert decision.state.on_demand == 3


def test_a_reset_keeps_the_restore_clock():
    held = run([check(0, 4, 4)])
    reapplied = decide(SETTINGS, check(10, 2, 6, on_demand_running=4), held.state)
    assert reapplied.state == FallbackState(
        node_group_id="sfr-1",
        on_demand=4,
        short_since=None,
        healthy_since=at(0),
        failures={},
        changed_at=at(10),
        checked_at=at(10),
        action=RAISE,
        reason=(
            "on-demand part is 2, the template's value, but the fallback had raised it to 4: a deploy reset it; "
            "raising it to 4 again"
        ),
    )
    decision = decide(SETTINGS, check(30, 4, 4), reapplied.state)
    assert (decision.action, decision.on_demand, decision.reason) == (
        LOWER,
        3,
        "spot back for 30 min: on-demand part 4 -> 3, one node for spot (floor 2)",
    )


def test_a_reset_keeps_the_shortfall_clock_and_its_failures():
    held = run([check(0, 3, 3, failures=[(0, NO_CAPACITY)])])
    reapplied = decide(SETTINGS, check(10, 2, 4, on_demand_running=3), held.state)
    assert (reapplied.action, reapplied.on_demand, reapplied.reapplied) == (RAISE, 3, True)
    assert (reapplied.state.short_since, reapplied.state.failures) == (at(0), {"no-capacity": 1})
    decision = decide(SETTINGS, check(15, 3, 3), reapplied.state)
    assert (decision.action, decision.on_demand, decision.reason) == (
        RAISE,
        4,
        "2 of 5 spot nodes missing for 15 min (launch failures: no-capacity x1): on-demand part 3 -> 4 (capped at the "
        "ceiling)",
    )


def test_a_value_set_outside_the_fallback_is_followed():
    raised = run([check(0, 2, 4), check(15, 2, 4)])
    decision = decide(SETTINGS, check(20, 3, 5), raised.state)
    assert (decision.action, decision.on_demand, decision.reapplied) == (HOLD, 3, False)
    assert decision.state.on_demand == 3


def test_state_survives_its_json_form():
    decision = run([check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(5, 2, 4)])
    text = decision.state.to_json()
    assert FallbackState.from_json(text) == decision.state
    assert FallbackState.from_json("{}") == FallbackState()
    assert '"short_since": "2026-11-23T06:00:00+00:00"' in text


def test_a_state_about_another_fleet_starts_afresh():
    raised = run([check(0, 2, 4), check(15, 2, 4)]).state
    assert raised.for_node_group("sfr-1") is raised
    assert raised.for_node_group("sfr-2") == FallbackState(node_group_id="sfr-2")


def test_a_hold_during_a_shortfall_remembers_its_clock_and_failures_and_not_a_change():
    decision = run([check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(5, 2, 4, failures=[(4, PRICE)])])
    assert decision.state == FallbackState(
        node_group_id="sfr-1",
        on_demand=2,
        short_since=at(0),
        healthy_since=None,
        failures={"no-capacity": 1, "price": 1},
        changed_at=None,
        checked_at=at(5),
        action=HOLD,
        reason=(
            "2 of 6 spot nodes missing for 5 min (launch failures: no-capacity x1, price x1); on-demand part 2 rises "
            "after 15 min"
        ),
    )


def test_a_raise_remembers_its_time_and_clears_the_shortfall():
    decision = run([check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(15, 2, 4)])
    assert decision.state == FallbackState(
        node_group_id="sfr-1",
        on_demand=4,
        short_since=None,
        healthy_since=None,
        failures={},
        changed_at=at(15),
        checked_at=at(15),
        action=RAISE,
        reason="2 of 6 spot nodes missing for 15 min (launch failures: no-capacity x1): on-demand part 2 -> 4",
    )


def test_a_lower_restarts_the_restore_clock_at_its_time():
    decision = run([check(0, 4, 4), check(30, 4, 4)])
    assert decision.state == FallbackState(
        node_group_id="sfr-1",
        on_demand=3,
        short_since=None,
        healthy_since=at(30),
        failures={},
        changed_at=at(30),
        checked_at=at(30),
        action=LOWER,
        reason="spot back for 30 min: on-demand part 4 -> 3, one node for spot (floor 2)",
    )


STORED = FallbackState(
    node_group_id="sfr-1",
    on_demand=3,
    short_since=at(40),
    healthy_since=at(10),
    failures={"no-capacity": 2, "price": 1},
    changed_at=at(20),
    checked_at=at(45),
    history_read_until=at(44.5),
    action=HOLD,
    reason="waiting",
)
STORED_JSON = (
    '{"action": "hold", "changed_at": "2026-11-23T06:20:00+00:00", "checked_at": "2026-11-23T06:45:00+00:00", '
    '"failures": {"no-capacity": 2, "price": 1}, "healthy_since": "2026-11-23T06:10:00+00:00", '
    '"history_read_until": "2026-11-23T06:44:30+00:00", "node_group_id": "sfr-1", "on_demand": 3, '
    '"reason": "waiting", "short_since": "2026-11-23T06:40:00+00:00"}'
)


def test_state_json_text_names_every_field_with_iso_times():
    assert STORED.to_json() == STORED_JSON
    assert FallbackState(node_group_id="sfr-2").to_json() == (
        '{"action": "", "changed_at": null, "checked_at": null, "failures": {}, "healthy_since": null, '
        '"history_read_until": null, "node_group_id": "sfr-2", "on_demand": null, "reason": "", "short_since": null}'
    )


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
            '{"history_read_until": "yesterday"}',
            "not a fallback state (Invalid isoformat string: 'yesterday')",
            id="not-a-time",
        ),
        pytest.param(
            '{"checked_at": 5}',
            "not a fallback state (fromisoformat: argument must be str)",
            id="a-number-for-a-time",
        ),
    ],
)
def test_text_that_is_not_a_state_is_one_value_error(text, message):
    with pytest.raises(ValueError) as raised:
        FallbackState.from_json(text)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("history", "expected_state"),
    [
        pytest.param(
            [check(0, 2, 4, failures=[(0, NO_CAPACITY)]), check(5, 2, 6)],
            FallbackState(
                node_group_id="sfr-1",
                on_demand=2,
                healthy_since=at(5),
                failures={},
                checked_at=at(5),
                action=HOLD,
                reason="spot part full (6 of 6); on-demand part at its floor 2",
            ),
            id="full-at-the-floor",
        ),
        pytest.param(
            [check(0, 4, 3, failures=[(0, NO_CAPACITY)]), check(5, 4, 4, on_demand_running=3)],
            FallbackState(
                node_group_id="sfr-1",
                on_demand=4,
                healthy_since=at(5),
                failures={},
                checked_at=at(5),
                action=HOLD,
                reason=(
                    "2 extra on-demand node(s); waiting for the fleet to reach its target (7 of 8) before replacing one"
                ),
            ),
            id="waiting-for-the-target",
        ),
    ],
)
def test_a_full_spot_part_clears_the_shortfall_from_the_state(history, expected_state):
    assert run(history).state == expected_state
