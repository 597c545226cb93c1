"""Sub-commands of ``gpufleet``; each module has ``register(subparsers)``."""

import argparse


def add_node_group_options(parser: argparse.ArgumentParser) -> None:
    """--fleet-id and --group-name, which name the node group when the stack output should not
    (gpufleet.ops.fleet.group_id_option reads them)."""
    parser.add_argument("--fleet-id", help="Spot Fleet request id (default: output FleetRequestId of the stack)")
    parser.add_argument(
        "--group-name",
        help="Auto Scaling group name (fleet.backend auto-scaling; default: output AutoScalingGroupName)",
    )


def print_stage(number: int, text: str, *, stages: int) -> None:
    """A stage of a command that works in stages (up, down): "[K/N] TEXT", flushed, since the stages take minutes."""
    print(f"[{number}/{stages}] {text}", flush=True)


def print_detail(text: str) -> None:
    """A line under a stage."""
    print(f"  {text}", flush=True)


def print_cdk_line(line: str) -> None:
    """A line the CDK CLI printed, under the stage that runs it."""
    print_detail(f"cdk | {line}")
