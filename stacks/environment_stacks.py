"""Adds the stacks of one environment to an app: the network (when it creates a VPC) and the cluster."""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from gpufleet.catalog import load_catalog
from gpufleet.environment import ENVIRONMENT_TAG_KEY, Environment
from stacks.cluster_stack import ClusterStack
from stacks.network_stack import NetworkStack

# Resource types whose Tags are create-only in their CloudFormation schema (cfn-lint's bundled copy): an edit of the
# environment's tags would replace them, and a replaced placement group takes every node with it. They carry only
# the environment tag, which never changes (tests/stacks/test_fleet_updates.py checks every resource's schema).
TAGS_CREATE_ONLY = ["AWS::EC2::PlacementGroup"]


def add_compliance_checks(app: cdk.App) -> None:
    """cdk-nag's AwsSolutions pack as a policy-validation plugin: synthesis fails on unacknowledged findings.
    Acknowledgements and their reasons are written into the templates' metadata for the audit trail."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, write_suppressions_to_cloud_formation=True))


def add_environment_stacks(app: cdk.App, environment: Environment) -> list[cdk.Stack]:
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
    cluster = ClusterStack(
        app,
        f"{environment.stack_prefix}-cluster",
        environment=environment,
        instance=instance,
        vpc=network_stack.vpc if network_stack else None,
        node_subnet=network_stack.node_subnet if network_stack else None,
        env=aws_env,
        description=f"gpufleet {environment.name}: {environment.capacity.target} x {environment.instance_type} "
        "EFA cluster (placement group, launch template, Spot Fleet)",
    )
    stacks.append(cluster)
    for stack in stacks:
        for key, value in environment.tags.items():
            cdk.Tags.of(stack).add(key, value, exclude_resource_types=TAGS_CREATE_ONLY)
        cdk.Tags.of(stack).add(ENVIRONMENT_TAG_KEY, environment.name)
    return stacks
