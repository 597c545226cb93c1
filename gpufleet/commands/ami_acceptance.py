"""gpufleet ami acceptance-environment: the environment file of the AMI pipeline's acceptance gate for a new image,
written only when the gate's nodes stay within acceptance.max_cost_usd at the current on-demand price
(scripts/pipeline/acceptance-gate.sh runs it after `packer build`, before launching anything)."""

from __future__ import annotations

import argparse
import json
from decimal import Decimal
from pathlib import Path

from gpufleet.errors import GpufleetError

PRICE_LIST_HELP = (
    "the JSON `aws pricing get-products --service-code AmazonEC2 --output json` printed for the gate's instance type "
    "(the filters of gpufleet/ops/cost.py ON_DEMAND_FILTERS)"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "acceptance-environment",
        help="write the AMI pipeline acceptance gate's environment file for a new image (refused when its nodes "
        "could cost more than acceptance.max_cost_usd)",
    )
    parser.add_argument("--name", required=True, help="environment name (the stack is gpufleet-NAME-cluster)")
    parser.add_argument("--image", required=True, metavar="AMI", help="the new image's id")
    parser.add_argument("--price-list", type=Path, required=True, metavar="FILE", help=PRICE_LIST_HELP)
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write NAME.yaml into")
    parser.set_defaults(handler=run_acceptance_environment)


def run_acceptance_environment(args: argparse.Namespace) -> int:
    import yaml

    from gpufleet.ami.pipeline import acceptance_environment
    from gpufleet.loading import load_environment, load_pipeline, pipeline_file
    from gpufleet.ops.cost import PriceUnavailable, single_on_demand_price

    pipeline = load_pipeline()
    gate = pipeline.acceptance
    if gate is None:
        raise GpufleetError(f"{pipeline_file()}: acceptance: null, the gate is off (nothing to deploy)", exit_code=2)
    try:
        price_list = json.loads(args.price_list.read_text())["PriceList"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GpufleetError(
            f"{args.price_list}: not the output of `aws pricing get-products --output json` ({error})"
        ) from None
    try:
        price = single_on_demand_price(price_list, gate.instance_type, pipeline.region)
    except PriceUnavailable as error:
        raise GpufleetError(f"{args.price_list}: {error}") from None
    bound, most = gate.cost_bound(price), Decimal(str(gate.max_cost_usd))
    what = f"{gate.nodes} x {gate.instance_type} at {price:f} USD/h for up to {gate.node_minutes_bound} minutes"
    if bound > most:
        raise GpufleetError(
            f"{pipeline_file()}: acceptance.max_cost_usd: {what} may cost {bound:.2f} USD, more than {most:f} "
            "(raise max_cost_usd, or lower nodes or timeout_minutes)"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name}.yaml"
    path.write_text(yaml.safe_dump(acceptance_environment(pipeline, args.name, args.image), sort_keys=False))
    load_environment(path, pipeline)
    print(f"{path}: {what}: at most {bound:.2f} USD (max_cost_usd {most:f})")
    return 0
