"""The capacity fallback's real Lambda handler in the loop against the model: every minute the world moves (instances
launch, end, get reclaimed; the fleet or group reconciles; scheduled events such as a redeploy happen), and every
FALLBACK_CHECK_INTERVAL_MINUTES the handler runs with boto3 clients the model answers (tests/fallback_model/aws.py).
Each minute the invariants of issue 19 are checked; what breaks one is a Violation.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufleet.constants import FALLBACK_CHECK_INTERVAL_MINUTES
from stacks.constructs.capacity_fallback.runtime import handler
from tests.fallback_model.aws import ModelEndpoint
from tests.fallback_model.model import (
    HOOK_MINUTES,
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
# The longest a node may wait for its checkpoint hook before the fallback ends it (gpufleet.fallback).
CHECKPOINT_TIMEOUT_MINUTES = 10
# At most this many runs that change the fleet in any 60 minutes (no oscillation). With after 15 and restore_after 30,
# raise and revert alternate at most every 15 minutes (5 changes in a closed hour), and a hand-back's second change
# follows its first: 6.
MAX_CHANGES_PER_HOUR = 6

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
    total: int  # the fleet's target as set (a Spot Fleet hand-back adds to it)
    on_demand_part: int
    spot: int  # live spot nodes
    on_demand: int  # live on-demand nodes
    spot_capacity: int
    on_demand_capacity: int
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
    timeline: list[Snapshot] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.world = World(self.availability, self.unknowns)
        if self.backend == "spot-fleet":
            self.fleet: SpotFleet | AutoScalingGroup = SpotFleet(self.world, target=self.target, on_demand=self.floor)
            self.node_group_id = self.fleet.id
        else:
            self.fleet = AutoScalingGroup(self.world, target=self.target, on_demand=self.floor)
            self.node_group_id = self.fleet.name
        # When each node now missing went missing, oldest first (nodes are interchangeable: one that comes back fills
        # the oldest gap).
        self._missing_since: list[int] = []
        self._holdable_since: int | None = None
        self._changes: list[int] = []
        self._checked_ends: set[str] = set()

    @property
    def ceiling(self) -> int:
        return min(self.floor + self.max_extra, self.target)

    # Events.

    def redeploy(self) -> None:
        """CloudFormation writes the template's target and on-demand part back; a fleet being modified makes the
        update wait (CloudFormation retries it the next minute here: how its handler waits is unconfirmed)."""
        try:
            self.fleet.redeploy(self.target, self.floor)
        except ModelError:
            self.events.setdefault(self.world.minute + 1, []).append(Simulation.redeploy)

    def refresh(self) -> None:
        assert isinstance(self.fleet, AutoScalingGroup), "instance refreshes are an Auto Scaling group's"
        self.fleet.start_refresh()

    def delete(self) -> None:
        assert isinstance(self.fleet, AutoScalingGroup)
        self.fleet.delete()

    # The loop.

    def run(self, minutes: int) -> Simulation:
        clients = endpoint()
        clients.world = self.world
        with self._environment(), contextlib.redirect_stdout(io.StringIO()):
            for minute in range(minutes + 1):
                self.world.minute = minute
                self.world.advance()
                self.world.caller = "deploy"
                for event in self.events.get(minute, []):
                    event(self)
                self.fleet.step()
                line = None
                if minute % FALLBACK_CHECK_INTERVAL_MINUTES == 0:
                    self.world.caller = "fallback"
                    line = handler.run(self.backend, self.node_group_id, PARAMETER, clients.clients, at(minute))
                    if line["action"] != "hold":
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
            "FLOOR": str(self.floor),
            "AFTER_MINUTES": str(self.after),
            "RESTORE_AFTER_MINUTES": str(self.restore_after),
            "MAX_EXTRA_ON_DEMAND": str(self.max_extra),
            "CHECKPOINT_COMMAND": self.checkpoint_command,
        }
        saved = {name: os.environ.get(name) for name in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def _snapshot(self, minute: int, line: dict[str, Any] | None) -> Snapshot:
        fleet = self.fleet
        if isinstance(fleet, SpotFleet):
            total, part = fleet.target, fleet.on_demand
        else:
            total, part = fleet.desired, fleet.distribution["OnDemandBaseCapacity"]
        return Snapshot(
            minute,
            total,
            part,
            len(fleet.live(SPOT)),
            len(fleet.live(ON_DEMAND)),
            self.availability.capacity(SPOT, minute),
            self.availability.capacity(ON_DEMAND, minute),
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
        violation = self.violations.append
        if now.on_demand_part < self.floor:
            violation(f"minute {minute}: on-demand part {now.on_demand_part} below the floor {self.floor}")
        if now.on_demand_part > self.ceiling:
            violation(f"minute {minute}: on-demand part {now.on_demand_part} above the ceiling {self.ceiling}")
        if now.on_demand > self.ceiling:
            violation(f"minute {minute}: {now.on_demand} on-demand nodes, above the ceiling {self.ceiling}")
        self._check_stuck(minute, now)
        self._check_restore(minute, now)
        recent = [m for m in self._changes if minute - 60 <= m <= minute]
        if len(recent) > MAX_CHANGES_PER_HOUR:
            violation(f"minute {minute}: {len(recent)} changes in an hour, at minutes {recent}")
            self._changes = self._changes[1:]
        self._check_hooks(minute)

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
        missing, _check_stuck applies): within restore_after and three checks. The first check after restore_after
        starts the hand-back; spot replacements launch and the checkpoint hooks run before an on-demand node ends,
        which takes the other two (a Spot Fleet: probe, lower, end; an Auto Scaling group: lower, then the group's
        launch-before-terminate through its lifecycle hook)."""
        full = now.spot + now.on_demand >= self.target
        holdable = full and now.on_demand > self.floor and now.spot_capacity >= self.target - self.floor
        if not holdable or self._busy():
            self._holdable_since = None
            return
        if self._holdable_since is None:
            self._holdable_since = minute
        bound = self.restore_after + 3 * FALLBACK_CHECK_INTERVAL_MINUTES
        if minute - self._holdable_since > bound:
            self.violations.append(
                f"minute {minute}: {now.on_demand} on-demand nodes (floor {self.floor}) since minute "
                f"{self._holdable_since} although spot can hold the fleet"
            )
            self._holdable_since = minute

    def _check_hooks(self, minute: int) -> None:
        """A node the fallback's action ends gets its checkpoint hook first; one the fallback ends itself, the
        whole hook (or its timeout)."""
        for instance in self.world.instances.values():
            if instance.ended_at is None or instance.id in self._checked_ends or instance.cause != "fallback":
                continue
            self._checked_ends.add(instance.id)
            if instance.hook_started_at is None or instance.hook_started_at > instance.ended_at:
                self.violations.append(f"minute {minute}: {instance.market} node {instance.id} ended without its hook")
                continue
            ended_by_call = any(
                op == "TerminateInstances" and instance.id in params.get("InstanceIds", [])
                for _, caller, op, params in self.world.calls
                if caller == "fallback"
            )
            ran = instance.ended_at - instance.hook_started_at
            if ended_by_call and ran < min(HOOK_MINUTES, CHECKPOINT_TIMEOUT_MINUTES):
                self.violations.append(
                    f"minute {minute}: node {instance.id} ended {ran} min after its hook started, before it finished"
                )

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

    def at_minute(self, minute: int) -> Snapshot:
        return self.timeline[minute]
