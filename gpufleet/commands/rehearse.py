"""gpufleet rehearse NAME [--wait-minutes M]: a spot interruption on the real cluster, followed to its end.

Starts an experiment from the cluster stack's AWS FIS template (stacks/constructs/spot_interruption_rehearsal.py: one
running spot node of the environment gets a real interruption notice, two minutes ahead), then follows it: the
experiment's state, the node that got the notice, that node going away and the node group's replacement launching,
setting up and becoming ready; until the replacement is ready or --wait-minutes pass. Run it while a job trains to see
the whole chain: the watcher on the warned node, the other nodes' Run Command output, the checkpoint, the restart.
An environment without spot nodes has no such template: it is refused before anything starts.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_WAIT_MINUTES = 30
BAD_INPUT = 2
NOT_OVER = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rehearse",
        help="interrupt one spot node for real (AWS FIS) and follow it until its replacement is ready",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("env", metavar="NAME", help="environment name (environments/NAME.yaml)")
    parser.add_argument(
        "--wait-minutes",
        type=int,
        default=DEFAULT_WAIT_MINUTES,
        metavar="M",
        help=f"how long to follow it (default: {DEFAULT_WAIT_MINUTES})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.constants import BACKEND_SPOT_FLEET, FLEET_TYPE_REQUEST, SPOT_INTERRUPTION_TEMPLATE_OUTPUT_KEY
    from gpufleet.errors import GpufleetError
    from gpufleet.ops import fleet
    from gpufleet.ops.down import describe_stack, stack_outputs
    from gpufleet.ops.rehearse import PACE, Rehearsal, follow, start

    if not 1 <= args.wait_minutes <= 24 * 60:
        raise GpufleetError(f"--wait-minutes {args.wait_minutes}: must be 1 to 1440", exit_code=BAD_INPUT)
    env = load_environment_for("rehearse", args.env)
    if env.capacity.spot == 0:
        raise GpufleetError(
            f"gpufleet rehearse {env.name}: {env.name} has no spot nodes (capacity.on_demand = capacity.target = "
            f"{env.capacity.target}), so nothing can get a spot interruption: there is nothing to rehearse",
            exit_code=BAD_INPUT,
        )
    aws = Aws(env.region)
    with aws_errors(env.region):
        stack_name = fleet.cluster_stack_name(env)
        stack = describe_stack(aws.client("cloudformation"), stack_name)
        if stack is None:
            raise GpufleetError(
                f"gpufleet rehearse {env.name}: {stack_name} not found in {env.region}: run gpufleet up"
            )
        template_id = stack_outputs(stack).get(SPOT_INTERRUPTION_TEMPLATE_OUTPUT_KEY)
        if template_id is None:
            raise GpufleetError(
                f"gpufleet rehearse {env.name}: {stack_name} ({stack['StackStatus']}) has no "
                f"{SPOT_INTERRUPTION_TEMPLATE_OUTPUT_KEY} output: deploy it again (gpufleet up {env.name}) to add it"
            )
        group = fleet.find_node_group(aws, env, None)
        spot = [instance for instance in group.running if instance.lifecycle == "spot"]
        if not spot:
            raise GpufleetError(
                f"gpufleet rehearse {env.name}: no spot node is running ({len(group.running)} running in "
                f"{group.label}): wait for them (gpufleet status {env.name}), then rehearse"
            )
        fis = aws.client("fis")
        experiment = start(fis, template_id)
        print(
            f"gpufleet rehearse {env.name}: experiment {experiment['id']} from {template_id}: one of {len(spot)} "
            f"running spot nodes gets an interruption notice, two minutes ahead ({len(group.running)} of "
            f"{group.target_capacity} nodes running, {len(group.ready)} ready)",
            flush=True,
        )
        rehearsal = Rehearsal(
            experiment_id=experiment["id"],
            initial=group,
            replaces=not (env.fleet.backend == BACKEND_SPOT_FLEET and env.fleet.type == FLEET_TYPE_REQUEST),
            started=PACE.clock(),
        )
        outcome = follow(
            fis,
            experiment["id"],
            lambda: fleet.find_node_group(aws, env, None),
            rehearsal,
            args.wait_minutes * 60,
            lambda line: print(line, flush=True),
        )
    for line in outcome.lines:
        print(f"gpufleet rehearse {env.name}: {line}", file=sys.stdout if outcome.ok else sys.stderr)
    return 0 if outcome.ok else NOT_OVER
