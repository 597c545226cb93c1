"""Spot first, on-demand when spot is not there, spot again when it returns (fleet.fallback): the decision.

A scheduled Lambda (stacks/constructs/capacity_fallback/runtime/handler.py) observes the fleet or Auto Scaling group,
calls `decide`, and applies its answer: the on-demand part (a Spot Fleet's OnDemandTargetCapacity, a group's
OnDemandBaseCapacity) and, on a Spot Fleet, the extra spot nodes it asks for and the on-demand nodes it ends.
This module is that decision and the state it keeps between runs, with no AWS in it, so the same file serves the
Lambda (its asset carries this file) and `gpufleet status` (which reads the state). Standard library only.

The rules, each checked against a model of how the fleets behave (tests/fallback_model/, which says where each
behaviour comes from):
- The fleet's size is capacity.target as the function's configuration gives it (FallbackSettings.target), never the
  fleet's live TargetCapacity: a total the fallback raised and failed to record cannot become the next run's target
  (issue 31, problem 2). A Spot Fleet total that is neither the target nor the fallback's own probe was set outside
  it: the first check holds (a deploy updates the fleet before the function's configuration), the next one sets the
  target back (CORRECT).
- Every change is recorded before it is made (the handler writes the state with the change as its `intent`, then
  calls AWS, then writes again). A run that fails after the first write leaves an intent the fleet does not show; the
  next run makes the same change again (RETRY, absolute values, so twice is once) when the fleet still shows what the
  change started from, and drops it when the fleet shows something else (a deploy).
- Nodes are missing when the fleet runs (pending or running) fewer than its target, whatever their market. A spot
  node missing for `after` raises the on-demand part by the missing spot nodes, at most to the ceiling
  (floor + max_extra, at most the target). Counting the whole fleet, not the spot part alone, is what keeps a Spot
  Fleet that keeps a surplus on-demand node from reading as short of spot.
- Revert: an on-demand part above the floor that on-demand capacity has not filled for `after` since the fallback's
  last change, or at once when the fleet is full without those nodes, is lowered to the on-demand nodes there are
  (never below the floor): the requests go back to spot. With both markets short the requests alternate between
  them, one change per `after` at most, so whichever market returns first fills them (problem 3 of issue 19).
- Spot back: from the first check with nothing missing, or from the last spot launch failure after it, whichever is
  later (a history read short of its end counts as a failure now). Once it has lasted `restore_after`, the extra
  on-demand nodes are handed back to spot, in the way each backend can do without a gap and without a node ending
  before its checkpoint hook:
  - an Auto Scaling group (HAND_BACK_BY_GROUP): the on-demand base drops to the floor and MaxSize rises to the target
    + 1 while the group replaces the on-demand nodes (LOWER); the group launches each spot node before it terminates
    an on-demand one, through its lifecycle hook (AWS documents both), and the extra MaxSize gives it room to do so
    whether or not it would go beyond MaxSize on its own (undocumented); a spot shortage leaves the on-demand nodes
    where they are. MaxSize goes back to the target once the group holds no on-demand node above its base (SETTLE).
  - a Spot Fleet (HAND_BACK_BY_FALLBACK): EC2 documents no swap of an on-demand node for a spot one when the on-demand
    part falls alone, so the fallback asks for spot first and ends the on-demand nodes itself. PROBE: the total rises
    to the target + the extra nodes (documented: the fleet launches spot), at most max_extra above the target, for at
    most `after` plus a check; nothing else happens to the nodes. Then HAND_BACK, in one run: the checkpoint hook
    starts on exactly the newest on-demand nodes that as many spot nodes came for, the run waits for it at most
    HAND_BACK_HOOK_WAIT (the two minutes a spot interruption notice gives), ends those nodes, and sets the total back
    to the target and the part down by the nodes ended, with ExcessCapacityTerminationPolicy noTermination ("keep the
    fleet at its current size, but not replace any Spot Instances that are interrupted or that you terminate
    manually", [modify-spot-fleet]): nodes the fleet launched between the two calls are then above the target and
    the part, kept, and ended with their hook at the next check (SETTLE), which also sets the policy back to the
    template's default. With no spot node, the probe is withdrawn (WITHDRAW) and no node ends or gets a hook.
  - Back-off (problem 3 of issue 31): a hand-back that did not hand back every extra node (spot only partly back)
    makes the next one wait restore_after * 2 ** misses, at most HAND_BACK_BACKOFF_CAP times restore_after; a raise
    or a complete hand-back resets it.
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

HOLD, RAISE, REAPPLY, REVERT, ALIGN, LOWER, PROBE, HAND_BACK, WITHDRAW, SETTLE, CORRECT, RETRY = (
    "hold",
    "raise",
    "reapply",
    "revert",
    "align",
    "lower",
    "probe",
    "hand-back",
    "withdraw",
    "settle",
    "correct",
    "retry",
)
# What stopped a launch, as read from a Spot Fleet's history or an Auto Scaling group's activities.
NO_CAPACITY, PRICE, ERROR = "no-capacity", "price", "error"
# How a backend gives on-demand nodes back to spot (see the module doc).
HAND_BACK_BY_GROUP, HAND_BACK_BY_FALLBACK = "group", "fallback"
# ExcessCapacityTerminationPolicy values (botocore's ec2 model, ModifySpotFleetRequest): "default" is the template's
# (stacks/constructs/gpu_spot_fleet.py).
TERMINATE_EXCESS, KEEP_EXCESS = "default", "noTermination"
# How long a hand-back waits for the checkpoint hook of a node it is about to end: the two minutes a spot interruption
# notice gives ("two-minute warning", EC2 user guide, spot-instance-termination-notices.html), inside which the default
# hook's own wait (90 seconds, scripts/ops/save-checkpoint.sh) fits, so that a node the fallback ends gets what a
# node EC2 interrupts gets. The node ends at most this long after its hook started.
HAND_BACK_HOOK_WAIT = dt.timedelta(minutes=2)
# What UpdateAutoScalingGroup may check of its caller on a group with a launch template: "ec2:RunInstances are checked
# when an Auto Scaling group is created or updated using a launch template" (EC2 Auto Scaling user guide,
# ec2-auto-scaling-launch-template-permissions.html), with iam:PassRole for the launch template's instance profile and
# ec2:CreateTags for its tag specifications (ec2-auto-scaling-api-permissions.html, as for CreateAutoScalingGroup).
# Whether an update naming only the distribution and MaxSize is checked is not documented (community.aws#831 met "You
# are not authorized to use launch template" on such an update): the fallback's role holds them, scoped to the node
# group's launch template and role (stacks/constructs/capacity_fallback/infrastructure.py).
GROUP_LAUNCH_PERMISSIONS = ("ec2:RunInstances", "iam:PassRole", "ec2:CreateTags")
# Our choice: while spot stays short, the wait between hand-backs doubles up to this many times restore_after
# (30 minutes: 4 hours), so that an unchanged world costs a probe every 4 hours, not every check.
HAND_BACK_BACKOFF_CAP = 8


@dataclass(frozen=True)
class FallbackSettings:
    floor: int  # capacity.on_demand: the on-demand part with spot available
    after: dt.timedelta  # fleet.fallback.after_minutes
    restore_after: dt.timedelta  # fleet.fallback.restore_after_minutes
    max_extra: int  # fleet.fallback.max_extra_on_demand
    hands_back: str = HAND_BACK_BY_GROUP
    # capacity.target, as the function's configuration gives it (the Lambda's TARGET): decide needs it (1 or more);
    # ceiling takes it as an argument for the callers that only size things (gpufleet.ops.preflight).
    target: int = 0

    def ceiling(self, target: int) -> int:
        """The highest on-demand part the fallback sets for a fleet of `target` nodes."""
        return min(self.floor + self.max_extra, target)

    def hand_back_wait(self, misses: int) -> dt.timedelta:
        """How long after a hand-back that found spot short (the `misses`-th in a row) the next one may start."""
        return self.restore_after * min(2**misses, HAND_BACK_BACKOFF_CAP)


@dataclass(frozen=True)
class LaunchFailure:
    at: dt.datetime
    kind: str  # NO_CAPACITY | PRICE | ERROR
    description: str


@dataclass(frozen=True)
class Observation:
    """One look at the fleet: its total and on-demand part as set now, the nodes it has, the launch failures its
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
    # Spot Fleet only: the live on-demand nodes, newest first, and the ExcessCapacityTerminationPolicy as set now.
    on_demand_nodes: tuple[str, ...] = ()
    excess_policy: str = TERMINATE_EXCESS
    max_size: int = 0  # Auto Scaling group only: its MaxSize
    # False when the history had more than a run reads: a launch failure may be in what was not read.
    history_complete: bool = True


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
    # A Spot Fleet probe under way: the total it set (target + extra spot nodes), the extra, and when it started.
    probe_total: int | None = None
    probe_extra: int = 0
    probe_started: dt.datetime | None = None
    # Back-off: hand-backs in a row that found spot short, and the earliest time of the next one.
    hand_back_misses: int = 0
    next_hand_back: dt.datetime | None = None
    outside_since: dt.datetime | None = None  # first check that saw a Spot Fleet total set outside the fallback
    # The change being made (recorded before it is made): total, on_demand, max_size (a group's, or None),
    # excess_policy (a Spot Fleet's), and what the fleet showed before it (from_total, from_on_demand, from_max_size);
    # empty when none is pending.
    intent: dict[str, Any] = field(default_factory=dict)
    action: str = ""  # the last decision
    reason: str = ""

    def to_json(self) -> str:
        document: dict[str, Any] = {}
        for name, value in vars(self).items():
            if isinstance(value, dt.datetime):
                value = value.isoformat()
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
            if not isinstance(known.get("intent", {}), dict):
                raise TypeError("intent is not a document")
        except (ValueError, TypeError, AttributeError) as error:
            raise ValueError(f"not a fallback state ({error})") from None
        return cls(**known)

    def for_node_group(self, node_group_id: str) -> FallbackState:
        """This state if it is about node_group_id, else a fresh one: a fleet that a deploy replaced (or a new
        stack after a teardown) starts with the template's on-demand part and owes nothing to the old one."""
        return self if self.node_group_id == node_group_id else FallbackState(node_group_id=node_group_id)

    def without_probe(self) -> FallbackState:
        return replace(self, probe_total=None, probe_extra=0, probe_started=None)


