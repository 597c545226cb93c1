"""gpufleet hosts ENV --format mpi|torchrun|slurm|json [--fleet-id ID | --group-name NAME] [--include-not-ready]:
launcher host lists of the nodes that are ready for jobs, on-demand nodes first, so that rank 0 and the rendezvous
host are a node spot cannot take."""

from __future__ import annotations

import argparse
import json
import sys

from gpufleet.commands import add_node_group_options

FORMATS = ("mpi", "torchrun", "slurm", "json")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hosts", help="host list of the nodes ready for jobs (on-demand first) for mpirun, torchrun, Slurm"
    )
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    parser.add_argument("--format", choices=FORMATS, default="mpi", help="output format (default: mpi)")
    add_node_group_options(parser)
    parser.add_argument(
        "--include-not-ready",
        action="store_true",
        help="also list running nodes that are booting or failed their checks (after the ready ones)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.errors import GpufleetError
    from gpufleet.ops import hostlists
    from gpufleet.ops.fleet import NODE_GROUP_ID_KEYS, find_node_group, group_id_option

    env = load_environment_for("hosts", args.env)
    gpus = load_catalog()[env.instance_type].gpu.count
    with aws_errors(env.region):
        fleet = find_node_group(Aws(env.region), env, group_id_option(args, env))
    running = fleet.running
    if not running:
        raise GpufleetError(
            f"{fleet.label} ({env.name}) has no running instances (state {fleet.state}, "
            f"fulfilled {fleet.fulfilled_capacity:g}/{fleet.target_capacity}): see `gpufleet status {env.name}`"
        )
    hosts = running if args.include_not_ready else fleet.ready
    if not hosts:
        waiting = ", ".join(f"{i.instance_id} ({i.readiness or 'not marked yet'})" for i in running)
        raise GpufleetError(
            f"{fleet.label} ({env.name}) has no node ready for jobs: {waiting}; see `gpufleet status {env.name}`, "
            "or pass --include-not-ready"
        )
    first = hosts[0]
    if first.reclaimable:
        print(
            f"warning: no ready on-demand node: rank 0 and the rendezvous go to {first.lifecycle} node "
            f"{first.instance_id} ({first.private_ip}), which EC2 can reclaim",
            file=sys.stderr,
        )
    ips = [instance.private_ip for instance in hosts]
    if args.format == "mpi":
        print(hostlists.mpi_hostfile(ips, gpus), end="")
    elif args.format == "torchrun":
        print(hostlists.torchrun_arguments(ips, gpus, env.name), end="")
    elif args.format == "slurm":
        print(hostlists.slurm_nodelist(ips), end="")
    else:
        listed = [
            {**instance.as_dict(), "hostname": hostlists.hostname(instance.private_ip), "slots": gpus}
            for instance in hosts
        ]
        document = {"environment": env.name, NODE_GROUP_ID_KEYS[fleet.kind]: fleet.id, "hosts": listed}
        print(json.dumps(document, indent=2))
    return 0
