"""gpufleet ami list | ami prune: gpufleet's images in one region, and removal of old unused ones.

The region is explicit: --region R, or --env ENV (the environment's region). One of them is required, so a
prune never runs against whatever region the shell happens to default to.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.ops.images import Image, PruneOutcome, PruneStep


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more (the newest image of each profile is always kept)")
    return value


def _add_common_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--region", help="AWS region of the images")
    where.add_argument("--env", metavar="ENV", help="use the region of environments/ENV.yaml")
    parser.add_argument("--profile", help="only images of this AMI profile (tag gpufleet:profile)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def register(ami_subparsers: argparse._SubParsersAction) -> None:
    list_parser = ami_subparsers.add_parser("list", help="images built by gpufleet, and what uses them")
    _add_common_arguments(list_parser)
    list_parser.set_defaults(handler=run_list)
    prune_parser = ami_subparsers.add_parser(
        "prune", help="deregister old unused images and delete their snapshots (dry run without --yes)"
    )
    _add_common_arguments(prune_parser)
    prune_parser.add_argument(
        "--keep", type=_positive, required=True, metavar="N", help="newest images kept per profile"
    )
    prune_parser.add_argument("--yes", action="store_true", help="really deregister and delete (default: only list)")
    prune_parser.set_defaults(handler=run_prune)


def _region(args: argparse.Namespace) -> str:
    if args.region:
        return args.region
    from gpufleet.loading import load_named_environment

    return load_named_environment(args.env).region


def _images(args: argparse.Namespace, region: str) -> tuple[Any, list[Image]]:
    from gpufleet.aws import Aws
    from gpufleet.ops.images import gpufleet_images, image_references

    aws = Aws(region)
    ec2 = aws.client("ec2")
    return ec2, gpufleet_images(ec2, image_references(ec2, aws.client("ssm")), args.profile)


def _image_row(image: Image, action: str | None = None) -> tuple[str, ...]:
    used = ", ".join(image.used_by) or "-"
    row = (image.image_id, image.name, image.profile, image.created, image.state, used)
    return row if action is None else (action, *row)


IMAGE_HEADERS = ["IMAGE", "NAME", "PROFILE", "CREATED", "STATE", "IN USE BY"]


def run_list(args: argparse.Namespace) -> int:
    from gpufleet.aws import aws_errors
    from gpufleet.table import format_table

    region = _region(args)
    with aws_errors(region):
        _, images = _images(args, region)
    if args.json:
        print(json.dumps({"region": region, "images": [image.as_dict() for image in images]}, indent=2))
    elif images:
        print(format_table(IMAGE_HEADERS, [_image_row(image) for image in images]))
    else:
        print(f"no gpufleet images (tag key gpufleet:profile) in {region}")
    return 0


def run_prune(args: argparse.Namespace) -> int:
    from gpufleet.aws import aws_errors
    from gpufleet.ops.images import plan_prune

    region = _region(args)
    with aws_errors(region):
        ec2, images = _images(args, region)
    steps = plan_prune(images, args.keep)
    if args.yes:
        return _prune(ec2, steps, region, args)
    removed = [step for step in steps if step.action == "deregister"]
    if args.json:
        document = {
            "region": region,
            "keep": args.keep,
            "dry_run": True,
            "steps": [{"action": step.action, **step.image.as_dict()} for step in steps],
        }
        print(json.dumps(document, indent=2))
        return 0
    if steps:
        from gpufleet.table import format_table

        print(format_table(["ACTION", *IMAGE_HEADERS], [_image_row(step.image, step.action) for step in steps]))
    snapshots = sum(len(step.image.snapshot_ids) for step in removed)
    print(
        f"dry run: would deregister {len(removed)} image(s) and delete {snapshots} snapshot(s) in {region}; "
        "pass --yes to do it"
    )
    return 0


def _prune(ec2: Any, steps: list[PruneStep], region: str, args: argparse.Namespace) -> int:
    """Carry out the plan, one report line per image and per snapshot as each completes; 1 when anything failed."""
    from gpufleet.ops.images import apply_prune

    outcomes = []
    for outcome in apply_prune(ec2, steps):
        outcomes.append(outcome)
        if not args.json:
            print("\n".join(outcome.lines()), flush=True)
    failed = any(outcome.failed for outcome in outcomes)
    if args.json:
        document = {
            "region": region,
            "keep": args.keep,
            "dry_run": False,
            "failed": failed,
            "steps": [{"action": o.step.action, **o.step.image.as_dict(), "outcome": o.as_dict()} for o in outcomes],
        }
        print(json.dumps(document, indent=2))
    else:
        print(_summary(outcomes, region))
    return 1 if failed else 0


def _summary(outcomes: list[PruneOutcome], region: str) -> str:
    from gpufleet.ops.images import IN_USE_BY_ANOTHER_IMAGE

    attempted = [outcome for outcome in outcomes if outcome.step.action == "deregister"]
    snapshots = [snapshot for outcome in attempted for snapshot in outcome.snapshots]

    def count(items: list[Any], status: str) -> int:
        return sum(item.status == status for item in items)

    counts = (
        f"deregistered {count(attempted, 'deregistered')} of {len(attempted)} image(s), "
        f"deleted {count(snapshots, 'deleted')} of {len(snapshots)} snapshot(s)"
    )
    shared = sum(snapshot.detail == IN_USE_BY_ANOTHER_IMAGE for snapshot in snapshots)
    if shared:
        counts += f", kept {shared} in use by another image"
    failures = count(attempted, "failed") + count(snapshots, "failed")
    if not failures:
        return f"{counts} in {region}"
    summary = f"prune incomplete in {region}: {counts}; {failures} failure(s) listed above"
    # Pruning finds snapshots through their images: once an image is gone, only the ids lead to its snapshots.
    orphaned = [
        snapshot.snapshot_id
        for outcome in attempted
        if outcome.status == "deregistered"
        for snapshot in outcome.snapshots
        if snapshot.status == "failed"
    ]
    if orphaned:
        summary += f"; no image refers to {', '.join(orphaned)} any more: delete by id (a later prune cannot find them)"
    return summary
