"""`gpufleet down` (gpufleet/commands/down.py, gpufleet/ops/down.py): the stacks in the order they can go, the export
that --keep-data waits for, what the storage stack's Retain policy leaves, and what is left; every state the FSx,
CloudFormation and EC2 models give what it waits on, and a second run after each place a first one can stop.

moto 5.2.5 has no FSx data repository associations or tasks and no UpdateTerminationProtection, so CloudFormation,
FSx and EC2 are answered by botocore-validated stand-ins (tests/answering.py); S3 is moto's. The CDK CLI is a stand-in
that records its arguments (GPUFLEET_CDK)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.session
import pytest

from gpufleet.ops import down
from tests.answering import client_error
from tests.gpufleet.ops.conftest import REGION

ACCOUNT = "123456789012"
BUCKET = f"gpufleet-lab-{ACCOUNT}-{REGION}"
FILE_SYSTEM = "fs-0123456789abcdef0"
GROUP = "sg-0fs00000000000001"
ASSOCIATION = "dra-0123456789abcdef0"
TASK = "task-0123456789abcdef0"
OTHER_TASK = "task-0fedcba9876543210"

LAB = f"""\
name: lab
account: "{ACCOUNT}"
region: {REGION}
availability_zone: us-east-1a
network:
  cidr: 10.40.0.0/16
instance_type: p4d.24xlarge
capacity:
  target: 2
  on_demand: 1
ami:
  ssm_parameter: /gpufleet/ami/p4d-ubuntu1804-cuda11
storage:
  lustre:
    deployment_type: PERSISTENT_2
    storage_capacity_gib: 1200
    throughput_mb_per_tib: 125
"""
WITH_BUCKET = LAB + "  data_repository: {}\n"

STAND_IN = """\
import json, os, sys
from pathlib import Path
with Path(sys.argv[1]).open("a") as calls:
    calls.write(json.dumps({"cwd": os.getcwd(), "arguments": sys.argv[2:]}) + "\\n")
