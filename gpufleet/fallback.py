"""Spot first, on-demand when spot is not there, spot again when it returns (fleet.fallback): the decision.

A scheduled Lambda (stacks/constructs/capacity_fallback/runtime/handler.py) observes the fleet or Auto Scaling group,
calls `decide`, and applies its answer to the on-demand part (a Spot Fleet's OnDemandTargetCapacity, a group's
OnDemandBaseCapacity).
This module is that decision and the state it keeps between runs, with no AWS in it, so the same file serves the
Lambda (its asset carries this file) and `gpufleet status` (which reads the state). Standard library only.

The rules:
- Shortfall: spot nodes wanted (target - on-demand part) minus spot nodes pending or running. It starts a clock at the
  first check that sees it; when it has lasted `after` (at or past the bound), the on-demand part rises by the
  shortfall, capped at floor + max_extra (and at the target). A raise restarts the clock.
- Restore: spot counts as back from the first check with no shortfall, or from the last spot launch failure after it,
  whichever is later. When it has been back for `restore_after` (at or past the bound) and the whole fleet is at its
  target, the on-demand part drops by ONE node, and the clock restarts: one node per `restore_after`, until the floor.
  One at a time because no API says how many spot nodes can be had: each step asks for one more spot node, and only
  after it came (the fleet full again, no failure) and stayed for `restore_after` is the next on-demand node let go.
  A step that finds no spot node shows up as a shortfall again and is raised back after `after`.
- A deploy writes the template's on-demand part back (capacity.on_demand). When the fleet shows the floor while the
  state says the fallback had raised it, the raise is applied again and the decision says so. Any other value set
  outside the fallback is taken as the new on-demand part.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

RAISE, LOWER, HOLD = "raise", "lower", "hold"
# What stopped a spot launch, as read from a Spot Fleet's history or an Auto Scaling group's activities.
NO_CAPACITY, PRICE, ERROR = "no-capacity", "price", "error"


@dataclass(frozen=True)
class FallbackSettings:
    target: int  # nodes the fleet keeps running
    floor: int  # capacity.on_demand: the on-demand part with spot available
    after: dt.timedelta  # fleet.fallback.after_minutes
    restore_after: dt.timedelta  # fleet.fallback.restore_after_minutes
    max_extra: int  # fleet.fallback.max_extra_on_demand

    @property
    def ceiling(self) -> int:
        """The highest on-demand part the fallback sets."""
        return min(self.floor + self.max_extra, self.target)


@dataclass(frozen=True)
class LaunchFailure:
    at: dt.datetime
    kind: str  # NO_CAPACITY | PRICE | ERROR
    description: str


@dataclass(frozen=True)
class Observation:
    """One look at the fleet: its on-demand part as set now, the nodes it has, and the spot launch failures its
    history reports since the previous look."""

    at: dt.datetime
    on_demand_target: int
    spot_running: int  # spot nodes pending or running
    on_demand_running: int  # on-demand nodes pending or running
    failures: tuple[LaunchFailure, ...] = ()


@dataclass(frozen=True)
class FallbackState:
    """What the fallback remembers between runs (kept in an SSM parameter by the Lambda)."""

    node_group_id: str = ""  # the fleet request or group this state is about; another one starts afresh
    on_demand: int | None = None  # the on-demand part the fallback last saw or set; None before its first run
    short_since: dt.datetime | None = None  # first check of the running spot shortfall
    healthy_since: dt.datetime | None = None  # since when spot has been back (no shortfall, no failure)
    failures: dict[str, int] = field(default_factory=dict)  # failure kinds seen during the running shortfall
    changed_at: dt.datetime | None = None  # when the fallback last changed the on-demand part
    checked_at: dt.datetime | None = None
    history_read_until: dt.datetime | None = None  # the fleet history is read from here on the next run
    action: str = ""  # the last decision
    reason: str = ""

    def to_json(self) -> str:
        document: dict[str, Any] = {}
        for name, value in vars(self).items():
            document[name] = value.isoformat() if isinstance(value, dt.datetime) else value
        return json.dumps(document, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FallbackState:
        """The state a parameter holds; fields it lacks take their defaults (an empty document is a fresh state).
        Raises ValueError for text that is not a state (someone edited the parameter)."""
        try:
            document = json.loads(text or "{}")
            known = {name: value for name, value in document.items() if name in cls.__dataclass_fields__}
            for name in ("short_since", "healthy_since", "changed_at", "checked_at", "history_read_until"):
                if known.get(name):
                    known[name] = dt.datetime.fromisoformat(known[name])
        except (ValueError, TypeError, AttributeError) as error:
            raise ValueError(f"not a fallback state ({error})") from None
        return cls(**known)

    def for_node_group(self, node_group_id: str) -> FallbackState:
        """This state if it is about node_group_id, else a fresh one: a fleet that a deploy replaced (or a new
        stack after a teardown) starts with the template's on-demand part and owes nothing to the old one."""
        return self if self.node_group_id == node_group_id else FallbackState(node_group_id=node_group_id)


