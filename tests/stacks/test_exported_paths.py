"""What the shared file system exchanges with S3, on the synthesized templates of every shipped environment and every
matrix entry (tests/stacks/matrix.py) whose storage stack links its file system to a data repository: the
association links the data folder only (stacks/storage_stack.py ASSOCIATED_PATH), so nothing under the cluster user's
home, the runs' folders or the runs' caches is ever exported to the bucket (the cluster's private key is in the home's
.ssh) or imported from it (an S3 writer could otherwise make files there with any owner and mode). The home comes from
the node settings the user data writes (gpufleet/user_data.py node_settings), the runs' folder and caches from
gpufleet/ops/runs.py (RUNS_SUBDIR, cache_steps), as the node scripts get them.

Also: `gpufleet run --workdir` archives land under the prefix the node role may read and outside the linked folder,
and `gpufleet plan` reports the association of an environment deployed before as replaced."""

from __future__ import annotations

import copy
import shlex
from pathlib import PurePosixPath

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.environment import Environment
from gpufleet.loading import environment_files, load_environments
from gpufleet.ops.plan import StackPair, plan_changes
from gpufleet.ops.runs import CACHE_VARIABLES, RUNS_SUBDIR, cache_steps, upload_workdir
from gpufleet.user_data import SHARED_CACHE_SUBDIR, node_settings
from tests.conftest import REPOSITORY
from tests.stacks.matrix import MATRIX
from tests.stacks.test_matrix_stacks import of_type

ASSOCIATION = "AWS::FSx::DataRepositoryAssociation"
SHIPPED = {env.name: env for env in load_environments(environment_files(REPOSITORY / "environments"))}
# Every environment with an association: where the nodes mount the file system, the folder the association links
# (FileSystemPath) and the S3 path it links it to (DataRepositoryPath).
LINKED = {
    "elastic": ("/fsx", "/data", "s3://gpufleet-elastic-123456789012-us-east-1/elastic/data/"),
    "prod": ("/fsx", "/data", "s3://gpufleet-prod-123456789012-us-east-1/prod/data/"),
    "spot-p4d": ("/shared", "/data", "s3://gpufleet-spot-p4d-123456789012-us-east-1/spot-p4d/data/"),
    "asg-g5": ("/fsx", "/data", "s3://inference-datasets/clusters/asg-g5/data/"),
}


