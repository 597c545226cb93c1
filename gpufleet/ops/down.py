"""What `gpufleet down` does besides running `cdk destroy`: the shared storage's teardown (the export of its data to S3
with --keep-data, then the storage stack, the file system and the security group its Retain policy leaves) and what
is left afterwards. Each step finds what is already gone and goes on, so a `down` that stopped can be run again.

Sources (botocore 1.44.5's fsx, cloudformation and ec2 models, as installed, unless named otherwise):
- CreateDataRepositoryTask: Type EXPORT_TO_REPOSITORY "export[s] from your Amazon FSx for Lustre file system to a
  linked data repository"; Paths "need to be relative to the mount point of the file system" (so the association's
  FileSystemPath /data is the path `data`), and without Paths the task exports the whole file system; Report is
  required (CompletionReport.Enabled false asks for none: a report would go to the linked S3 path, where the next
  `up` would import it into the data folder).
- DescribeDataRepositoryTasks: Lifecycle PENDING | EXECUTING | FAILED | SUCCEEDED | CANCELED | CANCELING;
  FailureDetails.Message "populated only when Lifecycle is set to FAILED"; Status.TotalCount, SucceededCount and
  FailedCount are running totals. Filters file-system-id and task-lifecycle.
- DeleteFileSystem: "If you have automatic export enabled and want to use an export data repository task, you have to
  disable automatic export before executing the export data repository task" (the FSx for Lustre user guide,
  export-changed-data-meta-dra: "Automatic export and export data repository tasks cannot run at the same time"), so
  the export turns each association's AutoExportPolicy off first (UpdateDataRepositoryAssociation, S3.AutoExportPolicy
  with no Events; that an empty list turns it off is (unconfirmed): storage.data_repository.export_events [] deploys
  that way) and puts it back when the export fails. "If a data repository task is in a PENDING or EXECUTING state,
  deleting an Amazon FSx for Lustre file system will fail"; "Backups cannot be enabled on S3-linked file systems", and
  LustreConfiguration.SkipFinalBackup defaults to true: gpufleet sets it, so no backup outlives the file system
  (whether FSx takes the flag on SCRATCH_2, which has no backups, is (unconfirmed)). The deletion "returns while the
  file system has the DELETING status"; DescribeFileSystems then "returns a FileSystemNotFound error" once it is gone.
  Whether deleting a file system deletes its data repository associations with it is (unconfirmed): FSx documents no
  separate step.
- FileSystem Lifecycle: AVAILABLE | CREATING | FAILED | DELETING | MISCONFIGURED | UPDATING | MISCONFIGURED_UNAVAILABLE;
  DataRepositoryAssociation Lifecycle: CREATING | AVAILABLE | MISCONFIGURED | UPDATING | DELETING | FAILED.
- A stack with termination protection cannot be deleted until UpdateTerminationProtection turns it off
  (EnableTerminationProtection in DescribeStacks); DescribeStacks of a deleted stack's name fails with ValidationError
  "Stack with id NAME does not exist" (gpufleet.ops.fleet reads it the same way).
- DeleteSecurityGroup fails with DependencyViolation while a network interface still uses the group (EC2 API
  reference, error codes: "DependencyViolation: The specified object has dependent resources"): the file servers'
  interfaces go some time after the file system, so the deletion is retried, at most SECURITY_GROUP_ATTEMPTS times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import error_code, error_message, is_unavailable
from gpufleet.constants import ENVIRONMENT_TAG_KEY, FILE_SYSTEM_OUTPUT_KEY, STORAGE_SECURITY_GROUP_DESCRIPTION
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.ops.pace import Pace, elapsed
from gpufleet.user_data import SHARED_DATA_SUBDIR

Echo = Callable[[str], None]

STACK_GONE = "does not exist"
EXPORT = "EXPORT_TO_REPOSITORY"
# DataRepositoryTaskLifecycle: where a task has ended, and where it is still going.
TASK_SUCCEEDED = "SUCCEEDED"
TASK_ENDED_BADLY = ("FAILED", "CANCELED")
TASK_GOING = ("PENDING", "EXECUTING", "CANCELING")
# FileSystemLifecycle: an export needs AVAILABLE; CREATING and UPDATING pass; the others cannot be trusted to export.
FILE_SYSTEM_PASSING = ("CREATING", "UPDATING")
FILE_SYSTEM_BROKEN = ("FAILED", "MISCONFIGURED", "MISCONFIGURED_UNAVAILABLE")
FILE_SYSTEM_DELETING = "DELETING"
# DataRepositoryLifecycle, the same way.
ASSOCIATION_PASSING = ("CREATING", "UPDATING")
ASSOCIATION_BROKEN = ("MISCONFIGURED", "FAILED", "DELETING")

POLL_SECONDS = 15
STACK_DELETE_MINUTES = 60
FILE_SYSTEM_DELETE_MINUTES = 60
FILE_SYSTEM_SETTLE_MINUTES = 60
SECURITY_GROUP_ATTEMPTS = 40  # every POLL_SECONDS: ten minutes


PACE = Pace()


# -- what the command line asks --------------------------------------------------------------------------------------

KEEP_DATA = "keep"
DELETE_DATA = "delete"
BAD_INPUT = 2


def data_choice(env: Environment, keep: bool, delete: bool) -> str | None:
    """KEEP_DATA or DELETE_DATA for an environment whose storage stack makes a file system, which needs exactly one of
    --keep-data and --delete-data; None for one without (which takes neither)."""
    storage = env.storage
    given = [option for option, on in (("--keep-data", keep), ("--delete-data", delete)) if on]
    if storage is None or storage.lustre is None:
        if not given:
            return None
        what = (
            "no shared storage"
            if storage is None or storage.existing is None
            else f"an existing file system (storage.existing: {storage.existing.file_system_id}), which gpufleet "
            "down leaves as it is"
        )
        raise GpufleetError(f"{' '.join(given)}: {env.name} has {what}: leave the option out", exit_code=BAD_INPUT)
    location = env.data_repository_location
    data = f"{storage.mount_path}/{SHARED_DATA_SUBDIR}"
    if len(given) != 1:
        keep_does = (
            f"export {data} to s3://{location[0]}/{location[1]}/{SHARED_DATA_SUBDIR}/, then delete the file system, so "
            f"only S3 bills and `gpufleet up {env.name}` brings the data back"
            if location is not None
            else "not possible here: no storage.data_repository links the file system to S3"
        )
        raise GpufleetError(
            f"gpufleet down {env.name}: {env.name} has a shared file system ({storage.mount_path}): pass exactly one "
            f"of --keep-data ({keep_does}) and --delete-data (delete the file system and all it holds; a bucket "
            "stays)",
            exit_code=BAD_INPUT,
        )
    if keep and location is None:
        raise GpufleetError(
            f"--keep-data: {env.name}'s file system has no storage.data_repository, so S3 holds no copy to keep: add "
            f"one and run gpufleet up {env.name} first (the export needs its association), or pass --delete-data",
            exit_code=BAD_INPUT,
        )
    return KEEP_DATA if keep else DELETE_DATA


# -- stacks -----------------------------------------------------------------------------------------------------------


def describe_stack(cloudformation: Any, name: str) -> dict | None:
    """The stack NAME as DescribeStacks says it, or None when there is none (never made, or deleted)."""
    try:
        return dict(cloudformation.describe_stacks(StackName=name)["Stacks"][0])
    except ClientError as error:
        if error_code(error) == "ValidationError" and STACK_GONE in error_message(error):
            return None
        raise


def stack_outputs(stack: dict) -> dict[str, str]:
    return {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}


def delete_protected_stack(cloudformation: Any, stack: dict, echo: Echo, pace: Pace | None = None) -> None:
    """Turn the stack's termination protection off when it is on, delete it and wait until it is gone."""
    pace = pace or PACE
    name = stack["StackName"]
    if stack.get("EnableTerminationProtection"):
        cloudformation.update_termination_protection(StackName=name, EnableTerminationProtection=False)
        echo(f"{name}: termination protection turned off")
    else:
        echo(f"{name}: termination protection is off")
    if stack["StackStatus"] != "DELETE_IN_PROGRESS":
        cloudformation.delete_stack(StackName=name)
    echo(f"{name}: deleting")
    started = pace.clock()
    while True:
        current = describe_stack(cloudformation, name)
        if current is None:
            echo(f"{name}: deleted ({elapsed(pace.clock() - started)})")
            return
        if current["StackStatus"] == "DELETE_FAILED":
            reason = current.get("StackStatusReason", "no reason given")
            raise GpufleetError(
                f"{name}: DELETE_FAILED: {reason}: see its events (aws cloudformation describe-stack-events "
                f"--stack-name {name}), fix it and run gpufleet down again"
            )
        if pace.clock() - started >= STACK_DELETE_MINUTES * 60:
            raise GpufleetError(
                f"{name}: still {current['StackStatus']} after {STACK_DELETE_MINUTES} minutes: run gpufleet down "
                "again to wait on"
            )
        pace.sleep(POLL_SECONDS)


def retained_security_group(cloudformation: Any, stack_name: str) -> str | None:
    """The security group of the storage stack (its only AWS::EC2::SecurityGroup), which Retain leaves."""
    resources = cloudformation.describe_stack_resources(StackName=stack_name)["StackResources"]
    groups = [r.get("PhysicalResourceId") for r in resources if r["ResourceType"] == "AWS::EC2::SecurityGroup"]
    return next((group for group in groups if group), None)


# -- what the storage stack made ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Storage:
    """The file systems and security group of an environment's storage: from its stack while it stands, else from
    the tags and description gpufleet gave them (found_by says which)."""

    file_system_ids: tuple[str, ...]
    security_group_id: str | None
    found_by: str


def storage_from_stack(cloudformation: Any, stack: dict) -> Storage:
    file_system = stack_outputs(stack).get(FILE_SYSTEM_OUTPUT_KEY)
    return Storage(
        (file_system,) if file_system else (),
        retained_security_group(cloudformation, stack["StackName"]),
        f"the outputs and resources of {stack['StackName']}",
    )


def storage_left_behind(fsx: Any, ec2: Any, env: Environment) -> Storage:
    """What the storage stack's Retain policy left once the stack is gone: the Lustre file systems tagged with the
    environment (only the storage stack tags a file system so), and the security group of its description."""
    file_systems = [
        file_system["FileSystemId"]
        for file_system in _pages(fsx.describe_file_systems, "FileSystems")
        if file_system.get("FileSystemType") == "LUSTRE"
        and {"Key": ENVIRONMENT_TAG_KEY, "Value": env.name} in file_system.get("Tags", [])
    ]
    groups = ec2.describe_security_groups(
        Filters=[
            {"Name": f"tag:{ENVIRONMENT_TAG_KEY}", "Values": [env.name]},
            {"Name": "description", "Values": [STORAGE_SECURITY_GROUP_DESCRIPTION.format(name=env.name)]},
        ]
    )["SecurityGroups"]
    return Storage(
        tuple(sorted(file_systems)),
        groups[0]["GroupId"] if groups else None,
        f"the tag {ENVIRONMENT_TAG_KEY}={env.name}",
    )


