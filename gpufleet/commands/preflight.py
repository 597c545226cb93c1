"""gpufleet preflight ENV [--suggest-az] [--json]: can this environment's cluster be launched? One line per check."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import TYPE_CHECKING

from gpufleet.constants import FLAVOUR_EKS

if TYPE_CHECKING:
    from gpufleet.environment import Environment


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "preflight", help="check offering, EFA, vCPU quotas, AMI and spot capacity before deploying an environment"
    )
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    parser.add_argument(
        "--suggest-az", action="store_true", help="rank the region's AZs offering the type (placement score, price)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.loading import load_named_environment
    from gpufleet.ops import preflight
    from gpufleet.table import format_table

    env = load_named_environment(args.env)
    spec = load_catalog()[env.instance_type]
    now = dt.datetime.now(dt.UTC)
    aws = Aws(env.region)
    with aws_errors(env.region):
        checks = preflight.run_checks(aws, env, spec, now)
        suggestions, note = preflight.suggest_zones(aws.client("ec2"), env, now) if args.suggest_az else ([], "")
    failed = any(check.status == "fail" for check in checks)
    if args.json:
        document = {
            "environment": env.name,
            "region": env.region,
            "availability_zone": env.availability_zone,
            "flavour": env.flavour,
            "backend": None if env.flavour == FLAVOUR_EKS else env.fleet.backend,
            "ok": not failed,
            "checks": [check.as_dict() for check in checks],
        }
        if args.suggest_az:
            document["suggested_zones"] = [vars(suggestion) for suggestion in suggestions]
            document["suggestion_note"] = note
        print(json.dumps(document, indent=2))
        return 1 if failed else 0
    print(
        f"Preflight {env.name}: {env.capacity.target} x {env.instance_type} ({env.capacity.on_demand} on-demand, "
        f"{env.capacity.spot} spot) in {env.availability_zone}, {node_group_words(env)}"
    )
    print(format_table(["RESULT", "CHECK", "DETAIL"], [(c.status, c.name, c.detail) for c in checks]))
    if args.suggest_az:
        print()
        rows = [
            (
                rank,
                s.zone,
                s.zone_id,
                "-" if s.placement_score is None else s.placement_score,
                "-" if s.spot_price is None else f"{s.spot_price:.4f}",
            )
            for rank, s in enumerate(suggestions, start=1)
        ]
        print(format_table(["RANK", "AZ", "AZ ID", "SPOT SCORE", "SPOT $/H"], rows))
        if note:
            print(f"note: {note}")
    print("preflight failed" if failed else "preflight passed")
    return 1 if failed else 0


def node_group_words(env: Environment) -> str:
    """What keeps the nodes: the fleet flavour's fleet.backend, or the eks flavour's managed node groups."""
    if env.flavour == FLAVOUR_EKS:
        assert env.eks is not None, "the environment's validation: the eks flavour has an eks section"
        return f"EKS managed node groups, Kubernetes {env.eks.kubernetes_version}"
    return f"fleet.backend {env.fleet.backend}"
