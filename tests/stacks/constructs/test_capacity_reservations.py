"""Capacity sources in the node launch template and the Auto Scaling group property: reservations (only, first; ids
and resource group) and a Capacity Block, for probe environments and for every entry of the environment matrix; then
the matrix's stacks through cfn-lint and cdk-nag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk.assertions import Template

from gpufleet.constants import BACKEND_AUTO_SCALING
from stacks.constructs.capacity_reservations import auto_scaling_capacity_reservation
from tests.stacks.constructs.conftest import bare_stack, environment
from tests.stacks.constructs.test_node_launch_template import add_launch_template, data_of, launch_template_data
from tests.stacks.matrix import FLEET_ENTRIES
from tests.stacks.matrix import GROUP_ARN as MATRIX_GROUP_ARN

CFN_LINT = Path(sys.executable).with_name("cfn-lint")
RESERVATION_ID = "cr-0123456789abcdef0"
BLOCK = {"reservation_id": RESERVATION_ID, "start": "2099-01-05T11:30:00Z", "end": "2099-01-12T11:30:00Z"}
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
    data = launch_template_data(stack, with_capacity(AUTO_SCALING, capacity_block=BLOCK))
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": RESERVATION_ID}
    }
    assert "Placement" not in data


def add_group(stack, specification) -> None:
    autoscaling.CfnAutoScalingGroup(
        stack, "AutoScalingGroup", max_size="2", min_size="2", capacity_reservation_specification=specification
    )


def group_specification(template: Template) -> dict | None:
    (group,) = template.find_resources("AWS::AutoScaling::AutoScalingGroup").values()
    return group["Properties"].get("CapacityReservationSpecification")


def group_with(stack, specification) -> dict | None:
    add_group(stack, specification)
    return group_specification(Template.from_stack(stack))


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
    assert (
        group_with(
            stack, auto_scaling_capacity_reservation(with_capacity(reservation=reservation).capacity.reservation)
        )
        == expected
    )


@pytest.mark.parametrize("capacity", [{}, {"capacity_block": BLOCK}], ids=["no source", "capacity block"])
def test_the_group_leaves_no_reservation_and_a_capacity_block_to_the_launch_template(stack, capacity):
    assert auto_scaling_capacity_reservation(with_capacity(**capacity).capacity.reservation) is None


def test_the_group_property_passes_cfn_lint(stack, tmp_path):
    reservation = {"resource_group_arn": GROUP_ARN, "preference": "first"}
    group_with(stack, auto_scaling_capacity_reservation(with_capacity(reservation=reservation).capacity.reservation))
    template = tmp_path / "group.template.json"
    template.write_text(json.dumps(Template.from_stack(stack).to_json()))
    result = subprocess.run([CFN_LINT, "--", str(template)], capture_output=True, text=True)
    # cfn-lint judges the group's other required settings too; no finding may concern the reservation property.
    assert "CapacityReservation" not in result.stdout, result.stdout


# The environment matrix (tests/stacks/matrix.py): each entry's launch template in a bare stack, with a stand-in Auto
# Scaling group that takes auto_scaling_capacity_reservation where the entry's backend is auto-scaling.
@pytest.fixture(scope="module", params=FLEET_ENTRIES)
def matrix_capacity(request, matrix) -> tuple[str, dict, dict | None]:
    environment = matrix[request.param]
    stack = bare_stack(environment.region)
    add_launch_template(stack, environment)
    with_group = environment.fleet.backend == BACKEND_AUTO_SCALING
    if with_group:
        add_group(stack, auto_scaling_capacity_reservation(environment.capacity.reservation))
    template = Template.from_stack(stack)
    return request.param, data_of(template), (group_specification(template) or {}) if with_group else None


PLACED = {"GroupName": "probe-cluster"}
# Per entry: the launch template's market options, reservation targeting and placement; the Auto Scaling group's
# reservation targeting (None: a Spot Fleet entry, no group; {}: a group that leaves it to the launch template).
MATRIX_CAPACITY = {
    "spot-p4d": (None, None, PLACED, None),
    "request-p4de": (
        None,
        {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationResourceGroupArn": MATRIX_GROUP_ARN},
        },
        PLACED,
        None,
    ),
    "block-p5": (
        {"MarketType": "capacity-block"},
        {"CapacityReservationTarget": {"CapacityReservationId": RESERVATION_ID}},
        None,
        {},
    ),
    "asg-g5": (
        None,
        None,
        PLACED,
        {
            "CapacityReservationPreference": "capacity-reservations-first",
            "CapacityReservationTarget": {"CapacityReservationIds": [RESERVATION_ID, OTHER_RESERVATION_ID]},
        },
    ),
    "small-g5": (
        None,
        {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": RESERVATION_ID},
        },
        PLACED,
        None,
    ),
}


def test_every_matrix_entry_takes_its_capacity_from_its_source(matrix_capacity):
    name, data, group = matrix_capacity
    found = (
        data.get("InstanceMarketOptions"),
        data.get("CapacityReservationSpecification"),
        data.get("Placement"),
        group,
    )
    assert found == MATRIX_CAPACITY[name]


def test_the_stacks_of_every_matrix_entry_pass_cfn_lint(matrix_assembly):
    """Every capacity source is in the matrix (tests/stacks/matrix.py): reservation ids (only, first), a resource
    group and a Capacity Block."""
    templates = [str(matrix_assembly.template_file(name)) for name in matrix_assembly.stack_names]
    # A cluster stack per fleet entry (5) or an eks and a GPU nodes stack per eks entry (2 x 2), a network stack for the
    # five with a cidr, a storage stack for the four with storage.lustre.
    assert len(templates) == 18
    result = subprocess.run(
        [CFN_LINT, "--config-file", ".cfnlintrc.yaml", "--", *templates], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_capacity_block_expiration_warning_runs_the_node_script_on_this_environments_nodes(matrix_assembly):
    template = matrix_assembly.template("gpufleet-block-p5-cluster")
    (rule,) = template.find_resources("AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": ["Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"],
        "detail": {"capacity-reservation-id": [RESERVATION_ID]},
    }
    (target,) = rule["Properties"]["Targets"]
    assert target["RunCommandParameters"] == {
        "RunCommandTargets": [{"Key": "tag:gpufleet:environment", "Values": ["block-p5"]}]
    }
    assert target["Arn"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-2::document/AWS-RunShellScript"]]
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


def test_the_rule_may_send_commands_to_this_environments_nodes_only(matrix_assembly):
    template = matrix_assembly.template("gpufleet-block-p5-cluster")
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
    assert instances["Condition"] == {"StringEquals": {"ssm:resourceTag/gpufleet:environment": "block-p5"}}
    assert instances["Resource"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-2:123456789012:instance/*"]]
    }
