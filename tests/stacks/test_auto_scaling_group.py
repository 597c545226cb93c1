"""The cluster stack of an environment with fleet.backend auto-scaling (built in tests/stacks/conftest.py), asserted
on its synthesized templates; what CloudFormation does with them is read from the AWS::AutoScaling::AutoScalingGroup
schema cfn-lint bundles."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from gpufleet.constants import TERMINATION_HOOK_TIMEOUT_SECONDS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from parliament import is_arn_match
    from parliament.statement import get_arn_format, get_privilege_info

GROUP_SCHEMA = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::AutoScaling::AutoScalingGroup").schema
CFN_LINT = Path(sys.executable).with_name("cfn-lint")


def resources(assembly, name, resource_type):
    template = assembly.template_json(f"gpufleet-{name}-cluster")
    return {k: r for k, r in template["Resources"].items() if r["Type"] == resource_type}


def group(assembly, name):
    ((logical_id, resource),) = resources(assembly, name, "AWS::AutoScaling::AutoScalingGroup").items()
    return logical_id, resource


def test_the_group_keeps_target_nodes_with_the_on_demand_base_and_spot_above_it(auto_scaling_assembly):
    logical_id, resource = group(auto_scaling_assembly, "asg")
    properties = resource["Properties"]
    # No minimum and no desired capacity in the template: CloudFormation would wait for that many nodes. The group's
    # GroupCapacity resource sets its desired capacity to the target once the group exists.
    assert (properties["MinSize"], properties["MaxSize"], properties.get("DesiredCapacity")) == ("0", "4", None)
    (capacity,) = resources(auto_scaling_assembly, "asg", "Custom::GpufleetGroupCapacity").values()
    assert {key: value for key, value in capacity["Properties"].items() if key != "ServiceToken"} == {
        "AutoScalingGroupName": {"Ref": logical_id},
        "Target": 4,
        "Rollout": "manual",
    }
    assert properties["MixedInstancesPolicy"]["InstancesDistribution"] == {
        "OnDemandAllocationStrategy": "lowest-price",
        "OnDemandBaseCapacity": 1,
        "OnDemandPercentageAboveBaseCapacity": 0,
        "SpotAllocationStrategy": "capacity-optimized",
    }
    assert properties["MixedInstancesPolicy"]["LaunchTemplate"] == {
        "LaunchTemplateSpecification": {
            "LaunchTemplateId": {"Ref": "NodeLaunchTemplateCABE86F2"},
            "Version": {"Fn::GetAtt": ["NodeLaunchTemplateCABE86F2", "LatestVersionNumber"]},
        },
        "Overrides": [{"InstanceType": "p4d.24xlarge"}],
    }
    assert properties["CapacityRebalance"] is True
    assert "PlacementGroup" not in properties  # the launch template places the nodes
    assert "UpdatePolicy" not in resource and "ScalingPolicy" not in str(
        auto_scaling_assembly.template_json("gpufleet-asg-cluster")
    )


def test_the_group_runs_in_the_one_node_subnet(auto_scaling_assembly):
    assert group(auto_scaling_assembly, "asg")[1]["Properties"]["VPCZoneIdentifier"] == [
        {"Fn::ImportValue": "gpufleet-asg-network:ExportsOutputRefVpcnodesSubnet1Subnet50682361B65FB99F"}
    ]
    assert group(auto_scaling_assembly, "asgp5")[1]["Properties"]["VPCZoneIdentifier"] == ["subnet-0a1b2c3d"]


def test_on_demand_only_and_prioritized(auto_scaling_assembly):
    distribution = group(auto_scaling_assembly, "asgp5")[1]["Properties"]["MixedInstancesPolicy"][
        "InstancesDistribution"
    ]
    assert (distribution["OnDemandBaseCapacity"], distribution["OnDemandAllocationStrategy"]) == (2, "prioritized")
    assert distribution["SpotAllocationStrategy"] == "price-capacity-optimized"
    assert group(auto_scaling_assembly, "asgp5")[1]["Properties"]["CapacityRebalance"] is False


def test_tags_stay_on_the_group_and_the_launch_template_tags_the_nodes(auto_scaling_assembly):
    tags = group(auto_scaling_assembly, "asg")[1]["Properties"]["Tags"]
    assert tags == [
        {"Key": "gpufleet:environment", "PropagateAtLaunch": False, "Value": "asg"},
        {"Key": "team", "PropagateAtLaunch": False, "Value": "research"},
    ]
    (template,) = resources(auto_scaling_assembly, "asg", "AWS::EC2::LaunchTemplate").values()
    specs = template["Properties"]["LaunchTemplateData"]["TagSpecifications"]
    instance_tags = next(spec["Tags"] for spec in specs if spec["ResourceType"] == "instance")
    assert {"Key": "team", "Value": "research"} in instance_tags
    assert {"Key": "gpufleet:environment", "Value": "asg"} in instance_tags


def test_only_the_name_and_instance_id_replace_a_group():
    assert sorted(GROUP_SCHEMA["createOnlyProperties"]) == [
        "/properties/AutoScalingGroupName",
        "/properties/InstanceId",
    ]


def test_a_manual_rollout_keeps_one_name_and_replace_all_carries_the_image(auto_scaling_assembly):
    assert group(auto_scaling_assembly, "asg")[1]["Properties"]["AutoScalingGroupName"] == "gpufleet-asg-nodes"
    assert (
        group(auto_scaling_assembly, "asgp5")[1]["Properties"]["AutoScalingGroupName"]
        == "gpufleet-asgp5-nodes-ami-0123456789abcdef0"
    )


def test_the_termination_hook_waits_for_the_checkpoint_within_the_allowed_range(auto_scaling_assembly):
    (hook,) = group(auto_scaling_assembly, "asg")[1]["Properties"]["LifecycleHookSpecificationList"]
    assert hook == {
        "DefaultResult": "CONTINUE",
        "HeartbeatTimeout": 600,
        "LifecycleHookName": "gpufleet-checkpoint",
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
    }
    described = GROUP_SCHEMA["definitions"]["LifecycleHookSpecification"]["properties"]["HeartbeatTimeout"]
    low, high = map(int, re.search(r"from ``(\d+)`` to ``(\d+)`` seconds", described["description"]).groups())
    assert (low, high) == (30, 7200)
    assert low <= TERMINATION_HOOK_TIMEOUT_SECONDS <= high


def test_deleting_the_group_scales_it_to_zero_within_hours_not_minutes_of_hook_waiting():
    """The delete handler may set the group's sizes to 0 (which terminates its instances) and runs up to 240
    minutes; a node waits at most the heartbeat timeout in Terminating:Wait."""
    delete = GROUP_SCHEMA["handlers"]["delete"]
    assert {"autoscaling:UpdateAutoScalingGroup", "autoscaling:DeleteAutoScalingGroup"} <= set(delete["permissions"])
    assert delete["timeoutInMinutes"] == 240
    assert TERMINATION_HOOK_TIMEOUT_SECONDS / 60 < delete["timeoutInMinutes"]


@pytest.mark.parametrize("name", ["asg", "asgp5"])
def test_the_group_is_deleted_before_what_its_nodes_use_and_needs_no_teardown_resource(auto_scaling_assembly, name):
    """The custom resources are the group's capacity and the cluster user's key, whose Deletes do nothing: the
    group's own deletion terminates its nodes."""
    _, resource = group(auto_scaling_assembly, name)
    depends_on = set(resource["DependsOn"])
    for resource_type in ("AWS::EC2::PlacementGroup", "AWS::EC2::SecurityGroup", "AWS::EC2::LaunchTemplate"):
        assert set(resources(auto_scaling_assembly, name, resource_type)) <= depends_on, resource_type
    (policy,) = [k for k in resources(auto_scaling_assembly, name, "AWS::IAM::Policy") if "CompleteLifecycle" in k]
    assert policy in depends_on
    template = auto_scaling_assembly.template_json(f"gpufleet-{name}-cluster")
    custom = [r["Type"] for r in template["Resources"].values() if r["Type"].startswith("Custom::")]
    assert sorted(custom) == ["Custom::GpufleetClusterUserKey", "Custom::GpufleetGroupCapacity"]
    assert not resources(auto_scaling_assembly, name, "AWS::EC2::SpotFleet")