print("stand-in: " + " ".join(sys.argv[2:]))
"""


def model_enum(service: str, shape: str) -> set[str]:
    return set(botocore.session.get_session().get_service_model(service).shape_for(shape).enum)


# -- the stand-ins ----------------------------------------------------------------------------------------------------


class VirtualPace(down.Pace):
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0
        super().__init__(clock=lambda: self.now, sleep=self.sleep_for)

    def sleep_for(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1


def gone(name: str) -> dict:
    return client_error("ValidationError", f"Stack with id {name} does not exist")


@dataclass
class FakeCloudFormation:
    """Stacks by name; a deleted one is DELETE_IN_PROGRESS for DELETE_POLLS looks, then gone (or ENDS as it says)."""

    stacks: dict[str, dict] = field(default_factory=dict)
    delete_polls: int = 2
    ends: str = "gone"  # or DELETE_FAILED
    looks: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, protection: bool = False, outputs: dict[str, str] | None = None) -> None:
        self.stacks[name] = {
            "StackName": name,
            "StackStatus": "CREATE_COMPLETE",
            "CreationTime": "2026-11-01T00:00:00Z",
            "EnableTerminationProtection": protection,
            "Outputs": [{"OutputKey": key, "OutputValue": value} for key, value in (outputs or {}).items()],
        }

    def describe_stacks(self, params: dict) -> dict:
        name = params["StackName"]
        stack = self.stacks.get(name)
        if stack is None:
            return gone(name)
        if stack["StackStatus"] == "DELETE_IN_PROGRESS":
            self.looks[name] = self.looks.get(name, 0) + 1
            if self.looks[name] > self.delete_polls:
                if self.ends == "gone":
                    del self.stacks[name]
                    return gone(name)
                stack["StackStatus"] = "DELETE_FAILED"
                stack["StackStatusReason"] = "The following resource(s) failed to delete: [FileSystem]."
        return {"Stacks": [stack]}

    def describe_stack_resources(self, params: dict) -> dict:
        return {
            "StackResources": [
                {
                    "StackName": params["StackName"],
                    "LogicalResourceId": logical,
                    "PhysicalResourceId": physical,
                    "ResourceType": kind,
                    "Timestamp": "2026-11-01T00:00:00Z",
                    "ResourceStatus": "CREATE_COMPLETE",
                }
                for logical, physical, kind in (
                    ("FileSystemSecurityGroupBFA44C6B", GROUP, "AWS::EC2::SecurityGroup"),
                    ("FileSystem", FILE_SYSTEM, "AWS::FSx::FileSystem"),
                    ("Bucket83908E77", BUCKET, "AWS::S3::Bucket"),
                )
            ]
        }

    def update_termination_protection(self, params: dict) -> dict:
        self.stacks[params["StackName"]]["EnableTerminationProtection"] = params["EnableTerminationProtection"]
        return {"StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{params['StackName']}/1"}

    def delete_stack(self, params: dict) -> dict:
        stack = self.stacks[params["StackName"]]
        if stack["EnableTerminationProtection"]:
            return client_error("ValidationError", "Stack cannot be deleted while TerminationProtection is enabled")
        stack["StackStatus"] = "DELETE_IN_PROGRESS"
        return {}

    def answers(self) -> dict:
        return {
            "DescribeStacks": lambda params: self.describe_stacks(params),
            "DescribeStackResources": lambda params: self.describe_stack_resources(params),
            "UpdateTerminationProtection": lambda params: self.update_termination_protection(params),
            "DeleteStack": lambda params: self.delete_stack(params),
        }


def task(lifecycle: str, succeeded: int | None = None, total: int | None = None, failed: int = 0, **more: Any) -> dict:
    answer: dict[str, Any] = {
        "TaskId": more.pop("TaskId", TASK),
        "Lifecycle": lifecycle,
        "Type": more.pop("Type", "EXPORT_TO_REPOSITORY"),
        "CreationTime": "2026-11-01T00:00:00Z",
        "FileSystemId": FILE_SYSTEM,
        **more,
    }
    if succeeded is not None:
        answer["Status"] = {"SucceededCount": succeeded, "FailedCount": failed}
        if total is not None:
            answer["Status"]["TotalCount"] = total
    return answer


@dataclass
class FakeFsx:
    """One file system, its association and its tasks: each task answers the next of its LIFECYCLES at each look."""

    lifecycles: list[str] = field(default_factory=lambda: ["AVAILABLE"])
    export_events: list[str] = field(default_factory=lambda: ["NEW", "CHANGED", "DELETED"])
    association_lifecycles: list[str] = field(default_factory=lambda: ["AVAILABLE"])
    task_answers: list[dict] = field(default_factory=list)
    running: list[dict] = field(default_factory=list)  # tasks already under way
    tagged: bool = True
    delete_polls: int = 2
    deleted: bool = False
    exists: bool = True
    polls: int = 0
    failure: str | None = None

    def file_system(self) -> dict:
        lifecycle = self.lifecycles.pop(0) if len(self.lifecycles) > 1 else self.lifecycles[0]
        answer: dict[str, Any] = {
            "FileSystemId": FILE_SYSTEM,
            "FileSystemType": "LUSTRE",
            "Lifecycle": lifecycle,
            "Tags": [{"Key": "gpufleet:environment", "Value": "lab" if self.tagged else "other"}],
        }
        if self.failure:
            answer["FailureDetails"] = {"Message": self.failure}
        return answer

    def describe_file_systems(self, params: dict) -> dict:
        if "FileSystemIds" not in params:  # the tag lookup: one of another type, one of another environment
            others = [
                {"FileSystemId": "fs-0ffffffffffffffff", "FileSystemType": "OPENZFS"},
                {
                    "FileSystemId": "fs-0eeeeeeeeeeeeeeee",
                    "FileSystemType": "LUSTRE",
                    "Tags": [{"Key": "gpufleet:environment", "Value": "prod"}],
                },
            ]
            return {"FileSystems": [*others, *([self.file_system()] if self.exists else [])]}
        if not self.exists:
            return client_error("FileSystemNotFound", "File system 'fs-0123456789abcdef0' does not exist.")
        if self.deleted:
            self.polls += 1
            if self.polls > self.delete_polls:
                self.exists = False
                return client_error("FileSystemNotFound", "File system 'fs-0123456789abcdef0' does not exist.")
        return {"FileSystems": [self.file_system()]}

    def association(self) -> dict:
        lifecycle = (
            self.association_lifecycles.pop(0)
            if len(self.association_lifecycles) > 1
            else self.association_lifecycles[0]
        )
        return {
            "AssociationId": ASSOCIATION,
            "FileSystemId": FILE_SYSTEM,
            "Lifecycle": lifecycle,
            "FileSystemPath": "/data",
            "DataRepositoryPath": f"s3://{BUCKET}/lab/data/",
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": list(self.export_events)},
            },
        }

    def describe_data_repository_associations(self, params: dict) -> dict:
        return {"Associations": [self.association()]}

    def update_data_repository_association(self, params: dict) -> dict:
        self.export_events = params["S3"]["AutoExportPolicy"]["Events"]
        self.association_lifecycles = ["UPDATING", "AVAILABLE"]
        return {"Association": self.association()}

    def describe_data_repository_tasks(self, params: dict) -> dict:
        if "Filters" in params:
            return {"DataRepositoryTasks": self.running}
        (task_id,) = params["TaskIds"]
        answer = self.task_answers.pop(0) if len(self.task_answers) > 1 else self.task_answers[0]
        assert answer["TaskId"] == task_id
        if answer["Lifecycle"] not in down.TASK_GOING:
            self.running = [t for t in self.running if t["TaskId"] != task_id]
        return {"DataRepositoryTasks": [answer]}

    def create_data_repository_task(self, params: dict) -> dict:
        if self.running:
            return client_error("DataRepositoryTaskExecuting", "A task is already executing on the file system.")
        return {"DataRepositoryTask": task("PENDING")}

    def delete_file_system(self, params: dict) -> dict:
        if not self.exists:
            return client_error("FileSystemNotFound", "File system 'fs-0123456789abcdef0' does not exist.")
        self.deleted = True
        self.lifecycles = ["DELETING"]
        return {"FileSystemId": FILE_SYSTEM, "Lifecycle": "DELETING"}

    def answers(self) -> dict:
        return {
            "DescribeFileSystems": lambda params: self.describe_file_systems(params),
            "DescribeDataRepositoryAssociations": lambda params: self.describe_data_repository_associations(params),
            "UpdateDataRepositoryAssociation": lambda params: self.update_data_repository_association(params),
            "DescribeDataRepositoryTasks": lambda params: self.describe_data_repository_tasks(params),
            "CreateDataRepositoryTask": lambda params: self.create_data_repository_task(params),
            "DeleteFileSystem": lambda params: self.delete_file_system(params),
        }


@dataclass
class FakeEc2:
    """The file system's security group: DeleteSecurityGroup answers the next of ERRORS (None: deleted)."""

    errors: list[str | None] = field(default_factory=lambda: [None])
    groups: list[str] = field(default_factory=lambda: [GROUP])

    def delete_security_group(self, params: dict) -> dict:
        error = self.errors.pop(0) if len(self.errors) > 1 else self.errors[0]
        if error == "DependencyViolation":
            return client_error(error, f"resource {params['GroupId']} has a dependent object")
        if error is not None:
            return client_error(error, f"The security group '{params['GroupId']}' does not exist")
        return {}

    def describe_security_groups(self, params: dict) -> dict:
        return {"SecurityGroups": [{"GroupId": group} for group in self.groups]}

    def answers(self) -> dict:
        return {
            "DeleteSecurityGroup": lambda params: self.delete_security_group(params),
            "DescribeSecurityGroups": lambda params: self.describe_security_groups(params),
        }


