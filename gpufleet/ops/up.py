"""What `gpufleet up` does besides running other commands: the environment file it writes when there is none, and the
view of the nodes coming up, from the readiness each node sets on itself (scripts/node/node-ready.sh, run-setup.sh).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpufleet.constants import READINESS_BOOTING_STEP, READINESS_READY
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.ops.fleet import FleetEvent, FleetInstance, NodeGroup
from gpufleet.ops.pace import elapsed

NOT_READY_PREFIX = "not ready"
# The network of an environment `up` writes: a /16 of its own, as the shipped environments have, with a NAT gateway,
# which a job's `--setup pip install` needs (docs/guides/environments.md, "What needs a NAT gateway").
DRAFT_CIDR = "10.60.0.0/16"
# The smallest FSx for Lustre file system of its deployment type: PERSISTENT_2 takes 1200 GiB and then steps of
# 2400 GiB (FSx for Lustre user guide, "Storage capacity"; gpufleet/validators/storage.py checks it) at 125 MB/s/TiB,
# its lowest throughput tier.
DRAFT_STORAGE_GIB = 1200
DRAFT_THROUGHPUT = 125
# The root volume: room for a Deep Learning AMI's snapshot, which preflight checks against it, and the system's caches
# (environments/elastic.yaml has the same).
DRAFT_ROOT_VOLUME_GIB = 500


@dataclass(frozen=True)
class Draft:
    """An environment from `gpufleet up`'s options, the account and region of the caller's credentials."""

    name: str
    account: str
    region: str
    availability_zone: str
    instance_type: str
    nodes: int
    on_demand: int
    storage: bool
    image: dict[str, str]
    options: str  # the command line's options, recorded in the file's first line

    def text(self, now: dt.datetime) -> str:
        image = ", ".join(f"{key}: {value}" for key, value in self.image.items())
        lines = [
            f"# Written by `gpufleet up {self.name}` on {now:%Y-%m-%d} from:{self.options}",
            "# Edit it freely: `gpufleet up` deploys what it says. The reference: docs/reference/environment.md.",
            f"name: {self.name}",
            f'account: "{self.account}"',
            f"region: {self.region}",
            f"availability_zone: {self.availability_zone}",
            "network:",
            f"  cidr: {DRAFT_CIDR}",
            "  nat_gateway: true",
            f"instance_type: {self.instance_type}",
            "capacity:",
            f"  target: {self.nodes}",
            f"  on_demand: {self.on_demand}",
            "fleet:",
            "  type: maintain",
            "  allocation_strategy: priceCapacityOptimized",
            f"ami: {{{image}}}",
            f"root_volume_gib: {DRAFT_ROOT_VOLUME_GIB}",
            "node:",
            "  checkpoint_hook: /usr/local/bin/save-checkpoint",
        ]
        if self.storage:
            lines += [
                "# Shared storage at /fsx: /fsx/data is linked to the bucket the storage stack makes (gpufleet down",
                "# --keep-data exports it there, and the next up brings it back).",
                "storage:",
                "  lustre:",
                "    deployment_type: PERSISTENT_2",
                f"    storage_capacity_gib: {DRAFT_STORAGE_GIB}",
                f"    throughput_mb_per_tib: {DRAFT_THROUGHPUT}",
                "  data_repository: {}",
            ]
        return "\n".join(lines) + "\n"


def write_new_file(path: Path, text: str, check: Callable[[Path], Environment], *, keep: bool = True) -> Environment:
    """Write TEXT to PATH, which must not exist, only once CHECK (loading it, every problem raised at once) passes on
    a copy of the same name in a folder beside it: a file with a problem is never left, and the problems name PATH.
    With keep=False only the check is made."""
    if path.exists():
        raise GpufleetError(f"{path}: exists already; gpufleet up uses it as it is")
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.stem}-", dir=path.parent))
    draft = folder / path.name
    try:
        draft.write_text(text)
        try:
            environment = check(draft)
        except GpufleetError as error:
            raise GpufleetError(
                *(problem.replace(str(draft), str(path)) for problem in error.problems), exit_code=error.exit_code
            ) from None
        if keep:
            os.link(draft, path)  # fails when another command wrote PATH meanwhile
    except FileExistsError:
        raise GpufleetError(f"{path}: written by another command meanwhile; run gpufleet up again") from None
    finally:
        shutil.rmtree(folder)
    return environment


# -- the nodes coming up ------------------------------------------------------------------------------------------


def node_state(instance: FleetInstance) -> str:
    """What a node is doing, in a few words: its readiness tag, or its EC2 state before it has set one."""
    if instance.readiness:
        return instance.readiness
    return "launched, booting the image" if instance.state in ("pending", "running") else instance.state


def settled(instance: FleetInstance) -> bool:
    """Whether the node has said its last word on this boot: ready, or not ready with the reason."""
    return instance.readiness == READINESS_READY or instance.readiness.startswith(NOT_READY_PREFIX)


def setting_up(instance: FleetInstance) -> bool:
    return instance.readiness.startswith(READINESS_BOOTING_STEP)


@dataclass
class NodesView:
    """The nodes' progress as lines: one per node whose state changed since the last look, one per new fleet event,
    and a count. Lines start with the time since `up` began waiting."""

    target: int
    started: float
    seen: dict[str, str] = field(default_factory=dict)
    seen_events: set[tuple[str, str, str]] = field(default_factory=set)
    last_count: str = ""

    def lines(self, group: NodeGroup, events: list[FleetEvent], now: float) -> list[str]:
        stamp = elapsed(now - self.started)
        out = []
        for event in events:
            key = (event.timestamp.isoformat(), event.event_type, event.description)
            if key in self.seen_events:
                continue
            self.seen_events.add(key)
            out.append(f"  {stamp} {group.label}: {event.event_type} {event.sub_type} {event.description}".rstrip())
        for instance in group.running:
            state = node_state(instance)
            if self.seen.get(instance.instance_id) == state:
                continue
            self.seen[instance.instance_id] = state
            where = f"{instance.lifecycle or 'on-demand'} {instance.private_ip or '-'}"
            out.append(f"  {stamp} {instance.instance_id} ({where}): {state}")
        gone = set(self.seen) - {instance.instance_id for instance in group.running}
        for instance_id in sorted(gone):
            del self.seen[instance_id]
            out.append(f"  {stamp} {instance_id}: no longer running")
        count = self.count(group)
        if count != self.last_count:
            self.last_count = count
            out.append(f"  {stamp} {count}")
        return out

    def count(self, group: NodeGroup) -> str:
        running = group.running
        ready = sum(1 for instance in running if instance.ready)
        failed = sum(1 for instance in running if instance.readiness.startswith(NOT_READY_PREFIX))
        parts = [f"{ready} of {self.target} nodes ready"]
        if len(running) < self.target:
            parts.append(f"{self.target - len(running)} not launched yet")
        if failed:
            parts.append(f"{failed} not ready")
        return ", ".join(parts)


@dataclass(frozen=True)
class NodesOutcome:
    ready: tuple[FleetInstance, ...]
    not_ready: tuple[FleetInstance, ...]
    missing: int  # nodes of the target that never launched


def wait_for_nodes(
    describe: Callable[[], tuple[NodeGroup, list[FleetEvent]]],
    target: int,
    timeout_seconds: float,
    echo: Callable[[str], None],
    *,
    poll_seconds: float = 5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> NodesOutcome:
    """Look at the nodes every POLL_SECONDS, echoing what changed, until TARGET nodes are ready, or every running
    node has settled and no more can be expected (a node that said not ready stays so until it is replaced), or
    TIMEOUT_SECONDS have passed."""
    started = clock()
    view = NodesView(target, started)
    while True:
        group, events = describe()
        for line in view.lines(group, events, clock()):
            echo(line)
        running = group.running
        ready = tuple(instance for instance in running if instance.ready)
        not_ready = tuple(instance for instance in running if instance.readiness.startswith(NOT_READY_PREFIX))
        if len(ready) >= target:
            return NodesOutcome(ready, (), 0)
        all_settled = len(running) >= target and all(settled(instance) for instance in running)
        if all_settled or clock() - started >= timeout_seconds:
            return NodesOutcome(ready, not_ready, max(target - len(running), 0))
        sleep(poll_seconds)


# -- what it cost ---------------------------------------------------------------------------------------------------


def node_hours(instances: list[FleetInstance], now: dt.datetime) -> dict[str, Decimal]:
    """Hours each market's running nodes have run so far (spot, on-demand), from their launch times."""
    hours: dict[str, Decimal] = {}
    for instance in instances:
        market = "spot" if instance.lifecycle == "spot" else "on-demand"
        ran = max((now - instance.launch_time).total_seconds(), 0.0)
        hours[market] = hours.get(market, Decimal(0)) + Decimal(str(round(ran / 3600, 4)))
    return hours


def money(value: Decimal) -> str:
    return f"${value.quantize(Decimal('0.01'))}"


def cost_lines(
    hours: dict[str, Decimal], prices: dict[str, Decimal | None], hourly: Decimal, complete: bool
) -> list[str]:
    """What getting here cost (nodes' hours so far at today's prices) and what the nodes cost per hour."""
    spent = Decimal(0)
    unknown = []
    for market, market_hours in sorted(hours.items()):
        price = prices.get(market)
        if price is None:
            unknown.append(market)
            continue
        spent += market_hours * price
    total_hours = sum(hours.values(), Decimal(0))
    lines = [
        f"cost so far: {money(spent)} for {total_hours.quantize(Decimal('0.01'))} node-hours since the first node "
        "launched" + (f" (no price for {', '.join(unknown)} nodes)" if unknown else "")
    ]
    per_hour = f"{money(hourly)} per hour for the nodes" + ("" if complete else " (some prices unknown)")
    lines.append(
        f"while it is up: {per_hour}, plus the NAT gateway, the endpoints and the file system "
        "(`gpufleet cost` for the lines; `gpufleet down` stops all of it)"
    )
    return lines


def caller_account(sts: Any) -> str:
    return str(sts.get_caller_identity()["Account"])