@pytest.mark.parametrize(
    ("name", "arn"),
    [
        (
            "asg",
            "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/gpufleet-asg-nodes",
        ),
        (
            "asgp5",
            "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/"
            "gpufleet-asgp5-nodes-ami-*",
        ),
    ],
)
def test_nodes_may_complete_lifecycle_actions_of_their_own_group_only(auto_scaling_assembly, name, arn):
    (policy,) = [
        r for k, r in resources(auto_scaling_assembly, name, "AWS::IAM::Policy").items() if "CompleteLifecycle" in k
    ]
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "autoscaling:CompleteLifecycleAction"
    assert statement["Condition"] == {"StringEquals": {"aws:ResourceTag/gpufleet:environment": name}}
    (prefix, partition, rest) = statement["Resource"]["Fn::Join"][1]
    assert (prefix, partition) == ("arn:", {"Ref": "AWS::Partition"})
    assert f"arn:aws{rest}" == arn
    (role,) = policy["Properties"]["Roles"]
    assert role["Ref"].startswith("NodeLaunchTemplateNodeRole")
    # The ARN form of CompleteLifecycleAction's resource in the Service Authorization Reference (parliament's copy).
    info = get_privilege_info("autoscaling", "CompleteLifecycleAction")
    (resource_type,) = [entry["resource_type"].rstrip("*") for entry in info["resource_types"]]
    assert is_arn_match(resource_type, get_arn_format(resource_type, info["service_resources"]), arn)
    own = arn.replace("*:", "0a1b-uuid:").replace("ami-*", "ami-0123456789abcdef0")
    other = own.replace(f"gpufleet-{name}-nodes", "gpufleet-other-nodes")
    assert re.fullmatch(arn.replace("*", ".*"), own) and not re.fullmatch(arn.replace("*", ".*"), other)


