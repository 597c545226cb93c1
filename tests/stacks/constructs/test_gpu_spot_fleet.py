"""The Spot Fleet on its own: the request it writes for a maintain and a request fleet, and for every Spot Fleet entry
of the environment matrix."""

from __future__ import annotations

import time

import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from stacks.constructs.gpu_spot_fleet import GpuSpotFleet
from tests.stacks.constructs.conftest import bare_stack, environment


def spot_fleet(stack, env, launch_template, image_id):
    return GpuSpotFleet(
        stack,
        "Fleet",
        environment_name=env.name,
        instance_type=env.instance_type,
        target=env.capacity.target,
        on_demand=env.capacity.on_demand,
        fleet=env.fleet,
        launch_template=launch_template,
        image_id=image_id,
    )


def request_config(stack, env, instance_type="p4d.24xlarge"):
    launch_template = ec2.CfnLaunchTemplate(
        stack,
        "Node",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(instance_type="p4d.24xlarge"),
    )
    fleet = spot_fleet(stack, env, launch_template, image_id="ami-0123456789abcdef0")
    (resource,) = Template.from_stack(stack).find_resources("AWS::EC2::SpotFleet").values()
    config = resource["Properties"]["SpotFleetRequestConfigData"]
    role = stack.get_logical_id(fleet.fleet_role.node.default_child)
    assert config.pop("IamFleetRole") == {"Fn::GetAtt": [role, "Arn"]}
    assert config.pop("LaunchTemplateConfigs") == [
        {
            "LaunchTemplateSpecification": {
                "LaunchTemplateId": {"Ref": "Node"},
                "Version": {"Fn::GetAtt": ["Node", "LatestVersionNumber"]},
            },
            "Overrides": [{"InstanceType": instance_type}],
        }
    ]
    return config


def test_a_maintain_fleet_keeps_two_nodes_one_on_demand_and_is_tagged_with_its_environment_only(stack):
    assert request_config(stack, environment()) == {
        "Type": "maintain",
        "TargetCapacity": 2,
        "OnDemandTargetCapacity": 1,
        "OnDemandAllocationStrategy": "lowestPrice",
        "AllocationStrategy": "priceCapacityOptimized",
        "InstanceInterruptionBehavior": "terminate",
        "ReplaceUnhealthyInstances": True,
        "ExcessCapacityTerminationPolicy": "default",
        "TerminateInstancesWithExpiration": True,
        "TagSpecifications": [
            {"ResourceType": "spot-fleet-request", "Tags": [{"Key": "gpufleet:environment", "Value": "probe"}]}
        ],
    }


def test_a_request_fleet_carries_its_launch_template_version_and_digest_and_no_maintain_settings(stack):
    config = request_config(
        stack,
        environment(fleet={"type": "request", "valid_until": "2027-01-02T03:04:05", "capacity_rebalance": None}),
    )
    (tags,) = config.pop("TagSpecifications")
    assert config == {
        "Type": "request",
        "TargetCapacity": 2,
        "OnDemandTargetCapacity": 1,
        "OnDemandAllocationStrategy": "lowestPrice",
        "AllocationStrategy": "priceCapacityOptimized",
        "InstanceInterruptionBehavior": "terminate",
        "TerminateInstancesWithExpiration": True,
        "ValidUntil": "2027-01-02T03:04:05Z",
    }
    assert [tag["Key"] for tag in tags["Tags"]] == [
        "gpufleet:environment",
        "gpufleet:launch-template-version",
        "gpufleet:request-digest",
    ]
    assert tags["Tags"][1]["Value"] == {"Fn::GetAtt": ["Node", "LatestVersionNumber"]}


def test_capacity_rebalance_becomes_the_fleets_maintenance_strategy(stack):
    rebalance = {"replacement_strategy": "launch-before-terminate", "termination_delay_seconds": 300}
    config = request_config(stack, environment(fleet={"type": "maintain", "capacity_rebalance": rebalance}))
    assert config["SpotMaintenanceStrategies"] == {
        "CapacityRebalance": {"ReplacementStrategy": "launch-before-terminate", "TerminationDelay": 300}
    }


def environment_tag(name: str) -> dict:
    return {"Key": "gpufleet:environment", "Value": name}


# The request of every Spot Fleet entry of the environment matrix (tests/stacks/matrix.py).
MATRIX_REQUESTS = {
    "spot-p4d": {
        "Type": "maintain",
        "TargetCapacity": 4,
        "OnDemandTargetCapacity": 1,
        "OnDemandAllocationStrategy": "prioritized",
        "AllocationStrategy": "diversified",
        "InstanceInterruptionBehavior": "terminate",
        "ReplaceUnhealthyInstances": False,
        "ExcessCapacityTerminationPolicy": "default",
        "TerminateInstancesWithExpiration": True,
        "SpotMaintenanceStrategies": {
            "CapacityRebalance": {"ReplacementStrategy": "launch-before-terminate", "TerminationDelay": 300}
        },
        # replace-all: a new image is a new tag, which replaces the fleet.
        "TagSpecifications": [
            {
                "ResourceType": "spot-fleet-request",
                "Tags": [environment_tag("spot-p4d"), {"Key": "gpufleet:image", "Value": "ami-0123456789abcdef0"}],
            }
        ],
    },
    "request-p4de": {
        "Type": "request",
        "TargetCapacity": 2,
        "OnDemandTargetCapacity": 2,
        "OnDemandAllocationStrategy": "lowestPrice",
        "AllocationStrategy": "lowestPrice",
        "InstanceInterruptionBehavior": "terminate",
        "TerminateInstancesWithExpiration": True,
        "ValidUntil": "2099-01-01T00:00:00Z",
        # A request fleet cannot be modified: any change is a new tag, which replaces it.
        "TagSpecifications": [
            {
                "ResourceType": "spot-fleet-request",
                "Tags": [
                    environment_tag("request-p4de"),
                    {
                        "Key": "gpufleet:launch-template-version",
                        "Value": {"Fn::GetAtt": ["Node", "LatestVersionNumber"]},
                    },
                    # sha256 of the synthesized request configuration, first 16 hex digits.
                    {"Key": "gpufleet:request-digest", "Value": "e217c17c62922d22"},
                ],
            }
        ],
    },
    "small-g5": {
        "Type": "maintain",
        "TargetCapacity": 1,
        "OnDemandTargetCapacity": 1,
        "OnDemandAllocationStrategy": "lowestPrice",
        "AllocationStrategy": "priceCapacityOptimized",
        "InstanceInterruptionBehavior": "terminate",
        "ReplaceUnhealthyInstances": True,
        "ExcessCapacityTerminationPolicy": "default",
        "TerminateInstancesWithExpiration": True,
        "TagSpecifications": [{"ResourceType": "spot-fleet-request", "Tags": [environment_tag("small-g5")]}],
    },
}


