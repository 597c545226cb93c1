"""gpufleet hosts ENV --format mpi|torchrun|slurm|json [--fleet-id ID | --group-name NAME]: launcher host lists of the
running nodes."""

from __future__ import annotations

import argparse
import json

FORMATS = ("mpi", "torchrun", "slurm", "json")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("hosts", help="host list of the fleet's running nodes for mpirun, torchrun, Slurm")
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    parser.add_argument("--format", choices=FORMATS, default="mpi", help="output format (default: mpi)")
    parser.add_argument("--fleet-id", help="Spot Fleet request id (default: output FleetRequestId of the stack)")
    parser.add_argument(
        "--group-name",
        help="Auto Scaling group name (fleet.backend auto-scaling; default: output AutoScalingGroupName)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.errors import GpufleetError
    from gpufleet.loading import load_named_environment
    from gpufleet.ops import hostlists
    from gpufleet.ops.fleet import NODE_GROUP_ID_KEYS, find_node_group, group_id_option

    env = load_named_environment(args.env)
    gpus = load_catalog()[env.instance_type].gpu.count
    with aws_errors(env.region):
        fleet = find_node_group(Aws(env.region), env, group_id_option(args, env))
    running = fleet.running
    if not running:
        raise GpufleetError(
            f"{fleet.label} ({env.name}) has no running instances (state {fleet.state}, "
            f"fulfilled {fleet.fulfilled_capacity:g}/{fleet.target_capacity}): see `gpufleet status {env.name}`"
        )
    ips = [instance.private_ip for instance in running]
    if args.format == "mpi":
        print(hostlists.mpi_hostfile(ips, gpus), end="")
    elif args.format == "torchrun":
        print(hostlists.torchrun_arguments(ips, gpus, env.name), end="")
    elif args.format == "slurm":
        print(hostlists.slurm_nodelist(ips), end="")
    else:
        hosts = [
            {**instance.as_dict(), "hostname": hostlists.hostname(instance.private_ip), "slots": gpus}
            for instance in running
        ]
        document = {"environment": env.name, NODE_GROUP_ID_KEYS[fleet.kind]: fleet.id, "hosts": hosts}
        print(json.dumps(document, indent=2))
    return 0
