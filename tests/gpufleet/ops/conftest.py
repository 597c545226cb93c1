"""Fixtures for the boto3 operator commands: fake credentials, no network, moto, stubbed clients, test environments.

Every test runs with fake credentials and a socket guard, so a call that escapes moto or a Stubber fails loudly
instead of reaching AWS.
"""

from __future__ import annotations

import json
import socket
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.ec2.responses.spot_fleets import SpotFleets

from gpufleet import cli
from gpufleet.aws import CLIENT_CONFIG, Aws
from tests.answering import Answer, answering_client

REGION = "us-east-1"
AMI_PARAMETER = "/gpufleet/ami/p4d-ubuntu1804-cuda11"

ENVIRONMENT_TEMPLATE = """\
name: {name}
account: "123456789012"
region: us-east-1
availability_zone: {zone}
network:
  cidr: 10.40.0.0/16
instance_type: {instance_type}
capacity:
  target: {target}
  on_demand: {on_demand}
ami:
  ssm_parameter: {parameter}
"""


@pytest.fixture(autouse=True)
def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-aws-file"
    empty.write_text("")
    for variable in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"test tried to open a network connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture(autouse=True)
def environments(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., str]:
    """Writes environment files into a private directory; `dev` (1 on-demand + 1 spot p4d) always exists."""
    directory = tmp_path / "environments"
    directory.mkdir()
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(directory))

    def write(
        name: str,
        zone: str = "us-east-1a",
        instance_type: str = "p4d.24xlarge",
        target: int = 2,
        on_demand: int = 1,
        parameter: str = AMI_PARAMETER,
    ) -> str:
        text = ENVIRONMENT_TEMPLATE.format(
            name=name, zone=zone, instance_type=instance_type, target=target, on_demand=on_demand, parameter=parameter
        )
        (directory / f"{name}.yaml").write_text(textwrap.dedent(text))
        return name

    write("dev")
    return write


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # moto's thousands of default AMIs cost seconds per test; tests register the images they need.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    # moto 5 ignores DryRun on RequestSpotFleet and would make the fleet; EC2 answers a permitted dry run with
    # DryRunOperation (botocore/data/ec2/2016-11-15/service-2.json, RequestSpotFleetRequest.DryRun), as moto's own
    # RunInstances does.
    request_spot_fleet = SpotFleets.request_spot_fleet

    def dry_run_first(self: SpotFleets) -> Any:
        self.error_on_dryrun()
        return request_spot_fleet(self)

    monkeypatch.setattr(SpotFleets, "request_spot_fleet", dry_run_first)
    with mock_aws():
        yield


@pytest.fixture
def node_image_id(moto: None) -> str:
    """An image in moto that instances can launch from."""
    ec2 = boto3.client("ec2", region_name=REGION)
    return ec2.register_image(
        Name="gpufleet-test-node",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 8}}],
    )["ImageId"]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Runs `gpufleet ARGS...` in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def run_json(run_cli: Callable[..., tuple[int, str, str]]) -> Callable[..., tuple[int, Any]]:
    def run(*args: str) -> tuple[int, Any]:
        code, out, err = run_cli(*args, "--json")
        assert "Traceback" not in err
        return code, json.loads(out)

    return run


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Stubber]:
    """Stubber on a real client of SERVICE that the commands get from Aws.client (moto lacks some APIs)."""
    stubs: dict[str, Stubber] = {}
    real_client = Aws.client

    def client(self: Aws, service: str) -> Any:
        return stubs[service].client if service in stubs else real_client(self, service)

    monkeypatch.setattr(Aws, "client", client)

    def stub(service: str) -> Stubber:
        stubber = Stubber(boto3.client(service, region_name=REGION, config=CLIENT_CONFIG))
        stubber.activate()
        stubs[service] = stubber
        return stubber

    return stub


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, dict[str, Answer]], list[tuple[str, dict]]]:
    """A client of SERVICE that the commands get from Aws.client, whose calls are answered by operation name
    (tests/answering.py). Returns the list of calls made, (operation, parameters), for the test to read."""
    clients: dict[str, Any] = {}
    real_client = Aws.client

    def client(self: Aws, service: str) -> Any:
        return clients[service] if service in clients else real_client(self, service)

    monkeypatch.setattr(Aws, "client", client)

    def answer(service: str, answers: dict[str, Answer]) -> list[tuple[str, dict]]:
        clients[service], calls = answering_client(service, answers, region_name=REGION, config=CLIENT_CONFIG)
        return calls

    return answer