def _pages(call: Callable[..., dict], key: str, **arguments: Any) -> Iterator[dict]:
    """Every item under KEY of a describe call that pages with NextToken (FSx has no paginators for some)."""
    while True:
        page = call(**arguments)
        yield from page.get(key, [])
        if not page.get("NextToken"):
            return
        arguments["NextToken"] = page["NextToken"]


def describe_file_system(fsx: Any, file_system_id: str) -> dict | None:
    try:
        return dict(fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"][0])
    except ClientError as error:
        if error_code(error) == "FileSystemNotFound":
            return None
        raise


# -- the export -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Association:
    association_id: str
    file_system_path: str
    data_repository_path: str
    import_events: tuple[str, ...] | None  # None: no AutoImportPolicy
    export_events: tuple[str, ...]

    @property
    def task_path(self) -> str:
        """The association's folder as an export task names it: relative to the file system's root."""
        return self.file_system_path.strip("/")

    def s3(self, export_events: tuple[str, ...]) -> dict:
        configuration: dict[str, Any] = {"AutoExportPolicy": {"Events": list(export_events)}}
        if self.import_events is not None:
            configuration["AutoImportPolicy"] = {"Events": list(self.import_events)}
        return configuration


@dataclass(frozen=True)
class Exported:
    task_id: str
    succeeded: int
    failed: int
    associations: tuple[Association, ...]


@dataclass
class TaskView:
    """The export task's lines: one each time its lifecycle or its counts change."""

    started: float
    last: str = ""

    def line(self, task: dict, now: float) -> str | None:
        text = task_progress(task)
        if text == self.last:
            return None
        self.last = text
        return f"{elapsed(now - self.started)} {text}"


def task_progress(task: dict) -> str:
    status = task.get("Status", {})
    if "TotalCount" not in status and "SucceededCount" not in status:
        return str(task["Lifecycle"])
    total = f" of {status['TotalCount']:,}" if "TotalCount" in status else ""
    return (
        f"{task['Lifecycle']}: {status.get('SucceededCount', 0):,}{total} files exported, "
        f"{status.get('FailedCount', 0):,} failed"
    )


def associations_of(fsx: Any, file_system_id: str) -> list[Association]:
    found = _pages(
        fsx.describe_data_repository_associations,
        "Associations",
        Filters=[{"Name": "file-system-id", "Values": [file_system_id]}],
    )
    return [
        Association(
            association_id=association["AssociationId"],
            file_system_path=association["FileSystemPath"],
            data_repository_path=association["DataRepositoryPath"],
            import_events=(
                tuple(association["S3"]["AutoImportPolicy"].get("Events", []))
                if "AutoImportPolicy" in association.get("S3", {})
                else None
            ),
            export_events=tuple(association.get("S3", {}).get("AutoExportPolicy", {}).get("Events", [])),
        )
        for association in found
    ]


def export_data(
    fsx: Any,
    file_system_id: str,
    name: str,
    export_events: tuple[str, ...],
    echo: Echo,
    pace: Pace | None = None,
) -> Exported | None:
    """Export what the file system's data repository associations link to S3, and wait until the task ends; None when
    the file system is gone or already being deleted (an earlier `down` that got that far). A task that fails or is
    canceled stops here with its message, automatic export back to EXPORT_EVENTS (the environment's
    storage.data_repository.export_events, what its stack deploys), even when an earlier `down` turned it off."""
    pace = pace or PACE
    if not wait_for_file_system(fsx, file_system_id, name, echo, pace):
        return None
    associations = associations_of(fsx, file_system_id)
    if not associations:
        raise GpufleetError(
            f"gpufleet down {name}: {file_system_id} has no data repository association, so there is no S3 copy to "
            f"keep: nothing was deleted; pass --delete-data to delete it without one"
        )
    for association in associations:
        wait_for_association(fsx, association, name, echo, pace)
    task = running_export(fsx, file_system_id, name, echo, pace)
    if task is None:
        for association in associations:
            if association.export_events:
                fsx.update_data_repository_association(AssociationId=association.association_id, S3=association.s3(()))
                echo(
                    f"{association.association_id}: automatic export turned off for the export task "
                    "(they cannot run together)"
                )
                wait_for_association(fsx, association, name, echo, pace)
        paths = [association.task_path for association in associations]
        arguments: dict[str, Any] = {
            "Type": EXPORT,
            "FileSystemId": file_system_id,
            "Report": {"Enabled": False},
        }
        if all(paths):  # an association of the whole file system ("/") exports everything: no Paths
            arguments["Paths"] = paths
        task = fsx.create_data_repository_task(**arguments)["DataRepositoryTask"]
        exported = ", ".join(f"/{path}" for path in paths) if all(paths) else "the whole file system"
        echo(f"{file_system_id}: export task {task['TaskId']} of {exported}")
    else:
        echo(f"{file_system_id}: following the export task {task['TaskId']} already under way")
    try:
        ended = follow_task(fsx, task, echo, pace)
    except KeyboardInterrupt:
        off = "; automatic export stays off until it finishes" if export_events else ""
        echo(
            f"the export task {task['TaskId']} goes on without gpufleet{off}: run gpufleet down {name} --keep-data "
            "again to follow it"
        )
        raise
    status = ended.get("Status", {})
    if ended["Lifecycle"] == TASK_SUCCEEDED:
        return Exported(
            ended["TaskId"], status.get("SucceededCount", 0), status.get("FailedCount", 0), tuple(associations)
        )
    if export_events:
        for association in associations:
            fsx.update_data_repository_association(
                AssociationId=association.association_id, S3=association.s3(export_events)
            )
            echo(f"{association.association_id}: automatic export back on ({', '.join(export_events)})")
    message = ended.get("FailureDetails", {}).get("Message") or "no message"
    counts = f"{status.get('FailedCount', 0):,} files failed, {status.get('SucceededCount', 0):,} exported"
    raise GpufleetError(
        f"gpufleet down {name}: the export task {ended['TaskId']} of {file_system_id} ended {ended['Lifecycle']}: "
        f"{message} ({counts}): nothing of the storage was deleted; run gpufleet down {name} --keep-data again once "
        f"fixed, or --delete-data to delete it without the export"
    )


def running_export(fsx: Any, file_system_id: str, name: str, echo: Echo, pace: Pace) -> dict | None:
    """The file system's export task already under way (an earlier `down` that stopped), or None; waits for a task
    of another type to end first (FSx runs one at a time: DataRepositoryTaskExecuting)."""
    while True:
        going = list(
            _pages(
                fsx.describe_data_repository_tasks,
                "DataRepositoryTasks",
                Filters=[
                    {"Name": "file-system-id", "Values": [file_system_id]},
                    {"Name": "task-lifecycle", "Values": ["PENDING", "EXECUTING"]},
                ],
            )
        )
        exports = [task for task in going if task["Type"] == EXPORT]
        if exports:
            return exports[0]
        if not going:
            return None
        other = going[0]
        echo(f"{file_system_id}: waiting for its {other['Type']} task {other['TaskId']} ({other['Lifecycle']}) to end")
        follow_task(fsx, other, lambda line: None, pace)


def follow_task(fsx: Any, task: dict, echo: Echo, pace: Pace) -> dict:
    """Look at the task every POLL_SECONDS until it has ended, echoing each change; returns it as it ended."""
    view = TaskView(pace.clock())
    while True:
        line = view.line(task, pace.clock())
        if line is not None:
            echo(line)
        if task["Lifecycle"] not in TASK_GOING:
            return task
        pace.sleep(POLL_SECONDS)
        task = fsx.describe_data_repository_tasks(TaskIds=[task["TaskId"]])["DataRepositoryTasks"][0]


def wait_for_file_system(fsx: Any, file_system_id: str, name: str, echo: Echo, pace: Pace) -> bool:
    """Until the file system is AVAILABLE (True); False when it is gone or being deleted, with nothing left to
    export. One that is broken cannot be exported from: that stops here."""
    started = pace.clock()
    said = ""
    while True:
        file_system = describe_file_system(fsx, file_system_id)
        if file_system is None or file_system["Lifecycle"] == FILE_SYSTEM_DELETING:
            state = "gone" if file_system is None else "already being deleted"
            echo(f"{file_system_id}: {state}: nothing left to export")
            return False
        lifecycle = file_system["Lifecycle"]
        if lifecycle == "AVAILABLE":
            return True
        if lifecycle in FILE_SYSTEM_BROKEN:
            why = file_system.get("FailureDetails", {}).get("Message")
            raise GpufleetError(
                f"gpufleet down {name}: {file_system_id} is {lifecycle}{': ' + why if why else ''}: an export from it "
                f"cannot be trusted, so nothing was deleted: repair it (FSx console), or pass --delete-data to delete "
                "it without the export"
            )
        if lifecycle != said:
            said = lifecycle
            echo(f"{file_system_id}: {lifecycle}: waiting for it to be AVAILABLE")
        if pace.clock() - started >= FILE_SYSTEM_SETTLE_MINUTES * 60:
            raise GpufleetError(
                f"gpufleet down {name}: {file_system_id} still {lifecycle} after {FILE_SYSTEM_SETTLE_MINUTES} minutes: "
                "run gpufleet down again later"
            )
        pace.sleep(POLL_SECONDS)


def wait_for_association(fsx: Any, association: Association, name: str, echo: Echo, pace: Pace) -> None:
    started = pace.clock()
    while True:
        (current,) = fsx.describe_data_repository_associations(AssociationIds=[association.association_id])[
            "Associations"
        ]
        lifecycle = current["Lifecycle"]
        if lifecycle == "AVAILABLE":
            return
        if lifecycle in ASSOCIATION_BROKEN:
            why = current.get("FailureDetails", {}).get("Message")
            raise GpufleetError(
                f"gpufleet down {name}: the data repository association {association.association_id} "
                f"({association.file_system_path} <-> {association.data_repository_path}) is {lifecycle}"
                f"{': ' + why if why else ''}: nothing was deleted; repair it, or pass --delete-data to delete the "
                "file system without the export"
            )
        if pace.clock() - started >= FILE_SYSTEM_SETTLE_MINUTES * 60:
            raise GpufleetError(
                f"gpufleet down {name}: {association.association_id} still {lifecycle} after "
                f"{FILE_SYSTEM_SETTLE_MINUTES} minutes: run gpufleet down again later"
            )
        pace.sleep(POLL_SECONDS)


# -- what Retain leaves -----------------------------------------------------------------------------------------------


def delete_file_system(fsx: Any, file_system_id: str, echo: Echo, pace: Pace | None = None) -> None:
    """Delete the file system (no final backup) unless it is already going, and wait until FSx no longer knows it."""
    pace = pace or PACE
    file_system = describe_file_system(fsx, file_system_id)
    if file_system is None:
        echo(f"{file_system_id}: already gone")
        return
    if file_system["Lifecycle"] != FILE_SYSTEM_DELETING:
        try:
            fsx.delete_file_system(FileSystemId=file_system_id, LustreConfiguration={"SkipFinalBackup": True})
        except ClientError as error:
            if error_code(error) != "FileSystemNotFound":
                raise
    echo(f"{file_system_id}: deleting")
    started = pace.clock()
    while True:
        file_system = describe_file_system(fsx, file_system_id)
        if file_system is None:
            echo(f"{file_system_id}: deleted ({elapsed(pace.clock() - started)})")
            return
        if file_system["Lifecycle"] == "FAILED":
            why = file_system.get("FailureDetails", {}).get("Message", "no message")
            raise GpufleetError(f"{file_system_id}: its deletion FAILED: {why}: see the FSx console, then run again")
        if pace.clock() - started >= FILE_SYSTEM_DELETE_MINUTES * 60:
            raise GpufleetError(
                f"{file_system_id}: still {file_system['Lifecycle']} after {FILE_SYSTEM_DELETE_MINUTES} minutes: "
                "run gpufleet down again to wait on"
            )
        pace.sleep(POLL_SECONDS)


def delete_security_group(ec2: Any, group_id: str, echo: Echo, pace: Pace | None = None) -> None:
    """Delete the group, retrying while the file servers' network interfaces still use it."""
    pace = pace or PACE
    for attempt in range(1, SECURITY_GROUP_ATTEMPTS + 1):
        try:
            ec2.delete_security_group(GroupId=group_id)
        except ClientError as error:
            code = error_code(error)
            if code == "InvalidGroup.NotFound":
                echo(f"{group_id}: already gone")
                return
            if code != "DependencyViolation":
                raise
            if attempt == SECURITY_GROUP_ATTEMPTS:
                raise GpufleetError(
                    f"{group_id}: still in use after {SECURITY_GROUP_ATTEMPTS} attempts ({error_message(error)}): "
                    f"find what uses it (aws ec2 describe-network-interfaces --filters Name=group-id,Values="
                    f"{group_id}) and run gpufleet down again"
                ) from None
            if attempt == 1:
                echo(
                    f"{group_id}: still in use (the file servers' network interfaces go after the file system): "
                    f"retrying every {POLL_SECONDS} s"
                )
            pace.sleep(POLL_SECONDS)
            continue
        echo(f"{group_id}: deleted")
        return


# -- what is left ---------------------------------------------------------------------------------------------------


def contents(s3: Any, bucket: str, prefix: str) -> str:
    """The objects under PREFIX and their size, in words; or why they cannot be counted."""
    objects = size = 0
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                objects += 1
                size += int(item.get("Size", 0))
    except ClientError as error:
        if is_unavailable(error) or error_code(error) == "NoSuchBucket":
            return f"not counted ({error_code(error)})"
        raise
    return f"{objects:,} objects, {in_words(size)}"


def in_words(size: int) -> str:
    """A size in bytes in the largest binary unit it reaches once rounded to one decimal."""
    if size < 2**10:
        return f"{size} bytes"
    for unit, power in (("KiB", 10), ("MiB", 20), ("GiB", 30), ("TiB", 40)):
        value = round(size / 2**power, 1)
        if value < 2**10 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"