TIME_FIELDS = (
    "short_since",
    "healthy_since",
    "changed_at",
    "checked_at",
    "history_read_until",
    "probe_started",
    "next_hand_back",
    "outside_since",
)


@dataclass(frozen=True)
class Decision:
    action: str
    on_demand: int  # the on-demand part after the decision (unchanged for HOLD)
    reason: str
    state: FallbackState  # what to remember for the next run
    total: int  # the total the fleet is to have (a Spot Fleet's probe asks for more than its target)
    # Spot Fleet: the nodes whose checkpoint hook runs now and that end right after it (HAND_BACK, SETTLE), and the
    # ExcessCapacityTerminationPolicy the modification sends.
    end: tuple[str, ...] = ()
    excess_policy: str = TERMINATE_EXCESS
    max_size: int | None = None  # Auto Scaling group: the MaxSize the update sends (None: not sent)
    modifies: bool = True  # whether the fleet's request or group is changed (a SETTLE that only ends nodes is not)

    @property
    def changes(self) -> bool:
        return self.action != HOLD


def carried_out(settings: FallbackSettings, decision: Decision, ended: tuple[str, ...], now: dt.datetime) -> Decision:
    """The decision as the handler carried it out when it ended fewer nodes than the decision names (a checkpoint
    hook SSM would not start): the part drops only by the nodes ended, and a hand-back that kept nodes counts as one
    that found spot short (HAND_BACK_BACKOFF_CAP), so that a node SSM cannot reach does not make a probe every check."""
    kept = [node for node in decision.end if node not in ended]
    if not kept:
        return replace(decision, end=ended)
    on_demand = decision.on_demand + len(kept) if decision.modifies else decision.on_demand
    reason = f"{decision.reason}; {', '.join(kept)} kept: no checkpoint hook could start there"
    state = replace(decision.state, on_demand=on_demand, reason=reason)
    if decision.state.intent:
        state = replace(state, intent={**decision.state.intent, "on_demand": on_demand})
    if decision.action == HAND_BACK:
        misses = decision.state.hand_back_misses + (0 if decision.state.next_hand_back else 1)
        state = replace(state, hand_back_misses=misses, next_hand_back=now + settings.hand_back_wait(misses))
    return replace(decision, on_demand=on_demand, reason=reason, state=state, end=ended)


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

    target: int  # capacity.target
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
    if settings.target < 1:
        raise ValueError(f"FallbackSettings.target is {settings.target}: capacity.target (1 or more) is needed")
    now = observation.at
    by_fallback = settings.hands_back == HAND_BACK_BY_FALLBACK
    target = settings.target
    notes: list[str] = []

    def decision(
        action: str,
        on_demand: int,
        reason: str,
        total: int | None = None,
        end: tuple[str, ...] = (),
        excess_policy: str = TERMINATE_EXCESS,
        max_size: int | None = None,
        modifies: bool = True,
        **changes: Any,
    ) -> Decision:
        total = (target if by_fallback else observation.target) if total is None else total
        changed_at = state.changed_at if action == HOLD else now
        intent: dict[str, Any] = {}
        if action != HOLD and modifies:
            intent = {
                "total": total,
                "on_demand": on_demand,
                "max_size": max_size,
                "excess_policy": excess_policy,
                "from_total": observation.target,
                "from_on_demand": observation.on_demand_target,
                "from_max_size": observation.max_size if max_size is not None else None,
            }
        said = "; ".join([*notes, reason])
        new_state = replace(
            state,
            on_demand=on_demand,
            checked_at=now,
            changed_at=changed_at,
            action=action,
            reason=said,
            intent=intent,
            **{"failures": dict(counts), **changes},
        )
        return Decision(action, on_demand, said, new_state, total, end, excess_policy, max_size, modifies)

    counts = Counter(state.failures) + Counter(failure.kind for failure in observation.failures)
    if observation.refresh and not (
        max(target - observation.spot_running - observation.on_demand_running, 0) and counts
    ):
        return decision(
            HOLD,
            observation.on_demand_target,
            f"{observation.refresh}: the nodes it replaces are not a spot shortage; the fallback acts only on missing "
            f"nodes with launch failures ({_fleet(settings, observation).counts()})",
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
            HOLD, observation.on_demand_target, f"{observation.busy}: nothing changes until it is over", **clocks
        )
        # What the fleet shows while it is busy (or gone) is not the part the fallback set, and a change it has
        # recorded is still to be seen.
        return replace(held, state=replace(held.state, on_demand=state.on_demand, intent=state.intent))

    if state.intent:
        pending = state.intent
        shown = (observation.target, observation.on_demand_target)
        if shown == (pending["total"], pending["on_demand"]) and pending.get("max_size") in (
            None,
            observation.max_size,
        ):
            state = replace(state, intent={})
        elif shown == (pending["from_total"], pending["from_on_demand"]) and pending.get("from_max_size") in (
            None,
            observation.max_size,
        ):
            # A part lowered below the live on-demand nodes would leave EC2 to pick which end (undocumented): those
            # above it end first, after their hook, as in a hand-back (the fleet may have replaced the nodes the
            # failed run ended).
            surplus = observation.on_demand_running - pending["on_demand"] if by_fallback else 0
            ending = observation.on_demand_nodes[: max(surplus, 0)]
            ends = f"; first the checkpoint hook runs on {', '.join(ending)}, which then end(s)" if ending else ""
            return decision(
                RETRY,
                pending["on_demand"],
                f"the change recorded at {state.checked_at:%H:%M:%SZ} ({state.action}: total "
                f"{pending['from_total']} -> {pending['total']}, on-demand part {pending['from_on_demand']} -> "
                f"{pending['on_demand']}) is not on the fleet (the run that made it failed): made again{ends}",
                total=pending["total"],
                end=tuple(ending),
                excess_policy=pending.get("excess_policy", TERMINATE_EXCESS),
                max_size=pending.get("max_size"),
            )
        else:
            notes.append(
                f"the fleet shows total {observation.target}, on-demand part {observation.on_demand_target}, neither "
                f"what the fallback's {state.action} started from nor what it set: changed outside the fallback"
            )
            state = replace(state, intent={})

    probing = state.probe_total is not None and observation.target == state.probe_total
    if state.probe_total is not None and not probing:
        notes.append(
            f"the fleet's total is {observation.target}, not the {state.probe_total} the probe asked for: changed "
            "outside the fallback, the probe is dropped"
        )
        state = state.without_probe()
    if by_fallback:
        expected = state.probe_total if probing else target
        if observation.target != expected:
            if state.outside_since is None:
                return decision(
                    HOLD,
                    observation.on_demand_target,
                    f"the fleet's TargetCapacity is {observation.target}, not capacity.target {target} (the function's "
                    "configuration): set outside the fallback, or a deploy under way; set back at the next check if "
                    "it stays",
                    total=observation.target,
                    outside_since=now,
                )
            part = min(observation.on_demand_target, target)
            return decision(
                CORRECT,
                part,
                f"the fleet's TargetCapacity {observation.target} is still not capacity.target {target} (seen since "
                f"{state.outside_since:%H:%M:%SZ}): set back to {target}",
                outside_since=None,
            )
        state = replace(state, outside_since=None)

    fleet = _fleet(settings, observation)
    if probing:
        return _probe_progress(settings, observation, state, fleet, decision)
    if by_fallback and observation.excess_policy == KEEP_EXCESS:
        return _settle_fleet(observation, fleet, decision)
    if not by_fallback and observation.max_size > target and observation.on_demand_running <= fleet.on_demand:
        return decision(
            SETTLE,
            fleet.on_demand,
            f"no on-demand node above the base {fleet.on_demand} is left to replace ({fleet.counts()}): MaxSize "
            f"{observation.max_size} -> {target}",
            max_size=target,
        )

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
    if by_fallback and fleet.on_demand < min(fleet.on_demand_nodes, fleet.ceiling):
        wanted = min(fleet.on_demand_nodes, fleet.ceiling)
        aligned = replace(fleet, on_demand=wanted)
        if not aligned.missing and not aligned.on_demand_missing:
            # A hand-back that is due anyway sets the part with its first change.
            restore = _nothing_missing(settings, observation, state, aligned, counts, decision)
            if restore.action == PROBE:
                return replace(
                    restore,
                    on_demand=wanted,
                    state=replace(
                        restore.state, on_demand=wanted, intent={**restore.state.intent, "on_demand": wanted}
                    ),
                )
        return decision(
            ALIGN,
            wanted,
            f"on-demand part {fleet.on_demand} is below the {fleet.on_demand_nodes} live on-demand nodes (set outside "
            f"the fallback; what EC2 does with the surplus is undocumented): {fleet.on_demand} -> {wanted}, the "
            "surplus goes back to spot through a hand-back",
            short_since=None,
        )
    if not by_fallback and observation.max_size <= target and observation.on_demand_running > fleet.on_demand:
        if fleet.on_demand == settings.floor and not fleet.missing:
            return decision(
                SETTLE,
                fleet.on_demand,
                f"the group replaces {observation.on_demand_running - fleet.on_demand} on-demand node(s) above its "
                f"base ({fleet.counts()}): MaxSize {observation.max_size} -> {target + 1}, room to launch each spot "
                "node before it terminates one",
                max_size=target + 1,
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
    return _nothing_missing(settings, observation, state, fleet, counts, decision)


def _fleet(settings: FallbackSettings, observation: Observation) -> _Fleet:
    return _Fleet(
        target=settings.target,
        on_demand=observation.on_demand_target,
        spot=observation.spot_running,
        on_demand_nodes=observation.on_demand_running,
        ceiling=settings.ceiling(settings.target),
    )


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
        hand_back_misses=0,
        next_hand_back=None,
    )


