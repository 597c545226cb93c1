"""gpufleet runs ENV, gpufleet stop ENV RUN, gpufleet logs ENV RUN [--node RANK]: the runs `gpufleet run` started as
systemd sees them on the nodes, stopping one, and one node's output (gpufleet.ops.runs). Each asks every running node,
ready or not, through Run Command: a run outlives its nodes' readiness."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gpufleet.commands import add_node_group_options

if TYPE_CHECKING:
    from gpufleet.environment import Environment

WAIT_SECONDS = 720  # as gpufleet run: SendCommand's 600 s delivery timeout and the script's 120 s
NOT_EVERY_NODE = 3
EXIT_CODES = (
    "exit codes: 0 every running node answered; 3 some did not (one line each on stderr: the answer is incomplete); "
    "1 nothing was sent (no running node, an AWS error); 2 an eks environment (the line says what to use)"
)


def _add_group_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    add_node_group_options(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    runs = subparsers.add_parser(
        "runs", help="the runs on the nodes: per run, each node's unit state", epilog=EXIT_CODES
    )
    _add_group_options(runs)
    runs.set_defaults(handler=list_runs)
    stop = subparsers.add_parser("stop", help="stop a run on every node", epilog=EXIT_CODES)
    _add_group_options(stop)
    stop.add_argument("run", metavar="RUN", help="the run id gpufleet run printed (gpufleet runs lists them)")
    stop.set_defaults(handler=stop_run)
    logs = subparsers.add_parser("logs", help="the output of one node of a run (its unit's journal)", epilog=EXIT_CODES)
    _add_group_options(logs)
    logs.add_argument("run", metavar="RUN", help="the run id gpufleet run printed (gpufleet runs lists them)")
    logs.add_argument("--node", type=int, default=0, metavar="RANK", help="the node's rank in the run (default: 0)")
    logs.add_argument("--lines", type=int, default=200, help="how many of the last lines (default: 200)")
    logs.add_argument(
        "--follow", action="store_true", help="then print new lines as they come, from that node alone, until Ctrl-C"
    )
    logs.set_defaults(handler=show_logs)


def _ask_running_nodes(
    args: argparse.Namespace, env: Environment, script: str, comment: str, done: str
) -> tuple[Any, dict, list]:
    """SCRIPT on every running node of the environment: (the ssm client, command id -> nodes, each node's
    NodeResult); one stderr line for each node that did not answer."""
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.errors import GpufleetError
    from gpufleet.ops.fleet import find_node_group, group_id_option
    from gpufleet.ops.runs import node_results, send_to_nodes

    aws = Aws(env.region)
    with aws_errors(env.region):
        group = find_node_group(aws, env, group_id_option(args, env))
        nodes = [instance.instance_id for instance in group.running]
        if not nodes:
            raise GpufleetError(
                f"{group.label} ({env.name}) has no running instances: see `gpufleet status {env.name}`"
            )
        ssm = aws.client("ssm")
        commands, refused = send_to_nodes(ssm, nodes, script, f"gpufleet {env.name} {comment}")
        results = refused + node_results(ssm, commands, WAIT_SECONDS)
    for result in results:
        if not result.ok:
            print(f"{env.name}: {result.line(done)}", file=sys.stderr)
    return ssm, commands, results


def _run_id(value: str) -> str:
    from gpufleet.errors import GpufleetError
    from gpufleet.ops.runs import RUN_ID

    if not RUN_ID.fullmatch(value):
        raise GpufleetError(f"RUN: {value!r} is not a run id (such as 20261126-210500-3fa2): see `gpufleet runs`")
    return value


def list_runs(args: argparse.Namespace) -> int:
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.ops.runs import LIST_RUNS_SCRIPT, runs_on_nodes

    env = load_environment_for("runs", args.env)
    _, _, results = _ask_running_nodes(args, env, LIST_RUNS_SCRIPT, "runs", "answered")
    runs = runs_on_nodes([result for result in results if result.ok])
    if not runs:
        print("no run on any node (a run whose processes all ended well leaves no unit behind)")
    for run_id, states in runs.items():
        counts: dict[str, int] = {}
        for state in states.values():
            counts[state] = counts.get(state, 0) + 1
        summary = ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))
        print(f"{run_id}: {summary}")
    return NOT_EVERY_NODE if any(not result.ok for result in results) else 0


def stop_run(args: argparse.Namespace) -> int:
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.ops.runs import stop_script, stopped_line

    run_id = _run_id(args.run)
    env = load_environment_for("stop", args.env)
    # The node script marks a described run stopped on the node's own shared file system (node.env's).
    _, _, results = _ask_running_nodes(args, env, stop_script(run_id), f"stop {run_id}", "stopped")
    # Its first line says what it did; a warning (stderr) may follow it in the invocation's output.
    stopped = [result for result in results if result.ok and result.output.split("\n", 1)[0] == stopped_line(run_id)]
    print(
        f"run {args.run}: stopped on {len(stopped)} nodes, not running on {sum(r.ok for r in results) - len(stopped)}"
    )
    return NOT_EVERY_NODE if any(not result.ok for result in results) else 0


def show_logs(args: argparse.Namespace) -> int:
    from gpufleet.aws import aws_errors
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.errors import GpufleetError
    from gpufleet.ops.runs import follow_log, logs_script, node_log

    run_id = _run_id(args.run)
    if args.node < 0 or args.lines < 1:
        raise GpufleetError("--node is a rank (0 or more) and --lines a count (1 or more)")
    env = load_environment_for("logs", args.env)
    comment = f"logs {run_id}"
    ssm, commands, results = _ask_running_nodes(
        args, env, logs_script(run_id, args.node, args.lines), comment, "answered"
    )
    log = node_log(ssm, commands, results, run_id, args.node)
    print(log.text, end="", flush=True)
    if args.follow:
        with aws_errors(ssm.meta.region_name):
            for new in follow_log(ssm, log, run_id, args.node, f"gpufleet {args.env} {comment}", WAIT_SECONDS):
                print(new.text, end="", flush=True)
    return NOT_EVERY_NODE if any(not result.ok for result in results) else 0
