"""gpufleet summary [CDK_OUT]: one line per synthesized environment, read back from the cloud assembly."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from gpufleet.catalog import load_catalog
from gpufleet.constants import AVAILABILITY_ZONE_OUTPUT_KEY, BACKEND_AUTO_SCALING, BACKEND_SPOT_FLEET
from gpufleet.errors import GpufleetError
from gpufleet.table import format_table

CLUSTER_STACK_SUFFIX = "-cluster"


@dataclass(frozen=True)
class ClusterSummary:
    environment: str
    stack: str
    backend: str
    instance_type: str
    on_demand_nodes: int
    spot_nodes: int
    gpus: int
    gpu_model: str
    efa_interfaces_per_node: int
    placement_strategy: str
    availability_zone: str


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("summary", help="summarize the clusters of a synthesized cloud assembly")
    parser.add_argument("cdk_out", nargs="?", type=Path, default=Path("cdk.out"), metavar="CDK_OUT")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    summaries = summarize(args.cdk_out)
    if args.json:
        print(json.dumps([asdict(summary) for summary in summaries], indent=2))
        return 0
    headers = ["ENVIRONMENT", "BACKEND", "INSTANCE TYPE", "NODES OD/SPOT", "GPUS", "EFA/NODE", "PLACEMENT", "AZ"]
    rows = [
        [
            s.environment,
            s.backend,
            s.instance_type,
            f"{s.on_demand_nodes}/{s.spot_nodes}",
            f"{s.gpus} x {s.gpu_model}",
            s.efa_interfaces_per_node,
            s.placement_strategy,
            s.availability_zone,
        ]
        for s in summaries
    ]
    print(format_table(headers, rows))
    return 0


def summarize(cdk_out: Path) -> list[ClusterSummary]:
    manifest_file = cdk_out / "manifest.json"
    if not manifest_file.is_file():
        raise GpufleetError(f"{cdk_out}: no cloud assembly here (run `cdk synth` first)")
    artifacts = json.loads(manifest_file.read_text())["artifacts"]
    stacks = sorted(
        name
        for name, artifact in artifacts.items()
        if artifact["type"] == "aws:cloudformation:stack" and name.endswith(CLUSTER_STACK_SUFFIX)
    )
    if not stacks:
        raise GpufleetError(f"{cdk_out}: the cloud assembly holds no gpufleet cluster stack")
    return [_summarize_stack(cdk_out, name) for name in stacks]


def _summarize_stack(cdk_out: Path, stack: str) -> ClusterSummary:
    template = json.loads((cdk_out / f"{stack}.template.json").read_text())
    resources = template["Resources"]

    def only(resource_type: str) -> dict:
        (properties,) = [r["Properties"] for r in resources.values() if r["Type"] == resource_type]
        return properties

    template_data = only("AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    backend, on_demand, target = _node_group(resources)
    instance = load_catalog()[template_data["InstanceType"]]
    interfaces = template_data["NetworkInterfaces"]
    return ClusterSummary(
        environment=stack.removeprefix("gpufleet-").removesuffix(CLUSTER_STACK_SUFFIX),
        stack=stack,
        backend=backend,
        instance_type=instance.name,
        on_demand_nodes=on_demand,
        spot_nodes=target - on_demand,
        gpus=target * instance.gpu.count,
        gpu_model=instance.gpu.model,
        # Both interface types give the node an EFA device; efa-only has no ENA device besides.
        efa_interfaces_per_node=sum(1 for i in interfaces if i["InterfaceType"] in ("efa", "efa-only")),
        placement_strategy=_placement(template_data, only("AWS::EC2::PlacementGroup")["Strategy"]),
        availability_zone=template["Outputs"][AVAILABILITY_ZONE_OUTPUT_KEY]["Value"],
    )


def _node_group(resources: dict) -> tuple[str, int, int]:
    """(fleet.backend, on-demand nodes, target) of the one Spot Fleet or Auto Scaling group of the stack."""
    for resource in resources.values():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::EC2::SpotFleet":
            fleet = properties["SpotFleetRequestConfigData"]
            return BACKEND_SPOT_FLEET, fleet["OnDemandTargetCapacity"], fleet["TargetCapacity"]
        if resource["Type"] == "AWS::AutoScaling::AutoScalingGroup":
            # The group's target is its MaxSize: a Capacity Block group's DesiredCapacity is 0 outside its block.
            # Without a mixed instances policy (a Capacity Block's group) every node is of the launch template's
            # market, none spot (stacks/constructs/gpu_auto_scaling_group.py).
            target = int(properties["MaxSize"])
            policy = properties.get("MixedInstancesPolicy")
            on_demand = policy["InstancesDistribution"]["OnDemandBaseCapacity"] if policy else target
            return BACKEND_AUTO_SCALING, on_demand, target
    raise GpufleetError("the cluster stack holds neither a Spot Fleet nor an Auto Scaling group")


def _placement(template_data: dict, placement_group_strategy: str) -> str:
    """The placement group's strategy when the launch template names it; a Capacity Block's nodes are placed by EC2
    (the launch template names no placement group then: stacks/constructs/node_launch_template.py)."""
    if "GroupName" in template_data.get("Placement", {}):
        return placement_group_strategy
    return template_data["InstanceMarketOptions"]["MarketType"]
