"""Adds the stacks of one environment to an app: the network (when it creates a VPC), the storage (when it creates a
file system) and the cluster."""

from __future__ import annotations

import datetime as dt

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from gpufleet.catalog import load_catalog
from gpufleet.constants import BACKEND_AUTO_SCALING, BACKEND_SPOT_FLEET, ENVIRONMENT_TAG_KEY, FLAVOUR_EKS
from gpufleet.environment import Environment
from stacks.cluster_stack import ClusterStack
from stacks.constructs.shared_storage_access import SharedFileSystem
from stacks.eks_cluster_stack import EksClusterStack
from stacks.eks_gpu_nodes_stack import EksGpuNodesStack
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack

# Resource types whose Tags are create-only in their CloudFormation schema (cfn-lint's bundled copy): an edit of the
# environment's tags would replace them, and a replaced placement group takes every node with it. They carry only
# the environment tag, which never changes (tests/stacks/test_fleet_updates.py checks every resource's schema).
TAGS_CREATE_ONLY = ["AWS::EC2::PlacementGroup"]

# What keeps the nodes running, by fleet.backend, as the cluster stack's description says it.
NODE_GROUP_NAMES = {BACKEND_SPOT_FLEET: "Spot Fleet", BACKEND_AUTO_SCALING: "Auto Scaling group"}


def add_compliance_checks(app: cdk.App) -> None:
    """cdk-nag's AwsSolutions pack as a policy-validation plugin: synthesis fails on unacknowledged findings.
    Acknowledgements and their reasons are written into the templates' metadata for the audit trail."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, write_suppressions_to_cloud_formation=True))


def add_environment_stacks(app: cdk.App, environment: Environment, now: dt.datetime) -> list[cdk.Stack]:
    """now: the time of synthesis (an eks Capacity Block node group's desired size depends on it:
    gpufleet.block_schedule)."""
    aws_env = cdk.Environment(account=environment.account, region=environment.region)
    instance = load_catalog()[environment.instance_type]
    stacks: list[cdk.Stack] = []
    network_stack = None
    if environment.network.creates_vpc:
        network_stack = NetworkStack(
            app,
            f"{environment.stack_prefix}-network",
            environment=environment,
            env=aws_env,
            description=f"gpufleet {environment.name}: VPC, node subnet, VPC endpoints and flow logs",
        )
        stacks.append(network_stack)
    vpc = network_stack.vpc if network_stack else None
    node_subnet = network_stack.node_subnet if network_stack else None
    shared_file_system = None
    storage = environment.storage
    if storage is not None and storage.lustre is not None:
        storage_stack = StorageStack(
            app,
            f"{environment.stack_prefix}-storage",
            environment=environment,
            vpc=vpc,
            node_subnet=node_subnet,
            env=aws_env,
            description=f"gpufleet {environment.name}: shared FSx for Lustre file system"
            + (" and its S3 data repository" if storage.data_repository else "")
            + f" (storage.on_destroy {storage.on_destroy})",
        )
        stacks.append(storage_stack)
        shared_file_system = storage_stack.shared_file_system
    elif storage is not None and storage.existing is not None:
        existing = storage.existing
        shared_file_system = SharedFileSystem(
            file_system_id=existing.file_system_id,
            dns_name=existing.dns_name,
            mount_name=existing.mount_name,
            security_group_id=existing.security_group_id,
        )
    if environment.flavour == FLAVOUR_EKS:
        cluster_stack = EksClusterStack(
            app,
            f"{environment.stack_prefix}-eks",
            environment=environment,
            vpc=vpc,
            node_subnet=node_subnet,
            control_plane_subnets=network_stack.control_plane_subnets if network_stack else None,
            shared_file_system=shared_file_system,
            env=aws_env,
            description=f"gpufleet {environment.name}: EKS cluster, system nodes and add-ons (the GPU nodes are "
            f"{environment.stack_prefix}-gpu-nodes)",
        )
        stacks.append(cluster_stack)
        stacks.append(
            EksGpuNodesStack(
                app,
                f"{environment.stack_prefix}-gpu-nodes",
                environment=environment,
                instance=instance,
                now=now,
                cluster=cluster_stack.cluster,
                node_role=cluster_stack.node_role,
                node_subnets=cluster_stack.node_subnets,
                efa_security_group=cluster_stack.efa_security_group,
                before_nodes=cluster_stack.before_nodes,
                env=aws_env,
                description=f"gpufleet {environment.name}: {environment.capacity.target} x "
                f"{environment.instance_type} in EKS GPU managed node groups (EFA, placement group)",
            )
        )
        _tag(stacks, environment)
        return stacks
    cluster = ClusterStack(
        app,
        f"{environment.stack_prefix}-cluster",
        environment=environment,
        instance=instance,
        vpc=vpc,
        node_subnet=node_subnet,
        shared_file_system=shared_file_system,
        env=aws_env,
        description=f"gpufleet {environment.name}: {environment.capacity.target} x {environment.instance_type} "
        f"EFA cluster (placement group, launch template, {NODE_GROUP_NAMES[environment.fleet.backend]})",
    )
    stacks.append(cluster)
    _tag(stacks, environment)
    return stacks


def _tag(stacks: list[cdk.Stack], environment: Environment) -> None:
    # An Auto Scaling group keeps its tags to itself (PropagateAtLaunch false): the launch template tags the nodes.
    for stack in stacks:
        for key, value in environment.tags.items():
            cdk.Tags.of(stack).add(
                key, value, exclude_resource_types=TAGS_CREATE_ONLY, apply_to_launched_instances=False
            )
        cdk.Tags.of(stack).add(ENVIRONMENT_TAG_KEY, environment.name, apply_to_launched_instances=False)
