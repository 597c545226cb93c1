"""gpufleet summary [CDK_OUT]: one line per synthesized environment, read back from the cloud assembly.

Exit codes: 0 the summary is printed; 1 no cloud assembly at CDK_OUT, none of gpufleet's cluster stacks in it, or a
file of it that cannot be read: every problem is one line naming the file and where in it (``line L column C`` for
JSON that does not parse, the path of keys for a value that is missing or of the wrong kind). Each file is read
whole, up to 16 MiB.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpufleet.catalog import load_catalog
from gpufleet.commands.cloud_assembly import assembly_file, stack_artifacts
from gpufleet.constants import (
    AVAILABILITY_ZONE_OUTPUT_KEY,
    BACKEND_AUTO_SCALING,
    BACKEND_SPOT_FLEET,
    FLAVOUR_EKS,
)
from gpufleet.errors import GpufleetError
from gpufleet.input_files import JsonFile, item_path, quoted
from gpufleet.table import format_table

CLUSTER_STACK_SUFFIX = "-cluster"
# The eks flavour's GPU nodes stack (stacks/environment_stacks.py, stacks/eks_gpu_nodes_stack.py): its managed node
# groups, their launch templates and placement group, and where they are.
EKS_STACK_SUFFIX = "-gpu-nodes"
NODEGROUP_TYPE = "AWS::EKS::Nodegroup"
_DIGITS = re.compile(r"[0-9]{1,9}")
_FIX = "synthesize it again (make synth)"


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
    stacks = stack_artifacts(
        assembly_file(manifest_file, _FIX), lambda name: name.endswith((CLUSTER_STACK_SUFFIX, EKS_STACK_SUFFIX))
    )
    if not stacks:
        raise GpufleetError(f"{cdk_out}: the cloud assembly holds no gpufleet cluster stack")
    return [_summarize_stack(cdk_out, name) for name in sorted(stacks)]


def _summarize_stack(cdk_out: Path, stack: str) -> ClusterSummary:
    template = assembly_file(cdk_out / f"{stack}.template.json", _FIX)
    resources = template.get(template.document, ("Resources",), dict)
    typed: dict[str, list[tuple[str, Any]]] = {}
    for resource_id, resource in resources.items():
        resource_type = template.get(resource, ("Resources", resource_id, "Type"), str)
        typed.setdefault(resource_type, []).append((resource_id, resource))

    def only(resource_type: str) -> tuple[tuple[str, ...], dict]:
        """(path, properties) of the one resource of ``resource_type``."""
        found = typed.get(resource_type, [])
        if len(found) != 1:
            raise template.error(("Resources",), f"{len(found)} resources of type {resource_type}, expected 1")
        resource_id, resource = found[0]
        path = ("Resources", resource_id, "Properties")
        return path, template.get(resource, path, dict)

    if stack.endswith(EKS_STACK_SUFFIX):
        launch_template_path, launch_template = _gpu_launch_template(template, typed)
        backend, on_demand, target = (FLAVOUR_EKS, *_eks_node_groups(template, typed))
    else:
        launch_template_path, launch_template = only("AWS::EC2::LaunchTemplate")
        backend, on_demand, target = _node_group(template, typed)
    data_path = (*launch_template_path, "LaunchTemplateData")
    template_data = template.get(launch_template, data_path, dict)
    instance_type = template.get(template_data, (*data_path, "InstanceType"), str)
    instance = load_catalog().get(instance_type)
    if instance is None:
        raise template.error((*data_path, "InstanceType"), f"{quoted(instance_type)} is not in the instance catalog")
    interfaces_path = (*data_path, "NetworkInterfaces")
    interfaces = template.get(template_data, interfaces_path, list)
    interface_types = [
        template.get(interface, (*item_path(interfaces_path, index), "InterfaceType"), str)
        for index, interface in enumerate(interfaces)
    ]
    placement_group_path, placement_group = only("AWS::EC2::PlacementGroup")
    outputs = template.get(template.document, ("Outputs",), dict)
    zone_path = ("Outputs", AVAILABILITY_ZONE_OUTPUT_KEY)
    zone = template.get(template.get(outputs, zone_path, dict), (*zone_path, "Value"), str)
    return ClusterSummary(
        environment=stack.removeprefix("gpufleet-").removesuffix(CLUSTER_STACK_SUFFIX).removesuffix(EKS_STACK_SUFFIX),
        stack=stack,
        backend=backend,
        instance_type=instance.name,
        on_demand_nodes=on_demand,
        spot_nodes=target - on_demand,
        gpus=target * instance.gpu.count,
        gpu_model=instance.gpu.model,
        # Both interface types give the node an EFA device; efa-only has no ENA device besides.
        efa_interfaces_per_node=sum(1 for kind in interface_types if kind in ("efa", "efa-only")),
        placement_strategy=_placement(
            template,
            template_data,
            data_path,
            template.get(placement_group, (*placement_group_path, "Strategy"), str),
        ),
        availability_zone=zone,
    )


def _node_group(template: JsonFile, typed: dict[str, list[tuple[str, Any]]]) -> tuple[str, int, int]:
    """(fleet.backend, on-demand nodes, target) of the one Spot Fleet or Auto Scaling group of the stack."""
    if fleets := typed.get("AWS::EC2::SpotFleet"):
        resource_id, resource = fleets[0]
        properties_path = ("Resources", resource_id, "Properties")
        config_path = (*properties_path, "SpotFleetRequestConfigData")
        config = template.get(template.get(resource, properties_path, dict), config_path, dict)
        return (
            BACKEND_SPOT_FLEET,
            template.get(config, (*config_path, "OnDemandTargetCapacity"), int),
            template.get(config, (*config_path, "TargetCapacity"), int),
        )
    if groups := typed.get("AWS::AutoScaling::AutoScalingGroup"):
        resource_id, resource = groups[0]
        properties_path = ("Resources", resource_id, "Properties")
        properties = template.get(resource, properties_path, dict)
        # The group's target is its MaxSize: a Capacity Block group's DesiredCapacity is 0 outside its block.
        # CloudFormation types the sizes as strings ("2").
        max_size_path = (*properties_path, "MaxSize")
        max_size = template.get(properties, max_size_path, str)
        if not _DIGITS.fullmatch(max_size):
            raise template.problem(max_size_path, 'a node count such as "2"', max_size)
        target = int(max_size)
        # Without a mixed instances policy (a Capacity Block's group) every node is of the launch template's market,
        # none spot (stacks/constructs/gpu_auto_scaling_group.py).
        if "MixedInstancesPolicy" not in properties:
            return BACKEND_AUTO_SCALING, target, target
        policy_path = (*properties_path, "MixedInstancesPolicy")
        distribution_path = (*policy_path, "InstancesDistribution")
        distribution = template.get(template.get(properties, policy_path, dict), distribution_path, dict)
        return (
            BACKEND_AUTO_SCALING,
            template.get(distribution, (*distribution_path, "OnDemandBaseCapacity"), int),
            target,
        )
    raise template.error(("Resources",), "neither a Spot Fleet nor an Auto Scaling group")


def _gpu_node_groups(template: JsonFile, typed: dict[str, list[tuple[str, Any]]]) -> list[tuple[tuple[str, ...], dict]]:
    """(properties path, properties) of the GPU nodes stack's managed node groups: those with a launch template (the
    system group, in the cluster's stack, names its instance type instead: stacks/eks_cluster_stack.py)."""
    groups: list[tuple[tuple[str, ...], dict]] = []
    for resource_id, resource in typed.get(NODEGROUP_TYPE, []):
        path = ("Resources", resource_id, "Properties")
        properties = template.get(resource, path, dict)
        if "LaunchTemplate" in properties:
            groups.append((path, properties))
    if not groups:
        raise template.error(("Resources",), f"no {NODEGROUP_TYPE} with a LaunchTemplate (the GPU node groups)")
    return groups


