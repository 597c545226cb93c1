"""Spot first, on-demand when spot is not there, spot again when it returns (fleet.fallback): the decision.

A scheduled Lambda (stacks/constructs/capacity_fallback/runtime/handler.py) observes the fleet or Auto Scaling group,
calls `decide`, and applies its answer: the on-demand part (a Spot Fleet's OnDemandTargetCapacity, a group's
OnDemandBaseCapacity) and, on a Spot Fleet, the extra spot nodes it asks for and the on-demand nodes it ends.
This module is that decision and the state it keeps between runs, with no AWS in it, so the same file serves the
Lambda (its asset carries this file) and `gpufleet status` (which reads the state). Standard library only.

The rules, each checked against a model of how the fleets behave (tests/fallback_model/, which says where each
behaviour comes from):
- Nodes are missing when the fleet runs (pending or running) fewer than its target, whatever their market. A spot
  node missing for `after` raises the on-demand part by the missing spot nodes, at most to the ceiling
  (floor + max_extra, at most the target). Counting the whole fleet, not the spot part alone, is what keeps a Spot
  Fleet that keeps a surplus on-demand node from reading as short of spot.
- Revert: an on-demand part above the floor that on-demand capacity has not filled for `after` since the fallback's
  last change, or at once when the fleet is full without those nodes, is lowered to the on-demand nodes there are
  (never below the floor): the requests go back to spot. With both markets short the requests alternate between
  them, one change per `after` at most, so whichever market returns first fills them (problem 3 of issue 19: a
  raise on-demand could not fill held the fleet short forever).
- Spot back: from the first check with nothing missing, or from the last spot launch failure after it, whichever is
  later. Once it has lasted `restore_after`, the extra on-demand nodes are handed back to spot, all of them in one
  step, in the way each backend can do without a gap and without a node ending before its checkpoint hook:
  - an Auto Scaling group (HAND_BACK_BY_GROUP): the on-demand base drops to the floor; the group replaces the
    on-demand nodes by spot ones, launching each new node before it terminates the old one, and terminates through
    its lifecycle hook (AWS documents both), so a spot shortage leaves the on-demand nodes where they are;
  - a Spot Fleet (HAND_BACK_BY_FALLBACK): EC2 documents no swap of an on-demand node for a spot one when the on-demand
    part falls alone (unconfirmed either way: the model has both), so the fallback asks for spot first and ends the
    on-demand nodes itself, in three changes (_probe_progress): the total rises by the extra nodes (documented: the
    fleet launches spot) while the checkpoint hook starts on every on-demand node; once the spot nodes came (or
    `after` passed) and every hook finished (or `checkpoint_timeout` passed), the part drops by the spot nodes that
    came; at the next check the fallback ends as many checkpointed on-demand nodes as remain above the part and sets
    the total back. Whether EC2 keeps the surplus or swaps it in between, every node that ends has had its hook, and
    no gap opens (problem 4).
- A change made outside the fallback (a deploy writes the template's part back, problem 5) is followed: when nodes
  are missing the fallback's raise is applied again at once; otherwise the new part stands, except that on a Spot
  Fleet a part below the live on-demand nodes is raised to them (the undocumented case again).
- While the fleet cannot or should not be changed (a Spot Fleet being modified, cancelled or not found; an Auto
  Scaling group being deleted or not found) the fallback holds; what a deletion or cancellation ends is no shortage,
  so the clocks start again after it (a modification, over within the minute, keeps them). During an Auto Scaling
  group's instance refresh the nodes it has ended are not a spot shortage either (problem 5): the fallback holds
  unless nodes are missing and launches failed, which is a shortage the refresh itself cannot finish without.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

HOLD, RAISE, REAPPLY, REVERT, ALIGN, LOWER, PROBE, HAND_BACK = (
    "hold",
    "raise",
    "reapply",
    "revert",
    "align",
    "lower",
    "probe",
    "hand-back",
)
# What stopped a launch, as read from a Spot Fleet's history or an Auto Scaling group's activities.
NO_CAPACITY, PRICE, ERROR = "no-capacity", "price", "error"
# How a backend gives on-demand nodes back to spot (see the module doc).
HAND_BACK_BY_GROUP, HAND_BACK_BY_FALLBACK = "group", "fallback"
# The checkpoint hook of a node the fallback is about to end: still running, or finished (whatever its result).
CHECKPOINT_RUNNING, CHECKPOINT_DONE = "running", "done"


@dataclass(frozen=True)
class FallbackSettings:
    floor: int  # capacity.on_demand: the on-demand part with spot available
    after: dt.timedelta  # fleet.fallback.after_minutes
    restore_after: dt.timedelta  # fleet.fallback.restore_after_minutes
    max_extra: int  # fleet.fallback.max_extra_on_demand
    hands_back: str = HAND_BACK_BY_GROUP
    # How long a node's checkpoint hook may run before the fallback ends the node anyway; the Auto Scaling group's
    # lifecycle hook waits as long (stacks/constructs/gpu_auto_scaling_group.py, HEARTBEAT_TIMEOUT).
    checkpoint_timeout: dt.timedelta = dt.timedelta(minutes=10)

    def ceiling(self, target: int) -> int:
        """The highest on-demand part the fallback sets for a fleet of `target` nodes."""
        return min(self.floor + self.max_extra, target)


@dataclass(frozen=True)
class LaunchFailure:
    at: dt.datetime
    kind: str  # NO_CAPACITY | PRICE | ERROR
    description: str


@dataclass(frozen=True)
class Observation:
    """One look at the fleet: its target and on-demand part as set now, the nodes it has, the launch failures its
    history reports since the previous look, and why it cannot be changed now ("" when it can)."""

    at: dt.datetime
    target: int  # a Spot Fleet's TargetCapacity, an Auto Scaling group's DesiredCapacity, as set now
    on_demand_target: int
    spot_running: int  # spot nodes pending or running
    on_demand_running: int  # on-demand nodes pending or running
    failures: tuple[LaunchFailure, ...] = ()
    busy: str = ""  # why the fleet cannot be changed now ("" when it can)
    replacing: bool = False  # busy ending and launching nodes on its own (a deletion, a cancelled fleet)
    # An Auto Scaling group's instance refresh under way ("" when none): the nodes it ends are not a shortage, but
    # its replacements may find spot short.
    refresh: str = ""
    # Spot Fleet only: the live on-demand nodes, newest first, and the state of the checkpoint hooks the fallback
    # started (instance id -> CHECKPOINT_RUNNING | CHECKPOINT_DONE).
    on_demand_nodes: tuple[str, ...] = ()
    checkpoints: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FallbackState:
    """What the fallback remembers between runs (kept in an SSM parameter by the Lambda)."""

    node_group_id: str = ""  # the fleet request or group this state is about; another one starts afresh
    on_demand: int | None = None  # the on-demand part the fallback last saw or set; None before its first run
    short_since: dt.datetime | None = None  # first check of the running shortfall
    healthy_since: dt.datetime | None = None  # since when spot has been back (nothing missing, no failure)
    failures: dict[str, int] = field(default_factory=dict)  # failure kinds seen during the running shortfall
    changed_at: dt.datetime | None = None  # when the fallback last changed the fleet
    checked_at: dt.datetime | None = None
    history_read_until: dt.datetime | None = None  # the fleet history is read from here on the next run
    # A Spot Fleet hand-back under way (_probe_progress): the total it set (target + extra spot nodes) and the
    # extra, the on-demand nodes to end (newest first), the nodes whose checkpoint hooks it started and the commands
    # that run them, whether the part is lowered yet, and when it started.
    probe_total: int | None = None
    probe_extra: int = 0
    probe_nodes: tuple[str, ...] = ()
    probe_checkpointed: tuple[str, ...] = ()
    probe_commands: dict[str, str] = field(default_factory=dict)
    probe_lowered: bool = False
    probe_started: dt.datetime | None = None
    action: str = ""  # the last decision
    reason: str = ""

    def to_json(self) -> str:
        document: dict[str, Any] = {}
        for name, value in vars(self).items():
            if isinstance(value, dt.datetime):
                value = value.isoformat()
            elif isinstance(value, tuple):
                value = list(value)
            document[name] = value
        return json.dumps(document, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FallbackState:
        """The state a parameter holds; fields it lacks take their defaults (an empty document is a fresh state).
        Raises ValueError for text that is not a state (someone edited the parameter)."""
        try:
            document = json.loads(text or "{}")
            known = {name: value for name, value in document.items() if name in cls.__dataclass_fields__}
            for name in TIME_FIELDS:
                if known.get(name):
                    known[name] = dt.datetime.fromisoformat(known[name])
            for name in ("probe_nodes", "probe_checkpointed"):
                if name in known:
                    known[name] = tuple(str(node) for node in known[name])
        except (ValueError, TypeError, AttributeError) as error:
            raise ValueError(f"not a fallback state ({error})") from None
        return cls(**known)

    def for_node_group(self, node_group_id: str) -> FallbackState:
        """This state if it is about node_group_id, else a fresh one: a fleet that a deploy replaced (or a new
        stack after a teardown) starts with the template's on-demand part and owes nothing to the old one."""
        return self if self.node_group_id == node_group_id else FallbackState(node_group_id=node_group_id)

    def without_probe(self) -> FallbackState:
        return replace(
            self,
            probe_total=None,
            probe_extra=0,
            probe_nodes=(),
            probe_checkpointed=(),
            probe_commands={},
            probe_lowered=False,
            probe_started=None,
        )


