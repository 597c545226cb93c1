"""The Auto Scaling group on its own, for every auto-scaling entry of the environment matrix: its name, capacity, mix,
reservations, lifecycle hook and tag, and the groups whose lifecycle actions its nodes may complete; and a Capacity
Block group's template, the same whenever it is synthesized (its schedule is made at deploy time:
tests/stacks/constructs/block_capacity/)."""

from __future__ import annotations

import datetime as dt

import pytest
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from stacks.constructs.gpu_auto_scaling_group import GpuAutoScalingGroup
from tests.stacks.constructs.conftest import bare_stack
from tests.stacks.constructs.test_node_launch_template import add_launch_template
from tests.stacks.matrix import OTHER_RESERVATION_ID, RESERVATION_ID

SUBNET = "subnet-0123456789abcdef0"
LAUNCH_TEMPLATE = {
    "LaunchTemplateId": {"Ref": "Node8BE85138"},
    "Version": {"Fn::GetAtt": ["Node8BE85138", "LatestVersionNumber"]},
}
# The termination hook the node watcher completes after the checkpoint hook; ten minutes, then the termination goes on.
LIFECYCLE_HOOKS = [
    {
        "DefaultResult": "CONTINUE",
        "HeartbeatTimeout": 600,
        "LifecycleHookName": "gpufleet-checkpoint",
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
    }
]


def group_arn(region: str, name: str) -> dict:
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":autoscaling:{region}:123456789012:autoScalingGroup:*:autoScalingGroupName/{name}",
            ],
        ]
    }


# Per auto-scaling entry of the matrix (tests/stacks/matrix.py): the group's properties, and the group ARNs in the
# nodes' CompleteLifecycleAction statement.
MATRIX_GROUPS = {
    # rollout manual: a fixed name, so a new image is a new launch template version taken in place. A Capacity Block
    # group names the launch template itself, with no mixed instances policy; no DesiredCapacity: its BlockCapacity
    # resource sets it at deploy time.
    "block-p5": (
        {
            "AutoScalingGroupName": "gpufleet-block-p5-nodes",
            "MinSize": "0",
            "MaxSize": "2",
            "VPCZoneIdentifier": [SUBNET],
            "CapacityRebalance": False,
            "LaunchTemplate": LAUNCH_TEMPLATE,
            # The Capacity Block is the launch template's: no reservation here.
            "LifecycleHookSpecificationList": LIFECYCLE_HOOKS,
            "Tags": [{"Key": "gpufleet:environment", "PropagateAtLaunch": False, "Value": "block-p5"}],
        },
        group_arn("us-east-2", "gpufleet-block-p5-nodes"),
    ),
    # replace-all: the name carries the image, so a new image is a new group; the nodes' permission covers both. No
    # DesiredCapacity: CloudFormation would wait for that many nodes; the group's GroupCapacity resource asks for them.
    "asg-g5": (
        {
            "AutoScalingGroupName": {
                "Fn::Join": ["-", ["gpufleet-asg-g5-nodes", {"Ref": "NodeNodeImageParameter5454208B"}]]
            },
            "MinSize": "0",
            "MaxSize": "4",
            "VPCZoneIdentifier": [SUBNET],
            "CapacityRebalance": True,
            "CapacityReservationSpecification": {
                "CapacityReservationPreference": "capacity-reservations-first",
                "CapacityReservationTarget": {"CapacityReservationIds": [RESERVATION_ID, OTHER_RESERVATION_ID]},
            },
            "MixedInstancesPolicy": {
                "LaunchTemplate": {
                    "LaunchTemplateSpecification": LAUNCH_TEMPLATE,
                    "Overrides": [{"InstanceType": "g5.48xlarge"}],
                },
                "InstancesDistribution": {
                    "OnDemandAllocationStrategy": "lowest-price",
                    "OnDemandBaseCapacity": 2,
                    "OnDemandPercentageAboveBaseCapacity": 0,
                    "SpotAllocationStrategy": "capacity-optimized",
                },
            },
            "LifecycleHookSpecificationList": LIFECYCLE_HOOKS,
            "Tags": [{"Key": "gpufleet:environment", "PropagateAtLaunch": False, "Value": "asg-g5"}],
        },
        group_arn("us-east-1", "gpufleet-asg-g5-nodes-ami-*"),
    ),
}


def test_the_table_holds_every_auto_scaling_entry_of_the_matrix(matrix):
    assert MATRIX_GROUPS.keys() == {
        name for name, env in matrix.items() if env.flavour == "fleet" and env.fleet.backend == "auto-scaling"
    }


