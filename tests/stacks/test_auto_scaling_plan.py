"""gpufleet plan on an auto-scaling environment: which edits of the group's template touch running nodes. Pairs of
templates come from the auto-scaling assembly (tests/stacks/conftest.py), edited the way a changed environment
would synthesize."""

from __future__ import annotations

import copy

import pytest

from gpufleet.ops.plan import StackPair, plan_changes

CLUSTER = "gpufleet-asgp5-cluster"
CAPACITY_TYPE = "Custom::GpufleetGroupCapacity"


@pytest.fixture
def templates(auto_scaling_assembly):
    old = auto_scaling_assembly.template_json(CLUSTER)
    return old, copy.deepcopy(old)


def group_change(old, new):
    changes = plan_changes([StackPair(CLUSTER, old, new)], "us-east-1")
    ((logical_id, _),) = [(k, r) for k, r in new["Resources"].items() if r["Type"].startswith("AWS::AutoScaling::")]
    return next(c for c in changes if c.logical_id == logical_id), changes


def group_properties(template):
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"]
    return resource["Properties"]


def test_a_new_image_under_replace_all_replaces_the_group_and_its_nodes(templates):
    old, new = templates
    group_properties(new)["AutoScalingGroupName"] = "gpufleet-asgp5-nodes-ami-0fedcba9876543210"
    change, _ = group_change(old, new)
    assert (change.action, change.replacing, change.node_impact) == (
        "replacement",
        ["AutoScalingGroupName"],
        "replaces running nodes",
    )
    assert change.affects_running_nodes


