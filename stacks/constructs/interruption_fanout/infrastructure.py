"""Every node hears an interruption: an EventBridge rule on EC2's spot interruption warning and rebalance
recommendation runs a Lambda (runtime/handler.py beside this file) that, when the instance is one of the environment's
nodes, runs the checkpoint hook on every other node of the environment through SSM Run Command.

The spot watcher (scripts/node/spot-watcher.sh) runs the hook on the node EC2 warns; the other nodes of the job would
go on training until the collective that needs the lost rank fails. With this they checkpoint too, while the warned
node still answers. The pattern is that of the Capacity Block warning (stacks/constructs/capacity_block_warning.py),
with a function in between because the events carry no tag to match (the handler's doc says more).

Events (EC2 user guide, spot-instance-termination-notices.html "EC2 Spot Instance Interruption Warning event" and
rebalance-recommendations.html "Use Amazon EventBridge"): source aws.ec2, detail-type "EC2 Spot Instance Interruption
Warning" and "EC2 Instance Rebalance Recommendation", detail {"instance-id", "instance-action"}. The EventBridge events
reference (events-ref-ec2.html) also lists "EC2 Spot Instance Rebalance Recommended", which the user guide never
shows; the rule matches it too (what differs from the other is unconfirmed, and the handler skips an event without an
instance id).

Its role, action by action (resource types from the Service Authorization Reference as parliament bundles it;
tests/stacks/test_iam_resources.py holds every statement to it): ec2:DescribeInstances (no resource type: "*");
ssm:SendCommand with the document AWS-RunShellScript on the environment's instances only (the condition
ssm:resourceTag/gpufleet:environment, as the Capacity Block warning's role has it).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.constants import ENVIRONMENT_TAG_KEY
from gpufleet.ssm_batches import RUN_SHELL_SCRIPT
from gpufleet.user_data import SETTINGS_FILE
from stacks.constructs.lambda_functions import lambda_base, runtime_code

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
INTERRUPTION_EVENTS = (
    "EC2 Spot Instance Interruption Warning",
    "EC2 Instance Rebalance Recommendation",
    "EC2 Spot Instance Rebalance Recommended",
)
# One DescribeInstances and a SendCommand per 50 nodes, about 12 more for each node SSM refuses
# (gpufleet/ssm_batches.py), each retried by botocore (the handler's CLIENT_CONFIG): well under the two minutes an
# interruption warning gives.
HANDLER_TIMEOUT = cdk.Duration.seconds(60)


class InterruptionFanOut(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, environment_name: str, log_retention: logs.RetentionDays
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        base = lambda_base(
            self,
            log_group_id="Logs",
            role_id="Role",
            role_description=f"gpufleet {environment_name}: run the checkpoint hook on every node when one is warned",
            code=runtime_code(RUNTIME_DIR),
            log_retention=log_retention,
        )
        role = base.role
        document = stack.format_arn(service="ssm", account="", resource="document", resource_name=RUN_SHELL_SCRIPT)
        nodes = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        role.add_to_policy(iam.PolicyStatement(actions=["ssm:SendCommand"], resources=[document]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ssm:SendCommand"],
                resources=[nodes],
                conditions={"StringEquals": {f"ssm:resourceTag/{ENVIRONMENT_TAG_KEY}": environment_name}},
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=["ec2:DescribeInstances"], resources=["*"]))
        for finding, reason in (
            (
                "Resource::*",
                "ec2:DescribeInstances supports no resource-level permissions and is read-only; the function asks "
                "with it whether the warned instance is one of the environment's nodes, and which nodes run",
            ),
            (
                f"Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:instance/*",
                "the nodes' instance ids are known only at run time; the condition on the "
                f"{ENVIRONMENT_TAG_KEY} tag limits SendCommand to this environment's nodes",
            ),
        ):
            cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))
        self.function = base.function(
            "Function",
            handler="handler.on_notice",
            timeout=HANDLER_TIMEOUT,
            description=f"gpufleet {environment_name}: a node is warned, every node runs its checkpoint hook",
            environment={"ENVIRONMENT_NAME": environment_name, "SETTINGS_FILE": SETTINGS_FILE},
        )
        # A warning two minutes ahead is useless later: neither Lambda nor EventBridge retries a failed run.
        self.function.configure_async_invoke(retry_attempts=0)
        self.rule = events.Rule(
            self,
            "Rule",
            description=f"gpufleet {environment_name}: spot interruption warnings and rebalance recommendations",
            event_pattern=events.EventPattern(source=["aws.ec2"], detail_type=list(INTERRUPTION_EVENTS)),
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )
