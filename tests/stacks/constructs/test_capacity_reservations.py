"""Capacity sources in the node launch template and the Auto Scaling group property: reservations (only, first; ids
and resource group) and a Capacity Block; then whole stacks with them through cfn-lint and cdk-nag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk.assertions import Template

from gpufleet.validators import BACKEND_AUTO_SCALING
from stacks.constructs.capacity_reservations import auto_scaling_capacity_reservation
from tests.conftest import synthesize
from tests.stacks.constructs.conftest import ENVIRONMENT, environment
from tests.stacks.constructs.test_node_launch_template import launch_template_data

CFN_LINT = Path(sys.executable).with_name("cfn-lint")
RESERVATION_ID = "cr-0123456789abcdef0"
OTHER_RESERVATION_ID = "cr-0fedcba9876543210"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-reservations"
ALL_ON_DEMAND = {"target": 2, "on_demand": 2}


AUTO_SCALING = {"backend": BACKEND_AUTO_SCALING}


def with_capacity(fleet: dict | None = None, **capacity):
    return environment(capacity={**ALL_ON_DEMAND, **capacity}, fleet=fleet or {})


def test_without_a_capacity_source_the_template_leaves_reservations_to_ec2(stack):
    data = launch_template_data(stack, environment())
    assert "CapacityReservationSpecification" not in data
    assert "InstanceMarketOptions" not in data
    assert data["Placement"] == {"GroupName": "probe-cluster"}


@pytest.mark.parametrize(
    ("reservation", "target"),
    [
        ({"ids": [RESERVATION_ID]}, {"CapacityReservationId": RESERVATION_ID}),
        ({"resource_group_arn": GROUP_ARN}, {"CapacityReservationResourceGroupArn": GROUP_ARN}),
    ],
)
def test_a_spot_fleet_launches_only_into_the_reservation_named_by_the_launch_template(stack, reservation, target):
    data = launch_template_data(stack, with_capacity(reservation={**reservation, "preference": "only"}))
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": target,
    }
    assert "InstanceMarketOptions" not in data
    assert data["Placement"] == {"GroupName": "probe-cluster"}


def test_with_auto_scaling_the_group_targets_the_reservations_not_the_launch_template(stack):
    data = launch_template_data(stack, with_capacity(AUTO_SCALING, reservation={"ids": [RESERVATION_ID]}))
    assert "CapacityReservationSpecification" not in data


def test_a_capacity_block_node_launches_as_capacity_block_into_the_block_outside_any_placement_group(stack):
    data = launch_template_data(stack, with_capacity(AUTO_SCALING, capacity_block={"reservation_id": RESERVATION_ID}))
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": RESERVATION_ID}
    }
    assert "Placement" not in data


def group_with(stack, specification) -> dict:
    autoscaling.CfnAutoScalingGroup(
        stack, "Group", max_size="2", min_size="2", capacity_reservation_specification=specification
    )
    (group,) = Template.from_stack(stack).find_resources("AWS::AutoScaling::AutoScalingGroup").values()
    return group["Properties"].get("CapacityReservationSpecification")


@pytest.mark.parametrize(
    ("reservation", "expected"),
    [
        (
            {"ids": [RESERVATION_ID, OTHER_RESERVATION_ID], "preference": "only"},
            {
                "CapacityReservationPreference": "capacity-reservations-only",
                "CapacityReservationTarget": {"CapacityReservationIds": [RESERVATION_ID, OTHER_RESERVATION_ID]},
            },
        ),
        (
            {"resource_group_arn": GROUP_ARN, "preference": "first"},
            {
                "CapacityReservationPreference": "capacity-reservations-first",
                "CapacityReservationTarget": {"CapacityReservationResourceGroupArns": [GROUP_ARN]},
            },
        ),
        (
            {"ids": [RESERVATION_ID], "preference": "first"},
            {
                "CapacityReservationPreference": "capacity-reservations-first",
                "CapacityReservationTarget": {"CapacityReservationIds": [RESERVATION_ID]},
            },
        ),
    ],
)
def test_auto_scaling_group_capacity_reservation(stack, reservation, expected):
    assert group_with(stack, auto_scaling_capacity_reservation(with_capacity(reservation=reservation))) == expected


@pytest.mark.parametrize(
    "capacity", [{}, {"capacity_block": {"reservation_id": RESERVATION_ID}}], ids=["no source", "capacity block"]
)
def test_the_group_leaves_no_reservation_and_a_capacity_block_to_the_launch_template(stack, capacity):
    assert auto_scaling_capacity_reservation(with_capacity(**capacity)) is None


def test_the_group_property_passes_cfn_lint(stack, tmp_path):
    reservation = {"resource_group_arn": GROUP_ARN, "preference": "first"}
    group_with(stack, auto_scaling_capacity_reservation(with_capacity(reservation=reservation)))
    template = tmp_path / "group.template.json"
    template.write_text(json.dumps(Template.from_stack(stack).to_json()))
    result = subprocess.run([CFN_LINT, "--", str(template)], capture_output=True, text=True)
    # cfn-lint judges the group's other required settings too; no finding may concern the reservation property.
    assert "CapacityReservation" not in result.stdout, result.stdout


ENVIRONMENTS = {
    "reserved": {"capacity": {**ALL_ON_DEMAND, "reservation": {"ids": [RESERVATION_ID], "preference": "only"}}},
    "grouped": {"capacity": {**ALL_ON_DEMAND, "reservation": {"resource_group_arn": GROUP_ARN}}},
    "block": {
        "instance_type": "p5.48xlarge",
        "fleet": AUTO_SCALING,
        "capacity": {**ALL_ON_DEMAND, "capacity_block": {"reservation_id": RESERVATION_ID}},
    },
    "first": {
        "fleet": AUTO_SCALING,
        "capacity": {"target": 4, "on_demand": 2, "reservation": {"ids": [RESERVATION_ID], "preference": "first"}},
    },
}


@pytest.fixture(scope="module")
def capacity_assembly(tmp_path_factory):
    """The stacks of an environment per capacity source, synthesized as `cdk synth` does: cdk-nag is attached and an
    unacknowledged finding fails synthesis, so the fixture itself is the cdk-nag check."""
    directory = tmp_path_factory.mktemp("environments")
    for name, changes in ENVIRONMENTS.items():
        document = {**yaml.safe_load(ENVIRONMENT), "name": name, **changes}
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(document))
    return synthesize(tmp_path_factory.mktemp("cdk.out"), directory)


def test_stacks_with_every_capacity_source_pass_cfn_lint(capacity_assembly):
    templates = [str(capacity_assembly.template_file(name)) for name in capacity_assembly.stack_names]
    assert any("block" in name for name in capacity_assembly.stack_names)
    result = subprocess.run(
        [CFN_LINT, "--config-file", ".cfnlintrc.yaml", "--", *templates], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_capacity_block_stack_launches_into_the_block(capacity_assembly):
    (name,) = [name for name in capacity_assembly.stack_names if name == "gpufleet-block-cluster"]
    (template,) = capacity_assembly.template(name).find_resources("AWS::EC2::LaunchTemplate").values()
    assert template["Properties"]["LaunchTemplateData"]["InstanceMarketOptions"] == {"MarketType": "capacity-block"}


def test_the_capacity_block_group_leaves_the_block_to_the_launch_template(capacity_assembly):
    (group,) = (
        capacity_assembly.template("gpufleet-block-cluster")
        .find_resources("AWS::AutoScaling::AutoScalingGroup")
        .values()
    )
    assert "CapacityReservationSpecification" not in group["Properties"]
    assert group["Properties"]["MixedInstancesPolicy"]["InstancesDistribution"]["OnDemandBaseCapacity"] == 2


def test_reservations_first_go_on_the_auto_scaling_group_and_spot_stays_above_the_base(capacity_assembly):
    template = capacity_assembly.template("gpufleet-first-cluster")
    (group,) = template.find_resources("AWS::AutoScaling::AutoScalingGroup").values()
    assert group["Properties"]["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-first",
        "CapacityReservationTarget": {"CapacityReservationIds": [RESERVATION_ID]},
    }
    assert group["Properties"]["MixedInstancesPolicy"]["InstancesDistribution"] == {
        "OnDemandAllocationStrategy": "lowest-price",
        "OnDemandBaseCapacity": 2,
        "OnDemandPercentageAboveBaseCapacity": 0,
        "SpotAllocationStrategy": "price-capacity-optimized",
    }
    (template_resource,) = template.find_resources("AWS::EC2::LaunchTemplate").values()
    assert "CapacityReservationSpecification" not in template_resource["Properties"]["LaunchTemplateData"]


def test_the_capacity_block_expiration_warning_runs_the_node_script_on_this_environments_nodes(capacity_assembly):
    template = capacity_assembly.template("gpufleet-block-cluster")
    (rule,) = template.find_resources("AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": ["Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"],
        "detail": {"capacity-reservation-id": [RESERVATION_ID]},
    }
    (target,) = rule["Properties"]["Targets"]
    assert target["RunCommandParameters"] == {
        "RunCommandTargets": [{"Key": "tag:gpufleet:environment", "Values": ["block"]}]
    }
    assert target["Arn"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-1::document/AWS-RunShellScript"]]
    }
    assert target["InputTransformer"] == {
        "InputPathsMap": {"reservation": "$.detail.capacity-reservation-id", "end": "$.detail.end-date"},
        "InputTemplate": json.dumps(
            {
                "commands": [
                    ". /etc/gpufleet/node.env && /opt/gpufleet/node/capacity-block-end.sh '<reservation>' '<end>'"
                ]
            }
        ),
    }


def test_the_rule_may_send_commands_to_this_environments_nodes_only(capacity_assembly):
    template = capacity_assembly.template("gpufleet-block-cluster")
    roles = template.find_resources(
        "AWS::IAM::Role", {"Properties": {"Policies": [{"PolicyName": "SendCommandToNodes"}]}}
    )
    ((_, role),) = roles.items()
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "events.amazonaws.com"
    }
    (policy,) = role["Properties"]["Policies"]
    document, instances = policy["PolicyDocument"]["Statement"]
    assert document["Action"] == instances["Action"] == "ssm:SendCommand"
    assert instances["Condition"] == {"StringEquals": {"ssm:resourceTag/gpufleet:environment": "block"}}
    assert instances["Resource"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:instance/*"]]
    }


def test_environments_outside_a_capacity_block_get_no_rule(capacity_assembly):
    for name in ("gpufleet-reserved-cluster", "gpufleet-grouped-cluster", "gpufleet-first-cluster"):
        assert capacity_assembly.template(name).find_resources("AWS::Events::Rule") == {}