@dataclass
class Aws:
    cloudformation: FakeCloudFormation
    fsx: FakeFsx
    ec2: FakeEc2
    calls: dict[str, list] = field(default_factory=dict)

    def made(self, operation: str) -> list[dict]:
        return [params for service in self.calls.values() for name, params in service if name == operation]


@pytest.fixture
def pace(monkeypatch) -> VirtualPace:
    virtual = VirtualPace()
    monkeypatch.setattr(down, "PACE", virtual)
    return virtual


@pytest.fixture
def cdk(tmp_path, monkeypatch) -> list:
    """The CDK CLI's stand-in, run in a checkout of its own; returns the list its calls are read into."""
    script = tmp_path / "cdk_stand_in.py"
    script.write_text(STAND_IN)
    log = tmp_path / "cdk-calls.jsonl"
    monkeypatch.setenv("GPUFLEET_CDK", f"{sys.executable} {script} {log}")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("cdk.json", "app.py"):
        (checkout / name).write_text("")
    monkeypatch.chdir(checkout)

    class Calls(list):
        def read(self) -> list[list[str]]:
            if not log.exists():
                return []
            entries = [json.loads(line) for line in log.read_text().splitlines()]
            assert {entry["cwd"] for entry in entries} == {str(checkout)}
            return [entry["arguments"] for entry in entries]

    return Calls()


@pytest.fixture
def lab(environments, tmp_path, monkeypatch):
    """Writes environments/lab.yaml from TEXT (LAB with its data repository, by default)."""
    directory = tmp_path / "environments"

    def write(text: str = WITH_BUCKET) -> None:
        (directory / "lab.yaml").write_text(text)

    write()
    return write


@pytest.fixture
def aws(moto, answered, pace, lab) -> Aws:
    """The lab environment deployed: its cluster, storage (termination protection on) and network stacks, the file
    system and its association; the bucket holds what an export wrote under lab/data/ and more that is not data."""
    cloudformation = FakeCloudFormation()
    cloudformation.add("gpufleet-lab-cluster")
    cloudformation.add(
        "gpufleet-lab-storage",
        protection=True,
        outputs={"FileSystemId": FILE_SYSTEM, "DataRepositoryBucket": BUCKET},
    )
    cloudformation.add("gpufleet-lab-network")
    fake = Aws(cloudformation, FakeFsx(), FakeEc2())
    for service, stand_in in (("cloudformation", cloudformation), ("fsx", fake.fsx), ("ec2", fake.ec2)):
        fake.calls[service] = answered(service, stand_in.answers())
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    for key, size in (("lab/data/step-100.pt", 2 * 2**20), ("lab/data/step-200.pt", 2**20), ("lab/data/a/b", 512)):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"x" * size)
    s3.put_object(Bucket=BUCKET, Key="lab/gpufleet-runs/run.tar.gz", Body=b"y" * 1000)
    s3.put_object(Bucket=BUCKET, Key="lab/database", Body=b"z" * 1000)
    return fake


CLUSTER_DESTROY = ["destroy", "-c", "env=lab", "--force", "gpufleet-lab-cluster"]
NETWORK_DESTROY = ["destroy", "-c", "env=lab", "--force", "gpufleet-lab-network"]


# -- --keep-data ------------------------------------------------------------------------------------------------------


