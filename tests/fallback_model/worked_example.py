"""The worked example of docs/guides/capacity.md ("Both markets short, then spot returns"): the model's output for the
scenario of issue 19's problem 3, as Markdown tables. test_worked_example.py keeps the guide equal to it; after a
change, print the tables with `python -m tests.fallback_model.worked_example` and paste them into the guide."""

from __future__ import annotations

from tests.fallback_model.model import Availability, at
from tests.fallback_model.simulation import Simulation, Snapshot

# 8 nodes, capacity.on_demand 2, after 15 min, restore after 30, max_extra_on_demand 3. Spot holds 6 nodes, 3 from
# minute 5, all 8 from minute 50; on-demand the floor and two more.
AVAILABILITY = Availability(spot=((0, 6), (5, 3), (50, 8)), on_demand=((0, 4),))
MINUTES = 100


def scenario(backend: str) -> Simulation:
    return Simulation(backend, AVAILABILITY, max_extra=3).run(MINUTES)


def table(backend: str) -> str:
    """One row per check that changed something or saw the fleet change since the row before."""
    rows = [
        "| check (UTC) | the market has (spot, on-demand) | target, on-demand part | live spot + on-demand | "
        "decision | reason (logged) |",
        "|---|---|---|---|---|---|",
    ]
    shown: tuple[int, int, str] | None = None
    for snapshot in scenario(backend).timeline:
        run = snapshot.run
        if run is None:
            continue
        seen = (run["spot_running"], run["on_demand_running"], run["action"])
        if seen == shown and run["action"] == "hold":
            continue
        shown = seen
        rows.append(row(snapshot, run))
    return "\n".join(rows)


def row(snapshot: Snapshot, run: dict) -> str:
    target = (
        f"{run['target_before']}"
        if run["target_before"] == run["target_after"]
        else (f"{run['target_before']} -> {run['target_after']}")
    )
    part = run["on_demand_before"]
    if run["on_demand_after"] != part:
        part = f"{part} -> {run['on_demand_after']}"
    return (
        f"| {at(snapshot.minute).strftime('%H:%M')} | {snapshot.spot_capacity}, {snapshot.on_demand_capacity} | "
        f"{target}, {part} | {run['spot_running']} + {run['on_demand_running']} | {run['action']} | "
        f"{run['reason']} |"
    )


def main() -> None:
    for backend in ("spot-fleet", "auto-scaling"):
        print(f"{backend}:\n\n{table(backend)}\n")


if __name__ == "__main__":
    main()
