"""gpufleet run ENV [--setup CMD] [--secret NAME=SECRET_ID]... [--workdir DIR] [--torchrun | --mpi]
[--fleet-id ID | --group-name NAME] -- CMD...: start CMD on every node that is ready for jobs, as the cluster user, in a
systemd unit that outlives this command (gpufleet.ops.runs)."""

from __future__ import annotations

import argparse
import sys

from gpufleet.commands import add_node_group_options

# A start SSM takes longer than this to deliver or run is reported as not started (SendCommand's delivery timeout is
# 600 s, the start itself at most 120 s: gpufleet.ops.runs).
DEFAULT_WAIT_SECONDS = 720
NOT_ALL_STARTED = 3
# --torchrun: any node left goes on (a lost node costs a restart, not the run); a lost node costs one restart of every
# surviving node's torchrun and a node joining none ("membership changes do not count as retries": torch 1.13.1
# torch/distributed/elastic/agent/server/api.py _invoke_run), so ten restarts are ten lost nodes.
DEFAULT_MIN_NODES = 1
DEFAULT_MAX_RESTARTS = 10
EXIT_CODES = (
    "exit codes: 0 started on every ready node; 3 started on some nodes only (one line each on stderr for the "
    "others: its processes on the nodes that started keep running, stop them with systemctl stop gpufleet-run-RUN); "
    "1 nothing was sent (no ready node, no command, an AWS error); 2 nothing was sent: an eks environment (the line "
    "says what to use), or a --secret that is not NAME=SECRET_ID in the environment's namespace"
)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--setup", default="", help="shell command run first on every node (e.g. pip install ...)")
    parser.add_argument(
        "--secret",
        action="append",
        default=None,
        metavar="NAME=SECRET_ID",
        help="every node reads the Secrets Manager secret SECRET_ID (a name starting gpufleet-ENV/, or its ARN) with "
        "its node role into the environment variable NAME, before --setup; only the reference travels with the run "
        "(repeatable). --setup and the command themselves are visible in SSM's command history: no secrets there",
    )
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        help="a local directory uploaded once (to storage.data_repository's bucket) and unpacked on every node, "
        "where the command then runs (default: the cluster user's home)",
    )
    parser.add_argument(
        "--mpi",
        action="store_true",
        help="start mpirun on the head only, GPUs-per-node processes on every ready node, over the cluster's SSH",
    )
    parser.add_argument(
        "--torchrun",
        action="store_true",
        help="run the command under torchrun on every ready node: c10d rendezvous on the head, GPUs-per-node "
        "processes a node, elastic between --min-nodes and the ready nodes; with shared storage a node that becomes "
        "ready later joins the run",
    )
    parser.add_argument(
        "--min-nodes",
        type=int,
        default=DEFAULT_MIN_NODES,
        metavar="N",
        help=f"--torchrun: the fewest nodes the run goes on with (default: {DEFAULT_MIN_NODES})",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=DEFAULT_MAX_RESTARTS,
        metavar="N",
        help="--torchrun: how often each node's torchrun restarts its processes after a failure, a lost node "
        f"included (default: {DEFAULT_MAX_RESTARTS})",
    )
    add_node_group_options(parser)
    parser.add_argument(
        "--wait",
        type=int,
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"how long to wait for every node to report its start (default: {DEFAULT_WAIT_SECONDS})",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="start a command on every node ready for jobs, as the cluster user, in a systemd unit",
        epilog=EXIT_CODES,
    )
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    add_options(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command and its arguments")
    parser.set_defaults(handler=run)


def split_command(args: argparse.Namespace) -> list[str]:
    """The command after --, with the options given between ENV and -- parsed into ARGS. argparse's REMAINDER takes
    everything after ENV, options included, and drops the -- only when nothing came between: a remainder that starts
    with an option is options up to the first --, anything else is the command (none starts with a dash)."""
    remainder = list(args.command)
    if not remainder or not remainder[0].startswith("-"):
        return remainder
    end = remainder.index("--") if "--" in remainder else len(remainder)
    options = argparse.ArgumentParser(prog="gpufleet run", add_help=False)
    add_options(options)
    options.parse_args(remainder[:end], namespace=args)
    return remainder[end + 1 :]


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import datetime as dt
    import secrets
    from pathlib import Path

    from gpufleet.aws import Aws, aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.errors import GpufleetError
    from gpufleet.ops.fleet import find_node_group, group_id_option
    from gpufleet.ops.runs import (
        new_run_id,
        node_results,
        node_workdir,
        parse_secrets,
        plan_run,
        plan_torchrun,
        start_run,
        unit_name,
        upload_workdir,
    )

    env = load_environment_for("run", args.env)
    command = split_command(args)
    if args.torchrun and args.mpi:
        raise GpufleetError("--torchrun and --mpi: choose one launcher")
    # Before any AWS call: a bad reference (or a value pasted where its name belongs) never leaves this machine.
    run_secrets = parse_secrets(
        args.secret or [], stack_prefix=env.stack_prefix, region=env.region, account=env.account
    )
    gpus = load_catalog()[env.instance_type].gpu.count
    location = env.data_repository_location
    if args.workdir and location is None:
        raise GpufleetError(
            f"--workdir: {env.name} has no storage.data_repository, the bucket the directory goes through: "
            "add one (docs/guides/storage.md), or put the code on the nodes another way"
        )
    aws = Aws(env.region)
    with aws_errors(env.region):
        group = find_node_group(aws, env, group_id_option(args, env))
        run_id = new_run_id(dt.datetime.now(dt.UTC), secrets.token_hex(2))
        if args.torchrun:
            plan = plan_torchrun(
                run_id,
                env.name,
                group.ready,
                gpus,
                command,
                min_nodes=args.min_nodes,
                max_restarts=args.max_restarts,
                setup=args.setup,
                shared_dir=env.storage.mount_path if env.storage else "",
                secrets=run_secrets,
            )
        else:
            plan = plan_run(
                run_id,
                env.name,
                group.ready,
                gpus,
                command,
                setup=args.setup,
                mpi=args.mpi,
                secrets=run_secrets,
                shared_dir=env.storage.mount_path if env.storage else "",
            )
        if args.workdir and location is not None:
            # After the plan, so that a run refused for want of ready nodes uploads nothing.
            archive = upload_workdir(aws.client("s3"), Path(args.workdir), location, run_id, region=env.region)
            print(f"run {run_id}: {args.workdir} uploaded to {archive.address}", flush=True)
            plan = dataclasses.replace(plan, workdir=node_workdir(run_id), workdir_archive=archive)
        head = plan.nodes[0]
        print(f"run {run_id}: {len(plan.nodes)} nodes, head {head.instance_id} ({head.private_ip})", flush=True)
        if head.reclaimable:
            print(
                f"warning: no ready on-demand node: the head is {head.lifecycle} node {head.instance_id}, "
                "which EC2 can reclaim",
                file=sys.stderr,
            )
        if args.torchrun and not plan.joinable:
            print(
                f"warning: {env.name} has no shared storage: a node that becomes ready later does not join this run",
                file=sys.stderr,
            )
        ssm = aws.client("ssm")
        commands, refused = start_run(ssm, plan)
        results = refused + node_results(
            ssm, commands, args.wait, progress=lambda start: print(start.line(), flush=True)
        )
    failed = [result for result in results if not result.ok]
    for result in failed:
        print(f"{env.name}: run {run_id}: {result.line()}", file=sys.stderr)
    started = len(results) - len(failed)
    print(f"run {run_id}: started on {started} of {len(results)} nodes (unit {unit_name(run_id)})")
    return NOT_ALL_STARTED if failed else 0
