"""gpufleet down NAME [--keep-data | --delete-data]: every stack of the environment gone, in the order they can go,
and then what is left in the account.

Four stages, each a line "[K/4] ..." and its detail, each safe to run again (what is already gone is said and
skipped):
1. the cluster: `cdk destroy` of gpufleet-NAME-cluster (the nodes first, before anything they use);
2. the data, for an environment whose storage stack makes a file system, which needs exactly one of the two options:
   --keep-data exports the file system's linked folder (MOUNT/data) to S3 with an FSx export task and waits for it
   (a task that fails or is canceled stops the teardown here, with nothing of the storage deleted); --delete-data
   exports nothing;
3. the storage: its stack's termination protection off, the stack deleted, then what its Retain policy leaves: the
   file system and its security group;
4. the network: `cdk destroy` of gpufleet-NAME-network.
The bucket always stays: it holds the exported data, and gpufleet never deletes data in S3. The next `gpufleet up
NAME` takes it back and imports its data into MOUNT/data (gpufleet.ops.cdk_cli says how).
"""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING

from gpufleet.commands import print_cdk_line, print_detail, print_stage

if TYPE_CHECKING:
    from gpufleet.aws import Aws
    from gpufleet.environment import Environment

STAGES = 4


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "down",
        help="destroy the environment's stacks; --keep-data exports the shared file system to S3 first, "
        "--delete-data does not; the bucket stays; safe to run again",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("env", metavar="NAME", help="environment name (environments/NAME.yaml)")
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="export the file system's data folder (MOUNT/data) to its S3 data repository, wait for it, then delete "
        "the file system: only S3 bills, and `gpufleet up NAME` brings the data back",
    )
    parser.add_argument(
        "--delete-data",
        action="store_true",
        help="delete the file system without an export: what only it holds is gone",
    )
    parser.set_defaults(handler=run)


stage = functools.partial(print_stage, stages=STAGES)


def run(args: argparse.Namespace) -> int:
    from gpufleet.aws import Aws, aws_errors
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.ops import cdk_cli
    from gpufleet.ops.down import data_choice

    env = load_environment_for("down", args.env)
    choice = data_choice(env, args.keep_data, args.delete_data)
    root = cdk_cli.project_root()
    aws = Aws(env.region)
    with aws_errors(env.region):
        destroy_stage(aws, env, root, 1, "cluster", f"{env.stack_prefix}-cluster")
        storage_stages(aws, env, choice)
        if env.network.creates_vpc:
            destroy_stage(aws, env, root, 4, "network", f"{env.stack_prefix}-network")
        else:
            stage(4, f"network: {env.network.vpc_id} is the environment's own VPC (network.vpc_id): left as it is")
        for line in left_lines(aws, env, choice):
            print(line)
    return 0


def destroy_stage(aws: Aws, env: Environment, root, number: int, what: str, stack_name: str) -> None:
    from gpufleet.ops import cdk_cli
    from gpufleet.ops.down import describe_stack

    if describe_stack(aws.client("cloudformation"), stack_name) is None:
        stage(number, f"{what}: {stack_name} is already gone")
        return
    stage(number, f"{what}: {stack_name} (cdk destroy)")
    cdk_cli.run_cdk(root, cdk_cli.destroy_arguments(env.name, [stack_name]), echo=print_cdk_line)


def storage_stages(aws: Aws, env: Environment, choice: str | None) -> None:
    from gpufleet.ops import down
    from gpufleet.user_data import SHARED_DATA_SUBDIR

    storage = env.storage
    if storage is None:
        stage(2, "data: no shared storage")
        stage(3, "storage: none")
        return
    if storage.existing is not None:
        existing = storage.existing.file_system_id
        stage(2, f"data: {existing} (storage.existing) is not gpufleet's: left as it is, with its data")
        stage(3, f"storage: {existing} and {storage.existing.security_group_id} stay (the cluster's rule is gone)")
        return
    cloudformation, fsx, ec2 = aws.client("cloudformation"), aws.client("fsx"), aws.client("ec2")
    stack_name = f"{env.stack_prefix}-storage"
    stack = down.describe_stack(cloudformation, stack_name)
    found = (
        down.storage_from_stack(cloudformation, stack) if stack is not None else down.storage_left_behind(fsx, ec2, env)
    )
    if choice == down.KEEP_DATA:
        stage(2, f"data: export {storage.mount_path}/{SHARED_DATA_SUBDIR} to S3 (--keep-data)")
        if not found.file_system_ids:
            print_detail(f"no file system left ({found.found_by}): nothing to export")
        for file_system_id in found.file_system_ids:
            exported = down.export_data(fsx, file_system_id, env.name, data_export_events(env), print_detail)
            if exported is None:
                continue
            print_detail(
                f"{file_system_id}: exported to "
                f"{', '.join(a.data_repository_path for a in exported.associations)} "
                f"({exported.succeeded:,} files, {exported.failed:,} failed)"
            )
    else:
        stage(2, "data: not exported (--delete-data): what only the file system holds goes with it")
    left = ", ".join([*found.file_system_ids, *filter(None, [found.security_group_id])]) or "nothing"
    stage(3, f"storage: {stack_name}, then what its Retain policy leaves ({left}, from {found.found_by})")
    if stack is None:
        print_detail(f"{stack_name}: already gone")
    else:
        down.delete_protected_stack(cloudformation, stack, print_detail)
    for file_system_id in found.file_system_ids:
        down.delete_file_system(fsx, file_system_id, print_detail)
    if found.security_group_id is not None:
        down.delete_security_group(ec2, found.security_group_id, print_detail)


def data_export_events(env: Environment) -> tuple[str, ...]:
    repository = env.storage.data_repository if env.storage is not None else None
    return tuple(repository.export_events) if repository is not None else ()


def left_lines(aws: Aws, env: Environment, choice: str | None) -> list[str]:
    """What is left of the environment: the bucket and what it holds under the data repository's prefix."""
    from gpufleet.ops import down
    from gpufleet.user_data import SHARED_DATA_SUBDIR

    location = env.data_repository_location
    if choice is None or location is None:
        return [f"{env.name} is down: nothing of it is left in {env.region}"]
    bucket, prefix = location
    data = f"s3://{bucket}/{prefix}/{SHARED_DATA_SUBDIR}/"
    counted = down.contents(aws.client("s3"), bucket, f"{prefix}/{SHARED_DATA_SUBDIR}/")
    assert env.storage is not None and env.storage.data_repository is not None, "a data repository location has both"
    own = env.storage.data_repository.bucket is None
    if choice == down.KEEP_DATA:
        return [
            f"{env.name} is down; left: {data} ({counted}), in the bucket {bucket}, which bills for storage only",
            f"`gpufleet up {env.name}` brings it back at {env.storage.mount_path}/{SHARED_DATA_SUBDIR}",
        ]
    delete = (
        f"aws s3 rb s3://{bucket} --force (it deletes the bucket and all it holds)"
        if own
        else f"aws s3 rm {data} --recursive (the bucket is yours: storage.data_repository.bucket)"
    )
    return [
        f"{env.name} is down; left: {data} ({counted}, what the file system exported before), in the bucket "
        f"{bucket}: gpufleet never deletes data in S3",
        f"to delete it: {delete}",
    ]