MATRIX_INSTANCE_TYPES = {"spot-p4d": "p4d.24xlarge", "request-p4de": "p4de.24xlarge", "small-g5": "g5.8xlarge"}


def test_the_tables_hold_every_spot_fleet_entry_of_the_matrix(matrix):
    assert (
        MATRIX_REQUESTS.keys()
        == MATRIX_INSTANCE_TYPES.keys()
        == {name for name, env in matrix.items() if env.flavour == "fleet" and env.fleet.backend == "spot-fleet"}
    )


@pytest.fixture(scope="module", params=list(MATRIX_REQUESTS))
def matrix_request(request, matrix) -> tuple[str, dict]:
    environment = matrix[request.param]
    stack = bare_stack(environment.region)
    return request.param, request_config(stack, environment, MATRIX_INSTANCE_TYPES[request.param])


def test_every_spot_fleet_entry_of_the_matrix_requests_its_fleet(matrix_request):
    name, config = matrix_request
    assert config == MATRIX_REQUESTS[name]


def test_valid_until_with_an_offset_is_written_in_utc(stack):
    """AWS reads ValidUntil as UTC (YYYY-MM-DDTHH:MM:SSZ): 05:04:05 at +02:00 is 03:04:05Z."""
    config = request_config(stack, environment(fleet={"type": "request", "valid_until": "2027-01-02T05:04:05+02:00"}))
    assert config["ValidUntil"] == "2027-01-02T03:04:05Z"


def test_the_fleet_and_its_role_keep_their_logical_ids_and_the_role_lets_spot_fleet_tag_and_launch(stack):
    """The logical ids follow the construct path (Fleet/Resource, Fleet/FleetRole, the cluster stack's too): a new
    one for the fleet makes CloudFormation replace it, and with it every node. Spot Fleet assumes the role with the
    managed policy AWS documents for it."""
    request_config(stack, environment())
    resources = Template.from_stack(stack).to_json()["Resources"]
    assert resources["Fleet30813DF3"]["Type"] == "AWS::EC2::SpotFleet"
    assert resources["Fleet30813DF3"]["Properties"]["SpotFleetRequestConfigData"]["IamFleetRole"] == {
        "Fn::GetAtt": ["FleetFleetRoleAC5D1B26", "Arn"]
    }
    assert resources["FleetFleetRoleAC5D1B26"] == {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "spotfleet.amazonaws.com"}}
                ],
                "Version": "2012-10-17",
            },
            "Description": "gpufleet probe: lets Spot Fleet launch, tag and terminate the nodes",
            "ManagedPolicyArns": [
                {
                    "Fn::Join": [
                        "",
                        [
                            "arn:",
                            {"Ref": "AWS::Partition"},
                            ":iam::aws:policy/service-role/AmazonEC2SpotFleetTaggingRole",
                        ],
                    ]
                }
            ],
        },
    }


def test_the_fleet_roles_managed_policy_is_acknowledged_with_its_reason():
    """cdk-nag's IAM4 finding on the managed policy, acknowledged on the role (synthesis of every environment fails on
    an unacknowledged one); the reason goes into the template metadata for the audit trail."""
    stack = bare_stack()
    launch_template = ec2.CfnLaunchTemplate(
        stack, "Node", launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty()
    )
    fleet = spot_fleet(stack, environment(), launch_template, image_id="ami-1")
    acknowledged = [
        item
        for entry in fleet.fleet_role.node.metadata
        if entry.type == "aws:cdk:acknowledged-rules"
        for item in entry.data.items()
    ]
    assert acknowledged == [
        (
            "Annotation::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonEC2SpotFleetTaggingRole]",
            "The policy AWS documents for Spot Fleet roles; AWS updates it when the service needs new actions, which "
            "a copied inline policy would silently miss",
        )
    ]


@pytest.fixture
def tokyo_time(monkeypatch):
    """The process's local time zone set to Asia/Tokyo (UTC+9) for one test, then restored."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_valid_until_without_an_offset_is_read_as_utc_whatever_the_machines_time_zone(stack, tokyo_time):
    """environments/*.yaml times without an offset are UTC: a deploy from a machine in Tokyo asks for the same end."""
    config = request_config(stack, environment(fleet={"type": "request", "valid_until": "2027-01-02T03:04:05"}))
    assert config["ValidUntil"] == "2027-01-02T03:04:05Z"
