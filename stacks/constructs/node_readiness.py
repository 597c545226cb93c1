"""The node role's one write to EC2: its readiness tag (scripts/node/node-ready.sh tags its own instance
gpufleet:readiness at every boot; `gpufleet hosts` lists the nodes tagged ready).

What the statement allows, condition by condition (condition keys of ec2:CreateTags on the instance resource type in
the Service Authorization Reference, as parliament 1.6.4 bundles it: aws:ResourceTag/${TagKey}, aws:TagKeys):
- aws:ResourceTag/gpufleet:environment: only instances of this environment;
- ForAllValues:StringEquals aws:TagKeys: only the readiness key, so a node cannot change the environment tag, which
  every other permission of the environment (Run Command, termination, the lifecycle hook) is scoped by;
- Null ec2:SourceInstanceARN false: only requests made from an EC2 instance with its instance profile's credentials
  ("This key is present only when the request comes from an Amazon EC2 instance using an IAM role associated with an
  EC2 instance profile", IAM user guide, reference_policies_variables.md), so the role's credentials copied off a
  node cannot set it.

"Its own instance only" is not among what IAM documents: ec2:SourceInstanceARN names the caller, and no documented
condition key holds the ARN of the instance being tagged to compare it with (the policy variable may appear in a
Resource element only after the ARN's fifth colon, reference_policies_variables.md, while the variable is a whole
ARN). Public policies use the undocumented key aws:ARN ("aws:ARN": "${ec2:SourceInstanceARN}"); a condition that
does not hold would leave every node unable to say it is ready, so it is left out (unconfirmed that it works). A node
may so mark another node of its own environment; the nodes of an environment trust each other already (one cluster
user, SSH between them).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpufleet.constants import ENVIRONMENT_TAG_KEY, READINESS_TAG_KEY


def let_nodes_mark_their_readiness(scope: Construct, *, role: iam.IRole, environment_name: str) -> iam.Policy:
    """A policy on the node role that lets a node set the readiness tag on the instances of its environment."""
    stack = cdk.Stack.of(scope)
    policy = iam.Policy(
        scope,
        "NodeReadinessTag",
        statements=[
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[stack.format_arn(service="ec2", resource="instance", resource_name="*")],
                conditions={
                    "StringEquals": {f"aws:ResourceTag/{ENVIRONMENT_TAG_KEY}": environment_name},
                    "ForAllValues:StringEquals": {"aws:TagKeys": [READINESS_TAG_KEY]},
                    "Null": {"ec2:SourceInstanceARN": "false"},
                },
            )
        ],
    )
    policy.attach_to_role(role)
    cdk.Validations.of(policy).acknowledge(
        cdk.Acknowledgment(
            id=f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:instance/*]",
            reason=f"a node tags its own instance, whose id is not known before launch; the conditions limit it to "
            f"the {READINESS_TAG_KEY} key on instances tagged {ENVIRONMENT_TAG_KEY}={environment_name}, from an "
            "instance",
        )
    )
    return policy
