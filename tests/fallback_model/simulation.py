"""The capacity fallback's real Lambda handler in the loop against the model: every minute the world moves (instances
launch, end, get reclaimed; the fleet or group reconciles; scheduled events such as a redeploy happen), and every
FALLBACK_CHECK_INTERVAL_MINUTES the handler runs with boto3 clients the model answers (tests/fallback_model/aws.py),
its hook wait on the model's clock. Each minute the invariants of issues 19 and 31 are checked; what breaks one is a
Violation.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gpufleet.fallback as fallback_module
from gpufleet.constants import FALLBACK_CHECK_INTERVAL_MINUTES
from gpufleet.fallback import FallbackState
from stacks.constructs.capacity_fallback.runtime import handler
from tests.fallback_model.aws import ModelEndpoint
from tests.fallback_model.model import (
    CAPACITY_BLOCK,
    HOOK_SECONDS,
    ON_DEMAND,
    SPOT,
    AutoScalingGroup,
    Availability,
    ModelError,
    SpotFleet,
    Unknowns,
    World,
    at,
)

PARAMETER = "/gpufleet/model/fallback"
CHECKPOINT_COMMAND = '. /etc/gpufleet/node.env && bash -c "$GPUFLEET_CHECKPOINT_HOOK"'
# A node the fallback ends had its checkpoint hook start at most this long before (issue 31: what a spot
# interruption notice gives, gpufleet.fallback.HAND_BACK_HOOK_WAIT, written out here).
HOOK_LEAD_MINUTES = 2
# At most this many runs that change the fleet in any 60 minutes (no oscillation). With after 15 and restore_after 30,
# raise and revert alternate at most every 15 minutes (5 changes in a closed hour), and a hand-back's probe, hand-back
# and settle follow one another: 6.
MAX_CHANGES_PER_HOUR = 6

# The model also runs against the handler as it was before issue 31 (its tests show what failed then): what that
# handler lacks counts as nothing.
BACKOFF_CAP = getattr(fallback_module, "HAND_BACK_BACKOFF_CAP", 1)

_endpoint: ModelEndpoint | None = None


def endpoint() -> ModelEndpoint:
    """One set of clients per process (creating boto3 clients is the slow part), pointed at each simulation's world."""
    global _endpoint
    if _endpoint is None:
        _endpoint = ModelEndpoint()
    return _endpoint


@dataclass(frozen=True)
class Snapshot:
    """The fleet at the end of one minute, and the fallback's decision when it ran in that minute."""

    minute: int
    total: int  # the fleet's target as set (a Spot Fleet probe adds to it)
    on_demand_part: int
    spot: int  # live spot nodes
    on_demand: int  # live on-demand (or Capacity Block) nodes
    spot_capacity: int
    on_demand_capacity: int
    max_size: int = 0  # an Auto Scaling group's
    run: dict[str, Any] | None = None


