"""A rehearsal of a spot interruption on the real cluster: an AWS FIS experiment template that sends one of the
environment's running spot nodes a real interruption notice, so that a user sees the whole chain (the watcher, the
fan-out to the other nodes, the training code's checkpoint, the fleet's replacement) before EC2 does it for real.
Nothing runs until someone starts an experiment from it (docs/guides/interruptions.md says how).

The template, as AWS's Spot workshop writes it (awslabs/ec2-spot-workshops workshops/fis/fisspotinterruption.yaml
and its guide; the FIS user guide's fis-actions-reference.html#send-spot-instance-interruptions was not read here):
action aws:ec2:send-spot-instance-interruptions on the target key SpotInstances, the target of resource type
aws:ec2:spot-instance chosen by resource tags with the filter State.Name running and a COUNT(n) selection mode, the
parameter durationBeforeInterruption (ISO 8601; "defaulted to 2 minutes, but can be changed to a value greater than 2
minutes to represent a EC2 Instance rebalance recommendation coming ahead of the Spot Instance interruption
notice"), and the stop condition source none. PT2M here: a notice two minutes ahead, as EC2 gives it.

Its role (trusted by fis.amazonaws.com): ec2:SendSpotInstanceInterruptions on the environment's instances only (the
instance resource type takes aws:ResourceTag/${TagKey}, Service Authorization Reference as parliament bundles it;
tests/stacks/test_iam_resources.py holds the statements to it) and ec2:DescribeInstances, which has no resource type,
for FIS to resolve the target by tag (the workshop's role grants it; that FIS needs it is unconfirmed).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_fis as fis
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpufleet.constants import ENVIRONMENT_TAG_KEY

INTERRUPT_ACTION = "aws:ec2:send-spot-instance-interruptions"
SPOT_INSTANCE_TARGET = "aws:ec2:spot-instance"
NOTICE_AHEAD = "PT2M"


class SpotInterruptionRehearsal(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, environment_name: str) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("fis.amazonaws.com"),
            description=f"gpufleet {environment_name}: FIS may interrupt one of the environment's spot nodes",
            inline_policies={
                "InterruptSpotNodes": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["ec2:SendSpotInstanceInterruptions"],
                            resources=[stack.format_arn(service="ec2", resource="instance", resource_name="*")],
                            conditions={"StringEquals": {f"aws:ResourceTag/{ENVIRONMENT_TAG_KEY}": environment_name}},
                        ),
                        iam.PolicyStatement(actions=["ec2:DescribeInstances"], resources=["*"]),
                    ]
                )
            },
        )
        for finding, reason in (
            (
                "Resource::*",
                "ec2:DescribeInstances supports no resource-level permissions and is read-only; FIS finds the "
                "environment's spot nodes with it",
            ),
            (
                f"Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:instance/*",
                "the spot nodes' ids are known only when an experiment runs; the condition on the "
                f"{ENVIRONMENT_TAG_KEY} tag limits the interruption to this environment's nodes",
            ),
        ):
            cdk.Validations.of(self.role).acknowledge(
                cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason)
            )
        self.template = fis.CfnExperimentTemplate(
            self,
            "Resource",
            description=f"gpufleet {environment_name}: interrupt one running spot node (notice two minutes ahead)",
            role_arn=self.role.role_arn,
            stop_conditions=[fis.CfnExperimentTemplate.ExperimentTemplateStopConditionProperty(source="none")],
            targets={
                "SpotNode": fis.CfnExperimentTemplate.ExperimentTemplateTargetProperty(
                    resource_type=SPOT_INSTANCE_TARGET,
                    resource_tags={ENVIRONMENT_TAG_KEY: environment_name},
                    filters=[
                        fis.CfnExperimentTemplate.ExperimentTemplateTargetFilterProperty(
                            path="State.Name", values=["running"]
                        )
                    ],
                    selection_mode="COUNT(1)",
                )
            },
            actions={
                "InterruptSpotNode": fis.CfnExperimentTemplate.ExperimentTemplateActionProperty(
                    action_id=INTERRUPT_ACTION,
                    description="a spot interruption notice, then the interruption",
                    parameters={"durationBeforeInterruption": NOTICE_AHEAD},
                    targets={"SpotInstances": "SpotNode"},
                )
            },
            tags={"Name": f"gpufleet-{environment_name}-spot-interruption"},
        )
