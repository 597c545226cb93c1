"""gpufleet ami ...: the image commands, one module per group of sub-commands in AMI_COMMAND_MODULES."""

from __future__ import annotations

import argparse
import importlib

AMI_COMMAND_MODULES: tuple[str, ...] = (
    "gpufleet.commands.ami_lifecycle",
    "gpufleet.commands.ami_images",
    "gpufleet.commands.ami_acceptance",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("ami", help="AMI profiles, Packer templates and image lifecycle")
    ami_subparsers = parser.add_subparsers(dest="ami_command", required=True, metavar="AMI_COMMAND")
    for module_name in AMI_COMMAND_MODULES:
        importlib.import_module(module_name).register(ami_subparsers)