TIME_FIELDS = ("short_since", "healthy_since", "changed_at", "checked_at", "history_read_until", "probe_started")


@dataclass(frozen=True)
class Decision:
    action: str
    on_demand: int  # the on-demand part after the decision (unchanged for HOLD)
    reason: str
    state: FallbackState  # what to remember for the next run
    total: int  # the target the fleet is to have (a Spot Fleet's probe asks for more than its target)
    checkpoint: tuple[str, ...] = ()  # nodes whose checkpoint hook is to start (PROBE)
    terminate: tuple[str, ...] = ()  # nodes to end, their hooks finished (HAND_BACK), before the modification

    @property
    def changes(self) -> bool:
        return self.action != HOLD


def parameter_name(environment_name: str) -> str:
    """The SSM parameter that holds an environment's fallback state (written by the Lambda, read by status)."""
    return f"/gpufleet/{environment_name}/fallback"


def minutes(delta: dt.timedelta) -> str:
    return f"{delta.total_seconds() / 60:g} min"


def failure_summary(counts: dict[str, int]) -> str:
    if not counts:
        return "the history reports no launch failure"
    return "launch failures: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(counts.items()))


@dataclass(frozen=True)
class _Fleet:
    """An observation in the terms of the rules."""

    target: int  # the nodes the fleet keeps, a running probe's extra spot nodes left out
    on_demand: int  # the on-demand part
    spot: int
    on_demand_nodes: int
    ceiling: int

    @property
    def missing(self) -> int:
        return max(self.target - self.spot - self.on_demand_nodes, 0)

    @property
    def spot_missing(self) -> int:
        return max(self.target - self.on_demand - self.spot, 0)

    @property
    def on_demand_missing(self) -> int:
        return max(self.on_demand - self.on_demand_nodes, 0)

    def counts(self) -> str:
        return f"{self.spot} spot + {self.on_demand_nodes} on-demand of {self.target}, on-demand part {self.on_demand}"