def test_keep_data_destroys_the_cluster_exports_then_deletes_the_storage_and_the_network(aws, cdk, run_cli, pace):
    aws.fsx.task_answers = [  # the first look is CreateDataRepositoryTask's answer, PENDING
        task("EXECUTING", 10, 40),
        task("EXECUTING", 10, 40),
        task("EXECUTING", 40, 40),
        task("SUCCEEDED", 40, 40),
    ]
    aws.ec2.errors = ["DependencyViolation", "DependencyViolation", None]

    code, out, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "[1/4] cluster: gpufleet-lab-cluster (cdk destroy)",
        "  cdk | stand-in: destroy -c env=lab --force gpufleet-lab-cluster",
        "[2/4] data: export /fsx/data to S3 (--keep-data)",
        f"  {ASSOCIATION}: automatic export turned off for the export task (they cannot run together)",
        f"  {FILE_SYSTEM}: export task {TASK} of /data",
        "  00:00 PENDING",
        "  00:15 EXECUTING: 10 of 40 files exported, 0 failed",
        "  00:45 EXECUTING: 40 of 40 files exported, 0 failed",
        "  01:00 SUCCEEDED: 40 of 40 files exported, 0 failed",
        f"  {FILE_SYSTEM}: exported to s3://{BUCKET}/lab/data/ (40 files, 0 failed)",
        f"[3/4] storage: gpufleet-lab-storage, then what its Retain policy leaves ({FILE_SYSTEM}, {GROUP}, from the "
        "outputs and resources of gpufleet-lab-storage)",
        "  gpufleet-lab-storage: termination protection turned off",
        "  gpufleet-lab-storage: deleting",
        "  gpufleet-lab-storage: deleted (00:30)",
        f"  {FILE_SYSTEM}: deleting",
        f"  {FILE_SYSTEM}: deleted (00:30)",
        f"  {GROUP}: still in use (the file servers' network interfaces go after the file system): retrying every 15 s",
        f"  {GROUP}: deleted",
        "[4/4] network: gpufleet-lab-network (cdk destroy)",
        "  cdk | stand-in: destroy -c env=lab --force gpufleet-lab-network",
        f"lab is down; left: s3://{BUCKET}/lab/data/ (3 objects, 3.0 MiB), in the bucket {BUCKET}, which bills for "
        "storage only",
        "`gpufleet up lab` brings it back at /fsx/data",
    ]
    assert cdk.read() == [CLUSTER_DESTROY, NETWORK_DESTROY]
    assert aws.made("UpdateDataRepositoryAssociation") == [
        {
            "AssociationId": ASSOCIATION,
            "S3": {"AutoExportPolicy": {"Events": []}, "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
        }
    ]
    assert aws.made("CreateDataRepositoryTask") == [
        {"Type": "EXPORT_TO_REPOSITORY", "FileSystemId": FILE_SYSTEM, "Report": {"Enabled": False}, "Paths": ["data"]}
    ]
    assert aws.made("UpdateTerminationProtection") == [
        {"StackName": "gpufleet-lab-storage", "EnableTerminationProtection": False}
    ]
    assert aws.made("DeleteStack") == [{"StackName": "gpufleet-lab-storage"}]
    assert aws.made("DeleteFileSystem") == [
        {"FileSystemId": FILE_SYSTEM, "LustreConfiguration": {"SkipFinalBackup": True}}
    ]
    assert aws.made("DeleteSecurityGroup") == [{"GroupId": GROUP}] * 3


@pytest.mark.parametrize(
    ("answers", "ended"),
    [
        (
            [task("EXECUTING", 30, 40, 2), task("FAILED", 38, 40, 2, FailureDetails={"Message": "2 files failed"})],
            f"the export task {TASK} of {FILE_SYSTEM} ended FAILED: 2 files failed (2 files failed, 38 exported)",
        ),
        (
            [task("EXECUTING", 5, 40), task("CANCELING", 6, 40), task("CANCELED", 6, 40)],
            f"the export task {TASK} of {FILE_SYSTEM} ended CANCELED: no message (0 files failed, 6 exported)",
        ),
    ],
    ids=["failed", "canceled"],
)
def test_an_export_that_fails_or_is_canceled_stops_with_nothing_of_the_storage_deleted(
    aws, cdk, run_cli, answers, ended
):
    aws.fsx.task_answers = answers

    code, out, err = run_cli("down", "lab", "--keep-data")

    assert code == 1
    assert err == (
        f"gpufleet down lab: {ended}: nothing of the storage was deleted; run gpufleet down lab --keep-data again "
        "once fixed, or --delete-data to delete it without the export\n"
    )
    assert out.splitlines()[-1] == f"  {ASSOCIATION}: automatic export back on (NEW, CHANGED, DELETED)"
    assert aws.fsx.export_events == ["NEW", "CHANGED", "DELETED"]
    assert cdk.read() == [CLUSTER_DESTROY]
    for operation in ("UpdateTerminationProtection", "DeleteStack", "DeleteFileSystem", "DeleteSecurityGroup"):
        assert aws.made(operation) == []


def test_a_second_run_follows_the_export_an_interrupted_one_left_running(aws, cdk, run_cli):
    """The first run destroyed the cluster, turned automatic export off and started the task, then stopped."""
    del aws.cloudformation.stacks["gpufleet-lab-cluster"]
    aws.fsx.export_events = []
    aws.fsx.running = [task("EXECUTING", 20, 40)]
    aws.fsx.task_answers = [task("SUCCEEDED", 40, 40)]

    code, out, _ = run_cli("down", "lab", "--keep-data")

    assert code == 0
    assert out.splitlines()[:7] == [
        "[1/4] cluster: gpufleet-lab-cluster is already gone",
        "[2/4] data: export /fsx/data to S3 (--keep-data)",
        f"  {FILE_SYSTEM}: following the export task {TASK} already under way",
        "  00:00 EXECUTING: 20 of 40 files exported, 0 failed",
        "  00:15 SUCCEEDED: 40 of 40 files exported, 0 failed",
        f"  {FILE_SYSTEM}: exported to s3://{BUCKET}/lab/data/ (40 files, 0 failed)",
        f"[3/4] storage: gpufleet-lab-storage, then what its Retain policy leaves ({FILE_SYSTEM}, {GROUP}, from the "
        "outputs and resources of gpufleet-lab-storage)",
    ]
    assert aws.made("CreateDataRepositoryTask") == []
    assert aws.made("UpdateDataRepositoryAssociation") == []
    assert cdk.read() == [NETWORK_DESTROY]


def test_an_import_task_under_way_is_waited_for_before_the_export(aws, cdk, run_cli):
    importing = task("EXECUTING", 1, 9, TaskId=OTHER_TASK, Type="IMPORT_METADATA_FROM_REPOSITORY")
    aws.fsx.running = [importing]
    aws.fsx.task_answers = [{**importing, "Lifecycle": "SUCCEEDED"}, task("SUCCEEDED", 40, 40)]

    code, out, _ = run_cli("down", "lab", "--keep-data")

    assert code == 0
    assert out.splitlines()[3:6] == [
        f"  {FILE_SYSTEM}: waiting for its IMPORT_METADATA_FROM_REPOSITORY task {OTHER_TASK} (EXECUTING) to end",
        f"  {ASSOCIATION}: automatic export turned off for the export task (they cannot run together)",
        f"  {FILE_SYSTEM}: export task {TASK} of /data",
    ]


def test_a_file_system_still_being_created_or_updated_is_waited_for(aws, cdk, run_cli):
    aws.fsx.lifecycles = ["CREATING", "CREATING", "UPDATING", "AVAILABLE"]
    aws.fsx.task_answers = [task("SUCCEEDED", 1, 1)]

    code, out, _ = run_cli("down", "lab", "--keep-data")

    assert code == 0
    assert out.splitlines()[3:5] == [
        f"  {FILE_SYSTEM}: CREATING: waiting for it to be AVAILABLE",
        f"  {FILE_SYSTEM}: UPDATING: waiting for it to be AVAILABLE",
    ]


@pytest.mark.parametrize("lifecycle", ["FAILED", "MISCONFIGURED", "MISCONFIGURED_UNAVAILABLE"])
def test_a_broken_file_system_is_not_exported_from_and_nothing_is_deleted(aws, cdk, run_cli, lifecycle):
    aws.fsx.lifecycles = [lifecycle]
    aws.fsx.failure = "The file system's subnet was deleted."

    code, _, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (
        1,
        f"gpufleet down lab: {FILE_SYSTEM} is {lifecycle}: The file system's subnet was deleted.: an export from it "
        "cannot be trusted, so nothing was deleted: repair it (FSx console), or pass --delete-data to delete it "
        "without the export\n",
    )
    assert aws.made("CreateDataRepositoryTask") == aws.made("DeleteStack") == []


@pytest.mark.parametrize("lifecycle", ["MISCONFIGURED", "FAILED", "DELETING"])
def test_an_association_that_cannot_export_stops_the_teardown(aws, cdk, run_cli, lifecycle):
    aws.fsx.association_lifecycles = [lifecycle]

    code, _, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (
        1,
        f"gpufleet down lab: the data repository association {ASSOCIATION} (/data <-> s3://{BUCKET}/lab/data/) is "
        f"{lifecycle}: nothing was deleted; repair it, or pass --delete-data to delete the file system without the "
        "export\n",
    )
    assert aws.made("UpdateDataRepositoryAssociation") == aws.made("DeleteStack") == []


def test_a_second_run_after_the_stack_went_finds_what_is_left_by_its_tags(aws, cdk, run_cli):
    """The first run exported, deleted the storage stack and asked FSx to delete the file system, then stopped."""
    for name in ("gpufleet-lab-cluster", "gpufleet-lab-storage"):
        del aws.cloudformation.stacks[name]
    aws.fsx.delete_file_system({})
    aws.ec2.errors = ["InvalidGroup.NotFound"]

    code, out, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (0, "")
    assert out.splitlines()[:9] == [
        "[1/4] cluster: gpufleet-lab-cluster is already gone",
        "[2/4] data: export /fsx/data to S3 (--keep-data)",
        f"  {FILE_SYSTEM}: already being deleted: nothing left to export",
        f"[3/4] storage: gpufleet-lab-storage, then what its Retain policy leaves ({FILE_SYSTEM}, {GROUP}, from the "
        "tag gpufleet:environment=lab)",
        "  gpufleet-lab-storage: already gone",
        f"  {FILE_SYSTEM}: deleting",
        f"  {FILE_SYSTEM}: deleted (00:00)",
        f"  {GROUP}: already gone",
        "[4/4] network: gpufleet-lab-network (cdk destroy)",
    ]
    (lookup,) = [params for params in aws.made("DescribeSecurityGroups")]
    assert lookup == {
        "Filters": [
            {"Name": "tag:gpufleet:environment", "Values": ["lab"]},
            {
                "Name": "description",
                "Values": ["gpufleet lab shared file system: Lustre from its file servers and the nodes"],
            },
        ]
    }
    assert aws.made("DeleteFileSystem") == []  # FSx was deleting it already


def test_everything_already_gone_is_said_and_skipped(aws, cdk, run_cli):
    aws.cloudformation.stacks.clear()
    aws.fsx.exists = False
    aws.ec2.groups = []

    code, out, _ = run_cli("down", "lab", "--keep-data")

    assert code == 0
    assert out.splitlines()[:6] == [
        "[1/4] cluster: gpufleet-lab-cluster is already gone",
        "[2/4] data: export /fsx/data to S3 (--keep-data)",
        "  no file system left (the tag gpufleet:environment=lab): nothing to export",
        "[3/4] storage: gpufleet-lab-storage, then what its Retain policy leaves (nothing, from the tag "
        "gpufleet:environment=lab)",
        "  gpufleet-lab-storage: already gone",
        "[4/4] network: gpufleet-lab-network is already gone",
    ]
    assert cdk.read() == []


def test_a_stack_that_fails_to_delete_stops_with_its_reason(aws, cdk, run_cli):
    aws.cloudformation.ends = "DELETE_FAILED"
    aws.fsx.task_answers = [task("SUCCEEDED", 1, 1)]

    code, _, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (
        1,
        "gpufleet-lab-storage: DELETE_FAILED: The following resource(s) failed to delete: [FileSystem].: see its "
        "events (aws cloudformation describe-stack-events --stack-name gpufleet-lab-storage), fix it and run gpufleet "
        "down again\n",
    )
    assert aws.made("DeleteFileSystem") == []


def test_a_stack_still_deleting_after_an_hour_says_so(aws, cdk, run_cli):
    aws.cloudformation.delete_polls = 10_000
    aws.fsx.task_answers = [task("SUCCEEDED", 1, 1)]

    code, _, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (
        1,
        "gpufleet-lab-storage: still DELETE_IN_PROGRESS after 60 minutes: run gpufleet down again to wait on\n",
    )


def test_a_security_group_in_use_for_every_attempt_names_how_to_find_the_user(aws, cdk, run_cli, pace):
    aws.fsx.task_answers = [task("SUCCEEDED", 1, 1)]
    aws.ec2.errors = ["DependencyViolation"]

    code, _, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (
        1,
        f"{GROUP}: still in use after 40 attempts (resource {GROUP} has a dependent object): find what uses it (aws "
        f"ec2 describe-network-interfaces --filters Name=group-id,Values={GROUP}) and run gpufleet down again\n",
    )
    assert len(aws.made("DeleteSecurityGroup")) == down.SECURITY_GROUP_ATTEMPTS
    assert cdk.read() == [CLUSTER_DESTROY]


def test_a_file_system_whose_deletion_fails_says_why(aws, cdk, run_cli):
    aws.fsx.task_answers = [task("SUCCEEDED", 1, 1)]
    original = aws.fsx.delete_file_system

    def delete_then_fail(params: dict) -> dict:
        answer = original(params)
        aws.fsx.lifecycles = ["FAILED"]
        aws.fsx.failure = "Internal error"
        aws.fsx.deleted = False
        return answer

    aws.fsx.delete_file_system = delete_then_fail

    code, _, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (
        1,
        f"{FILE_SYSTEM}: its deletion FAILED: Internal error: see the FSx console, then run again\n",
    )


# -- --delete-data ----------------------------------------------------------------------------------------------------


def test_delete_data_exports_nothing_and_says_how_to_delete_the_bucket(aws, cdk, run_cli):
    aws.cloudformation.stacks["gpufleet-lab-storage"]["EnableTerminationProtection"] = False

    code, out, err = run_cli("down", "lab", "--delete-data")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "[1/4] cluster: gpufleet-lab-cluster (cdk destroy)",
        "  cdk | stand-in: destroy -c env=lab --force gpufleet-lab-cluster",
        "[2/4] data: not exported (--delete-data): what only the file system holds goes with it",
        f"[3/4] storage: gpufleet-lab-storage, then what its Retain policy leaves ({FILE_SYSTEM}, {GROUP}, from the "
        "outputs and resources of gpufleet-lab-storage)",
        "  gpufleet-lab-storage: termination protection is off",
        "  gpufleet-lab-storage: deleting",
        "  gpufleet-lab-storage: deleted (00:30)",
        f"  {FILE_SYSTEM}: deleting",
        f"  {FILE_SYSTEM}: deleted (00:30)",
        f"  {GROUP}: deleted",
        "[4/4] network: gpufleet-lab-network (cdk destroy)",
        "  cdk | stand-in: destroy -c env=lab --force gpufleet-lab-network",
        f"lab is down; left: s3://{BUCKET}/lab/data/ (3 objects, 3.0 MiB, what the file system exported before), in "
        f"the bucket {BUCKET}: gpufleet never deletes data in S3",
        f"to delete it: aws s3 rb s3://{BUCKET} --force (it deletes the bucket and all it holds)",
    ]
    assert aws.made("UpdateTerminationProtection") == []
    assert aws.made("CreateDataRepositoryTask") == aws.made("DescribeDataRepositoryAssociations") == []