def make_subnet(ec2: Any, zone: str = "us-east-1a", cidr: str = "10.40.0.0/24") -> str:
    vpc_id = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    return ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]


@pytest.fixture
def spot_fleet(node_image_id: str) -> Callable[[int], str]:
    """Creates a Spot Fleet of N p4d nodes from a launch template in moto; returns its request id."""

    def create(nodes: int = 2) -> str:
        ec2 = boto3.client("ec2", region_name=REGION)
        subnet_id = make_subnet(ec2)
        template_id = ec2.create_launch_template(
            LaunchTemplateName="gpufleet-dev-nodes",
            LaunchTemplateData={"ImageId": node_image_id, "InstanceType": "p4d.24xlarge"},
        )["LaunchTemplate"]["LaunchTemplateId"]
        return ec2.request_spot_fleet(
            SpotFleetRequestConfig={
                "IamFleetRole": "arn:aws:iam::123456789012:role/gpufleet-dev-fleet",
                "TargetCapacity": nodes,
                "AllocationStrategy": "priceCapacityOptimized",
                "Type": "maintain",
                "LaunchTemplateConfigs": [
                    {
                        "LaunchTemplateSpecification": {"LaunchTemplateId": template_id, "Version": "$Latest"},
                        "Overrides": [{"SubnetId": subnet_id, "InstanceType": "p4d.24xlarge"}],
                    }
                ],
            }
        )["SpotFleetRequestId"]

    return create


@pytest.fixture
def cluster_stack(moto: None) -> Callable[..., None]:
    """Creates a stand-in for the cluster stack: a WaitConditionHandle and (optionally) the FleetRequestId output."""

    def create(fleet_id: str | None, name: str = "gpufleet-dev-cluster") -> None:
        template: dict[str, Any] = {"Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
        if fleet_id:
            template["Outputs"] = {"FleetRequestId": {"Value": fleet_id}}
        with warnings.catch_warnings():  # moto warns that it does not model WaitConditionHandle; it needs none
            warnings.simplefilter("ignore", UserWarning)
            boto3.client("cloudformation", region_name=REGION).create_stack(
                StackName=name, TemplateBody=json.dumps(template)
            )

    return create


def mark_readiness(instance_ids: list[str], value: str = "ready") -> None:
    """What scripts/node/node-ready.sh does on each node: tag it gpufleet:readiness=VALUE (moto keeps instance tags)."""
    boto3.client("ec2", region_name=REGION).create_tags(
        Resources=instance_ids, Tags=[{"Key": "gpufleet:readiness", "Value": value}]
    )


def make_on_demand(instance_id: str) -> None:
    """An instance EC2 launched on demand (no InstanceLifecycle), as a fleet's OnDemandTargetCapacity part is: moto's
    Spot Fleet launches every node as spot, so the test turns one into what EC2 would have launched."""
    from moto.ec2.models import ec2_backends

    ec2_backends["123456789012"][REGION].get_instance(instance_id).lifecycle = None


def fleet_nodes(fleet_id: str) -> list[str]:
    """The fleet's instance ids in launch order (moto launches them one after the other)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    active = ec2.describe_spot_fleet_instances(SpotFleetRequestId=fleet_id)["ActiveInstances"]
    described = ec2.describe_instances(InstanceIds=[a["InstanceId"] for a in active])["Reservations"]
    instances = [i for r in described for i in r["Instances"]]
    return [i["InstanceId"] for i in sorted(instances, key=lambda i: (i["LaunchTime"], i["PrivateIpAddress"]))]