class RecordedS3:
    """An S3 client that keeps what put_object was given."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []

    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> dict:  # noqa: N803 (boto3's names)
        self.keys.append((Bucket, Key))
        return {}


def environment_and_template(name: str, assembly, matrix_assembly, matrix) -> tuple[Environment, dict]:
    if name in SHIPPED:
        return SHIPPED[name], assembly.template_json(f"gpufleet-{name}-storage")
    return matrix[name], matrix_assembly.template_json(f"gpufleet-{name}-storage")


def the_association(template: dict) -> dict:
    (association,) = of_type(template, ASSOCIATION).values()
    return association["Properties"]


def on_the_node(env: Environment, file_system_path: str) -> PurePosixPath:
    """Where the nodes see a path of the file system (FileSystemPath is from the file system's root)."""
    assert env.storage is not None
    return PurePosixPath(env.storage.mount_path) / file_system_path.lstrip("/")


def test_every_environment_linked_to_s3_is_checked(assembly, matrix_assembly):
    """LINKED holds every storage stack with an association, shipped or in the matrix, and every environment whose
    storage stack gets one."""
    linked = [
        stack
        for source in (assembly, matrix_assembly)
        for stack in source.stack_names
        if stack.endswith("-storage") and of_type(source.template_json(stack), ASSOCIATION)
    ]
    assert sorted(linked) == sorted(f"gpufleet-{name}-storage" for name in LINKED)
    expected = [name for name, env in SHIPPED.items() if env.data_repository_location is not None]
    expected += [name for name, document in MATRIX.items() if "data_repository" in document.get("storage", {})]
    assert sorted(expected) == sorted(LINKED)


@pytest.mark.parametrize("name", sorted(LINKED))
def test_the_association_links_the_data_folder_and_neither_the_home_nor_the_runs_folders(
    name, assembly, matrix_assembly, matrix
):
    env, template = environment_and_template(name, assembly, matrix_assembly, matrix)
    properties = the_association(template)
    mount_path, file_system_path, data_repository_path = LINKED[name]
    settings = node_settings(env, load_catalog()[env.instance_type])

    linked = on_the_node(env, properties["FileSystemPath"])
    # What is exported, and what S3 can create: nothing else on the file system.
    home = PurePosixPath(settings["GPUFLEET_CLUSTER_HOME"])
    runs = PurePosixPath(settings["GPUFLEET_SHARED_DIR"]) / RUNS_SUBDIR
    exchanged = f"exported to and imported from {properties['DataRepositoryPath']}"
    assert not home.is_relative_to(linked), f"the cluster user's home {home} is {exchanged}"
    assert not runs.is_relative_to(linked), f"the runs' folder {runs} is {exchanged}"
    # The runs' pip, uv and Hugging Face caches (gpufleet/ops/runs.py cache_steps): no wheel or model goes to S3.
    caches = [
        PurePosixPath(word.split("=", 1)[1])
        for step in cache_steps(settings["GPUFLEET_SHARED_DIR"])
        if step.startswith("export ")
        for word in shlex.split(step)[1:]
        if word.split("=", 1)[0] in dict(CACHE_VARIABLES)
    ]
    assert len(caches) == len(CACHE_VARIABLES)
    for cache in caches:
        assert cache.is_relative_to(PurePosixPath(mount_path) / SHARED_CACHE_SUBDIR)
        assert not cache.is_relative_to(linked), f"the runs' cache {cache} is {exchanged}"
    assert (properties["FileSystemPath"], properties["DataRepositoryPath"]) == (file_system_path, data_repository_path)
    assert settings["GPUFLEET_SHARED_DIR"] == mount_path
    # The linked folder is where the nodes are told to put data and checkpoints that must outlive the file system.
    assert settings["GPUFLEET_SHARED_DATA_DIR"] == str(linked)


@pytest.mark.parametrize("name", sorted(LINKED))
def test_a_workdir_archive_is_under_the_node_roles_prefix_and_never_imported(
    name, assembly, matrix_assembly, matrix, tmp_path
):
    """`gpufleet run --workdir` uploads to PREFIX/gpufleet-runs/RUN/, which the node role may read (its policy:
    BUCKET/PREFIX/*, tests/stacks/test_storage_stack.py) and which is outside the S3 folder the association links, so
    it never appears on the file system (and root, which reads the runs' folders, never meets it there)."""
    env, template = environment_and_template(name, assembly, matrix_assembly, matrix)
    location = env.data_repository_location
    assert location is not None
    (tmp_path / "train.py").write_text("print('hello')\n")
    s3 = RecordedS3()

    address = upload_workdir(s3, tmp_path, location, "20261126-210500-3fa2", region=env.region).address

    ((bucket, key),) = s3.keys
    assert address == f"s3://{bucket}/{key}"
    assert bucket == location[0] and key.startswith(f"{location[1]}/")
    assert not address.startswith(the_association(template)["DataRepositoryPath"])


def test_plan_reports_the_association_of_an_environment_deployed_before_as_replaced(assembly):
    """An association deployed before linked the whole file system ("/") to PREFIX/; FileSystemPath and
    DataRepositoryPath are create-only (cfn-lint's schema), so the deploy replaces it. docs/guides/storage.md says
    what a deployed environment must do first."""
    new = assembly.template_json("gpufleet-prod-storage")
    old = copy.deepcopy(new)
    old["Resources"]["DataRepositoryAssociation"]["Properties"].update(
        FileSystemPath="/", DataRepositoryPath="s3://gpufleet-prod-123456789012-us-east-1/prod/"
    )

    changes = plan_changes([StackPair("gpufleet-prod-storage", old, new)], "us-east-1")

    assert [change.line() for change in changes] == [
        "gpufleet-prod-storage DataRepositoryAssociation [AWS::FSx::DataRepositoryAssociation] replacement "
        "(FileSystemPath, DataRepositoryPath): no effect on nodes"
    ]
