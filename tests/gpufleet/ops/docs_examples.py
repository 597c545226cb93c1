"""Prints the worked examples of `gpufleet preflight`, `gpufleet cost`, `gpufleet plan` and `gpufleet status` that
docs/operations/aws-commands.md, docs/guides/deploying.md, docs/guides/updating.md and docs/guides/capacity.md show,
run in-process against
moto and botocore's Stubber with the fixtures the tests use (tests/gpufleet/ops/conftest.py). Not collected by
`make test` (the file name does not start with test_); run it by name and paste what it prints:

    .venv/bin/pytest tests/gpufleet/ops/docs_examples.py -q -s -p no:cacheprovider

What moto lacks is answered here, and the docs say so next to each output: placement scores (GetSpotPlacementScores),
EC2's vCPU quotas (moto's Service Quotas knows none), the caller's policy simulation (SimulatePrincipalPolicy), the
Capacity Block's description (moto has no Capacity Blocks), Capacity Block offerings, and the deployed stacks and
parameters plan reads (`deployed` in tests/gpufleet/ops/test_plan.py). Instance, image and fleet ids are moto's, so
they change from run to run.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpufleet.loading import environments_dir
from gpufleet.ops import fleet, preflight, reservations
from tests.conftest import synthesize
from tests.gpufleet.ops.test_cost import answer_capacity_blocks, offering
from tests.gpufleet.ops.test_plan import changed_environment, deployed
from tests.gpufleet.ops.test_preflight import create_service_linked_role

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.fixture
def scores(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Placement scores by AZ id, served instead of moto's missing GetSpotPlacementScores."""
    by_zone_id: dict[str, int] = {}
    monkeypatch.setattr(preflight, "placement_scores", lambda ec2, instance_type, region, capacity: by_zone_id)
    return by_zone_id


def publish_image(region: str, name: str, parameter: str) -> None:
    """An image in moto and the SSM parameter that names it, as the AMI pipeline leaves them."""
    image_id = boto3.client("ec2", region_name=region).register_image(
        Name=name,
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 8}}],
    )["ImageId"]
    boto3.client("ssm", region_name=region).put_parameter(
        Name=parameter, Value=image_id, Type="String", DataType="aws:ec2:image"
    )


def show(command: str, run_cli) -> None:
    code, out, err = run_cli(*command.split()[1:])
    print(f"\n$ {command}\n{out}{err}", end="")
    print(f"(exit status {code})")


