"""What `gpufleet rehearse` follows once it has started the cluster's spot interruption experiment
(stacks/constructs/spot_interruption_rehearsal.py): the experiment's state, the spot node that got the notice, that
node going away and the node group's replacement launching and becoming ready (its readiness tag: "booting: step
K/N NAME", then "ready"), until the replacement is ready, the experiment ended without interrupting anything, or the
time is up.

Sources (botocore 1.44.5's fis model, as installed):
- StartExperiment takes clientToken ("Unique, case-sensitive identifier that you provide to ensure the idempotency of
  the request") and experimentTemplateId, and answers the experiment.
- GetExperiment: state.status is one of pending | initiating | running | completed | stopping | stopped | failed |
  cancelled; state.reason "The reason for the state"; state.error (code, location) "when the action has failed".
- ListExperimentResolvedTargets answers resolvedTargets, each a targetName and a targetInformation map of strings to
  strings whose keys the model does not name (unconfirmed: moto 5.2.5 answers {"arn": ...}). The node is read from
  any value that names an instance (i-..., alone or at the end of an instance ARN), and only among the spot nodes
  that ran when the experiment started; failing that, the first of them to stop running is the one.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.constants import READINESS_READY
from gpufleet.ops.fleet import FleetInstance, NodeGroup
from gpufleet.ops.pace import Pace, elapsed

Echo = Callable[[str], None]

# ExperimentStatus: the experiment has ended, and how.
ENDED = ("completed", "stopped", "failed", "cancelled")
ENDED_BADLY = ("stopped", "failed", "cancelled")
# Before these, FIS has not resolved the targets yet.
UNRESOLVED = ("pending", "initiating")
INSTANCE = re.compile(r"(?:^|[/:])(i-[0-9a-f]{8,17})$")
POLL_SECONDS = 10


PACE = Pace()


def start(fis: Any, template_id: str) -> dict:
    """Start an experiment from the template; a token of its own makes botocore's retries of the call one start."""
    return dict(fis.start_experiment(experimentTemplateId=template_id, clientToken=str(uuid.uuid4()))["experiment"])


def noticed_instance(fis: Any, experiment_id: str, candidates: set[str]) -> str | None:
    """The spot node FIS chose, read from the experiment's resolved targets (module doc), or None."""
    arguments: dict[str, Any] = {"experimentId": experiment_id}
    while True:
        page = fis.list_experiment_resolved_targets(**arguments)
        for target in page.get("resolvedTargets", []):
            for value in target.get("targetInformation", {}).values():
                match = INSTANCE.search(value)
                if match and match.group(1) in candidates:
                    return match.group(1)
        if not page.get("nextToken"):
            return None
        arguments["nextToken"] = page["nextToken"]


def node_state(instance: FleetInstance) -> str:
    return instance.readiness or "launched, booting the image"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    lines: tuple[str, ...]  # the last word, for standard error when not ok


@dataclass
class Rehearsal:
    """The rehearsal as it goes: what has been said, and what it is waiting for."""

    experiment_id: str
    initial: NodeGroup
    replaces: bool  # whether the node group launches a replacement (not a Spot Fleet of type request)
    started: float
    status: str = ""
    noticed: str | None = None
    noticed_at: float | None = None
    gone: bool = False
    seen: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.seen = {instance.instance_id: node_state(instance) for instance in self.initial.running}

    @property
    def spot_nodes(self) -> set[str]:
        return {instance.instance_id for instance in self.initial.running if instance.lifecycle == "spot"}

    def experiment_lines(self, experiment: dict, now: float) -> list[str]:
        state = experiment["state"]
        status = state["status"]
        if status == self.status:
            return []
        self.status = status
        why = [state.get("reason", "")]
        error = state.get("error", {})
        if error:
            why.append(" ".join(filter(None, (error.get("code"), error.get("location")))))
        detail = "; ".join(filter(None, why)) if status in ENDED_BADLY else ""
        said = f"{status}: {detail}" if detail else status
        return [f"  {elapsed(now - self.started)} experiment {self.experiment_id}: {said}"]

    def notice_line(self, instance_id: str, now: float) -> str:
        self.noticed, self.noticed_at = instance_id, now
        node = next(i for i in self.initial.running if i.instance_id == instance_id)
        return (
            f"  {elapsed(now - self.started)} {instance_id} (spot {node.private_ip or '-'}): got the interruption "
            "notice; EC2 interrupts it two minutes later"
        )

    def node_lines(self, group: NodeGroup, now: float) -> list[str]:
        stamp = elapsed(now - self.started)
        out = []
        running = {instance.instance_id: instance for instance in group.running}
        for instance_id in sorted(set(self.seen) - set(running)):
            del self.seen[instance_id]
            if self.noticed is None and instance_id in self.spot_nodes:
                self.noticed, self.noticed_at = instance_id, now
            which = " (the interrupted node)" if instance_id == self.noticed else ""
            self.gone = self.gone or instance_id == self.noticed
            out.append(f"  {stamp} {instance_id}{which}: no longer running")
        for instance in running.values():
            state = node_state(instance)
            if self.seen.get(instance.instance_id) == state:
                continue
            new = instance.instance_id not in self.seen
            self.seen[instance.instance_id] = state
            where = f" ({instance.lifecycle or 'on-demand'} {instance.private_ip or '-'})" if new else ""
            out.append(f"  {stamp} {instance.instance_id}{where}: {state}")
        return out

    def replacement(self, group: NodeGroup) -> FleetInstance | None:
        """A node that was not running when the rehearsal started and now is ready."""
        before = {instance.instance_id for instance in self.initial.running}
        return next((i for i in group.running if i.instance_id not in before and i.readiness == READINESS_READY), None)