# The helper decide hands to the rules: action, on-demand part, reason, and what else changes.
DecisionMaker = Callable[..., "Decision"]


def decide(settings: FallbackSettings, observation: Observation, state: FallbackState) -> Decision:
    now = observation.at
    probing = state.probe_total is not None and observation.target == state.probe_total
    dropped = ""
    if state.probe_total is not None and not probing:
        dropped = (
            f"the fleet's target is {observation.target}, not the {state.probe_total} the hand-back asked for: "
            "changed outside the fallback, the hand-back is dropped; "
        )
        state = state.without_probe()
    target = observation.target - state.probe_extra if probing else observation.target
    fleet = _Fleet(
        target=target,
        on_demand=observation.on_demand_target,
        spot=observation.spot_running,
        on_demand_nodes=observation.on_demand_running,
        ceiling=settings.ceiling(target),
    )
    counts = Counter(state.failures) + Counter(failure.kind for failure in observation.failures)

    def decision(
        action: str,
        on_demand: int,
        reason: str,
        total: int = target,
        checkpoint: tuple[str, ...] = (),
        terminate: tuple[str, ...] = (),
        **changes: Any,
    ) -> Decision:
        changed_at = state.changed_at if action == HOLD else now
        new_state = replace(
            state,
            on_demand=on_demand,
            checked_at=now,
            changed_at=changed_at,
            action=action,
            reason=dropped + reason,
            **{"failures": dict(counts), **changes},
        )
        return Decision(action, on_demand, dropped + reason, new_state, total, checkpoint, terminate)

    if observation.refresh and not (fleet.missing and counts):
        return decision(
            HOLD,
            fleet.on_demand,
            f"{observation.refresh}: the nodes it replaces are not a spot shortage; the fallback acts only on missing "
            f"nodes with launch failures ({fleet.counts()})",
            total=observation.target,
            short_since=None,
            healthy_since=None,
            failures={},
        )
    if observation.busy:
        # Nodes an instance refresh or a deletion ends are not a shortage: the clocks start again after it. A
        # modification in progress keeps them (it is over within the minute: a redeploy must not cost `after`).
        clocks: dict[str, Any] = {}
        if observation.replacing:
            clocks = dict(short_since=None, healthy_since=None, failures={})
        held = decision(
            HOLD,
            fleet.on_demand,
            f"{observation.busy}: nothing changes until it is over",
            total=observation.target,
            **clocks,
        )
        # What the fleet shows while it is busy (or gone) is not the part the fallback set.
        return replace(held, state=replace(held.state, on_demand=state.on_demand))
    if probing:
        return _probe_progress(settings, observation, state, fleet, decision)

    if (
        state.on_demand is not None
        and fleet.on_demand < state.on_demand
        and fleet.missing
        and state.on_demand > (settings.floor)
    ):
        wanted = min(state.on_demand, fleet.ceiling)
        if wanted > fleet.on_demand:
            return decision(
                REAPPLY,
                wanted,
                f"on-demand part {fleet.on_demand} was set outside the fallback (a deploy writes the template's "
                f"value back) below its {state.on_demand} while {fleet.missing} node(s) are missing "
                f"({fleet.counts()}): {fleet.on_demand} -> {wanted} again",
            )
    if settings.hands_back == HAND_BACK_BY_FALLBACK and fleet.on_demand < min(fleet.on_demand_nodes, fleet.ceiling):
        wanted = min(fleet.on_demand_nodes, fleet.ceiling)
        aligned = replace(fleet, on_demand=wanted)
        if not aligned.missing and not aligned.on_demand_missing:
            # A hand-back that is due anyway sets the part with its first change.
            restore = _nothing_missing(settings, observation, state, aligned, decision)
            if restore.action == PROBE:
                return restore
        return decision(
            ALIGN,
            wanted,
            f"on-demand part {fleet.on_demand} is below the {fleet.on_demand_nodes} live on-demand nodes (set outside "
            f"the fallback; what EC2 does with the surplus is undocumented): {fleet.on_demand} -> {wanted}, the "
            "surplus goes back to spot through a hand-back",
            short_since=None,
        )
    if fleet.on_demand_missing and fleet.on_demand > settings.floor:
        waited = now - state.changed_at if state.changed_at else settings.after
        if not fleet.missing or waited >= settings.after:
            wanted = max(settings.floor, fleet.on_demand_nodes)
            why = (
                "the fleet is full without them"
                if not fleet.missing
                else f"on-demand capacity has not filled them for {minutes(waited)}"
            )
            return decision(
                REVERT,
                wanted,
                f"{fleet.on_demand_missing} on-demand node(s) of the part {fleet.on_demand} are not there and {why} "
                f"({fleet.counts()}; {failure_summary(dict(counts))}): {fleet.on_demand} -> {wanted}, spot asked "
                "again",
                short_since=now if fleet.missing else None,
                healthy_since=None,
                failures={},
            )
    if fleet.missing:
        return _missing(settings, observation, state, fleet, counts, decision)
    return _nothing_missing(settings, observation, state, fleet, decision)