def serve_quotas(stubbed, answers: list[tuple[str, float]]) -> None:
    quotas = stubbed("service-quotas")
    for code, value in answers:
        quotas.add_response(
            "get_service_quota",
            {"Quota": {"QuotaCode": code, "Value": value}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )


def serve_policy_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real check_auto_scaling_policy on Stubber clients: the caller is a role that may do every action."""
    real = preflight.check_auto_scaling_policy

    def simulated(iam: Any, sts: Any, env: Any) -> preflight.Check:
        iam, sts = boto3.client("iam", region_name="us-east-1"), boto3.client("sts", region_name="us-east-1")
        with Stubber(iam) as iam_stub, Stubber(sts) as sts_stub:
            sts_stub.add_response(
                "get_caller_identity",
                {
                    "UserId": "AROAEXAMPLE:deployer",
                    "Account": "123456789012",
                    "Arn": "arn:aws:sts::123456789012:assumed-role/gpufleet-deployer/deployer",
                },
            )
            iam_stub.add_response(
                "get_role",
                {
                    "Role": {
                        "Path": "/",
                        "RoleName": "gpufleet-deployer",
                        "RoleId": "AROAEXAMPLEEXAMPLE01",
                        "Arn": "arn:aws:iam::123456789012:role/gpufleet-deployer",
                        "CreateDate": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
                    }
                },
                {"RoleName": "gpufleet-deployer"},
            )
            for action in preflight.AUTO_SCALING_ACTIONS:
                iam_stub.add_response(
                    "simulate_principal_policy",
                    {
                        "EvaluationResults": [
                            {
                                "EvalActionName": action,
                                "EvalDecision": "allowed",
                                "OrganizationsDecisionDetail": {"AllowedByOrganizations": True},
                            }
                        ]
                    },
                )
            return real(iam, sts, env)

    monkeypatch.setattr(preflight, "check_auto_scaling_policy", simulated)


def test_preflight_dev(environments, node_image_id, spot_fleet, scores, stubbed, run_cli) -> None:
    """dev: a Spot Fleet of two running spot nodes in moto, the image its parameter names, both Spot roles."""
    publish_image("us-east-1", "gpufleet-p4d-ubuntu1804-cuda11-20240604", "/gpufleet/ami/p4d-ubuntu1804-cuda11")
    spot_fleet(2)
    create_service_linked_role("AWSServiceRoleForEC2SpotFleet", "spotfleet.amazonaws.com")
    create_service_linked_role("AWSServiceRoleForEC2Spot", "spot.amazonaws.com")
    scores.update({"use1-az6": 2, "use1-az1": 3, "use1-az2": 1, "use1-az4": 3})
    serve_quotas(stubbed, [("L-417A185B", 192.0), ("L-7212CCBC", 384.0)])
    show("gpufleet preflight dev --suggest-az", run_cli)


# The block of environments/p5-block.yaml as DescribeCapacityReservations describes it, before it starts.
P5_BLOCK = {
    "CapacityReservationId": "cr-0123456789abcdef0",
    "ReservationType": "capacity-block",
    "InstanceType": "p5.48xlarge",
    "AvailabilityZone": "us-east-2a",
    "TotalInstanceCount": 2,
    "AvailableInstanceCount": 2,
    "State": "scheduled",
    "StartDate": dt.datetime(2027, 1, 11, 11, 30, tzinfo=dt.UTC),
    "EndDate": dt.datetime(2027, 1, 18, 11, 30, tzinfo=dt.UTC),
    "EndDateType": "limited",
}


def test_preflight_p5_block(environments, moto, monkeypatch, run_cli) -> None:
    """environments/p5-block.yaml as shipped: its image in us-east-2, Auto Scaling's role, the block scheduled (its
    nodes ask no vCPU quota: none is served)."""
    shutil.copy(REPOSITORY / "environments" / "p5-block.yaml", environments_dir())
    publish_image("us-east-2", "gpufleet-ubuntu2204-cuda12-20261122", "/gpufleet/ami/ubuntu2204-cuda12")
    boto3.client("iam", region_name="us-east-1").create_service_linked_role(AWSServiceName="autoscaling.amazonaws.com")
    serve_policy_simulation(monkeypatch)
    monkeypatch.setattr(reservations, "describe_reservations", lambda ec2, ids: [P5_BLOCK])
    show("gpufleet preflight p5-block", run_cli)


def test_status_p5_block(environments, moto, monkeypatch, run_cli) -> None:
    """environments/p5-block.yaml deployed before its block: the group in moto with the two scheduled actions its
    BlockCapacity resource puts then (tests/stacks/constructs/block_capacity/), the block scheduled."""
    shutil.copy(REPOSITORY / "environments" / "p5-block.yaml", environments_dir())
    ec2 = boto3.client("ec2", region_name="us-east-2")
    image = ec2.register_image(
        Name="gpufleet-ubuntu2204-cuda12-20261122",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 8}}],
    )["ImageId"]
    template = ec2.create_launch_template(
        LaunchTemplateName="gpufleet-p5-block-nodes",
        LaunchTemplateData={"ImageId": image, "InstanceType": "p5.48xlarge"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    vpc = ec2.create_vpc(CidrBlock="10.60.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.60.0.0/17", AvailabilityZone="us-east-2a")["Subnet"]
    autoscaling = boto3.client("autoscaling", region_name="us-east-2")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="gpufleet-p5-block-nodes",
        MinSize=0,
        MaxSize=2,
        DesiredCapacity=0,
        VPCZoneIdentifier=subnet["SubnetId"],
        LaunchTemplate={"LaunchTemplateId": template, "Version": "1"},
    )
    for name, start, desired in (
        ("gpufleet-block-scale-out", "2027-01-11T11:30:00Z", 2),
        ("gpufleet-block-scale-in", "2027-01-18T10:40:00Z", 0),
    ):
        autoscaling.put_scheduled_update_group_action(
            AutoScalingGroupName="gpufleet-p5-block-nodes",
            ScheduledActionName=name,
            StartTime=start,
            DesiredCapacity=desired,
        )
    monkeypatch.setattr(fleet, "describe_reservations", lambda ec2, ids: [P5_BLOCK])
    show("gpufleet status p5-block --group-name gpufleet-p5-block-nodes", run_cli)


def test_cost_p5_block(environments, stubbed, run_cli) -> None:
    """environments/p5-block.yaml: today's 24-hour offerings for 2 x p5.48xlarge, two in its AZ."""
    shutil.copy(REPOSITORY / "environments" / "p5-block.yaml", environments_dir())
    answer_capacity_blocks(
        stubbed("ec2"),
        [
            offering("us-east-2a", "1600.00", "cb-0000000000000000a"),
            offering("us-east-2b", "1400.00", "cb-0000000000000000b"),
            offering("us-east-2a", "1512.00", "cb-0000000000000000c"),
        ],
    )
    show("gpufleet cost p5-block", run_cli)


