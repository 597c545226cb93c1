"""gpufleet validate [FILE...]: check environment files, one line per problem; warnings alone exit 0."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufleet.errors import GpufleetError
from gpufleet.loading import (
    WHERE_ENVIRONMENTS_ARE,
    check_environments,
    environment_files,
    environments_dir,
    load_pipeline,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check environment files (default: every file in environments/), and that the AMI pipeline "
        "(ami/pipeline.yaml) publishes the image each one reads",
    )
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    files = args.files or environment_files()
    if not files:
        raise GpufleetError(f"{environments_dir()}: no environment files (*.yaml) found ({WHERE_ENVIRONMENTS_ARE})")
    environments, warnings = check_environments(files, ami_pipeline=load_pipeline())
    for line in warnings:
        print(line, file=sys.stderr)
    for path, env in zip(files, environments, strict=True):
        print(f"{path}: ok ({env.name}: {env.capacity.target} x {env.instance_type} in {env.availability_zone})")
    return 0
