"""gpufleet plan on the eks flavour's stack: what a change to an EKS managed node group or its launch template does
to running nodes (a rolling update replaces them; a new desired size launches or terminates some; labels do
nothing to them)."""

from __future__ import annotations

import copy

from gpufleet.ops.plan import StackPair, plan_changes

# The eks flavour's GPU node groups and their launch templates (stacks/eks_gpu_nodes_stack.py).
STACK = "gpufleet-lab-gpu-nodes"
REGION = "us-east-1"


def eks_template() -> dict:
    """A GPU node group and its launch template as stacks/eks_gpu_nodes_stack.py writes them, and the cluster (in
    stacks/eks_cluster_stack.py's stack, here in the same template to show what replacing it does)."""
    return {
        "Resources": {
            "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"RoleArn": "arn:aws:iam::1:role/c"}},
            "LaunchTemplate": {
                "Type": "AWS::EC2::LaunchTemplate",
                "Properties": {"LaunchTemplateData": {"InstanceType": "p5.48xlarge", "EbsOptimized": True}},
            },
            "GpuNodes": {
                "Type": "AWS::EKS::Nodegroup",
                "Properties": {
                    "AmiType": "AL2023_x86_64_NVIDIA",
                    "CapacityType": "ON_DEMAND",
                    "ClusterName": {"Ref": "Cluster"},
                    "LaunchTemplate": {
                        "Id": {"Ref": "LaunchTemplate"},
                        "Version": {"Fn::GetAtt": ["LaunchTemplate", "LatestVersionNumber"]},
                    },
                    "Labels": {"nvidia.com/gpu.present": "true"},
                    "NodeRole": "arn:aws:iam::1:role/n",
                    "ScalingConfig": {"DesiredSize": 2, "MaxSize": 2, "MinSize": 2},
                    "Subnets": ["subnet-0123456789abcdef0"],
                },
            },
        }
    }


def impacts(edit) -> dict[str, tuple[str, str]]:
    old = eks_template()
    new = copy.deepcopy(old)
    edit(new["Resources"])
    return {c.logical_id: (c.action, c.node_impact) for c in plan_changes([StackPair(STACK, old, new)], REGION)}


def test_a_launch_template_change_rolls_every_node_of_the_group() -> None:
    """Unlike an Auto Scaling group (new version, new nodes only), a managed node group rolls the new version out."""

    def edit(resources: dict) -> None:
        resources["LaunchTemplate"]["Properties"]["LaunchTemplateData"]["EbsOptimized"] = False

    assert impacts(edit) == {
        "LaunchTemplate": ("in place", "in place: new launch template version, new nodes only"),
        "GpuNodes": (
            "in place",
            "replaces running nodes (managed node group rolling update for LaunchTemplate: new nodes first, each old "
            "node drained of its pods)",
        ),
    }


def test_a_smaller_desired_size_terminates_nodes() -> None:
    def edit(resources: dict) -> None:
        resources["GpuNodes"]["Properties"]["ScalingConfig"].update(DesiredSize=1, MinSize=1, MaxSize=1)

    assert impacts(edit) == {"GpuNodes": ("in place", "terminates nodes (desired size 2 -> 1)")}


def test_a_larger_desired_size_launches_nodes() -> None:
    def edit(resources: dict) -> None:
        resources["GpuNodes"]["Properties"]["ScalingConfig"].update(DesiredSize=3, MaxSize=3)

    assert impacts(edit) == {
        "GpuNodes": (
            "in place",
            "in place: running nodes unaffected; launches nodes (desired size 2 -> 3); short of EC2 capacity, EKS "
            "fails the group and CloudFormation rolls back the deploy of gpufleet-lab-gpu-nodes",
        )
    }


def test_a_new_gpu_node_group_says_what_a_shortage_of_capacity_does() -> None:
    """aws/containers-roadmap#2204: EKS fails a group's create for want of capacity; the stack's deploy rolls back."""

    def edit(resources: dict) -> None:
        resources["SpotGpuNodes"] = copy.deepcopy(resources["GpuNodes"])
        resources["SpotGpuNodes"]["Properties"]["CapacityType"] = "SPOT"

    assert impacts(edit) == {
        "SpotGpuNodes": (
            "added",
            "launches nodes; short of EC2 capacity, EKS fails the group and CloudFormation rolls back the deploy "
            "of gpufleet-lab-gpu-nodes",
        )
    }


def test_a_label_change_leaves_the_nodes_running() -> None:
    def edit(resources: dict) -> None:
        resources["GpuNodes"]["Properties"]["Labels"]["team"] = "research"

    assert impacts(edit) == {"GpuNodes": ("in place", "in place: running nodes unaffected")}


def test_a_new_capacity_type_replaces_the_group() -> None:
    """CapacityType is create-only (cfn-lint's AWS::EKS::Nodegroup schema): a new group, new nodes."""

    def edit(resources: dict) -> None:
        resources["GpuNodes"]["Properties"]["CapacityType"] = "SPOT"

    assert impacts(edit) == {"GpuNodes": ("replacement", "replaces running nodes")}


def test_a_replaced_cluster_replaces_its_node_groups() -> None:
    def edit(resources: dict) -> None:
        resources["Cluster"]["Properties"]["RoleArn"] = "arn:aws:iam::1:role/other"

    changes = impacts(edit)
    assert changes["GpuNodes"] == ("replacement", "replaces running nodes")
    assert changes["Cluster"][0] == "replacement"