def follow(
    fis: Any,
    experiment_id: str,
    describe: Callable[[], NodeGroup],
    rehearsal: Rehearsal,
    timeout_seconds: float,
    echo: Echo,
    pace: Pace | None = None,
) -> Outcome:
    """Look every POLL_SECONDS at the experiment and the node group, echoing each change, until the replacement is
    ready (or, where none comes, the interrupted node is gone), the experiment has ended without a notice, or
    TIMEOUT_SECONDS have passed."""
    pace = pace or PACE
    while True:
        now = pace.clock()
        experiment = fis.get_experiment(id=experiment_id)["experiment"]
        for line in rehearsal.experiment_lines(experiment, now):
            echo(line)
        status = experiment["state"]["status"]
        if rehearsal.noticed is None and status not in UNRESOLVED:
            instance_id = noticed_instance(fis, experiment_id, rehearsal.spot_nodes)
            if instance_id is not None:
                echo(rehearsal.notice_line(instance_id, now))
        group = describe()
        for line in rehearsal.node_lines(group, now):
            echo(line)
        replacement = rehearsal.replacement(group) if rehearsal.gone else None
        ready = len(group.ready)
        if replacement is not None:
            since = elapsed(now - (rehearsal.noticed_at or rehearsal.started))
            return Outcome(
                True,
                (
                    f"the replacement {replacement.instance_id} is ready, {since} after the notice; "
                    f"{ready} of {group.target_capacity} nodes ready: the rehearsal is over",
                ),
            )
        if rehearsal.gone and not rehearsal.replaces and status in ENDED:
            return Outcome(
                True,
                (
                    f"{rehearsal.noticed} is gone and fleet.type request launches no replacement; {ready} of "
                    f"{group.target_capacity} nodes ready: the rehearsal is over",
                ),
            )
        if status in ENDED_BADLY and rehearsal.noticed is None:
            return Outcome(
                False,
                (f"experiment {experiment_id} ended {status} before any spot node got a notice: see the line above",),
            )
        if now - rehearsal.started >= timeout_seconds:
            return Outcome(False, timeout_lines(rehearsal, group, status, timeout_seconds))
        pace.sleep(POLL_SECONDS)


def timeout_lines(rehearsal: Rehearsal, group: NodeGroup, status: str, timeout_seconds: float) -> tuple[str, ...]:
    minutes = int(timeout_seconds // 60)
    if rehearsal.noticed is None:
        where = f"no spot node has got the notice yet (experiment {status})"
    elif not rehearsal.gone:
        where = f"{rehearsal.noticed} got the notice and is still running (experiment {status})"
    else:
        booting = [i for i in group.running if i.instance_id not in {n.instance_id for n in rehearsal.initial.running}]
        states = ", ".join(f"{i.instance_id} {node_state(i)}" for i in booting) or "none launched yet"
        where = f"{rehearsal.noticed} is gone; its replacement is not ready ({states})"
    return (
        f"not over after {minutes} min: {where}; `gpufleet status` shows the node group (--wait-minutes waits longer)",
    )