def _missing(
    settings: FallbackSettings,
    observation: Observation,
    state: FallbackState,
    fleet: _Fleet,
    counts: Counter[str],
    decision: DecisionMaker,
) -> Decision:
    now = observation.at
    short_since = state.short_since or now
    lasted = now - short_since
    situation = (
        f"{fleet.missing} node(s) missing for {minutes(lasted)} ({fleet.counts()}; {failure_summary(dict(counts))})"
    )
    hold: dict[str, Any] = dict(short_since=short_since, healthy_since=None)
    if not fleet.spot_missing:
        return decision(
            HOLD,
            fleet.on_demand,
            f"{situation}; the missing nodes are on-demand ones: the fleet launches them when on-demand capacity "
            "allows"
            + (
                f", and those above the floor {settings.floor} go back to spot {minutes(settings.after)} after the "
                "fallback's last change if they do not come"
                if fleet.on_demand > settings.floor
                else ""
            ),
            **hold,
        )
    if lasted < settings.after:
        return decision(
            HOLD,
            fleet.on_demand,
            f"{situation}; on-demand part {fleet.on_demand} rises after {minutes(settings.after)}",
            **hold,
        )
    # From the on-demand nodes there are when the part is below them (an Auto Scaling group replacing them by spot
    # ones launch-first, which spot cannot finish): raising the part up to them would launch nothing.
    wanted_unbounded = max(fleet.on_demand, fleet.on_demand_nodes) + min(fleet.spot_missing, fleet.missing)
    wanted = min(wanted_unbounded, fleet.ceiling)
    if wanted <= max(fleet.on_demand, fleet.on_demand_nodes):
        return decision(
            HOLD,
            fleet.on_demand,
            f"{situation}; on-demand part {fleet.on_demand} is at its ceiling (capacity.on_demand {settings.floor} + "
            f"max_extra_on_demand {settings.max_extra}, at most the target {fleet.target})",
            **hold,
        )
    capped = " (capped at the ceiling)" if wanted < wanted_unbounded else ""
    return decision(
        RAISE,
        wanted,
        f"{situation}: on-demand part {fleet.on_demand} -> {wanted}{capped}",
        short_since=None,
        healthy_since=None,
        failures={},
    )


