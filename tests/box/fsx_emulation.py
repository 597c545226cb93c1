"""FSx for Lustre as the box's emulator answers for it: the file system is the box's shared folder (bound at the mount
path on every node), and its data repository association and tasks move files between that folder and the bucket in
moto's S3. Imported by the emulator's server process (tests/box/aws_server.py), where moto's backends live.

moto 5.2.5 has file systems (create, describe, delete) but no data repository associations or tasks. Added here, in
the shapes of botocore's fsx model (2018-03-01):
- a file system's Lifecycle, AVAILABLE (moto leaves it out); the folder it stands for is its tag box:shared-dir, which
  the box sets when it makes one (tests/box/cluster.py);
- CreateDataRepositoryAssociation, DescribeDataRepositoryAssociations (AssociationIds, or Filters file-system-id),
  UpdateDataRepositoryAssociation (S3). Lifecycle AVAILABLE. With BatchImportMetaDataOnCreate the association imports
  what the bucket holds under its DataRepositoryPath into FileSystemPath at once (the storage stack sets it: "The
  files already under PREFIX/data/ appear on the file system from the start"); it makes FileSystemPath first, root's
  with mode 755 (the mode FSx gives it is unconfirmed: stacks/storage_stack.py);
- CreateDataRepositoryTask of Type EXPORT_TO_REPOSITORY with Paths relative to the root (or none: every
  association), DescribeDataRepositoryTasks (TaskIds, or Filters file-system-id and task-lifecycle): PENDING, then
  EXECUTING while the files are copied in a thread, then SUCCEEDED with Status TotalCount, SucceededCount, FailedCount;
- DeleteFileSystem also empties the folder (a deleted file system's data is gone) and drops its associations;
  DescribeFileSystems of an id that is gone answers FileSystemNotFound, as botocore's model lists for it (moto answers
  an empty list).
What FSx carries to S3 besides the bytes is the POSIX metadata of each file and directory: the user-defined metadata
file-owner, file-group and file-permissions (octal, type bits included) of the FSx for Lustre user guide
(posix-metadata-support.html); directories are exported as objects whose key ends in "/". Import applies them. Links,
FIFOs and the like are not exported here (the box's checkpoints are files).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from moto.fsx.exceptions import FileSystemNotFound
from moto.fsx.models import FileSystem, FSxBackend
from moto.fsx.responses import FSxResponse
from moto.s3.models import s3_backends

SHARED_DIR_TAG = "box:shared-dir"
EXPORT = "EXPORT_TO_REPOSITORY"
# How long an export task stays PENDING and then EXECUTING before its copy: long enough for `gpufleet down` to see it.
TASK_STEP_SECONDS = 1.0

_associations: dict[str, dict[str, Any]] = {}
_tasks: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def _now() -> float:
    return time.time()


def _shared_dir(response: FSxResponse, file_system_id: str) -> Path | None:
    file_system = response.fsx_backend.file_systems.get(file_system_id)
    if file_system is None:
        return None
    tags = {tag["Key"]: tag["Value"] for tag in response.fsx_backend.list_tags_for_resource(file_system.resource_arn)}
    return Path(tags[SHARED_DIR_TAG]) if SHARED_DIR_TAG in tags else None


def _split(s3_path: str) -> tuple[str, str]:
    bucket, _, prefix = s3_path.removeprefix("s3://").partition("/")
    return bucket, prefix


def _bucket(account_id: str) -> Any:
    return s3_backends[account_id]["aws"]


def import_folder(account_id: str, association: dict[str, Any], root: Path) -> None:
    """What the bucket holds under the association's DataRepositoryPath, into its folder of ROOT, with its metadata."""
    folder = root / association["FileSystemPath"].strip("/")
    folder.mkdir(mode=0o755, exist_ok=True)
    bucket_name, prefix = _split(association["DataRepositoryPath"])
    backend = _bucket(account_id)
    bucket = backend.get_bucket(bucket_name)
    for key in sorted(bucket.keys.keys()):
        if not key.startswith(prefix) or key == prefix:
            continue
        item = bucket.keys[key]
        relative = key[len(prefix) :]
        target = folder / relative.rstrip("/")
        metadata = {name.lower(): value for name, value in item.metadata.items()}
        if key.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(item.value)
        if "x-amz-meta-file-permissions" in metadata:
            os.chmod(target, stat.S_IMODE(int(metadata["x-amz-meta-file-permissions"], 8)))
        if "x-amz-meta-file-owner" in metadata:
            os.chown(target, int(metadata["x-amz-meta-file-owner"]), int(metadata["x-amz-meta-file-group"]))


