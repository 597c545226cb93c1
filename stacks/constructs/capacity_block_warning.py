"""The nodes of a Capacity Block hear of its end before EC2 reclaims them: an EventBridge rule on the block's
expiration warning runs scripts/node/capacity-block-end.sh (the checkpoint hook) on them through SSM Run Command.

Why this way: instance metadata exposes neither the Capacity Block nor its end. The group's scheduled scale-in, made
from capacity.capacity_block.end, normally ends the nodes first (gpufleet.block_schedule); this rule is for nodes
still there when EC2's warning comes (an end copied wrong, a scale-in that did not run). EC2 emits "Capacity Block
Expiration Warning" to EventBridge forty minutes before the block ends, ten minutes before it begins terminating the
instances (EC2 user guide, capacity-blocks-monitor.html and capacity-blocks-using.html); the event's detail carries
capacity-reservation-id and end-date. The nodes need no extra permission (they are SSM managed instances already);
the rule's role may send AWS-RunShellScript to this environment's instances only.

The detail type is "Capacity Block Expiration Warning" in the EventBridge events reference (events-ref-ec2.html)
and in one version of the EC2 user guide's example, "Capacity Block Reservation Expiration Warning" in another:
the rule matches both (which one EC2 sends is unconfirmed).
"""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpufleet.constants import ENVIRONMENT_TAG_KEY
from gpufleet.ssm_batches import RUN_SHELL_SCRIPT
from gpufleet.user_data import INSTALL_DIR, SETTINGS_FILE

EXPIRATION_WARNINGS = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")


def node_command() -> str:
    """What Run Command runs on each node: the node's settings, then the script with the event's id and end date
    (EventBridge input transformer placeholders)."""
    return f". {SETTINGS_FILE} && {INSTALL_DIR}/capacity-block-end.sh '<reservation>' '<end>'"


class CapacityBlockWarning(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, environment_name: str, block_id: str) -> None:
        """block_id: the reservation id of the environment's Capacity Block."""
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        document_arn = stack.format_arn(service="ssm", account="", resource="document", resource_name=RUN_SHELL_SCRIPT)
        instances_arn = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        self.role = iam.Role(
            self,
            "RunCommandRole",
            assumed_by=iam.ServicePrincipal("events.amazonaws.com"),
            description=f"gpufleet {environment_name}: runs the checkpoint hook on the nodes as their block ends",
            inline_policies={
                "SendCommandToNodes": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(actions=["ssm:SendCommand"], resources=[document_arn]),
                        # EventBridge's Run Command target by tag (EventBridge user guide, eb-events-iam-roles.html):
                        # the instances, narrowed here by the condition key SendCommand offers (Service
                        # Authorization Reference: ssm:resourceTag/${TagKey}).
                        iam.PolicyStatement(
                            actions=["ssm:SendCommand"],
                            resources=[instances_arn],
                            conditions={"StringEquals": {f"ssm:resourceTag/{ENVIRONMENT_TAG_KEY}": environment_name}},
                        ),
                    ]
                )
            },
        )
        cdk.Validations.of(self.role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:instance/*]",
                reason="Run Command targets the nodes by their gpufleet environment tag, so their instance ids are "
                "not known here; the condition on that tag limits the role to this environment's nodes",
            )
        )
        self.rule = events.CfnRule(
            self,
            "Resource",
            description=f"gpufleet {environment_name}: Capacity Block {block_id} expiration warning "
            "runs the checkpoint hook on the nodes",
            event_pattern={
                "source": ["aws.ec2"],
                "detail-type": list(EXPIRATION_WARNINGS),
                "detail": {"capacity-reservation-id": [block_id]},
            },
            targets=[
                events.CfnRule.TargetProperty(
                    id="Nodes",
                    arn=document_arn,
                    role_arn=self.role.role_arn,
                    run_command_parameters=events.CfnRule.RunCommandParametersProperty(
                        run_command_targets=[
                            events.CfnRule.RunCommandTargetProperty(
                                key=f"tag:{ENVIRONMENT_TAG_KEY}", values=[environment_name]
                            )
                        ]
                    ),
                    input_transformer=events.CfnRule.InputTransformerProperty(
                        input_paths_map={
                            "reservation": "$.detail.capacity-reservation-id",
                            "end": "$.detail.end-date",
                        },
                        input_template=json.dumps({"commands": [node_command()]}),
                    ),
                )
            ],
        )