def _nothing_missing(
    settings: FallbackSettings, observation: Observation, state: FallbackState, fleet: _Fleet, decision: DecisionMaker
) -> Decision:
    now = observation.at
    failure_times = [failure.at for failure in observation.failures]
    healthy_since = max([state.healthy_since or now, *failure_times])
    back_for = now - healthy_since
    keep: dict[str, Any] = dict(short_since=None, healthy_since=healthy_since, failures={})
    by_fallback = settings.hands_back == HAND_BACK_BY_FALLBACK
    extra = (min(fleet.on_demand_nodes, fleet.on_demand) if by_fallback else fleet.on_demand) - settings.floor
    if extra <= 0:
        return decision(
            HOLD,
            fleet.on_demand,
            f"fleet full ({fleet.counts()}); on-demand part at its floor {settings.floor}",
            **keep,
        )
    if back_for < settings.restore_after:
        return decision(
            HOLD,
            fleet.on_demand,
            f"fleet full ({fleet.counts()}), spot back for {minutes(back_for)}; {extra} extra on-demand node(s) go "
            f"back to spot after {minutes(settings.restore_after)}",
            **keep,
        )
    if not by_fallback:
        return decision(
            LOWER,
            settings.floor,
            f"spot back for {minutes(back_for)}: on-demand base {fleet.on_demand} -> {settings.floor}; the group "
            "replaces the extra on-demand nodes by spot ones as spot allows, launching each before it terminates one "
            "(through its lifecycle hook)",
            **keep,
        )
    nodes = observation.on_demand_nodes[:extra]
    if not nodes:
        return decision(
            HOLD,
            fleet.on_demand,
            f"spot back for {minutes(back_for)}, but the fleet names none of its {fleet.on_demand_nodes} on-demand "
            "node(s) yet: the hand-back waits",
            **keep,
        )
    return decision(
        PROBE,
        fleet.on_demand,
        f"spot back for {minutes(back_for)}: asking for {len(nodes)} spot node(s) beyond the target "
        f"({fleet.target} -> {fleet.target + len(nodes)}) to replace on-demand node(s) {', '.join(nodes)}; the "
        f"checkpoint hook runs on every on-demand node ({', '.join(observation.on_demand_nodes)})",
        total=fleet.target + len(nodes),
        checkpoint=observation.on_demand_nodes,
        **keep,
        probe_total=fleet.target + len(nodes),
        probe_extra=len(nodes),
        probe_nodes=tuple(nodes),
        probe_checkpointed=observation.on_demand_nodes,
        probe_commands={},
        probe_lowered=False,
        probe_started=now,
    )


