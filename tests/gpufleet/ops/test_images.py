"""gpufleet ami list / prune against moto: in-use images survive, dry run deletes nothing, --yes goes oldest first."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from gpufleet.ops.images import Image, plan_prune

DAY = dt.timedelta(days=1)
START = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)


@pytest.fixture
def ec2(moto: None) -> Any:
    return boto3.client("ec2", region_name="us-east-1")


@pytest.fixture
def build_image(ec2: Any, node_image_id: str) -> Callable[..., str]:
    """Creates an image (with its own snapshot) as the AMI pipeline would tag it, built `day` days after START."""
    instance_id = ec2.run_instances(ImageId=node_image_id, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]

    def build(profile: str | None, day: int) -> str:
        tags = [{"Key": "gpufleet:profile", "Value": profile}] if profile else [{"Key": "team", "Value": "other"}]
        image_id = ec2.create_image(
            InstanceId=instance_id,
            Name=f"{profile or 'other'}-{day:02d}",
            TagSpecifications=[{"ResourceType": "image", "Tags": tags}],
        )["ImageId"]
        # moto stamps every image with the current second; the pipeline's images are days apart.
        ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].amis[image_id].creation_date = START + day * DAY
        return image_id

    return build


def snapshot_of(ec2: Any, image_id: str) -> str:
    return ec2.describe_images(ImageIds=[image_id])["Images"][0]["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]


def snapshot_exists(ec2: Any, snapshot_id: str) -> bool:
    return any(s["SnapshotId"] == snapshot_id for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"])


@pytest.fixture
def images(ec2: Any, build_image: Callable[..., str]) -> dict[str, str]:
    """Profile a: days 1-5 (day 2 in SSM, day 3 in a launch template); profile b: days 6-7; one untagged image."""
    built = {f"a{day}": build_image("a", day) for day in range(1, 6)}
    built |= {f"b{day}": build_image("b", day) for day in (6, 7)}
    built["other"] = build_image(None, 1)
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name="/gpufleet/ami/a", Value=built["a2"], Type="String", DataType="aws:ec2:image"
    )
    ec2.create_launch_template(
        LaunchTemplateName="gpufleet-dev-nodes",
        LaunchTemplateData={"ImageId": built["a3"], "InstanceType": "p4d.24xlarge"},
    )
    return built


def test_list_shows_gpufleet_images_and_their_users(images: dict[str, str], run_json) -> None:
    code, document = run_json("ami", "list", "--region", "us-east-1")
    assert code == 0
    listed = {image["image_id"]: image for image in document["images"]}
    assert images["other"] not in listed
    assert len(listed) == 7
    assert listed[images["a2"]]["used_by"] == ["ssm:/gpufleet/ami/a"]
    assert listed[images["a3"]]["used_by"][0].startswith("launch-template:gpufleet-dev-nodes (lt-")
    assert listed[images["a1"]]["used_by"] == []
    assert [image["name"] for image in document["images"]] == ["a-05", "a-04", "a-03", "a-02", "a-01", "b-07", "b-06"]


def test_list_table(images: dict[str, str], run_cli) -> None:
    code, out, _ = run_cli("ami", "list", "--env", "dev", "--profile", "b")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["IMAGE", "NAME", "PROFILE", "CREATED", "STATE", "IN", "USE", "BY"]
    assert [line.split()[1] for line in lines[1:]] == ["b-07", "b-06"]


def test_prune_dry_run_deletes_nothing(ec2: Any, images: dict[str, str], run_cli) -> None:
    code, out, _ = run_cli("ami", "prune", "--region", "us-east-1", "--keep", "1")
    assert code == 0
    actions = {line.split()[1]: line.split()[0] for line in out.splitlines()[1:-1]}
    assert actions == {
        images["a5"]: "keep-newest",
        images["a3"]: "keep-in-use",
        images["a2"]: "keep-in-use",
        images["a4"]: "deregister",
        images["a1"]: "deregister",
        images["b7"]: "keep-newest",
        images["b6"]: "deregister",
    }
    assert out.splitlines()[-1] == (
        "dry run: would deregister 3 image(s) and delete 3 snapshot(s) in us-east-1; pass --yes to do it"
    )
    remaining = {image["ImageId"] for image in ec2.describe_images(Owners=["self"])["Images"]}
    assert set(images.values()) <= remaining


def test_prune_yes_deletes_oldest_first_and_spares_images_in_use(ec2: Any, images: dict[str, str], run_cli) -> None:
    snapshots = {name: snapshot_of(ec2, image_id) for name, image_id in images.items()}
    code, out, err = run_cli("ami", "prune", "--region", "us-east-1", "--keep", "1", "--yes")
    assert code == 0
    assert err.splitlines() == [
        f"deregistering {images['a1']} (a-01)",
        f"deleting snapshot {snapshots['a1']}",
        f"deregistering {images['a4']} (a-04)",
        f"deleting snapshot {snapshots['a4']}",
        f"deregistering {images['b6']} (b-06)",
        f"deleting snapshot {snapshots['b6']}",
    ]
    assert out.splitlines()[-1] == "deregistered 3 image(s) and deleted 3 snapshot(s) in us-east-1"
    remaining = {image["ImageId"] for image in ec2.describe_images(Owners=["self"])["Images"]}
    for name in ("a2", "a3", "a5", "b7", "other"):
        assert images[name] in remaining and snapshot_exists(ec2, snapshots[name])
    for name in ("a1", "a4", "b6"):
        assert images[name] not in remaining and not snapshot_exists(ec2, snapshots[name])


def test_prune_one_profile_json(ec2: Any, images: dict[str, str], run_json) -> None:
    code, document = run_json("ami", "prune", "--region", "us-east-1", "--keep", "2", "--profile", "a")
    assert code == 0 and document["dry_run"] is True
    assert [(step["image_id"], step["action"]) for step in document["steps"] if step["action"] == "deregister"] == [
        (images["a1"], "deregister")
    ]
    assert all(step["profile"] == "a" for step in document["steps"])


@pytest.mark.parametrize(
    "arguments",
    [
        ["ami", "prune", "--keep", "1"],  # no region
        ["ami", "prune", "--region", "us-east-1", "--env", "dev", "--keep", "1"],  # both
        ["ami", "prune", "--region", "us-east-1", "--keep", "0"],
        ["ami", "prune", "--region", "us-east-1"],
    ],
)
def test_prune_arguments_are_checked(run_cli, arguments: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(*arguments)
    assert exit_info.value.code == 2


def image(image_id: str, day: int, used_by: tuple[str, ...] = (), state: str = "available") -> Image:
    created = (START + day * DAY).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return Image(image_id, image_id, "p", created, state, (f"snap-{image_id}",), used_by)


def test_plan_keeps_pending_images() -> None:
    steps = plan_prune([image("new", 3), image("building", 2, state="pending"), image("old", 1)], keep=1)
    assert [(s.image.image_id, s.action) for s in steps] == [
        ("new", "keep-newest"),
        ("building", "keep-pending"),
        ("old", "deregister"),
    ]