def _nothing_missing(
    settings: FallbackSettings,
    observation: Observation,
    state: FallbackState,
    fleet: _Fleet,
    counts: Counter[str],
    decision: DecisionMaker,
) -> Decision:
    now = observation.at
    failure_times = [failure.at for failure in observation.failures]
    if not observation.history_complete:
        failure_times.append(now)
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
        unread = (
            "" if observation.history_complete else " (the history had more than a run reads: counted as a failure now)"
        )
        return decision(
            HOLD,
            fleet.on_demand,
            f"fleet full ({fleet.counts()}), spot back for {minutes(back_for)}{unread}; {extra} extra on-demand "
            f"node(s) go back to spot after {minutes(settings.restore_after)}",
            **keep,
        )
    if not by_fallback:
        return decision(
            LOWER,
            settings.floor,
            f"spot back for {minutes(back_for)}: on-demand base {fleet.on_demand} -> {settings.floor}, MaxSize "
            f"{observation.max_size} -> {fleet.target + 1}; the group replaces the extra on-demand nodes by spot ones "
            "as spot allows, launching each before it terminates one (through its lifecycle hook)",
            max_size=fleet.target + 1,
            **keep,
        )
    if state.next_hand_back is not None and now < state.next_hand_back:
        return decision(
            HOLD,
            fleet.on_demand,
            f"fleet full ({fleet.counts()}); {state.hand_back_misses} hand-back(s) in a row found spot short: the next "
            f"one starts at {state.next_hand_back:%H:%M:%SZ}",
            **keep,
        )
    extra = min(extra, settings.max_extra)
    total = fleet.target + extra
    return decision(
        PROBE,
        fleet.on_demand,
        f"spot back for {minutes(back_for)}: asking for {extra} spot node(s) beyond the target ({fleet.target} -> "
        f"{total}) to replace as many on-demand nodes; they end, after their checkpoint hook, once the spot nodes are "
        f"there (at most {minutes(settings.after)})",
        total=total,
        **keep,
        probe_total=total,
        probe_extra=extra,
        probe_started=now,
    )


