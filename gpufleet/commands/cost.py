"""gpufleet cost ENV [--json]: the hourly and 30-day cost of an environment's nodes from live prices.

Exit codes: 0 every price was read; 3 some price could not be read (its line says why; the totals count only the
known prices and say so); 1 the environment or AWS failed (one line on stderr).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.ops.cost import Mix

EXIT_INCOMPLETE = 3
EXIT_CODES = (
    "exit codes: 0 every price read; 3 some price could not be read (the totals are incomplete); "
    "1 the environment or AWS failed"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cost",
        help="hourly and 30-day cost of an environment's nodes from live prices, and the worst case after fallback",
        epilog=EXIT_CODES,
    )
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.commands.preflight import node_group_words
    from gpufleet.constants import FLAVOUR_EKS
    from gpufleet.loading import load_named_environment
    from gpufleet.ops import cost

    env = load_named_environment(args.env)
    with aws_errors(env.region):
        estimate = cost.estimate(Aws(env.region), env, dt.datetime.now(dt.UTC))
    exit_code = 0 if estimate.complete else EXIT_INCOMPLETE
    if args.json:
        document = {
            "environment": env.name,
            "region": env.region,
            "availability_zone": env.availability_zone,
            "instance_type": env.instance_type,
            "flavour": env.flavour,
            "backend": None if env.flavour == FLAVOUR_EKS else env.fleet.backend,
            "currency": cost.CURRENCY,
            "hours_in_30_days": cost.HOURS_PER_30_DAYS,
            "complete": estimate.complete,
            **estimate.configured.as_dict(),
            "after_fallback": None
            if estimate.after_fallback is None
            else {"extra_on_demand": estimate.extra_on_demand, **estimate.after_fallback.as_dict()},
        }
        print(json.dumps(document, indent=2))
        return exit_code
    print(
        f"Cost {env.name}: {env.capacity.target} x {env.instance_type} in {env.availability_zone} "
        f"({node_group_words(env)}), {cost.CURRENCY}"
    )
    print(_table(estimate.configured))
    if estimate.after_fallback is not None:
        print()
        print(
            f"Worst case after fallback: {estimate.extra_on_demand} spot node(s) replaced by on-demand (fleet.fallback)"
        )
        print(_table(estimate.after_fallback))
    missing = estimate.missing
    if missing:
        print()
        print(f"totals are incomplete: no price for {', '.join(line.market for line in missing)} (see PRICE above)")
    return exit_code


def _table(mix: Mix) -> str:
    from gpufleet.ops.cost import HOURS_PER_30_DAYS
    from gpufleet.table import format_table

    rows: list[tuple[object, ...]] = [
        (
            line.market,
            line.nodes,
            _money(line.node_hourly, 4),
            _money(line.hourly, 2),
            _money(None if line.hourly is None else line.hourly * HOURS_PER_30_DAYS, 2),
            line.source,
        )
        for line in mix.lines
    ]
    total = "total" if mix.complete else "total (incomplete)"
    nodes = sum(line.nodes for line in mix.lines)
    rows.append((total, nodes, "", _money(mix.hourly, 2), _money(mix.thirty_days, 2), ""))
    return format_table(["MARKET", "NODES", "PER NODE-HOUR", "PER HOUR", "PER 30 DAYS", "PRICE"], rows)


def _money(value: Decimal | None, places: int) -> str:
    return "-" if value is None else f"{value:,.{places}f}"