@pytest.fixture(scope="module", params=list(MATRIX_GROUPS))
def matrix_group(request, matrix) -> tuple[str, dict, list, dict, list]:
    """The entry's name, the group's properties, the ARNs its nodes may complete lifecycle actions of, every resource
    of the stack, and the acknowledgements (construct path, finding, reason) of the construct's cdk-nag findings."""
    environment = matrix[request.param]
    stack = bare_stack(environment.region)
    group = GpuAutoScalingGroup(
        stack,
        "NodeGroup",
        environment_name=environment.name,
        name_prefix=environment.auto_scaling_group_prefix,
        instance_type=environment.instance_type,
        target=environment.capacity.target,
        on_demand=environment.capacity.on_demand,
        fleet=environment.fleet,
        reservation=environment.capacity.reservation,
        capacity_block=environment.capacity.capacity_block,
        launch_template=add_launch_template(stack, environment),
        subnet_id=SUBNET,
        log_retention=logs.RetentionDays.ONE_MONTH,
    )
    template = Template.from_stack(stack)
    (group_resource,) = template.find_resources("AWS::AutoScaling::AutoScalingGroup").values()
    (policy,) = template.find_resources(
        "AWS::IAM::Policy",
        {"Properties": {"PolicyDocument": {"Statement": [{"Action": "autoscaling:CompleteLifecycleAction"}]}}},
    ).values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    # The group's own acknowledgements; its GroupCapacity's and BlockCapacity's are tests/stacks/constructs/
    # group_capacity/'s and block_capacity/'s.
    acknowledged = [
        (construct.node.path, *item)
        for construct in group.node.find_all()
        if not construct.node.path.startswith(("Probe/NodeGroup/Capacity", "Probe/NodeGroup/BlockCapacity"))
        for entry in construct.node.metadata
        if entry.type == "aws:cdk:acknowledged-rules"
        for item in entry.data.items()
    ]
    return (
        request.param,
        group_resource["Properties"],
        statement["Resource"],
        template.to_json()["Resources"],
        acknowledged,
    )


def test_every_auto_scaling_entry_of_the_matrix_writes_its_group(matrix_group):
    name, properties, *_ = matrix_group
    assert properties == MATRIX_GROUPS[name][0]


def test_the_nodes_of_every_auto_scaling_entry_complete_lifecycle_actions_of_their_group_only(matrix_group):
    name, _, resources, *_ = matrix_group
    assert resources == MATRIX_GROUPS[name][1]


def test_the_group_keeps_its_logical_id_and_outlives_the_nodes_permission(matrix_group):
    """The logical id follows the construct path (NodeGroup/Resource, the cluster stack's too): a new one makes
    CloudFormation create a new group and delete the old one with its nodes. The group depends on the policy, so
    CloudFormation deletes the group (whose terminating nodes complete their lifecycle actions) before the policy."""
    name, _, _, resources, _ = matrix_group
    group = resources["NodeGroupA8D4A5C5"]
    assert (group["Type"], group["DependsOn"]) == (
        "AWS::AutoScaling::AutoScalingGroup",
        ["NodeGroupCompleteLifecycleActionFE2A0165"],
    )


def test_only_the_nodes_of_the_environment_may_complete_lifecycle_actions(matrix_group):
    """One statement on the node role: the group ARNs by name (MATRIX_GROUPS) and the environment tag as condition."""
    name, _, _, resources, _ = matrix_group
    policy = resources["NodeGroupCompleteLifecycleActionFE2A0165"]
    assert policy == {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": "autoscaling:CompleteLifecycleAction",
                        "Condition": {"StringEquals": {"aws:ResourceTag/gpufleet:environment": name}},
                        "Effect": "Allow",
                        "Resource": MATRIX_GROUPS[name][1],
                    }
                ],
                "Version": "2012-10-17",
            },
            "PolicyName": "NodeGroupCompleteLifecycleActionFE2A0165",
            "Roles": [{"Ref": "NodeNodeRole8BD22AAE"}],
        },
    }


# The finding on each entry's group ARN (the group id is known only once the group exists), as cdk-nag names it.
MATRIX_ARN_FINDINGS = {
    "block-p5": "arn:<AWS::Partition>:autoscaling:us-east-2:123456789012:autoScalingGroup:*:"
    "autoScalingGroupName/gpufleet-block-p5-nodes",
    "asg-g5": "arn:<AWS::Partition>:autoscaling:us-east-1:123456789012:autoScalingGroup:*:"
    "autoScalingGroupName/gpufleet-asg-g5-nodes-ami-*",
}


def test_the_groups_cdk_nag_findings_are_acknowledged_with_their_reasons(matrix_group):
    """Synthesis of every environment fails on an unacknowledged finding; the reasons go into the template metadata
    for the audit trail. EC26 is acknowledged under the name cdk-nag gives a rule that could not evaluate."""
    name, _, _, _, acknowledged = matrix_group
    assert acknowledged == [
        (
            "Probe/NodeGroup/Resource",
            "Annotation::AwsSolutions-AS3",
            "gpufleet status reads the group's scaling activities (DescribeScalingActivities) and the node watcher "
            "sees terminations through instance metadata; an SNS topic per environment would add a resource nobody "
            "subscribes to",
        ),
        (
            "Probe/NodeGroup/Resource",
            "AwsSolutions::AwsSolutions-EC26",
            "the node launch template, the group's only source of volumes, encrypts the gp3 root volume "
            "(NodeLaunchTemplate; tests/stacks/test_cluster_stack.py checks it) and nodes attach no others",
        ),
        (
            "Probe/NodeGroup/CompleteLifecycleAction",
            f"Annotation::AwsSolutions-IAM5[Resource::{MATRIX_ARN_FINDINGS[name]}]",
            "the group id in an Auto Scaling group ARN is known only once the group exists; the name and the "
            f"condition aws:ResourceTag/gpufleet:environment={name} limit the nodes to completing lifecycle actions "
            "of their own environment's group",
        ),
    ]


