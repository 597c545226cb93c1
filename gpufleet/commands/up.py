"""gpufleet up NAME: from nothing (or from where an earlier `up` stopped) to a cluster that passed acceptance.

Six stages, each a line "[K/6] ..." and its detail, each safe to run again:
1. the environment file: environments/NAME.yaml as it is, or, when there is none, one written from the options and
   the caller's account (STS) and region, in the AZ preflight's ranking puts first (offering, spot placement score,
   price);
2. preflight (gpufleet preflight's checks; a failing one stops here, before anything is made);
3. the CDK bootstrap of the account and region, when its version parameter is missing or too old (gpufleet.ops.cdk_cli);
4. `cdk deploy` of the environment's stacks (unchanged stacks are left as they are; a bucket `down --keep-data` kept is
   taken back);
5. the nodes: one line per node each time its state changes (launched, each setup step, ready or the reason), the
   node group's events, a count; until every node is ready, every node has settled, or --wait-minutes pass;
6. gpufleet acceptance.
Then what it cost to get here and what the nodes cost per hour.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.commands import print_cdk_line, print_detail, print_stage
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from gpufleet.aws import Aws
    from gpufleet.environment import Environment

STAGES = 6
DEFAULT_NODES = 2
DEFAULT_ON_DEMAND = 1
DEFAULT_WAIT_MINUTES = 40
BAD_INPUT = 2
STAGE_FAILED = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "up",
        help="write the environment file if there is none, preflight, bootstrap, deploy, wait for every node, "
        "run acceptance; safe to run again",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("env", metavar="NAME", help="environment name (environments/NAME.yaml, written if missing)")
    new = parser.add_argument_group("a new environment (only when environments/NAME.yaml does not exist)")
    new.add_argument("--instance-type", metavar="TYPE", help="GPU instance type, e.g. p5.48xlarge (required)")
    new.add_argument("--nodes", type=int, metavar="N", help=f"nodes (default: {DEFAULT_NODES})")
    new.add_argument(
        "--on-demand",
        type=int,
        metavar="N",
        help=f"of those, on-demand; the rest are spot (default: {DEFAULT_ON_DEMAND}: the torchrun head)",
    )
    new.add_argument("--no-storage", action="store_true", help="no shared FSx for Lustre file system at /fsx")
    new.add_argument("--region", help="AWS region (default: your AWS configuration's region)")
    new.add_argument("--az", metavar="ZONE", help="availability zone (default: the best one preflight ranks)")
    parser.add_argument(
        "--wait-minutes",
        type=int,
        default=DEFAULT_WAIT_MINUTES,
        metavar="M",
        help=f"how long to wait for the nodes to be ready (default: {DEFAULT_WAIT_MINUTES})",
    )
    parser.add_argument("--skip-acceptance", action="store_true", help="stop once every node is ready")
    parser.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="where acceptance's report goes: a new or empty directory (default: acceptance-NAME-TIME here)",
    )
    parser.set_defaults(handler=run)


stage = functools.partial(print_stage, stages=STAGES)


def run(args: argparse.Namespace) -> int:
    import datetime as dt

    from gpufleet.aws import aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.ops import cdk_cli

    if not 1 <= args.wait_minutes <= 24 * 60:
        raise GpufleetError(f"--wait-minutes {args.wait_minutes}: must be 1 to 1440", exit_code=BAD_INPUT)
    root = cdk_cli.project_root()
    env, aws = environment_stage(args)
    spec = load_catalog()[env.instance_type]
    with aws_errors(env.region):
        if not preflight_stage(aws, env, spec):
            return STAGE_FAILED
        bootstrap_stage(aws, env, root)
        stage(4, f"deploy: the stacks of {env.name} (cdk deploy)")
        cdk_cli.run_cdk(root, cdk_cli.deploy_arguments(env.name), echo=print_cdk_line)
        outcome = nodes_stage(aws, env, args.wait_minutes)
        if outcome is None:
            return STAGE_FAILED
        status = 0
        if args.skip_acceptance:
            stage(6, "acceptance: skipped (--skip-acceptance)")
        else:
            status = acceptance_stage(env, args.report_dir)
        cost_stage(aws, env, dt.datetime.now(dt.UTC))
    if status == 0:
        first_job = f"gpufleet run {env.name} --torchrun -- train.py"
        print(f"{env.name} is up: `{first_job}` starts a job (docs/guides/first-job.md)")
    return status


def environment_stage(args: argparse.Namespace) -> tuple[Environment, Aws]:
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.loading import environments_dir
    from gpufleet.ops.up import caller_account

    path = environments_dir() / f"{args.env}.yaml"
    if path.exists():
        env = load_environment_for("up", args.env)
        problems = differences(args, env)
        if problems:
            raise GpufleetError(*problems, exit_code=BAD_INPUT)
        aws = Aws(env.region)
        with aws_errors(env.region):
            account = caller_account(aws.client("sts"))
        if account != env.account:
            raise GpufleetError(
                f"{path}: account: {env.account} is not the account of your AWS credentials ({account}): set "
                f'account: "{account}" in the file, or use credentials for {env.account}',
                exit_code=BAD_INPUT,
            )
        stage(1, f"environment: {path} ({describe(env)})")
        return env, aws
    env = write_environment(args, path)
    stage(1, f"environment: wrote {path} ({describe(env)})")
    return env, Aws(env.region)


def describe(env: Environment) -> str:
    capacity = env.capacity
    storage = ", shared storage" if env.storage is not None else ""
    return (
        f"{capacity.target} x {env.instance_type}, {capacity.on_demand} on-demand and {capacity.spot} spot, "
        f"in {env.availability_zone}{storage}"
    )


def differences(args: argparse.Namespace, env: Environment) -> list[str]:
    """The options for a new environment that say otherwise than NAME.yaml, which is what `up` deploys."""
    given = {
        "--instance-type": (args.instance_type, env.instance_type),
        "--nodes": (args.nodes, env.capacity.target),
        "--on-demand": (args.on_demand, env.capacity.on_demand),
        "--region": (args.region, env.region),
        "--az": (args.az, env.availability_zone),
        "--no-storage": (True if args.no_storage else None, env.storage is None),
    }
    return [
        f"{option} {value}: environments/{env.name}.yaml says {current}; edit the file, or leave the option out"
        for option, (value, current) in given.items()
        if value is not None and value != current
    ]


def write_environment(args: argparse.Namespace, path) -> Environment:
    import datetime as dt

    import boto3

    from gpufleet.aws import Aws, aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.loading import load_environment
    from gpufleet.ops.preflight import suggest_zones
    from gpufleet.ops.up import Draft, caller_account, write_new_file

    problems = []
    if args.instance_type is None:
        problems.append(f"{path}: no such file: pass --instance-type (and --nodes, ...) for gpufleet up to write it")
    elif args.instance_type not in load_catalog():
        known = ", ".join(sorted(load_catalog()))
        problems.append(f"--instance-type {args.instance_type}: not in gpufleet's catalog; one of {known}")
    nodes = DEFAULT_NODES if args.nodes is None else args.nodes
    on_demand = min(DEFAULT_ON_DEMAND, nodes) if args.on_demand is None else args.on_demand
    if nodes < 1:
        problems.append(f"--nodes {nodes}: must be 1 or more")
    if not 0 <= on_demand <= max(nodes, 0):
        problems.append(f"--on-demand {on_demand}: must be 0 to --nodes ({nodes})")
    region = args.region or boto3.session.Session().region_name
    if not region:
        problems.append("no region: pass --region, or set one in your AWS configuration (AWS_REGION, aws configure)")
    if problems:
        raise GpufleetError(*problems, exit_code=BAD_INPUT)
    aws = Aws(region)
    now = dt.datetime.now(dt.UTC)
    options = f" --instance-type {args.instance_type} --nodes {nodes} --on-demand {on_demand}" + (
        " --no-storage" if args.no_storage else ""
    )
    with aws_errors(region):
        account = caller_account(aws.client("sts"))
        draft = Draft(
            name=args.env,
            account=account,
            region=region,
            availability_zone=args.az or f"{region}a",
            instance_type=args.instance_type,
            nodes=nodes,
            on_demand=on_demand,
            storage=not args.no_storage,
            image=first_job_image(args.instance_type),
            options=options,
        )
        if args.az is None:
            # The ranking needs an environment: the draft's, in the region's first zone until it has chosen.
            sketch = write_new_file(path, draft.text(now), load_environment, keep=False)
            ranking, note = suggest_zones(aws.client("ec2"), sketch, now)
            if not ranking:
                raise GpufleetError(f"--instance-type {args.instance_type}: {note or 'not offered in ' + region}")
            best = ranking[0]
            score = "-" if best.placement_score is None else best.placement_score
            print_detail(
                f"zone: {best.zone} ({best.zone_id}), spot placement score {score}; {len(ranking)} zones offer it"
            )
            draft = Draft(**{**vars(draft), "availability_zone": best.zone})
    return write_new_file(path, draft.text(now), load_environment)


def first_job_image(instance_type: str) -> dict[str, str]:
    """The image of an environment `up` writes: the newest AWS Deep Learning AMI with PyTorch whose release notes
    support the type (gpufleet/deep_learning_ami.py), which exists in every region without an image build. gpufleet's
    own images are the production path once the AMI pipeline has published them (docs/guides/images.md)."""
    from gpufleet.deep_learning_ami import DEEP_LEARNING_AMIS

    for ami in DEEP_LEARNING_AMIS.values():
        if ami.supports(instance_type):
            return {"deep_learning_ami": ami.name}
    raise GpufleetError(
        f"--instance-type {instance_type}: no Deep Learning AMI gpufleet knows supports it; write "
        "environments/NAME.yaml with an image of your own (ami.ssm_parameter or ami.id: docs/guides/images.md)",
        exit_code=BAD_INPUT,
    )


def preflight_stage(aws: Aws, env: Environment, spec) -> bool:
    import datetime as dt

    from gpufleet.ops import preflight

    checks = preflight.run_checks(aws, env, spec, dt.datetime.now(dt.UTC))
    failed = [check for check in checks if check.status == "fail"]
    warned = [check for check in checks if check.status == "warn"]
    stage(2, f"preflight: {len(checks) - len(failed) - len(warned)} passed, {len(warned)} warned, {len(failed)} failed")
    for check in [*failed, *warned]:
        print_detail(f"{check.status} {check.name}: {check.detail}")
    if failed:
        print(
            f"gpufleet up {env.name}: preflight failed: fix the lines above, then run gpufleet up again",
            file=sys.stderr,
        )
    return not failed


def bootstrap_stage(aws: Aws, env: Environment, root) -> None:
    from botocore.exceptions import ClientError

    from gpufleet.aws import error_code
    from gpufleet.ops import cdk_cli

    target = f"aws://{env.account}/{env.region}"
    try:
        version = aws.client("ssm").get_parameter(Name=cdk_cli.BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"]
    except ClientError as error:
        if error_code(error) != "ParameterNotFound":
            raise
        version = None
    if not cdk_cli.bootstrap_needed(version):
        stage(3, f"CDK bootstrap: {target} has version {version}")
        return
    why = "none yet" if version is None else f"version {version}, below {cdk_cli.MIN_BOOTSTRAP_VERSION}"
    stage(3, f"CDK bootstrap: {target} ({why}): cdk bootstrap")
    cdk_cli.run_cdk(root, cdk_cli.bootstrap_arguments(env.account, env.region), echo=print_cdk_line)


def nodes_stage(aws: Aws, env: Environment, wait_minutes: int):
    import datetime as dt

    from gpufleet.ops.fleet import find_node_group, node_group_events
    from gpufleet.ops.up import wait_for_nodes

    target = env.capacity.target
    stage(5, f"nodes: waiting for {target} nodes to be ready (at most {wait_minutes} min)")
    since = dt.datetime.now(dt.UTC)

    def describe():
        group = find_node_group(aws, env, None)
        events = [event for event in node_group_events(aws, group, dt.datetime.now(dt.UTC)) if event.timestamp >= since]
        return group, events

    outcome = wait_for_nodes(describe, target, wait_minutes * 60, print_flushed)
    if len(outcome.ready) >= target:
        return outcome
    for instance in outcome.not_ready:
        print(
            f"gpufleet up {env.name}: {instance.instance_id}: {instance.readiness} (the setup's output is on its "
            f"console: aws ec2 get-console-output --region {env.region} --instance-id {instance.instance_id})",
            file=sys.stderr,
        )
    if outcome.missing:
        print(
            f"gpufleet up {env.name}: {outcome.missing} node(s) never launched: see the node group's events above "
            f"and `gpufleet status {env.name}`",
            file=sys.stderr,
        )
    print(
        f"gpufleet up {env.name}: {len(outcome.ready)} of {target} nodes ready; run gpufleet up again once fixed",
        file=sys.stderr,
    )
    return None


def print_flushed(line: str) -> None:
    print(line, flush=True)


def acceptance_stage(env: Environment, report_dir: Path | None) -> int:
    from gpufleet.commands import acceptance

    stage(6, f"acceptance: gpufleet acceptance {env.name}")
    arguments = argparse.Namespace(
        env=env.name,
        fleet_id=None,
        group_name=None,
        report_dir=report_dir,
        min_nodes=min(acceptance.DEFAULT_MIN_NODES, env.capacity.target),
        nccl_timeout=acceptance.DEFAULT_NCCL_TIMEOUT_SECONDS,
    )
    return acceptance.run(arguments)


def cost_stage(aws: Aws, env: Environment, now) -> None:
    """The cost lines; prices that cannot be read are said in one line, and the cluster is up all the same."""
    from botocore.exceptions import BotoCoreError, ClientError

    from gpufleet.aws import describe_failure
    from gpufleet.ops import cost
    from gpufleet.ops.fleet import find_node_group
    from gpufleet.ops.up import cost_lines, node_hours

    try:
        estimate = cost.estimate(aws, env, now)
    except (ClientError, BotoCoreError) as error:
        why = describe_failure(error, env.region).splitlines()[0]
        print(f"cost: prices could not be read ({why}); see `gpufleet cost {env.name}`")
        return
    prices = {line.market: line.node_hourly for line in estimate.configured.lines}
    prices.setdefault("on-demand", prices.get("capacity-block"))
    running = find_node_group(aws, env, None).running
    for line in cost_lines(node_hours(running, now), prices, estimate.configured.hourly, estimate.configured.complete):
        print(line)
