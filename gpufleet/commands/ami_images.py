"""gpufleet ami check|render|validate PROFILE: the compatibility gate, the Packer build directory, `packer validate`."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from gpufleet.errors import GpufleetError

PROFILE_HELP = "a shipped profile name (ami/profiles/NAME.yaml) or the path of a profile file"
INSTANCE_PROFILE_HELP = (
    "an existing instance profile for the build instance, whose role lets the SSM agent work "
    "(default: Packer creates a temporary one, which needs iam:CreateRole)"
)


def _date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a date (YYYY-MM-DD)") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser("check", help="run the compatibility gate on a profile, one line per verdict")
    check.add_argument("profile", metavar="PROFILE", help=PROFILE_HELP)
    check.add_argument("--today", type=_date, help="date the end-of-life rule compares with (default: today)")
    check.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    check.set_defaults(handler=run_check)

    render = subparsers.add_parser(
        "render",
        help="write a profile's Packer build directory: ami/packer plus its "
        "values in gpufleet.auto.pkrvars.json (refused on gate errors)",
    )
    render.add_argument("profile", metavar="PROFILE", help=PROFILE_HELP)
    render.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="directory to write (new, empty, or an earlier render of gpufleet)",
    )
    render.add_argument("--instance-profile", metavar="NAME", help=INSTANCE_PROFILE_HELP)
    render.set_defaults(handler=run_render)

    validate = subparsers.add_parser("validate", help="render into a temporary directory and run packer validate")
    validate.add_argument("profile", metavar="PROFILE", help=PROFILE_HELP)
    validate.add_argument(
        "--scripts-dir",
        type=Path,
        metavar="DIR",
        help="provisioning scripts the template points at (default: those installed with gpufleet)",
    )
    validate.add_argument("--instance-profile", metavar="NAME", help=INSTANCE_PROFILE_HELP)
    validate.set_defaults(handler=run_validate)


def run_check(args: argparse.Namespace) -> int:
    from gpufleet.ami.compatibility import Level, check_profile
    from gpufleet.ami.profile import load_profile

    profile = load_profile(args.profile)
    verdicts = check_profile(profile, today=args.today)
    if args.json:
        print(json.dumps([{"rule": v.rule, "level": v.level.value, "message": v.message} for v in verdicts], indent=2))
    else:
        width = max(len(v.rule) for v in verdicts)
        for verdict in verdicts:
            print(f"{verdict.rule:<{width}}  {verdict.level.value:<5}  {verdict.message}")
    return 1 if any(v.level is Level.ERROR for v in verdicts) else 0


def run_render(args: argparse.Namespace) -> int:
    from gpufleet.ami.profile import load_profile
    from gpufleet.ami.render import render_profile

    profile = load_profile(args.profile)
    for path in render_profile(profile, args.out, instance_profile=args.instance_profile):
        print(path)
    if profile.end_of_life is not None:
        from gpufleet.ami.compatibility import end_of_life_line

        print(f"warning: {end_of_life_line(profile)}", file=sys.stderr)
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from gpufleet.ami import SCRIPTS_DIR
    from gpufleet.ami.packer import validate_profile
    from gpufleet.ami.profile import load_profile

    profile = load_profile(args.profile)
    scripts_dir = args.scripts_dir or SCRIPTS_DIR
    if not scripts_dir.is_dir():
        raise GpufleetError(f"{scripts_dir}: no provisioning scripts directory (give one with --scripts-dir)")
    result = validate_profile(profile, scripts_dir, instance_profile=args.instance_profile)
    print(f"packer {result.packer_version}: validating {', '.join(result.files)}")
    if result.left_out:
        left_out = ", ".join(f"{construct.name} ({construct.file})" for construct in result.left_out)
        print(
            f"note: packer {result.packer_version} (amazon builder built in) does not know these, left out here: "
            f"{left_out}; Packer >= 1.7 with the pinned amazon plugin validates every line"
        )
    if result.output:
        print(result.output, file=sys.stdout if result.returncode == 0 else sys.stderr)
    print(f"{profile.name}: {'valid' if result.returncode == 0 else 'INVALID'}")
    return 0 if result.returncode == 0 else 1