def test_delete_data_with_a_bucket_of_your_own_names_only_the_data_folder(aws, cdk, run_cli, lab):
    lab(LAB + "  data_repository:\n    bucket: my-datasets\n    prefix: team/lab\n")

    code, out, _ = run_cli("down", "lab", "--delete-data")

    assert code == 0
    assert out.splitlines()[-2:] == [
        "lab is down; left: s3://my-datasets/team/lab/data/ (not counted (NoSuchBucket), what the file system "
        "exported before), in the bucket my-datasets: gpufleet never deletes data in S3",
        "to delete it: aws s3 rm s3://my-datasets/team/lab/data/ --recursive (the bucket is yours: "
        "storage.data_repository.bucket)",
    ]


def test_on_destroy_delete_leaves_nothing_for_down_to_delete_after_the_stack(aws, cdk, run_cli, lab):
    """storage.on_destroy delete: no protection, and deleting the stack deleted the file system and the group."""
    aws.cloudformation.stacks["gpufleet-lab-storage"]["EnableTerminationProtection"] = False
    original = aws.cloudformation.delete_stack

    def delete_with_resources(params: dict) -> dict:
        aws.fsx.exists = False
        aws.ec2.errors = ["InvalidGroup.NotFound"]
        return original(params)

    aws.cloudformation.delete_stack = delete_with_resources

    code, out, _ = run_cli("down", "lab", "--delete-data")

    assert code == 0
    assert out.splitlines()[4:10] == [
        "  gpufleet-lab-storage: termination protection is off",
        "  gpufleet-lab-storage: deleting",
        "  gpufleet-lab-storage: deleted (00:30)",
        f"  {FILE_SYSTEM}: already gone",
        f"  {GROUP}: already gone",
        "[4/4] network: gpufleet-lab-network (cdk destroy)",
    ]