@dataclass(frozen=True)
class Decision:
    action: str  # RAISE | LOWER | HOLD
    on_demand: int  # the on-demand part after the decision (unchanged for HOLD)
    reason: str
    state: FallbackState  # what to remember for the next run
    reapplied: bool = False  # a raise that puts back what a deploy reset


def parameter_name(environment_name: str) -> str:
    """The SSM parameter that holds an environment's fallback state (written by the Lambda, read by status)."""
    return f"/gpufleet/{environment_name}/fallback"


def minutes(delta: dt.timedelta) -> str:
    return f"{delta.total_seconds() / 60:g} min"


def failure_summary(counts: dict[str, int]) -> str:
    if not counts:
        return "the history reports no launch failure"
    return "launch failures: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(counts.items()))


def decide(settings: FallbackSettings, observation: Observation, state: FallbackState) -> Decision:
    now = observation.at
    current = observation.on_demand_target
    spot_wanted = max(settings.target - current, 0)
    shortfall = max(spot_wanted - observation.spot_running, 0)

    def decision(action: str, on_demand: int, reason: str, **changes: Any) -> Decision:
        changed_at = state.changed_at if action == HOLD else now
        new_state = replace(
            state, on_demand=on_demand, checked_at=now, changed_at=changed_at, action=action, reason=reason, **changes
        )
        return Decision(action, on_demand, reason, new_state)

    if state.on_demand is not None and current != state.on_demand:
        if current == settings.floor and state.on_demand > settings.floor:
            wanted = min(state.on_demand, settings.ceiling)
            reason = (
                f"on-demand part is {current}, the template's value, but the fallback had raised it to "
                f"{state.on_demand}: a deploy reset it; raising it to {wanted} again"
            )
            # The clocks stay as they were: this observation's shortfall is the reset, not spot.
            new_state = replace(state, on_demand=wanted, checked_at=now, changed_at=now, action=RAISE, reason=reason)
            return Decision(RAISE, wanted, reason, new_state, reapplied=True)

    if shortfall:
        short_since = state.short_since or now
        counts = Counter(state.failures) + Counter(failure.kind for failure in observation.failures)
        lasted = now - short_since
        situation = (
            f"{shortfall} of {spot_wanted} spot nodes missing for {minutes(lasted)} ({failure_summary(dict(counts))})"
        )
        if lasted < settings.after:
            return decision(
                HOLD,
                current,
                f"{situation}; on-demand part {current} rises after {minutes(settings.after)}",
                short_since=short_since,
                healthy_since=None,
                failures=dict(counts),
            )
        wanted = min(current + shortfall, settings.ceiling)
        if wanted <= current:
            return decision(
                HOLD,
                current,
                f"{situation}; on-demand part {current} is at its ceiling (capacity.on_demand {settings.floor} + "
                f"max_extra_on_demand {settings.max_extra}, at most the target {settings.target})",
                short_since=short_since,
                healthy_since=None,
                failures=dict(counts),
            )
        capped = " (capped at the ceiling)" if wanted < current + shortfall else ""
        return decision(
            RAISE,
            wanted,
            f"{situation}: on-demand part {current} -> {wanted}{capped}",
            short_since=None,
            healthy_since=None,
            failures={},
        )

    failure_times = [failure.at for failure in observation.failures]
    healthy_since = max([state.healthy_since or now, *failure_times])
    if current <= settings.floor:
        return decision(
            HOLD,
            current,
            f"spot part full ({observation.spot_running} of {spot_wanted}); on-demand part at its floor {current}",
            short_since=None,
            healthy_since=healthy_since,
            failures={},
        )
    back_for = now - healthy_since
    if observation.spot_running + observation.on_demand_running < settings.target:
        return decision(
            HOLD,
            current,
            f"{current - settings.floor} extra on-demand node(s); waiting for the fleet to reach its target "
            f"({observation.spot_running + observation.on_demand_running} of {settings.target}) before replacing one",
            short_since=None,
            healthy_since=healthy_since,
            failures={},
        )
    if back_for < settings.restore_after:
        return decision(
            HOLD,
            current,
            f"spot back for {minutes(back_for)}; one of {current - settings.floor} extra on-demand node(s) goes "
            f"after {minutes(settings.restore_after)}",
            short_since=None,
            healthy_since=healthy_since,
            failures={},
        )
    return decision(
        LOWER,
        current - 1,
        f"spot back for {minutes(back_for)}: on-demand part {current} -> {current - 1}, one node for spot "
        f"(floor {settings.floor})",
        short_since=None,
        healthy_since=now,
        failures={},
    )