def serve_dev_replace_all(answered, monkeypatch, tmp_path: Path, holds: dict[str, str | dict]) -> None:
    """environments/dev.yaml with fleet.rollout replace-all, synthesized into cdk.out in the current directory and
    deployed as synthesized, its image parameter resolved to ami-0a1b2c3d4e5f60718 then; Parameter Store holds
    `holds`."""
    changed_environment(environments_dir(), "dev", lambda document: document["fleet"].update(rollout="replace-all"))
    assembly = synthesize(tmp_path / "cdk.out", environments_dir())
    monkeypatch.chdir(tmp_path)
    templates = {name: assembly.template_json(name) for name in assembly.stack_names}
    deployed(answered, templates, {"NodeLaunchTemplateNodeImageParameter4F083533": "ami-0a1b2c3d4e5f60718"}, holds)


def test_plan_dev_replace_all_new_image(answered, run_cli, monkeypatch, tmp_path) -> None:
    """The AMI pipeline published a new image since the last deploy."""
    serve_dev_replace_all(
        answered, monkeypatch, tmp_path, {"/gpufleet/ami/p4d-ubuntu1804-cuda11": "ami-0f9e8d7c6b5a49382"}
    )
    show("gpufleet plan dev --cdk-out cdk.out", run_cli)


def test_plan_dev_replace_all_parameter_deleted(answered, run_cli, monkeypatch, tmp_path) -> None:
    serve_dev_replace_all(answered, monkeypatch, tmp_path, {})
    show("gpufleet plan dev --cdk-out cdk.out", run_cli)


def test_plan_dev_damaged_saved_template(run_cli, monkeypatch, tmp_path) -> None:
    """A template saved for --against that lost a resource's Type."""
    assembly = synthesize(tmp_path / "cdk.out", REPOSITORY / "environments")
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("gpufleet-dev-network", "gpufleet-dev-cluster"):
        shutil.copy(assembly.template_file(name), saved)
    cluster = saved / "gpufleet-dev-cluster.template.json"
    cluster.write_text(cluster.read_text().replace('"Type": "AWS::EC2::SpotFleet",', "", 1))
    monkeypatch.chdir(tmp_path)
    show("gpufleet plan dev --cdk-out cdk.out --against saved/", run_cli)