def _gpu_launch_template(template: JsonFile, typed: dict[str, list[tuple[str, Any]]]) -> tuple[tuple[str, ...], dict]:
    """(path, properties) of the launch template of the first GPU node group (every GPU group's template describes
    the same nodes; they differ in the capacity reservation they target)."""
    path, properties = _gpu_node_groups(template, typed)[0]
    launch_path = (*path, "LaunchTemplate")
    id_path = (*launch_path, "Id")
    launch_id = template.get(template.get(properties, launch_path, dict), id_path, dict)
    reference = template.get(launch_id, (*id_path, "Ref"), str)
    resources = template.get(template.document, ("Resources",), dict)
    if reference not in resources:
        raise template.error((*id_path, "Ref"), f"refers to {quoted(reference)}, which is no resource of the stack")
    properties_path = ("Resources", reference, "Properties")
    return properties_path, template.get(resources[reference], properties_path, dict)


def _eks_node_groups(template: JsonFile, typed: dict[str, list[tuple[str, Any]]]) -> tuple[int, int]:
    """(on-demand nodes, all nodes) of the GPU node groups: their desired sizes by CapacityType (ON_DEMAND when
    unset: the AWS::EKS::Nodegroup default, botocore's eks model CreateNodegroup capacityType)."""
    on_demand = target = 0
    for path, properties in _gpu_node_groups(template, typed):
        scaling_path = (*path, "ScalingConfig")
        scaling = template.get(properties, scaling_path, dict)
        size = template.get(scaling, (*scaling_path, "DesiredSize"), int)
        target += size
        # A Capacity Block's nodes are on-demand instances, as the fleet flavour counts them.
        if template.get(properties, (*path, "CapacityType"), str, default="ON_DEMAND") != "SPOT":
            on_demand += size
    return on_demand, target


def _placement(template: JsonFile, template_data: dict, data_path: tuple[str, ...], strategy: str) -> str:
    """The placement group's strategy when the launch template names it; a Capacity Block's nodes are placed by EC2
    (the launch template names no placement group then: stacks/constructs/node_launch_template.py)."""
    if "Placement" in template_data:
        placement = template.get(template_data, (*data_path, "Placement"), dict)
        if "GroupName" in placement:
            return strategy
    market_path = (*data_path, "InstanceMarketOptions")
    market = template.get(template_data, market_path, dict)
    return template.get(market, (*market_path, "MarketType"), str)