def _probe_progress(
    settings: FallbackSettings, observation: Observation, state: FallbackState, fleet: _Fleet, decision: DecisionMaker
) -> Decision:
    """A Spot Fleet probe under way (the module doc): wait for the extra spot nodes at most `after` (or until nodes go
    missing), then hand back as many on-demand nodes as spot nodes came, or withdraw the probe when none came."""
    now = observation.at
    assert state.probe_started is not None, "a probe always has its start"
    lasted = now - state.probe_started
    extra = state.probe_extra
    arrived = min(max(fleet.spot - (fleet.target - fleet.on_demand), 0), extra)
    if arrived < extra and lasted < settings.after and not fleet.missing:
        return decision(
            HOLD,
            fleet.on_demand,
            f"probe under way for {minutes(lasted)}: {arrived} of {extra} extra spot node(s) there ({fleet.counts()}); "
            f"waiting up to {minutes(settings.after)} for them",
            total=observation.target,
            short_since=None,
        )
    back = state.without_probe()
    cleared = dict(probe_total=back.probe_total, probe_extra=back.probe_extra, probe_started=back.probe_started)
    misses = 0 if arrived == extra else state.hand_back_misses + 1
    backoff: dict[str, Any] = dict(
        hand_back_misses=misses, next_hand_back=None if not misses else now + settings.hand_back_wait(misses)
    )
    if not arrived:
        return decision(
            WITHDRAW,
            fleet.on_demand,
            f"probe over after {minutes(lasted)}: no extra spot node came ({fleet.counts()}); the probe is withdrawn "
            f"(total {observation.target} -> {fleet.target}), the on-demand nodes stay, no hook runs; next hand-back "
            f"not before {backoff['next_hand_back']:%H:%M:%SZ}",
            short_since=None,
            **cleared,
            **backoff,
        )
    endable = min(arrived, fleet.on_demand - settings.floor, fleet.on_demand_nodes - settings.floor)
    ending = observation.on_demand_nodes[: max(endable, 0)]
    later = f"; next hand-back not before {backoff['next_hand_back']:%H:%M:%SZ}" if misses else ""
    return decision(
        HAND_BACK,
        fleet.on_demand - len(ending),
        f"probe over after {minutes(lasted)}: {arrived} of {extra} extra spot node(s) came ({fleet.counts()}): the "
        f"checkpoint hook runs on {', '.join(ending) or 'no node'}, which then end(s); total {observation.target} -> "
        f"{fleet.target}, on-demand part {fleet.on_demand} -> {fleet.on_demand - len(ending)}{later}",
        end=tuple(ending),
        excess_policy=KEEP_EXCESS,
        short_since=None,
        **cleared,
        **backoff,
    )


def _settle_fleet(observation: Observation, fleet: _Fleet, decision: DecisionMaker) -> Decision:
    """After a hand-back (ExcessCapacityTerminationPolicy noTermination): on-demand nodes the fleet launched between
    the hand-back's two calls are above both the target and the part; they end with their hook. Then the policy goes
    back to the template's, and the fleet ends any spot node above the target with an interruption notice."""
    live = fleet.spot + fleet.on_demand_nodes
    surplus = min(fleet.on_demand_nodes - fleet.on_demand, live - fleet.target)
    if surplus > 0:
        ending = observation.on_demand_nodes[:surplus]
        return decision(
            SETTLE,
            fleet.on_demand,
            f"{surplus} on-demand node(s) above the part and the target ({fleet.counts()}), launched while the "
            f"hand-back ended others: the checkpoint hook runs on {', '.join(ending)}, which then end(s)",
            end=tuple(ending),
            excess_policy=KEEP_EXCESS,
            modifies=False,
        )
    return decision(
        SETTLE,
        fleet.on_demand,
        f"hand-back done ({fleet.counts()}): ExcessCapacityTerminationPolicy {KEEP_EXCESS} -> {TERMINATE_EXCESS}, "
        "the template's",
    )