def test_outputs_name_the_group_instead_of_a_fleet_request(auto_scaling_assembly):
    outputs = auto_scaling_assembly.template_json("gpufleet-asg-cluster")["Outputs"]
    assert outputs["AutoScalingGroupName"] == {"Value": {"Ref": "NodeGroupA8D4A5C5"}}
    assert "FleetRequestId" not in outputs


def test_cfn_lint_passes_the_auto_scaling_templates(auto_scaling_assembly):
    templates = [str(auto_scaling_assembly.template_file(name)) for name in auto_scaling_assembly.stack_names]
    result = subprocess.run(
        [CFN_LINT, "--config-file", ".cfnlintrc.yaml", "--", *templates], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cdk_nag_passed_with_reasoned_acknowledgements_of_the_group(auto_scaling_assembly):
    """The assembly was synthesized with cdk-nag attached (an unacknowledged finding fails synthesis); the group's
    own acknowledgements name their rule and say why (EC26 as cdk-nag names a rule that could not evaluate)."""
    found = [
        rule
        for name in auto_scaling_assembly.stack_names
        for logical_id, resource in auto_scaling_assembly.template_json(name)["Resources"].items()
        if logical_id.startswith("NodeGroup") and not logical_id.startswith("NodeGroupCapacity")
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert {rule["id"].split("[")[0] for rule in found} == {
        "AwsSolutions-AS3",
        "AwsSolutions::AwsSolutions-EC26",
        "AwsSolutions-IAM5",
    }
    for rule in found:
        assert len(rule["reason"]) >= 60, rule