def test_an_interrupted_export_says_the_task_goes_on_and_how_to_follow_it(aws, cdk, run_cli, pace, monkeypatch):
    aws.fsx.task_answers = [task("EXECUTING", 1, 40)]

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pace, "sleep", interrupt)

    code, out, err = run_cli("down", "lab", "--keep-data")

    assert (code, err) == (130, "interrupted\n")
    assert out.splitlines()[-1] == (
        f"  the export task {TASK} goes on without gpufleet; automatic export stays off until it finishes: run "
        "gpufleet down lab --keep-data again to follow it"
    )


# -- what the command line asks ---------------------------------------------------------------------------------------

NO_CHOICE = (
    "gpufleet down lab: lab has a shared file system (/fsx): pass exactly one of --keep-data (export /fsx/data to "
    f"s3://{BUCKET}/lab/data/, then delete the file system, so only S3 bills and `gpufleet up lab` brings the data "
    "back) and --delete-data (delete the file system and all it holds; a bucket stays)\n"
)


@pytest.mark.parametrize("options", [[], ["--keep-data", "--delete-data"]], ids=["neither", "both"])
def test_an_environment_with_a_file_system_needs_exactly_one_choice(lab, run_cli, options, no_aws):
    assert run_cli("down", "lab", *options) == (2, "", NO_CHOICE)


