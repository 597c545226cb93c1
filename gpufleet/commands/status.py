"""gpufleet status ENV [--fleet-id ID | --group-name NAME] [--json]: the node group's state, capacity, instances (with
each node's readiness, in the order `gpufleet hosts` hands them to launchers) and last 24h of events (Spot Fleet
history, or the Auto Scaling group's scaling activities); for a Capacity Block, the block's dates and the group's
scheduled scale-out and scale-in.

On an eks environment (flavour: eks), `gpufleet status ENV [--nodes FILE] [--json]`: the EKS cluster and its managed
node groups (status, capacity type, sizes, health issues), and with --nodes (what `kubectl get nodes -o json`
printed) each node's readiness and allocatable nvidia.com/gpu and vpc.amazonaws.com/efa, with a line for every GPU
node short of what the catalog says it has."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import TYPE_CHECKING

from gpufleet.commands import add_node_group_options

if TYPE_CHECKING:
    from gpufleet.environment import Environment


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="node group state, capacity, instances and recent events")
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    add_node_group_options(parser)
    parser.add_argument(
        "--nodes",
        metavar="FILE",
        help="flavour eks: what `kubectl get nodes -o json` printed (- for standard input), for each node's readiness "
        "and allocatable GPUs and EFA devices",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.constants import FLAVOUR_EKS
    from gpufleet.errors import GpufleetError
    from gpufleet.loading import load_named_environment

    env = load_named_environment(args.env)
    if env.flavour == FLAVOUR_EKS:
        if args.fleet_id or args.group_name:
            raise GpufleetError(
                f"{args.env}: --fleet-id and --group-name name a fleet flavour's node group; an eks environment's "
                "node groups are its cluster's (leave them out)"
            )
        return run_eks(args, env)
    if args.nodes:
        raise GpufleetError(f"{args.env}: --nodes is for an eks environment (flavour: eks); leave it out")
    return run_fleet(args, env)


def run_fleet(args: argparse.Namespace, env: Environment) -> int:
    from botocore.exceptions import ClientError

    from gpufleet.aws import Aws, aws_errors, describe_failure, is_unavailable
    from gpufleet.ops import fleet as node_groups
    from gpufleet.ops.fallback import fallback_status
    from gpufleet.table import format_table

    aws = Aws(env.region)
    events_note = ""
    with aws_errors(env.region):
        fleet = node_groups.find_node_group(aws, env, node_groups.group_id_option(args, env))
        try:
            events = node_groups.node_group_events(aws, fleet, dt.datetime.now(dt.UTC))
        except ClientError as error:
            if not is_unavailable(error):
                raise
            events, events_note = [], f"events unavailable: {describe_failure(error, env.region)}"
        fallback = fallback_status(aws.client("ssm"), env, fleet.id)
        block = node_groups.capacity_block_status(aws, env, fleet.id)
    if args.json:
        document = {
            "environment": env.name,
            "region": env.region,
            "backend": fleet.kind,
            node_groups.NODE_GROUP_ID_KEYS[fleet.kind]: fleet.id,
            "state": fleet.state,
            "activity_status": fleet.activity_status,
            "target_capacity": fleet.target_capacity,
            "fulfilled_capacity": fleet.fulfilled_capacity,
            "on_demand_target_capacity": fleet.on_demand_target_capacity,
            "on_demand_fulfilled_capacity": fleet.on_demand_fulfilled_capacity,
            "instances": [instance.as_dict() for instance in sorted(fleet.instances, key=node_groups.job_order)],
            "images": fleet.images,
            "mixed_images": len(fleet.images) > 1,
            "events": [event.as_dict() for event in events],
            "events_note": events_note,
            "fallback": fallback.as_dict() if fallback else None,
            "capacity_block": block.as_dict() if block else None,
        }
        print(json.dumps(document, indent=2))
        return 0
    print(
        f"{fleet.label.capitalize()} ({env.name}, {env.region}): {fleet.state}, activity {fleet.activity_status}, "
        f"fulfilled {fleet.fulfilled_capacity:g}/{fleet.target_capacity} "
        f"(on-demand {fleet.on_demand_fulfilled_capacity:g}/{fleet.on_demand_target_capacity})"
    )
    if fallback:
        print(fallback.line())
    if block:
        print("\n".join(block.lines()))
    print()
    instance_rows = [
        (
            i.instance_id,
            i.lifecycle,
            i.availability_zone,
            i.placement_group,
            i.private_ip or "-",
            i.launch_time.strftime("%Y-%m-%d %H:%M:%SZ"),
            i.state,
            i.readiness or "-",
            i.image_id,
        )
        for i in sorted(fleet.instances, key=node_groups.job_order)
    ]
    headers = [
        "INSTANCE",
        "LIFECYCLE",
        "AZ",
        "PLACEMENT GROUP",
        "PRIVATE IP",
        "LAUNCHED (UTC)",
        "STATE",
        "READINESS",
        "IMAGE",
    ]
    print(format_table(headers, instance_rows) if instance_rows else "no instances")
    if any(not i.ready for i in fleet.running):
        print(
            "nodes not ready: the reason is the READINESS column; the full output is on the node "
            "(journalctl -u gpufleet-node-setup) and its console (aws ec2 get-console-output --instance-id ID)"
        )
    if len(fleet.images) > 1:
        print(
            f"mixed images: the nodes run {', '.join(fleet.images)}; a new image reached the fleet in place "
            "(fleet.rollout: manual): replace the older nodes to run one image"
        )
    print()
    if events_note:
        print(events_note)
    elif events:
        print("Events (last 24h):")
        event_rows = [
            (e.timestamp.strftime("%Y-%m-%d %H:%M:%SZ"), e.event_type, e.sub_type, e.instance_id, e.description)
            for e in events
        ]
        print(format_table(["TIME (UTC)", "TYPE", "SUBTYPE", "INSTANCE", "DESCRIPTION"], event_rows))
    else:
        print(f"no {node_groups.NODE_GROUP_WORDS[fleet.kind]} events in the last 24h")
    return 0


# Why gpufleet status reads nodes from a file (gpufleet.reports.kubernetes_nodes), and how to make one.
NODES_HINT = (
    "Kubernetes nodes not read: the cluster's endpoint is private, so run `kubectl get nodes -o json > nodes.json` "
    "where it answers (docs/guides/eks.md) and pass --nodes nodes.json"
)


def run_eks(args: argparse.Namespace, env: Environment) -> int:
    """The cluster and its managed node groups from the EKS API; with --nodes, every node's readiness and devices,
    and a line per GPU node short of what the catalog says."""
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.ops.eks_status import describe_cluster
    from gpufleet.reports.kubernetes_nodes import (
        EFA_RESOURCE,
        GPU_RESOURCE,
        expected_efa_devices,
        node_problems,
        read_nodes,
    )
    from gpufleet.table import format_table

    spec = load_catalog()[env.instance_type]
    nodes = read_nodes(args.nodes) if args.nodes else None
    with aws_errors(env.region):
        cluster = describe_cluster(Aws(env.region), env)
    problems = node_problems(nodes, env, spec) if nodes is not None else []
    if args.json:
        document = {
            "environment": env.name,
            "region": env.region,
            "flavour": env.flavour,
            "cluster": cluster.as_dict(),
            "expected_per_gpu_node": {GPU_RESOURCE: spec.gpu.count, EFA_RESOURCE: expected_efa_devices(env, spec)},
            "nodes": None if nodes is None else [vars(node) for node in nodes],
            "node_problems": problems,
        }
        print(json.dumps(document, indent=2))
        return 0
    endpoint = "public and private" if cluster.endpoint_public else "private"
    print(
        f"EKS cluster {cluster.name} ({env.name}, {env.region}): {cluster.status}, Kubernetes "
        f"{cluster.kubernetes_version} ({cluster.platform_version}), endpoint {endpoint}"
    )
    print()
    group_rows = [
        (g.name, g.capacity_type, g.status, f"{g.desired}/{g.minimum}/{g.maximum}", "; ".join(g.issues) or "-")
        for g in cluster.node_groups
    ]
    headers = ["NODE GROUP", "CAPACITY", "STATUS", "DESIRED/MIN/MAX", "HEALTH ISSUES"]
    print(format_table(headers, group_rows) if group_rows else "no managed node groups")
    print()
    if nodes is None:
        print(NODES_HINT)
        return 0
    node_rows = [
        (n.name, n.node_group or "-", n.instance_type or "-", n.readiness, n.gpus, n.efa_devices)
        for n in sorted(nodes, key=lambda node: (node.node_group, node.name))
    ]
    headers = ["NODE", "NODE GROUP", "INSTANCE TYPE", "READY", GPU_RESOURCE, EFA_RESOURCE]
    print(format_table(headers, node_rows) if node_rows else f"no nodes in {args.nodes}")
    gpu_nodes = [node for node in nodes if node.instance_type == spec.name]
    ready = [node for node in gpu_nodes if node.ready]
    print(f"{len(ready)} of {len(gpu_nodes)} {spec.name} nodes Ready (capacity.target {env.capacity.target})")
    for problem in problems:
        print(problem)
    return 0
