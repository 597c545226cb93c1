"""node_group on its own, for every entry of the environment matrix: the backend's node group, the fleet teardown only
with a Spot Fleet, and the resources the nodes sit in deleted only after the node group (or its teardown)."""

from __future__ import annotations

import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from stacks.constructs.node_group import node_group
from tests.stacks.constructs.conftest import bare_stack, environment
from tests.stacks.constructs.test_node_launch_template import add_launch_template
from tests.stacks.matrix import FLEET_ENTRIES


@pytest.fixture(scope="module", params=FLEET_ENTRIES)
def matrix_node_group(request, matrix):
    environment = matrix[request.param]
    stack = bare_stack(environment.region)
    launch_template = add_launch_template(stack, environment)
    placement_group = ec2.CfnPlacementGroup(stack, "Cluster", strategy="cluster")
    nodes = add_node_group(stack, environment, launch_template, guarded=[placement_group])
    resource_id = stack.resolve(stack.get_logical_id(nodes.resource))
    return request.param, nodes, stack.resolve(nodes.id), Template.from_stack(stack).to_json()["Resources"], resource_id


def add_node_group(stack, environment, launch_template, guarded):
    return node_group(
        stack,
        environment_name=environment.name,
        instance_type=environment.instance_type,
        capacity=environment.capacity,
        fleet=environment.fleet,
        group_name_prefix=environment.auto_scaling_group_prefix,
        launch_template=launch_template,
        subnet_id="subnet-0123456789abcdef0",
        checkpoint_hook=bool(environment.node.checkpoint_hook),
        guarded=guarded,
    )


# The logical ids are the cluster stack's too (the same construct path): a new one would make CloudFormation replace
# the fleet or group, and with it every node.
SPOT_FLEET = ("spot-fleet", "FleetRequestId", {"Ref": "Fleet30813DF3"})
AUTO_SCALING = ("auto-scaling", "AutoScalingGroupName", {"Ref": "NodeGroupA8D4A5C5"})
# Per entry: the backend, the stack output that names the node group, and the group's id.
MATRIX_NODE_GROUPS = {
    "spot-p4d": SPOT_FLEET,
    "request-p4de": SPOT_FLEET,
    "block-p5": AUTO_SCALING,
    "asg-g5": AUTO_SCALING,
    "small-g5": SPOT_FLEET,
}


def test_every_matrix_entry_gets_the_node_group_of_its_backend(matrix_node_group):
    name, nodes, node_group_id, *_ = matrix_node_group
    assert (nodes.kind, nodes.output_key, node_group_id) == MATRIX_NODE_GROUPS[name]


def of_type(resources: dict, resource_type: str) -> dict:
    return {logical_id: r for logical_id, r in resources.items() if r["Type"] == resource_type}


def test_a_spot_fleet_comes_with_its_teardown_and_an_auto_scaling_group_alone(matrix_node_group):
    name, nodes, _, resources, _ = matrix_node_group
    counts = tuple(
        len(of_type(resources, resource_type))
        for resource_type in (
            "AWS::EC2::SpotFleet",
            "Custom::GpufleetFleetTeardown",
            "AWS::AutoScaling::AutoScalingGroup",
        )
    )
    assert counts == {"spot-fleet": (1, 1, 0), "auto-scaling": (0, 0, 1)}[MATRIX_NODE_GROUPS[name][0]]


def test_the_placement_group_outlives_the_nodes(matrix_node_group):
    """CloudFormation deletes a resource before those it depends on: the teardown (which waits for the Spot Fleet's
    nodes) or the Auto Scaling group (whose deletion terminates its nodes) goes before the placement group."""
    name, _, _, resources, _ = matrix_node_group
    (deleted_first,) = (
        of_type(resources, "Custom::GpufleetFleetTeardown") or of_type(resources, "AWS::AutoScaling::AutoScalingGroup")
    ).values()
    assert "Cluster" in deleted_first["DependsOn"]


def test_the_teardown_keeps_its_logical_id(matrix_node_group):
    """CloudFormation takes a custom resource under a new logical id for a new one: it creates the new one and deletes
    the old, and the old one's Delete cancels the fleet and terminates every node. The id follows the construct path
    (FleetTeardown/Resource, in the cluster stack as here), so renaming either part would end a running cluster."""
    name, _, _, resources, _ = matrix_node_group
    expected = {"spot-fleet": ["FleetTeardown6AA62985"], "auto-scaling": []}[MATRIX_NODE_GROUPS[name][0]]
    assert list(of_type(resources, "Custom::GpufleetFleetTeardown")) == expected