# A week's Capacity Block for the block-p5 entry's two nodes.
BLOCK_START = dt.datetime(2027, 1, 11, 11, 30, tzinfo=dt.UTC)
BLOCK_END = dt.datetime(2027, 1, 18, 11, 30, tzinfo=dt.UTC)
GROUP_ID = "NodeGroupA8D4A5C5"
# What the group's update policy must be once scheduled actions change its sizes: a deploy leaves the sizes they set.
KEEP_SCHEDULED_SIZES = {"AutoScalingScheduledAction": {"IgnoreUnmodifiedGroupSizeProperties": True}}
BLOCK_CAPACITY_ID = "NodeGroupBlockCapacity5D2E1478"


def block_group_resources(matrix) -> dict:
    """block-p5's group with the week's block."""
    environment = matrix["block-p5"]
    block = environment.capacity.capacity_block.model_copy(update={"start": BLOCK_START, "end": BLOCK_END})
    stack = bare_stack(environment.region)
    GpuAutoScalingGroup(
        stack,
        "NodeGroup",
        environment_name=environment.name,
        name_prefix=environment.auto_scaling_group_prefix,
        instance_type=environment.instance_type,
        target=2,
        on_demand=2,
        fleet=environment.fleet,
        reservation=None,
        capacity_block=block,
        launch_template=add_launch_template(stack, environment),
        subnet_id=SUBNET,
        log_retention=logs.RetentionDays.ONE_MONTH,
    )
    return Template.from_stack(stack).to_json()["Resources"]


def test_a_block_group_holds_the_blocks_dates_and_no_scheduled_action(matrix):
    """The construct takes no time of synthesis: its template holds no scheduled action whose time synthesis fixed (a
    template made before the start and deployed after it held one AWS refuses), the block's dates in its
    BlockCapacity resource, whose handler schedules at deploy time, and the update policy that keeps what that sets."""
    resources = block_group_resources(matrix)
    assert not [r for r in resources.values() if r["Type"] == "AWS::AutoScaling::ScheduledAction"]
    assert {key: resources[BLOCK_CAPACITY_ID]["Properties"][key] for key in ("Target", "Start", "End")} == {
        "Target": 2,
        "Start": "2027-01-11T11:30:00Z",
        "End": "2027-01-18T11:30:00Z",
    }
    assert resources[GROUP_ID]["UpdatePolicy"] == KEEP_SCHEDULED_SIZES
    assert "MixedInstancesPolicy" not in resources[GROUP_ID]["Properties"]
    assert resources[GROUP_ID]["Properties"]["LaunchTemplate"] == LAUNCH_TEMPLATE


def test_only_the_block_group_has_a_block_capacity_and_the_policy_that_keeps_its_sizes(matrix_group):
    name, _, _, resources, _ = matrix_group
    in_block = name == "block-p5"
    assert resources[GROUP_ID].get("UpdatePolicy") == (KEEP_SCHEDULED_SIZES if in_block else None)
    blocks = [r for r in resources.values() if r["Type"] == "Custom::GpufleetBlockCapacity"]
    assert len(blocks) == (1 if in_block else 0)


# Per auto-scaling entry: the GroupCapacity resource (logical id, properties less the Provider's ServiceToken) that
# sets the group's desired capacity after CloudFormation has created it; a Capacity Block group has none, its
# BlockCapacity resource sizes it. The resource references the group, so CloudFormation creates or updates the group
# first.
MATRIX_CAPACITY = {
    "block-p5": {},
    "asg-g5": {
        "NodeGroupCapacityFB91B065": {
            "AutoScalingGroupName": {"Ref": GROUP_ID},
            "Target": 4,
            # replace-all: a new group's resource waits for its nodes before CloudFormation deletes the old group.
            "Rollout": "replace-all",
        }
    },
}


def test_a_group_without_a_block_gets_its_desired_capacity_from_its_capacity_resource(matrix_group):
    name, properties, _, resources, _ = matrix_group
    capacity = {
        logical_id: {key: value for key, value in r["Properties"].items() if key != "ServiceToken"}
        for logical_id, r in resources.items()
        if r["Type"] == "Custom::GpufleetGroupCapacity"
    }
    assert capacity == MATRIX_CAPACITY[name]
    # No group's template says how many nodes it wants: a custom resource sets it after CloudFormation made the group.
    assert "DesiredCapacity" not in properties
