"""The ``gpufleet`` command: one sub-command per module listed in COMMAND_MODULES.

Each module exposes ``register(subparsers)``, which adds its parser and sets ``handler`` (a function taking
the parsed arguments and returning an exit code). Modules import heavy libraries (boto3, aws_cdk, matplotlib)
inside their handlers so that ``gpufleet validate`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from gpufleet.errors import GpufleetError

COMMAND_MODULES = (
    "gpufleet.commands.validate",
    "gpufleet.commands.summary",
    "gpufleet.commands.reachability",
    "gpufleet.commands.environment_reference",
    "gpufleet.commands.ami_profile_reference",
    "gpufleet.commands.cli_reference",
    "gpufleet.commands.ami",
    "gpufleet.commands.preflight",
    "gpufleet.commands.up",
    "gpufleet.commands.down",
    "gpufleet.commands.plan",
    "gpufleet.commands.cost",
    "gpufleet.commands.status",
    "gpufleet.commands.hosts",
    "gpufleet.commands.run",
    "gpufleet.commands.runs",
    "gpufleet.commands.acceptance",
    "gpufleet.commands.rehearse",
    "gpufleet.commands.k8s",
    "gpufleet.commands.nccl_report",
    "gpufleet.commands.topo_check",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpufleet", description="EFA GPU clusters on AWS: validate, build, operate.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    # The command-line reference documents the parser it is part of.
    parser.set_defaults(command_line=parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except GpufleetError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (head, less) went away: stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