def _probe_progress(
    settings: FallbackSettings, observation: Observation, state: FallbackState, fleet: _Fleet, decision: DecisionMaker
) -> Decision:
    """A Spot Fleet hand-back, in three changes a check or more apart:
    1. PROBE (_nothing_missing): total = target + extra, the checkpoint hook started on every on-demand node;
    2. LOWER, once the extra spot nodes are there (or `after` has passed with those that came) and every hook has
       finished (or `checkpoint_timeout` passed): the part drops by the spot nodes that came and the total keeps
       them (target + arrived: the requests that did not come are withdrawn). For a moment the part is below the live
       on-demand nodes, the undocumented case: if EC2 ends on-demand nodes for it, whichever it picks has had its
       hook;
    3. HAND_BACK, at the next check: the fallback ends as many of the newest checkpointed on-demand nodes as remain
       above the part (none if EC2 ended them), and sets the total back to the target. If the fleet launches spot
       nodes between those two calls, the lower total ends them with an interruption notice ([modify-spot-fleet]).
    With no extra spot node at step 2, the extra request is withdrawn and nothing ends."""
    now = observation.at
    assert state.probe_started is not None, "a probe always has its start"
    lasted = now - state.probe_started
    back = state.without_probe()
    cleared = {name: getattr(back, name) for name in PROBE_FIELDS}
    if state.probe_lowered:
        surplus = max(fleet.on_demand_nodes - fleet.on_demand, 0)
        live = [node for node in state.probe_nodes if node in observation.on_demand_nodes]
        ending = tuple(live[:surplus])
        ended = f"ending on-demand node(s) {', '.join(ending)}" if ending else "no on-demand node left to end"
        return decision(
            HAND_BACK,
            fleet.on_demand,
            f"hand-back after {minutes(lasted)}: {ended} ({fleet.counts()}), target {observation.target} -> "
            f"{fleet.target}",
            short_since=None,
            healthy_since=now,
            terminate=ending,
            **cleared,
        )
    extra = state.probe_extra
    arrived = min(max(fleet.spot - (fleet.target - fleet.on_demand), 0), extra)

    def hook_done(node: str) -> bool:
        return observation.checkpoints.get(node) == CHECKPOINT_DONE or lasted >= settings.checkpoint_timeout

    window_over = arrived == extra or lasted >= settings.after or fleet.missing > 0
    checkpointed = [node for node in state.probe_checkpointed if node in observation.on_demand_nodes]
    waiting_hooks = [node for node in checkpointed if not hook_done(node)]
    if not window_over or (arrived and waiting_hooks):
        waits = (
            f"checkpoint hook(s) still running on {', '.join(waiting_hooks)}"
            if window_over
            else f"waiting up to {minutes(settings.after)} for them"
        )
        return decision(
            HOLD,
            fleet.on_demand,
            f"hand-back under way for {minutes(lasted)}: {arrived} of {extra} extra spot node(s) there "
            f"({fleet.counts()}); {waits}",
            total=observation.target,
            short_since=None,
        )
    if not arrived:
        return decision(
            HAND_BACK,
            fleet.on_demand,
            f"hand-back after {minutes(lasted)}: no extra spot node came ({fleet.counts()}); the extra request is "
            f"withdrawn (target {observation.target} -> {fleet.target}), the on-demand nodes stay",
            short_since=None,
            healthy_since=now,
            **cleared,
        )
    wanted = fleet.on_demand - arrived
    withdrawn = (
        f", target {observation.target} -> {fleet.target + arrived} (the requests that did not come withdrawn)"
        if arrived < extra
        else ""
    )
    return decision(
        LOWER,
        wanted,
        f"hand-back after {minutes(lasted)}: {arrived} of {extra} extra spot node(s) came ({fleet.counts()}), "
        f"checkpoint hooks done: on-demand part {fleet.on_demand} -> {wanted}{withdrawn}; the on-demand node(s) end "
        "at the next check",
        total=fleet.target + arrived,
        short_since=None,
        probe_total=fleet.target + arrived,
        probe_extra=arrived,
        probe_nodes=state.probe_nodes[:arrived],
        probe_lowered=True,
    )


PROBE_FIELDS = (
    "probe_total",
    "probe_extra",
    "probe_nodes",
    "probe_checkpointed",
    "probe_commands",
    "probe_lowered",
    "probe_started",
)