def test_without_a_data_repository_keep_data_is_not_possible(lab, run_cli, no_aws):
    lab(LAB)

    assert run_cli("down", "lab") == (
        2,
        "",
        "gpufleet down lab: lab has a shared file system (/fsx): pass exactly one of --keep-data (not possible here: "
        "no storage.data_repository links the file system to S3) and --delete-data (delete the file system and all "
        "it holds; a bucket stays)\n",
    )
    assert run_cli("down", "lab", "--keep-data") == (
        2,
        "",
        "--keep-data: lab's file system has no storage.data_repository, so S3 holds no copy to keep: add one and run "
        "gpufleet up lab first (the export needs its association), or pass --delete-data\n",
    )


@pytest.mark.parametrize("options", [["--keep-data"], ["--delete-data"], ["--keep-data", "--delete-data"]])
def test_an_environment_without_shared_storage_takes_neither(run_cli, options, no_aws):
    assert run_cli("down", "dev", *options) == (
        2,
        "",
        f"{' '.join(options)}: dev has no shared storage: leave the option out\n",
    )


EXISTING = f"""\
name: lab
account: "{ACCOUNT}"
region: {REGION}
availability_zone: us-east-1a
network:
  vpc_id: vpc-0123456789abcdef0
  subnet_id: subnet-0123456789abcdef0
instance_type: p4d.24xlarge
capacity:
  target: 2
  on_demand: 1
ami:
  ssm_parameter: /gpufleet/ami/p4d-ubuntu1804-cuda11
storage:
  existing:
    file_system_id: fs-0aaaaaaaaaaaaaaaa
    dns_name: fs-0aaaaaaaaaaaaaaaa.fsx.us-east-1.amazonaws.com
    mount_name: abcdefgh
    security_group_id: sg-0aaaaaaaaaaaaaaaa
"""