def export_folder(account_id: str, association: dict[str, Any], root: Path) -> tuple[int, int]:
    """The association's folder of ROOT into the bucket, each file and directory with its POSIX metadata; returns
    (exported, failed)."""
    folder = root / association["FileSystemPath"].strip("/")
    bucket_name, prefix = _split(association["DataRepositoryPath"])
    backend = _bucket(account_id)
    exported = failed = 0
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            failed += 1
            continue
        key = prefix + str(path.relative_to(folder)) + ("/" if stat.S_ISDIR(info.st_mode) else "")
        value = b"" if stat.S_ISDIR(info.st_mode) else path.read_bytes()
        stored = backend.put_object(bucket_name, key, value)
        stored.set_metadata(
            {
                "x-amz-meta-file-owner": str(info.st_uid),
                "x-amz-meta-file-group": str(info.st_gid),
                "x-amz-meta-file-permissions": f"{info.st_mode:o}".zfill(7),
            }
        )
        exported += 1
    return exported, failed


def _create_data_repository_association(self: FSxResponse) -> str:
    params = json.loads(self.body)
    association_id = f"dra-{uuid.uuid4().hex[:17]}"
    file_system_id = params["FileSystemId"]
    arn = f"arn:aws:fsx:{self.region}:{self.current_account}:association/{file_system_id}/{association_id}"
    association = {
        "AssociationId": association_id,
        "ResourceARN": arn,
        "FileSystemId": file_system_id,
        "Lifecycle": "AVAILABLE",
        "FileSystemPath": params["FileSystemPath"],
        "DataRepositoryPath": params["DataRepositoryPath"],
        "BatchImportMetaDataOnCreate": bool(params.get("BatchImportMetaDataOnCreate", False)),
        "ImportedFileChunkSize": params.get("ImportedFileChunkSize", 1024),
        "S3": params.get("S3", {}),
        "CreationTime": _now(),
    }
    root = _shared_dir(self, file_system_id)
    if root is not None:
        if association["BatchImportMetaDataOnCreate"]:
            import_folder(self.current_account, association, root)
        else:
            (root / association["FileSystemPath"].strip("/")).mkdir(mode=0o755, exist_ok=True)
    with _lock:
        _associations[association_id] = association
    return json.dumps({"Association": association})


def _describe_data_repository_associations(self: FSxResponse) -> str:
    params = json.loads(self.body)
    wanted = params.get("AssociationIds")
    filters = {item["Name"]: item["Values"] for item in params.get("Filters", [])}
    with _lock:
        found = [
            association
            for association in _associations.values()
            if (not wanted or association["AssociationId"] in wanted)
            and association["FileSystemId"] in filters.get("file-system-id", [association["FileSystemId"]])
        ]
    return json.dumps({"Associations": found})


def _update_data_repository_association(self: FSxResponse) -> str:
    params = json.loads(self.body)
    with _lock:
        association = _associations[params["AssociationId"]]
        if "S3" in params:
            association["S3"] = params["S3"]
    return json.dumps({"Association": association})


def _run_task(account_id: str, task_id: str, root: Path, associations: list[dict[str, Any]]) -> None:
    time.sleep(TASK_STEP_SECONDS)
    with _lock:
        _tasks[task_id]["Lifecycle"] = "EXECUTING"
        _tasks[task_id]["StartTime"] = _now()
    time.sleep(TASK_STEP_SECONDS)
    exported = failed = 0
    for association in associations:
        done, bad = export_folder(account_id, association, root)
        exported, failed = exported + done, failed + bad
    with _lock:
        _tasks[task_id].update(
            Lifecycle="SUCCEEDED",
            EndTime=_now(),
            Status={"TotalCount": exported + failed, "SucceededCount": exported, "FailedCount": failed},
        )