@dataclass
class Simulation:
    backend: str  # spot-fleet | auto-scaling
    availability: Availability
    target: int = 8
    floor: int = 2
    after: int = 15
    restore_after: int = 30
    max_extra: int = 2
    unknowns: Unknowns = field(default_factory=Unknowns)
    # Things that happen at a minute: a redeploy, an instance refresh, a deletion (functions of the simulation).
    events: dict[int, list[Callable[[Simulation], None]]] = field(default_factory=dict)
    checkpoint_command: str = CHECKPOINT_COMMAND
    # Capacity rebalancing as the template sets it: a Spot Fleet's replacement strategy, or "on" for a group.
    rebalance: str = ""
    # A Capacity Block (start, end) in minutes: an Auto Scaling group of the block's nodes, without the fallback
    # (gpufleet validate refuses fleet.fallback with a Capacity Block).
    block: tuple[int, int] | None = None
    # Items a list operation returns per page: 2 makes every reader page (the model's default); the scenario suites
    # take more, for speed, paging being checked where it is the point.
    page_size: int = 2
    timeline: list[Snapshot] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    # The runs of the fallback that failed (a call the model made fail), by minute, with the error.
    failed_runs: dict[int, str] = field(default_factory=dict)
    # Nodes a deploy's change ended without a hook (Unknowns: what EC2 does with an on-demand part written below the
    # live on-demand nodes), which the fallback cannot prevent: the tests say where they are expected.
    unhooked_by_deploy: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.world = World(self.availability, self.unknowns)
        self.world.page_size = self.page_size
        if self.backend == "spot-fleet":
            self.fleet: SpotFleet | AutoScalingGroup = SpotFleet(
                self.world, target=self.target, on_demand=self.floor, rebalance=self.rebalance
            )
            self.node_group_id = self.fleet.id
        else:
            self.fleet = AutoScalingGroup(
                self.world, target=self.target, on_demand=self.floor, rebalance=bool(self.rebalance), block=self.block
            )
            self.node_group_id = self.fleet.name
            # What the fallback's role holds for the group's launch template (gpufleet.fallback, infrastructure.py).
            self.world.granted = set(getattr(fallback_module, "GROUP_LAUNCH_PERMISSIONS", ()))
        # When each node now missing went missing, oldest first (nodes are interchangeable: one that comes back fills
        # the oldest gap).
        self._missing_since: list[int] = []
        self._holdable_since: int | None = None
        self._restore_bound = self.restore_after
        self._raised_since: int | None = None
        self._changes: list[int] = []
        self._checked_ends: set[str] = set()
        self._checked_commands: set[str] = set()

    @property
    def ceiling(self) -> int:
        return min(self.floor + self.max_extra, self.target)

    # Events.

    def redeploy(self) -> None:
        """CloudFormation writes the template's target and on-demand part back. A fleet being modified may refuse it
        (Unknowns.modify_while_modifying): the update fails and CloudFormation rolls back, which writes the previous
        template's values (the same ones) and may be refused too; the stack is then UPDATE_ROLLBACK_FAILED until the
        operator continues the rollback. Either way the fleet keeps what it had."""
        try:
            self.fleet.redeploy(self.target, self.floor)
        except ModelError:
            with contextlib.suppress(ModelError):
                self.fleet.redeploy(self.target, self.floor)

    def refresh(self) -> None:
        assert isinstance(self.fleet, AutoScalingGroup), "instance refreshes are an Auto Scaling group's"
        self.fleet.start_refresh()

    def delete(self) -> None:
        assert isinstance(self.fleet, AutoScalingGroup)
        self.fleet.delete()

    @staticmethod
    def fail(operation: str, skip: int = 0) -> Callable[[Simulation], None]:
        """An event: the fallback's call of OPERATION after the next SKIP ones fails (throttled through every
        retry)."""

        def failing(sim: Simulation) -> None:
            sim.world.failing[operation] = [False] * skip + [True]

        return failing

    # The loop.

    def run(self, minutes: int, start: int = 0) -> Simulation:
        """Run the world from minute START to minute MINUTES (a second call goes on where the first stopped)."""
        clients = endpoint()
        clients.world = self.world
        with self._environment(), contextlib.redirect_stdout(io.StringIO()):
            for minute in range(start, minutes + 1):
                self.world.minute = minute
                self.world.advance()
                self.world.caller = "deploy"
                for event in self.events.get(minute, []):
                    event(self)
                self.fleet.step()
                line = None
                if self.block is None and minute % FALLBACK_CHECK_INTERVAL_MINUTES == 0:
                    self.world.caller = "fallback"
                    try:
                        line = handler.run(self.backend, self.node_group_id, PARAMETER, clients.clients, at(minute))
                    except Exception as error:  # any error: the Lambda's run fails, and the next one retries
                        self.failed_runs[minute] = f"{type(error).__name__}: {error}"
                    if line is not None and line["action"] != "hold":
                        self._changes.append(minute)
                self.timeline.append(self._snapshot(minute, line))
                self._check(minute)
        return self

    def check_now(self) -> dict[str, Any]:
        """One run of the handler at the world's minute, outside the loop."""
        endpoint().world = self.world
        self.world.caller = "fallback"
        with self._environment(), contextlib.redirect_stdout(io.StringIO()):
            return handler.run(self.backend, self.node_group_id, PARAMETER, endpoint().clients, at(self.world.minute))

    @contextlib.contextmanager
    def _environment(self) -> Iterator[None]:
        values = {
            "TARGET": str(self.target),
            "FLOOR": str(self.floor),
            "AFTER_MINUTES": str(self.after),
            "RESTORE_AFTER_MINUTES": str(self.restore_after),
            "MAX_EXTRA_ON_DEMAND": str(self.max_extra),
            "CHECKPOINT_COMMAND": self.checkpoint_command,
        }
        saved = {name: os.environ.get(name) for name in values}
        os.environ.update(values)
        # The hand-back's wait for the hooks runs on the model's clock.
        timing = {name: getattr(handler, name, None) for name in ("clock", "sleep")}
        handler.clock, handler.sleep = self.world.clock, self.world.sleep  # type: ignore[attr-defined]
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            for name, value in timing.items():
                if value is None:
                    delattr(handler, name)
                else:
                    setattr(handler, name, value)

    def _snapshot(self, minute: int, line: dict[str, Any] | None) -> Snapshot:
        fleet = self.fleet
        if isinstance(fleet, SpotFleet):
            total, part, max_size = fleet.target, fleet.on_demand, 0
            on_demand = len(fleet.live(ON_DEMAND))
        else:
            total, part, max_size = fleet.desired, fleet.distribution["OnDemandBaseCapacity"], fleet.max_size
            on_demand = len(fleet.live(ON_DEMAND)) + len(fleet.live(CAPACITY_BLOCK))
        return Snapshot(
            minute,
            total,
            part,
            len(fleet.live(SPOT)),
            on_demand,
            self.availability.capacity(SPOT, minute),
            self.availability.capacity(ON_DEMAND, minute),
            max_size,
            line,
        )

    # The invariants.

    def _busy(self) -> bool:
        """The fallback stands aside: an instance refresh or a deletion runs."""
        fleet = self.fleet
        if isinstance(fleet, AutoScalingGroup):
            return bool(fleet.status) or any(r["Status"] == "InProgress" for r in fleet.refreshes)
        return False

    def _check(self, minute: int) -> None:
        now = self.timeline[-1]
        self._check_hooks(minute)
        if self.block is not None:
            return
        violation = self.violations.append
        if now.on_demand_part < self.floor:
            violation(f"minute {minute}: on-demand part {now.on_demand_part} below the floor {self.floor}")
        if now.on_demand_part > self.ceiling:
            violation(f"minute {minute}: on-demand part {now.on_demand_part} above the ceiling {self.ceiling}")
        if now.on_demand > self.ceiling:
            violation(f"minute {minute}: {now.on_demand} on-demand nodes, above the ceiling {self.ceiling}")
        self._check_total(minute, now)
        self._check_stuck(minute, now)
        self._check_restore(minute, now)
        recent = [m for m in self._changes if minute - 60 <= m <= minute]
        if len(recent) > MAX_CHANGES_PER_HOUR:
            violation(f"minute {minute}: {len(recent)} changes in an hour, at minutes {recent}")
            self._changes = self._changes[1:]

    def _check_total(self, minute: int, now: Snapshot) -> None:
        """The requested total: never above the target + max_extra, above the target for one probe at most (`after`
        and two checks: the check that ends it, and one more after a failed call), and never drifting after a failed
        call; an Auto Scaling group's MaxSize at most the target + 1 (issue 31, problems 2 and 3)."""
        if isinstance(self.fleet, AutoScalingGroup):
            if now.max_size > self.target + 1:
                self.violations.append(f"minute {minute}: MaxSize {now.max_size} above the target + 1")
            return
        if now.total > self.target + self.max_extra:
            self.violations.append(
                f"minute {minute}: total {now.total} above the target {self.target} + max_extra {self.max_extra}"
            )
        if now.total <= self.target:
            self._raised_since = None
            return
        if self._raised_since is None:
            self._raised_since = minute
        bound = self.after + 2 * FALLBACK_CHECK_INTERVAL_MINUTES
        if minute - self._raised_since > bound:
            self.violations.append(
                f"minute {minute}: total {now.total} above the target {self.target} since minute {self._raised_since}"
            )
            self._raised_since = minute

    def _check_stuck(self, minute: int, now: Snapshot) -> None:
        """Never stuck while either market has capacity for the missing nodes the fallback may place (the on-demand
        nodes below the floor are the fleet's own): a node missing longer than `after` plus two checks and a launch,
        with room for it in a market, is stuck. Each missing node has its own clock: a node that goes missing
        after a raise began waits its own `after`, not the time since the first one went."""
        missing = max(self.target - now.spot - now.on_demand, 0)
        while len(self._missing_since) > missing:
            self._missing_since.pop(0)
        self._missing_since.extend([minute] * (missing - len(self._missing_since)))
        movable = missing - max(self.floor - now.on_demand, 0)
        spot_room = self.world.capacity_left(SPOT)
        on_demand_room = self.world.capacity_left(ON_DEMAND)
        fillable = movable > 0 and (
            spot_room >= movable or (on_demand_room >= movable and now.on_demand + movable <= self.ceiling)
        )
        if not fillable or self._busy():
            self._missing_since = [minute] * missing
            return
        bound = self.after + 2 * FALLBACK_CHECK_INTERVAL_MINUTES + 2
        oldest = self._missing_since[0]
        if minute - oldest > bound:
            self.violations.append(
                f"minute {minute}: {missing} node(s) missing, the first since minute {oldest}, although a market has "
                f"room for them (spot {spot_room}, on-demand {on_demand_room})"
            )
            self._missing_since = [minute] * missing

    def _check_restore(self, minute: int, now: Snapshot) -> None:
        """Extra on-demand nodes back to the floor once spot can hold them and the fleet is full (while nodes are
        missing, _check_stuck applies): within restore_after and three checks, or, after hand-backs that found spot
        short, three checks after the back-off the state names (at most HAND_BACK_BACKOFF_CAP times restore_after:
        the fallback cannot see spot return without asking for it). The first check after restore_after starts the
        hand-back; spot replacements launch before an on-demand node ends, which takes the other two (a Spot Fleet:
        probe, then the hand-back at the next check; an Auto Scaling group: lower, then the group's
        launch-before-terminate through its lifecycle hook)."""
        full = now.spot + now.on_demand >= self.target
        holdable = full and now.on_demand > self.floor and now.spot_capacity >= self.target - self.floor
        if not holdable or self._busy():
            self._holdable_since = None
            return
        if self._holdable_since is None:
            self._holdable_since, self._restore_bound = minute, self.restore_after
        state = FallbackState.from_json(self.world.parameters.get(PARAMETER, ""))
        backoff = getattr(state, "next_hand_back", None)  # see BACKOFF_CAP
        if backoff is not None:
            wait = round((backoff - at(self._holdable_since)).total_seconds() / 60)
            self._restore_bound = max(self._restore_bound, min(wait, BACKOFF_CAP * self.restore_after))
        bound = self._restore_bound + 3 * FALLBACK_CHECK_INTERVAL_MINUTES
        if minute - self._holdable_since > bound:
            self.violations.append(
                f"minute {minute}: {now.on_demand} on-demand nodes (floor {self.floor}) since minute "
                f"{self._holdable_since} although spot can hold the fleet"
            )
            self._holdable_since = minute

    def _check_hooks(self, minute: int) -> None:
        """Every node that ran and ends has had its checkpoint hook start before; one the fallback ends itself, at most
        HOOK_LEAD_MINUTES before, and for all that time or until the hook was over; and the fallback's hook goes only
        to nodes it then ends (issue 31, problems 1 and 3)."""
        ended_by_fallback = {
            node
            for _, caller, operation, params in self.world.calls
            if caller == "fallback" and operation == "TerminateInstances"
            for node in params["InstanceIds"]
        }
        for instance in self.world.instances.values():
            if instance.ended_at is None or instance.id in self._checked_ends:
                continue
            self._checked_ends.add(instance.id)
            hooked = instance.hook_started_at is not None and instance.hook_started_at <= instance.ended_at
            if instance.ran and not hooked:
                if instance.cause == "deploy":
                    self.unhooked_by_deploy.append(instance.id)
                else:
                    self.violations.append(
                        f"minute {minute}: {instance.market} node {instance.id} ended ({instance.cause}) without its "
                        "hook"
                    )
                continue
            if instance.id not in ended_by_fallback or not self.checkpoint_command:
                continue
            assert instance.hook_started_at is not None
            lead = instance.ended_at - instance.hook_started_at
            if lead > HOOK_LEAD_MINUTES + 1e-9:
                self.violations.append(
                    f"minute {minute}: node {instance.id} ended {lead:g} min after its hook started, more than "
                    f"{HOOK_LEAD_MINUTES}"
                )
            if lead < min(HOOK_SECONDS / 60, HOOK_LEAD_MINUTES) - 1e-9:
                self.violations.append(
                    f"minute {minute}: node {instance.id} ended {lead:g} min after its hook started, before it finished"
                )
        for command in self.world.commands.values():
            if command.caller != "fallback" or command.id in self._checked_commands:
                continue
            if minute - command.sent <= HOOK_LEAD_MINUTES:
                continue
            self._checked_commands.add(command.id)
            # A node the fallback tried to end (TerminateInstances failed) was about to end: its next hand-back runs
            # the hook again.
            tried = {
                node
                for when, caller, operation, params in self.world.calls
                if caller == "fallback"
                and operation == "TerminateInstances (failed)"
                and 0 <= when - command.sent <= HOOK_LEAD_MINUTES + 1e-9
                for node in params["InstanceIds"]
            }
            for node in command.instance_ids:
                ended_at = self.world.instances[node].ended_at
                if node not in tried and (ended_at is None or ended_at - command.sent > HOOK_LEAD_MINUTES + 1e-9):
                    self.violations.append(f"minute {minute}: the hook went to {node}, which did not end after it")

    # Reading the outcome.

    def runs(self) -> list[dict[str, Any]]:
        return [snapshot.run for snapshot in self.timeline if snapshot.run is not None]

    def changes(self) -> list[tuple[int, str, int, int]]:
        """(minute, action, on-demand part before, after) of each run that changed the fleet."""
        return [
            (snapshot.minute, snapshot.run["action"], snapshot.run["on_demand_before"], snapshot.run["on_demand_after"])
            for snapshot in self.timeline
            if snapshot.run is not None and snapshot.run["action"] != "hold"
        ]

    def hooks_sent(self) -> list[str]:
        """The nodes the fallback sent the checkpoint hook to, in order."""
        return [
            node
            for command in self.world.commands.values()
            if command.caller == "fallback"
            for node in command.instance_ids
        ]

    def at_minute(self, minute: int) -> Snapshot:
        return self.timeline[minute]