def test_an_existing_file_system_is_left_as_it_is_and_takes_no_choice(lab, aws, cdk, run_cli):
    lab(EXISTING)

    assert run_cli("down", "lab", "--delete-data") == (
        2,
        "",
        "--delete-data: lab has an existing file system (storage.existing: fs-0aaaaaaaaaaaaaaaa), which gpufleet down "
        "leaves as it is: leave the option out\n",
    )
    code, out, err = run_cli("down", "lab")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "[1/4] cluster: gpufleet-lab-cluster (cdk destroy)",
        "  cdk | stand-in: destroy -c env=lab --force gpufleet-lab-cluster",
        "[2/4] data: fs-0aaaaaaaaaaaaaaaa (storage.existing) is not gpufleet's: left as it is, with its data",
        "[3/4] storage: fs-0aaaaaaaaaaaaaaaa and sg-0aaaaaaaaaaaaaaaa stay (the cluster's rule is gone)",
        "[4/4] network: vpc-0123456789abcdef0 is the environment's own VPC (network.vpc_id): left as it is",
        "lab is down: nothing of it is left in us-east-1",
    ]
    assert cdk.read() == [CLUSTER_DESTROY]
    assert aws.made("DescribeFileSystems") == aws.made("DeleteStack") == []


def test_an_environment_without_storage_goes_in_two_cdk_destroys(aws, cdk, run_cli):
    for stack in ("cluster", "network"):
        aws.cloudformation.add(f"gpufleet-dev-{stack}")

    code, out, err = run_cli("down", "dev")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "[1/4] cluster: gpufleet-dev-cluster (cdk destroy)",
        "  cdk | stand-in: destroy -c env=dev --force gpufleet-dev-cluster",
        "[2/4] data: no shared storage",
        "[3/4] storage: none",
        "[4/4] network: gpufleet-dev-network (cdk destroy)",
        "  cdk | stand-in: destroy -c env=dev --force gpufleet-dev-network",
        "dev is down: nothing of it is left in us-east-1",
    ]


def test_a_failing_cdk_destroy_stops_before_the_storage(aws, cdk, run_cli, tmp_path, monkeypatch):
    script = tmp_path / "failing_cdk.py"
    script.write_text("import sys\nprint('gpufleet-lab-cluster: destroy failed')\nsys.exit(3)\n")
    monkeypatch.setenv("GPUFLEET_CDK", f"{sys.executable} {script}")

    code, out, err = run_cli("down", "lab", "--keep-data")

    assert (code, out, err) == (
        1,
        "[1/4] cluster: gpufleet-lab-cluster (cdk destroy)\n  cdk | gpufleet-lab-cluster: destroy failed\n",
        "cdk destroy failed (exit status 3): its messages are above\n",
    )
    assert aws.made("DescribeFileSystems") == []


@pytest.fixture
def no_aws(monkeypatch):
    """Any AWS client the command asks for fails the test: bad input is refused first."""
    from gpufleet.aws import Aws as RealAws

    def refuse(self, service):
        raise AssertionError(f"the command asked for an AWS {service} client")

    monkeypatch.setattr(RealAws, "client", refuse)


# -- every state the models name --------------------------------------------------------------------------------------


def test_every_task_lifecycle_of_the_fsx_model_is_going_succeeded_or_ended_badly():
    lifecycles = [*down.TASK_GOING, down.TASK_SUCCEEDED, *down.TASK_ENDED_BADLY]
    assert sorted(lifecycles) == sorted(model_enum("fsx", "DataRepositoryTaskLifecycle"))


def test_every_file_system_lifecycle_of_the_fsx_model_has_its_handling():
    lifecycles = ["AVAILABLE", down.FILE_SYSTEM_DELETING, *down.FILE_SYSTEM_PASSING, *down.FILE_SYSTEM_BROKEN]
    assert sorted(lifecycles) == sorted(model_enum("fsx", "FileSystemLifecycle"))


def test_every_association_lifecycle_of_the_fsx_model_has_its_handling():
    lifecycles = ["AVAILABLE", *down.ASSOCIATION_PASSING, *down.ASSOCIATION_BROKEN]
    assert sorted(lifecycles) == sorted(model_enum("fsx", "DataRepositoryLifecycle"))


def test_the_export_is_a_type_the_model_has_and_the_task_needs_a_report():
    model = botocore.session.get_session().get_service_model("fsx")
    request = model.operation_model("CreateDataRepositoryTask").input_shape
    assert down.EXPORT in model_enum("fsx", "DataRepositoryTaskType")
    assert set(request.required_members) == {"Type", "FileSystemId", "Report"}
    assert request.members["Report"].required_members == ["Enabled"]
    deleting = model.operation_model("DeleteFileSystem").input_shape.members["LustreConfiguration"]
    assert "SkipFinalBackup" in deleting.members


@pytest.mark.parametrize(
    ("size", "words"),
    [
        (0, "0 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (2**20 - 52, "1023.9 KiB"),
        (2**20 - 51, "1.0 MiB"),  # 1023.95 KiB rounds to 1024.0: the next unit
        (5 * 2**30, "5.0 GiB"),
        (3 * 2**40 + 2**39, "3.5 TiB"),
        (2**60, "1048576.0 TiB"),
    ],
)
def test_a_size_is_said_in_the_largest_unit_it_reaches(size, words):
    assert down.in_words(size) == words