def capacity_and_group(old, new, target: int):
    """The plan's lines for the group capacity resource and the group when the environment's target becomes TARGET:
    the resource's Target and the group's MaxSize (as tests/stacks/constructs/ check them synthesized)."""
    ((capacity_id, capacity),) = [(k, r) for k, r in new["Resources"].items() if r["Type"] == CAPACITY_TYPE]
    capacity["Properties"]["Target"] = target
    group_properties(new)["MaxSize"] = str(target)
    changes = {c.logical_id: c for c in plan_changes([StackPair(CLUSTER, old, new)], "us-east-1")}
    group_id = next(k for k, r in new["Resources"].items() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup")
    return changes[capacity_id], changes[group_id]


def test_a_higher_target_launches_nodes_in_place(templates):
    capacity, group = capacity_and_group(*templates, 3)
    assert (capacity.action, capacity.node_impact) == (
        "in place",
        "in place: running nodes unaffected; launches nodes (desired capacity 2 -> 3)",
    )
    assert (group.properties, group.node_impact) == (["MaxSize"], "in place: running nodes unaffected")
    assert not (capacity.affects_running_nodes or group.affects_running_nodes)


def test_a_lower_target_terminates_nodes(templates):
    """The group's lower maximum takes its desired capacity down with it (CloudFormation updates the group first),
    and the resource sets it to the target."""
    capacity, group = capacity_and_group(*templates, 1)
    assert capacity.node_impact == "terminates nodes (desired capacity 2 -> 1)" and capacity.affects_running_nodes
    assert group.node_impact == "terminates nodes above the new maximum (maximum size 2 -> 1)"


def test_a_new_on_demand_base_replaces_nodes_gradually(templates):
    old, new = templates
    group_properties(new)["MixedInstancesPolicy"]["InstancesDistribution"]["OnDemandBaseCapacity"] = 1
    change, _ = group_change(old, new)
    assert change.node_impact == ("replaces running nodes (on-demand base and share (2, 0) -> (1, 0), new nodes first)")


def test_a_launch_template_change_is_a_new_version_and_the_group_takes_it_in_place(templates):
    old, new = templates
    (template,) = [r for r in new["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    template["Properties"]["LaunchTemplateData"]["UserData"] = "changed"
    change, changes = group_change(old, new)
    assert (change.action, change.node_impact) == ("in place", "in place: running nodes unaffected")
    launch_template = next(c for c in changes if c.resource_type == "AWS::EC2::LaunchTemplate")
    assert launch_template.node_impact == "in place: new launch template version, new nodes only"
    assert not [c for c in changes if c.affects_running_nodes]


def test_a_replaced_placement_group_strands_the_groups_nodes(templates):
    old, new = templates
    (group,) = [r for r in new["Resources"].values() if r["Type"] == "AWS::EC2::PlacementGroup"]
    group["Properties"]["Strategy"] = "spread"
    _, changes = group_change(old, new)
    placement = next(c for c in changes if c.resource_type == "AWS::EC2::PlacementGroup")
    assert (placement.action, placement.node_impact) == ("replacement", "terminates nodes")


# The node image parameter (ami.ssm_parameter) as CDK names it in the cluster stack.
IMAGE_PARAMETER = "NodeLaunchTemplateNodeImageParameter4F083533"


def image_changes(template: dict, stack: str) -> list[str]:
    """The plan of a deploy whose template is unchanged but whose image parameter resolves to a new image."""
    pair = StackPair(stack, template, copy.deepcopy(template), frozenset({IMAGE_PARAMETER}))
    return [change.line() for change in plan_changes([pair], "us-east-1") if change.node_impact != "no effect on nodes"]


def test_a_new_image_from_ssm_under_replace_all_replaces_the_group(matrix_assembly):
    """asg-g5 (rollout replace-all): the group's create-only name carries the resolved image."""
    stack = "gpufleet-asg-g5-cluster"
    assert image_changes(matrix_assembly.template_json(stack), stack) == [
        f"{stack} NodeGroupA8D4A5C5 [AWS::AutoScaling::AutoScalingGroup] replacement (AutoScalingGroupName): "
        "replaces running nodes",
        f"{stack} NodeGroupCapacityFB91B065 [Custom::GpufleetGroupCapacity] in place (AutoScalingGroupName): in place: "
        "running nodes unaffected; launches nodes in the new group (desired capacity 4); the deploy waits until they "
        "are InService",
        f"{stack} NodeLaunchTemplateCABE86F2 [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.ImageId): "
        "in place: new launch template version, new nodes only",
    ]


def test_a_new_image_from_ssm_under_manual_is_a_new_launch_template_version_for_new_nodes(auto_scaling_assembly):
    stack = "gpufleet-asg-cluster"
    assert image_changes(auto_scaling_assembly.template_json(stack), stack) == [
        f"{stack} NodeGroupA8D4A5C5 [AWS::AutoScaling::AutoScalingGroup] in place "
        "(MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification.Version): in place: running nodes unaffected",
        f"{stack} NodeLaunchTemplateCABE86F2 [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.ImageId): "
        "in place: new launch template version, new nodes only",
    ]


# The shipped Capacity Block environment: its BlockCapacity resource gives the group 2 nodes from the block's start
# (2027-01-11 11:30 UTC) until its scale-in, 50 minutes before its end (2027-01-18 10:40 UTC), as the deploy's time
# finds them.
BLOCK_CLUSTER = "gpufleet-p5-block-cluster"
BLOCK_CAPACITY = "NodeGroupBlockCapacity5D2E1478"
WINDOW = "2 node(s) from 2027-01-11 11:30 UTC until 2027-01-18 10:40 UTC"


def block_capacity_change(assembly, **after):
    """The plan's change of p5-block's BlockCapacity resource whose properties are updated with AFTER."""
    old = assembly.template_json(BLOCK_CLUSTER)
    new = copy.deepcopy(old)
    new["Resources"][BLOCK_CAPACITY]["Properties"].update(after)
    changes = plan_changes([StackPair(BLOCK_CLUSTER, old, new)], "us-east-2")
    (change,) = [c for c in changes if c.logical_id == BLOCK_CAPACITY]
    return change


@pytest.mark.parametrize(
    ("after", "impact"),
    [
        pytest.param(
            {"Target": 1},
            f"terminates nodes ({WINDOW} -> 1 node(s) from 2027-01-11 11:30 UTC until 2027-01-18 10:40 UTC)",
            id="fewer-nodes",
        ),
        pytest.param(
            {"Start": "2027-01-12T11:30:00Z"},
            f"terminates nodes ({WINDOW} -> 2 node(s) from 2027-01-12 11:30 UTC until 2027-01-18 10:40 UTC)",
            id="later-start",
        ),
        pytest.param(
            {"End": "2027-01-18T09:30:00Z"},
            f"terminates nodes ({WINDOW} -> 2 node(s) from 2027-01-11 11:30 UTC until 2027-01-18 08:40 UTC)",
            id="earlier-end",
        ),
        pytest.param(
            {"Target": 4},
            f"in place: running nodes unaffected; launches nodes ({WINDOW} -> 4 node(s) from 2027-01-11 11:30 UTC "
            "until 2027-01-18 10:40 UTC)",
            id="more-nodes",
        ),
        pytest.param(
            {"Start": "2027-01-10T11:30:00Z", "End": "2027-01-25T11:30:00Z"},
            f"in place: running nodes unaffected; launches nodes ({WINDOW} -> 2 node(s) from 2027-01-10 11:30 UTC "
            "until 2027-01-25 10:40 UTC)",
            id="wider-window",
        ),
        pytest.param({"Target": "2"}, "in place: running nodes unaffected", id="same-window-as-text"),
    ],
)
def test_a_changed_block_says_which_nodes_it_takes_or_adds(assembly, after, impact):
    change = block_capacity_change(assembly, **after)
    assert change.node_impact == impact
    assert change.affects_running_nodes == impact.startswith("terminates")


def test_a_new_block_capacity_says_when_the_nodes_come(assembly):
    """An environment that gets a block, or a group deployed with the scheduled actions of gpufleet before the
    BlockCapacity resource: the resource is added."""
    old = assembly.template_json(BLOCK_CLUSTER)
    new = copy.deepcopy(old)
    del old["Resources"][BLOCK_CAPACITY]
    (change,) = [
        c for c in plan_changes([StackPair(BLOCK_CLUSTER, old, new)], "us-east-2") if c.logical_id == BLOCK_CAPACITY
    ]
    assert change.line() == (
        f"{BLOCK_CLUSTER} {BLOCK_CAPACITY} [Custom::GpufleetBlockCapacity] added: running nodes unaffected; launches "
        f"{WINDOW} (at once inside that window)"
    )


def test_a_lower_group_maximum_terminates_the_nodes_above_it(assembly):
    """UpdateAutoScalingGroup: a new MaxSize below the group's size lowers its desired capacity to it; the maximum
    also bounds what the block's schedule gets."""
    old = assembly.template_json(BLOCK_CLUSTER)
    new = copy.deepcopy(old)
    new["Resources"]["NodeGroupA8D4A5C5"]["Properties"]["MaxSize"] = "1"
    (change,) = [
        c
        for c in plan_changes([StackPair(BLOCK_CLUSTER, old, new)], "us-east-2")
        if c.logical_id == "NodeGroupA8D4A5C5"
    ]
    assert (change.node_impact, change.affects_running_nodes) == (
        "terminates nodes above the new maximum (maximum size 2 -> 1)",
        True,
    )


def test_upgrading_a_deployed_group_to_the_capacity_resource_leaves_its_nodes(templates):
    """A group deployed with DesiredCapacity in its template (gpufleet before the GroupCapacity resource): the deploy
    drops the property, which leaves the group's desired capacity as it is, and creates the resource, which sets it to
    the target it already has."""
    old, new = templates
    for logical_id in [k for k in old["Resources"] if k.startswith("NodeGroupCapacity")]:
        del old["Resources"][logical_id]
    group_properties(old)["DesiredCapacity"] = "2"
    lines = [
        c.line()
        for c in plan_changes([StackPair(CLUSTER, old, new)], "us-east-1")
        if c.resource_type in ("AWS::AutoScaling::AutoScalingGroup", CAPACITY_TYPE)
    ]
    assert lines == [
        f"{CLUSTER} NodeGroupA8D4A5C5 [AWS::AutoScaling::AutoScalingGroup] in place (DesiredCapacity): in place: "
        "running nodes unaffected",
        f"{CLUSTER} NodeGroupCapacityFB91B065 [Custom::GpufleetGroupCapacity] added: running nodes unaffected; "
        "launches nodes up to desired capacity 2",
    ]
