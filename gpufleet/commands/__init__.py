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
