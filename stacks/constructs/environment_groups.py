"""The environment's Auto Scaling groups in IAM: the ARNs they may have, a statement that lets a role act on them
alone, and cdk-nag's acknowledgement of the wildcard those ARNs need. Shared by the node role
(gpu_auto_scaling_group.py: CompleteLifecycleAction) and the handlers that size the group (group_capacity,
block_capacity)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpufleet.constants import ENVIRONMENT_TAG_KEY, ROLLOUT_REPLACE_ALL
from gpufleet.environment import Fleet


def group_arns(stack: cdk.Stack, prefix: str, fleet: Fleet) -> dict[str, str]:
    """The ARNs of the environment's groups, each with the form cdk-nag gives it in a finding. ARN of an Auto Scaling
    group: arn:${Partition}:autoscaling:${Region}:${Account}:autoScalingGroup:${GroupId}:autoScalingGroupName/
    ${GroupFriendlyName} (Service Authorization Reference, EC2 Auto Scaling; tests/stacks/test_iam_resources.py
    matches it against parliament's copy); the group id is known only once the group exists. Under replace-all two
    groups of the environment live for a moment (the name carries the image): the name prefix covers both."""
    names = [f"{prefix}-ami-*"] if fleet.image_rollout == ROLLOUT_REPLACE_ALL else [prefix]
    tail = f":autoscaling:{stack.region}:{stack.account}:autoScalingGroup:*:autoScalingGroupName/"
    return {f"arn:{stack.partition}{tail}{name}": f"Resource::arn:<AWS::Partition>{tail}{name}" for name in names}


def environment_groups_statement(
    actions: list[str], arns: dict[str, str], environment_name: str
) -> iam.PolicyStatement:
    """ACTIONS on the groups of ARNS (group_arns) that carry the environment's tag. Each action must act on the
    autoScalingGroup resource type and take aws:ResourceTag/${TagKey} (tests/stacks/test_iam_resources.py)."""
    return iam.PolicyStatement(
        actions=actions,
        resources=list(arns),
        conditions={"StringEquals": {f"aws:ResourceTag/{ENVIRONMENT_TAG_KEY}": environment_name}},
    )


def acknowledge_group_arns(scope: Construct, arns: dict[str, str], environment_name: str, *, limits: str) -> None:
    """cdk-nag's AwsSolutions-IAM5 on each of ARNS, acknowledged on SCOPE: the name and the tag condition of
    environment_groups_statement LIMIT (e.g. "the handler to the environment's own group")."""
    for finding in arns.values():
        cdk.Validations.of(scope).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM5[{finding}]",
                reason="the group id in an Auto Scaling group ARN is known only once the group exists; the name and "
                f"the condition aws:ResourceTag/{ENVIRONMENT_TAG_KEY}={environment_name} limit {limits}",
            )
        )