# Per entry: the logs of the node group's Lambda functions (the Spot Fleet's teardown, the capacity of a group without
# a Capacity Block, the schedule of a group with one) and their retention in days.
MATRIX_LOGS = {
    "spot-p4d": {"FleetTeardownHandlerLogs05B66F5D": 30, "FleetTeardownProviderLogsA8D0D14B": 30},
    "request-p4de": {"FleetTeardownHandlerLogs05B66F5D": 30, "FleetTeardownProviderLogsA8D0D14B": 30},
    "block-p5": {"NodeGroupBlockCapacityHandlerLogs143A0798": 30, "NodeGroupBlockCapacityProviderLogs57DC6415": 30},
    "asg-g5": {"NodeGroupCapacityHandlerLogsC043B692": 30, "NodeGroupCapacityProviderLogsD414886E": 30},
    "small-g5": {"FleetTeardownHandlerLogs05B66F5D": 30, "FleetTeardownProviderLogsA8D0D14B": 30},
}


def test_the_node_groups_lambda_logs_are_kept_a_month(matrix_node_group):
    name, _, _, resources, _ = matrix_node_group
    retention = {
        logical_id: r["Properties"]["RetentionInDays"]
        for logical_id, r in of_type(resources, "AWS::Logs::LogGroup").items()
    }
    assert retention == MATRIX_LOGS[name]


def test_the_node_group_resource_is_the_fleet_or_group_that_keeps_the_nodes(matrix_node_group):
    """NodeGroup.resource: the Spot Fleet or Auto Scaling group itself, under the logical id its Ref names."""
    name, nodes, _, resources, resource_id = matrix_node_group
    expected = {
        "spot-fleet": ("Fleet30813DF3", "AWS::EC2::SpotFleet"),
        "auto-scaling": ("NodeGroupA8D4A5C5", "AWS::AutoScaling::AutoScalingGroup"),
    }[MATRIX_NODE_GROUPS[name][0]]
    assert (resource_id, resources[resource_id]["Type"]) == expected


def test_the_teardown_may_terminate_only_nodes_of_its_environment(matrix_node_group):
    """The teardown's TerminateInstances is conditioned on the environment tag the nodes carry (gpufleet:environment
    = the environment's name), so it cannot reach another environment's nodes."""
    name, _, _, resources, _ = matrix_node_group
    conditions = [
        statement["Condition"]
        for policy in of_type(resources, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "ec2:TerminateInstances"
    ]
    expected = {
        "spot-fleet": [{"StringEquals": {"aws:ResourceTag/gpufleet:environment": name}}],
        "auto-scaling": [],
    }[MATRIX_NODE_GROUPS[name][0]]
    assert conditions == expected


def test_a_spot_fleets_teardown_runs_the_checkpoint_hook_first_only_when_the_nodes_have_one(matrix_node_group):
    name, _, _, resources, _ = matrix_node_group
    commands = [
        function["Properties"].get("Environment", {}).get("Variables", {}).get("CHECKPOINT_COMMAND")
        for function in of_type(resources, "AWS::Lambda::Function").values()
        if function["Properties"]["Description"] == "Cancels the gpufleet Spot Fleet and terminates its nodes"
    ]
    # spot-p4d names /usr/local/bin/save-checkpoint; the other Spot Fleet entries name no hook; a group's
    # termination lifecycle hook has the nodes run theirs (gpu_auto_scaling_group.py), with no teardown.
    expected = {"spot-p4d": True, "request-p4de": False, "small-g5": False}.get(name)
    assert [command is not None for command in commands] == ([] if expected is None else [expected])


# What a Spot Fleet entry's request is tagged with beyond its environment (test_gpu_spot_fleet.py
# has the whole request): under replace-all the image the launch template resolves, here its SSM parameter.
MATRIX_IMAGE_TAGS = {
    "spot-p4d": [{"Key": "gpufleet:image", "Value": {"Ref": "NodeNodeImageParameter5454208B"}}],
    "request-p4de": [],
    "small-g5": [],
}


def test_a_replace_all_fleet_is_tagged_with_the_image_of_the_launch_template(matrix_node_group):
    name, _, _, resources, _ = matrix_node_group
    tags = [
        tag
        for fleet in of_type(resources, "AWS::EC2::SpotFleet").values()
        for specification in fleet["Properties"]["SpotFleetRequestConfigData"]["TagSpecifications"]
        for tag in specification["Tags"]
        if tag["Key"] == "gpufleet:image"
    ]
    assert tags == MATRIX_IMAGE_TAGS.get(name, [])


def test_an_environment_with_a_backend_its_parsing_never_allows_fails_naming_it():
    """Environment parsing allows spot-fleet and auto-scaling only; an Environment built around it (model_copy skips
    validation) must not quietly get a Spot Fleet."""
    probe = environment()
    unknown = probe.model_copy(update={"fleet": probe.fleet.model_copy(update={"backend": "karpenter"})})
    stack = bare_stack()
    launch_template = add_launch_template(stack, unknown)
    with pytest.raises(AssertionError) as raised:
        add_node_group(stack, unknown, launch_template, guarded=[])
    assert str(raised.value) == "fleet.backend karpenter: the environment's parsing allows no other"
