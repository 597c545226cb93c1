"""The GPU nodes of an environment with flavour: eks, in a stack of their own: one GPU managed node group per capacity
type (on-demand and spot, or a Capacity Block), each from its own launch template
(stacks/constructs/eks_node_launch_template.py) with EFA interfaces in the environment's placement group (a Capacity
Block's: placed by EC2).

Why a stack of their own: EKS fails a managed node group's create when EC2 has no capacity for it
("InsufficientInstanceCapacity ... CREATE_FAILED", aws/containers-roadmap#2204), and CloudFormation rolls back the
whole stack whose resource failed; in the cluster's stack that was the cluster, its add-ons and the network's use with
it. eksctl makes one stack per node group for that reason (eksctl-io/eksctl#4406: "To prevent rollback of the CF and
the other parts of the stack"). Here a create short of capacity rolls back this stack alone: the cluster, its system
nodes and add-ons stay, and `cdk deploy` tries the GPU nodes again (docs/guides/eks.md, "When EC2 is short of
capacity").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from gpufleet.block_schedule import eks_block_desired_size
from gpufleet.catalog import InstanceType
from gpufleet.constants import (
    AVAILABILITY_ZONE_OUTPUT_KEY,
    EKS_EFA_NODE_LABEL,
    EKS_GPU_NODE_HUGEPAGES_MIB,
    EKS_GPU_NODE_LABEL,
    EKS_GPU_NODE_TAINT_KEY,
    EKS_GPU_NODE_TAINT_VALUE,
)
from gpufleet.environment import Environment
from stacks.constructs.eks_add_ons import declare_node_calls
from stacks.constructs.eks_node_launch_template import EksNodeLaunchTemplate

# What marks and keeps the GPU nodes, as the lab does (terraform-aws-eks-blueprints patterns/nvidia-gpu-efa/eks.tf):
# the NVIDIA device plugin's chart runs on nodes labelled nvidia.com/gpu.present, the EFA plugin is to select
# vpc.amazonaws.com/efa.present (set only where the nodes have EFA), and only pods that tolerate nvidia.com/gpu land on
# them.
GPU_NODE_LABEL = {EKS_GPU_NODE_LABEL: "true"}
EFA_NODE_LABEL = {EKS_EFA_NODE_LABEL: "true"}
GPU_NODE_TAINT = eks.TaintSpec(
    effect=eks.TaintEffect.NO_SCHEDULE, key=EKS_GPU_NODE_TAINT_KEY, value=EKS_GPU_NODE_TAINT_VALUE
)


@dataclass(frozen=True)
class GpuNodeGroup:
    """A GPU managed node group: its construct name, capacity type, size (its maximum) and the desired and minimum
    sizes it is synthesized with."""

    name: str
    capacity_type: eks.CapacityType
    size: int
    desired_size: int
    min_size: int


class EksGpuNodesStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        instance: InstanceType,
        now: dt.datetime,
        cluster: eks.Cluster,
        node_role: iam.IRole,
        node_subnets: ec2.SubnetSelection,
        efa_security_group: ec2.ISecurityGroup,
        before_nodes: Sequence[IConstruct],
        **kwargs,
    ) -> None:
        """now: the time of synthesis (a Capacity Block group's desired size depends on it). cluster, node_role,
        node_subnets, efa_security_group: the cluster stack's (stacks/eks_cluster_stack.py); before_nodes: what every
        node group waits for there (its PodIdentityAddOns)."""
        super().__init__(scope, construct_id, **kwargs)
        placement_group = ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
        node_tags = {**environment.resource_tags, "Name": f"{environment.stack_prefix}-node"}
        assert environment.eks is not None, "the environment's validation: the eks flavour has an eks section"
        add_ons = environment.eks.add_ons
        capacity = environment.capacity
        block = capacity.capacity_block
        for group in self._gpu_node_groups(environment, now):
            launch_template = EksNodeLaunchTemplate(
                self,
                f"{group.name}LaunchTemplate",
                instance=instance,
                efa=environment.efa,
                raid0_nvme=environment.node.raid0_nvme,
                root_volume_gib=environment.root_volume_gib,
                key_pair=environment.key_pair,
                security_group_ids=[efa_security_group.security_group_id, cluster.cluster_security_group_id],
                # A Capacity Block's instances are placed close together by EC2 (as on the fleet flavour:
                # stacks/constructs/node_launch_template.py).
                placement_group=None if block is not None else placement_group,
                reservation=capacity.reservation if group.capacity_type == eks.CapacityType.ON_DEMAND else None,
                capacity_block_id=block.reservation_id if block is not None else None,
                hugepages_mib=EKS_GPU_NODE_HUGEPAGES_MIB if environment.efa else 0,
                node_tags=node_tags,
            ).launch_template
            gpu_nodes = eks.Nodegroup(
                self,
                f"{group.name}GpuNodes",
                # jsii's Python types do not say that a Cluster is an ICluster.
                cluster=cast(eks.ICluster, cluster),
                ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
                capacity_type=group.capacity_type,
                launch_template_spec=eks.LaunchTemplateSpec(
                    id=launch_template.ref, version=launch_template.attr_latest_version_number
                ),
                min_size=group.min_size,
                max_size=group.size,
                desired_size=group.desired_size,
                subnets=node_subnets,
                labels={**GPU_NODE_LABEL, **(EFA_NODE_LABEL if environment.efa else {})},
                taints=[GPU_NODE_TAINT],
                node_role=node_role,
            )
            gpu_nodes.node.add_dependency(*before_nodes)
            declare_node_calls(
                gpu_nodes,
                gpu=True,
                nvidia_device_plugin=add_ons.nvidia_device_plugin,
                mpi_operator=add_ons.mpi_operator,
                # The CSI driver runs where there is a file system to mount (stacks/eks_cluster_stack.py).
                fsx_csi_driver=add_ons.fsx_csi_driver and environment.storage is not None,
            )
        # Where the GPU nodes are, as the fleet flavour's cluster stack says it (gpufleet summary reads it).
        cdk.CfnOutput(self, AVAILABILITY_ZONE_OUTPUT_KEY, value=environment.availability_zone)

    @staticmethod
    def _gpu_node_groups(environment: Environment, now: dt.datetime) -> list[GpuNodeGroup]:
        """One GPU node group per capacity type: on-demand and spot, or the Capacity Block. A block's group is named
        after its reservation, so a new block makes a new group: EKS scales a block's group to the desired size it
        had "at create time" once the block is active, and scales it in to zero itself 40 minutes before the end
        (gpufleet.block_schedule). Its minimum is 0, where EKS's scale-in puts it."""
        capacity = environment.capacity
        block = capacity.capacity_block
        if block is not None:
            desired = eks_block_desired_size(end=block.end, target=capacity.target, now=now)
            name = "CapacityBlock" + block.reservation_id.removeprefix("cr-")
            return [GpuNodeGroup(name, eks.CapacityType.CAPACITY_BLOCK, capacity.target, desired, 0)]
        groups = [
            GpuNodeGroup(
                "OnDemand", eks.CapacityType.ON_DEMAND, capacity.on_demand, capacity.on_demand, capacity.on_demand
            ),
            GpuNodeGroup("Spot", eks.CapacityType.SPOT, capacity.spot, capacity.spot, capacity.spot),
        ]
        return [group for group in groups if group.size > 0]
