"""The Spot Fleet on its own: the request it writes for a maintain and a request fleet."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from stacks.constructs.gpu_spot_fleet import GpuSpotFleet
from tests.stacks.constructs.conftest import environment


def request_config(stack, env):
    launch_template = ec2.CfnLaunchTemplate(
        stack,
        "Node",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(instance_type="p4d.24xlarge"),
    )
    fleet = GpuSpotFleet(
        stack, "Fleet", environment=env, launch_template=launch_template, image_id="ami-0123456789abcdef0"
    )
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
            "Overrides": [{"InstanceType": "p4d.24xlarge"}],
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
