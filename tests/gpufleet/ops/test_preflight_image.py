"""gpufleet preflight's image check (gpufleet/ops/preflight.py check_ami) on the AWS Deep Learning AMI: its public SSM
parameter read in the environment's region, the image it names described in moto, and the root volume against the
image's root snapshot. The parameter is served by a stand-in: AWS reserves names under /aws for its own
(SSM PutParameter refuses them), so no test can publish one."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from gpufleet.environment import Ami
from gpufleet.loading import load_environment
from gpufleet.ops.preflight import check_ami
from tests.conftest import REPOSITORY

PARAMETER = "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id"


class PublicParameters:
    """SSM's GetParameter for the public parameters AWS publishes in a region; the names asked for are recorded."""

    def __init__(self, published: dict[str, str]) -> None:
        self.published = published
        self.asked: list[str] = []

    def get_parameter(self, Name: str) -> dict[str, Any]:  # noqa: N803 (boto3's keyword)
        self.asked.append(Name)
        if Name not in self.published:
            raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": ""}}, "GetParameter")
        return {"Parameter": {"Name": Name, "Value": self.published[Name]}}


def dlami_image(snapshot_gib: int) -> str:
    """A DLAMI release as moto describes it: Ubuntu's root device, its root snapshot of SNAPSHOT_GIB."""
    return boto3.client("ec2", region_name="us-east-1").register_image(
        Name="Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.11 (Ubuntu 24.04) 20260815",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": snapshot_gib}}],
    )["ImageId"]


@pytest.fixture
def elastic():
    """environments/elastic.yaml: the DLAMI pytorch-2.11-ubuntu-24.04 in us-east-1, a 500 GiB root volume."""
    env = load_environment(REPOSITORY / "environments" / "elastic.yaml")
    assert env.ami is not None and env.ami.deep_learning_ami == "pytorch-2.11-ubuntu-24.04"
    return env


def test_the_dlami_the_public_parameter_names_passes(moto, elastic):
    image = dlami_image(snapshot_gib=120)
    ssm = PublicParameters({PARAMETER: image})

    check = check_ami(ssm, boto3.client("ec2", region_name="us-east-1"), elastic)

    assert ssm.asked == [PARAMETER]
    assert (check.status, check.detail) == (
        "pass",
        f"{image} (Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.11 (Ubuntu 24.04) 20260815) (from {PARAMETER}) "
        "is available",
    )


def test_a_region_without_the_dlami_fails_with_the_fix(moto, elastic):
    check = check_ami(PublicParameters({}), boto3.client("ec2", region_name="us-east-1"), elastic)

    assert (check.status, check.detail) == (
        "fail",
        f"AWS publishes no pytorch-2.11-ubuntu-24.04 Deep Learning AMI in us-east-1 ({PARAMETER} not found): choose "
        "another ami.deep_learning_ami, or another region",
    )


@pytest.mark.parametrize(("snapshot_gib", "status"), [(500, "pass"), (501, "fail")])
def test_the_root_volume_must_hold_the_images_root_snapshot(elastic, snapshot_gib, status):
    """EC2 refuses a root volume smaller than the image's snapshot (InvalidBlockDeviceMapping); 500 GiB is elastic's.
    moto describes every registered image with a 15 GiB snapshot, so DescribeImages answers through botocore's Stubber,
    checked against the EC2 model."""
    image = "ami-0123456789abcdef0"
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stubbed:
        stubbed.add_response(
            "describe_images",
            {
                "Images": [
                    {
                        "ImageId": image,
                        "Name": "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.11 (Ubuntu 24.04) 20260815",
                        "State": "available",
                        "RootDeviceName": "/dev/sda1",
                        "BlockDeviceMappings": [
                            {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": snapshot_gib, "VolumeType": "gp3"}},
                            {"DeviceName": "/dev/sdb", "VirtualName": "ephemeral0"},
                        ],
                    }
                ]
            },
            {"ImageIds": [image]},
        )
        check = check_ami(PublicParameters({PARAMETER: image}), ec2, elastic)

    assert check.status == status
    if status == "fail":
        assert check.detail == (
            f"image {image} (from {PARAMETER}) has a 501 GiB root snapshot, larger than root_volume_gib 500: set "
            "root_volume_gib to at least 501"
        )


def test_the_pipelines_parameter_keeps_its_own_message(moto, elastic):
    env = elastic.model_copy(update={"ami": Ami(ssm_parameter="/gpufleet/ami/ubuntu2404-cuda13")})

    check = check_ami(PublicParameters({}), boto3.client("ec2", region_name="us-east-1"), env)

    assert (check.status, check.detail) == (
        "fail",
        "SSM parameter /gpufleet/ami/ubuntu2404-cuda13 not found in us-east-1: build the image (AMI pipeline) or fix "
        "ami.ssm_parameter",
    )


def test_a_fixed_image_id_reads_no_parameter(moto, elastic):
    image = dlami_image(snapshot_gib=100)
    ssm = PublicParameters({})
    env = elastic.model_copy(update={"ami": Ami(id=image)})

    check = check_ami(ssm, boto3.client("ec2", region_name="us-east-1"), env)

    assert (check.status, ssm.asked) == ("pass", [])