def _create_data_repository_task(self: FSxResponse) -> str:
    params = json.loads(self.body)
    assert params["Type"] == EXPORT, f"the box exports only: {params['Type']}"
    file_system_id = params["FileSystemId"]
    task_id = f"task-{uuid.uuid4().hex[:17]}"
    paths = params.get("Paths") or []
    with _lock:
        associations = [
            association
            for association in _associations.values()
            if association["FileSystemId"] == file_system_id
            and (not paths or association["FileSystemPath"].strip("/") in paths)
        ]
        task = {
            "TaskId": task_id,
            "Lifecycle": "PENDING",
            "Type": EXPORT,
            "CreationTime": _now(),
            "ResourceARN": f"arn:aws:fsx:{self.region}:{self.current_account}:task/{task_id}",
            "FileSystemId": file_system_id,
            "Paths": paths,
            "Report": params.get("Report", {"Enabled": False}),
        }
        _tasks[task_id] = task
    root = _shared_dir(self, file_system_id)
    assert root is not None, f"{file_system_id} is not one of the box's file systems"
    threading.Thread(target=_run_task, args=(self.current_account, task_id, root, associations), daemon=True).start()
    return json.dumps({"DataRepositoryTask": task})


def _describe_data_repository_tasks(self: FSxResponse) -> str:
    params = json.loads(self.body)
    wanted = params.get("TaskIds")
    filters = {item["Name"]: item["Values"] for item in params.get("Filters", [])}
    with _lock:
        found = [
            dict(task)
            for task in _tasks.values()
            if (not wanted or task["TaskId"] in wanted)
            and task["FileSystemId"] in filters.get("file-system-id", [task["FileSystemId"]])
            and task["Lifecycle"] in filters.get("task-lifecycle", [task["Lifecycle"]])
        ]
    return json.dumps({"DataRepositoryTasks": found})


_delete_file_system = FSxResponse.delete_file_system


def _delete_file_system_and_its_data(self: FSxResponse) -> Any:
    file_system_id = json.loads(self.body)["FileSystemId"]
    root = _shared_dir(self, file_system_id)
    answer = _delete_file_system(self)
    if root is not None:
        for entry in root.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    with _lock:
        for association_id in [key for key, value in _associations.items() if value["FileSystemId"] == file_system_id]:
            del _associations[association_id]
    return answer


_to_dict = FileSystem.to_dict


def _with_lifecycle(self: FileSystem) -> dict[str, Any]:
    return {**_to_dict(self), "Lifecycle": "AVAILABLE"}


_describe_file_systems = FSxBackend.describe_file_systems


def _describe_file_systems_or_not_found(
    self: FSxBackend, file_system_ids: list[str] | None = None, **pages: Any
) -> Any:
    for file_system_id in file_system_ids or []:
        if file_system_id not in self.file_systems:
            raise FileSystemNotFound(file_system_id)
    return _describe_file_systems(self, file_system_ids=file_system_ids, **pages)


def install() -> None:
    FSxBackend.describe_file_systems = _describe_file_systems_or_not_found  # type: ignore[method-assign]
    FileSystem.to_dict = _with_lifecycle  # type: ignore[method-assign]
    FSxResponse.create_data_repository_association = _create_data_repository_association  # type: ignore[attr-defined]
    FSxResponse.describe_data_repository_associations = _describe_data_repository_associations  # type: ignore[attr-defined]
    FSxResponse.update_data_repository_association = _update_data_repository_association  # type: ignore[attr-defined]
    FSxResponse.create_data_repository_task = _create_data_repository_task  # type: ignore[attr-defined]
    FSxResponse.describe_data_repository_tasks = _describe_data_repository_tasks  # type: ignore[attr-defined]
    FSxResponse.delete_file_system = _delete_file_system_and_its_data  # type: ignore[method-assign]
