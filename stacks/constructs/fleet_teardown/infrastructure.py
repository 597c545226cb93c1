"""A custom resource whose Delete cancels the fleet, terminates its nodes and waits for them.

CDK's custom_resources.Provider runs the two handlers (runtime/handler.py beside this file): on_event cancels and
terminates, is_complete is polled by a Step Functions waiter until every node is terminated, so the wait is not
bounded by one Lambda run.

CloudFormation's own Spot Fleet delete handler is not documented to terminate running instances (Terraform had
exactly that bug); this makes `cdk destroy` leave no node, network interface or fleet request behind. It depends
on the fleet, the placement group and the security group, so CloudFormation deletes it, and so waits for the
nodes, before any of them.

With a checkpoint hook (node.checkpoint_hook) the nodes run it first: the handler sends it through Run Command
(AWS-RunShellScript, on the environment's instances only: the condition ssm:resourceTag/gpufleet:environment, as the
capacity fallback's role has it) and reads each run's end with GetCommandInvocation (no resource type: "*"), waiting
at most gpufleet.checkpoint_hook.REMOVAL_WAIT_SECONDS, which its timeout adds to the usual two minutes.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.checkpoint_hook import REMOVAL_WAIT_SECONDS, hook_command
from gpufleet.ssm_batches import RUN_SHELL_SCRIPT
from gpufleet.user_data import SETTINGS_FILE
from stacks.constructs.lambda_functions import LONGEST_POLLING, lambda_base, provider, runtime_code

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
# Each handler call is a few EC2 calls; the waiting is the Provider's.
HANDLER_TIMEOUT = cdk.Duration.minutes(2)
# p4d nodes usually take one to three minutes to terminate; CloudFormation's own Spot Fleet delete handler waits up
# to 40 minutes (handlers.delete.timeoutInMinutes of the AWS::EC2::SpotFleet schema cfn-lint 1.58 bundles,
# read with cfnlint.schema.PROVIDER_SCHEMA_MANAGER; tests/stacks/test_cluster_stack.py checks it). The teardown polls
# as long as a custom resource can (LONGEST_POLLING: 50 minutes).
TOTAL_TIMEOUT = LONGEST_POLLING
QUERY_INTERVAL = cdk.Duration.seconds(30)  # the Provider needs TOTAL_TIMEOUT / QUERY_INTERVAL to be whole


class FleetTeardown(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        fleet: ec2.CfnSpotFleet,
        environment_tag: tuple[str, str],
        checkpoint_hook: bool,
        guarded: list[Construct],
        log_retention: logs.RetentionDays,
    ) -> None:
        """checkpoint_hook: the nodes have one (node.checkpoint_hook): they run it before the fleet ends."""
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        base = lambda_base(
            self,
            log_group_id="HandlerLogs",
            role_id="HandlerRole",
            role_description="gpufleet fleet teardown: cancel the fleet and terminate its nodes",
            code=runtime_code(RUNTIME_DIR),
            log_retention=log_retention,
        )
        role = base.role
        # Both act on the spot-fleet-request resource type (its only required one) in the Service Authorization
        # Reference as parliament 1.6.4 bundles it (parliament/iam_definition.json; the capacity fallback scopes its
        # Spot Fleet calls the same way, and tests/stacks/test_iam_resources.py holds both to it), so both are
        # granted on this fleet request only.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:CancelSpotFleetRequests", "ec2:DescribeSpotFleetInstances"],
                resources=[stack.format_arn(service="ec2", resource="spot-fleet-request", resource_name=fleet.ref)],
            )
        )
        tag_key, tag_value = environment_tag
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:TerminateInstances"],
                resources=[stack.format_arn(service="ec2", resource="instance", resource_name="*")],
                conditions={"StringEquals": {f"aws:ResourceTag/{tag_key}": tag_value}},
            )
        )
        reads = ["ec2:DescribeInstances"]
        environment: dict[str, str] = {}
        if checkpoint_hook:
            document = stack.format_arn(service="ssm", account="", resource="document", resource_name=RUN_SHELL_SCRIPT)
            role.add_to_policy(iam.PolicyStatement(actions=["ssm:SendCommand"], resources=[document]))
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["ssm:SendCommand"],
                    resources=[stack.format_arn(service="ec2", resource="instance", resource_name="*")],
                    conditions={"StringEquals": {f"ssm:resourceTag/{tag_key}": tag_value}},
                )
            )
            reads.append("ssm:GetCommandInvocation")
            # No fleet id in the notice: a deploy that replaces the fleet updates this function before
            # CloudFormation deletes the old fleet's teardown, which would then name the new fleet.
            environment["CHECKPOINT_COMMAND"] = hook_command(SETTINGS_FILE, "fleet-teardown", "fleet-ends")
        role.add_to_policy(iam.PolicyStatement(actions=reads, resources=["*"]))
        for finding, reason in (
            (
                "Resource::*",
                f"{', '.join(reads)} support no resource-level permissions and are read-only; the teardown finds the "
                "fleet's nodes with them (and when their checkpoint hook is over)",
            ),
            (
                f"Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:instance/*",
                f"TerminateInstances (and SendCommand of the checkpoint hook) is limited by the tag condition "
                f"{tag_key}={tag_value} to this environment's nodes, whose ids are not known before the fleet "
                "launches them",
            ),
        ):
            cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))
        on_event = base.function(
            "OnEventHandler",
            handler="handler.on_event",
            timeout=HANDLER_TIMEOUT.plus(cdk.Duration.seconds(REMOVAL_WAIT_SECONDS))
            if checkpoint_hook
            else HANDLER_TIMEOUT,
            description="Cancels the gpufleet Spot Fleet and terminates its nodes",
            environment=environment or None,
        )
        is_complete = base.function(
            "IsCompleteHandler",
            handler="handler.is_complete",
            timeout=HANDLER_TIMEOUT,
            description="Says whether every node of the gpufleet Spot Fleet is terminated",
        )
        teardown_provider = provider(
            self,
            "Provider",
            on_event=on_event,
            is_complete=is_complete,
            total_timeout=TOTAL_TIMEOUT,
            query_interval=QUERY_INTERVAL,
            log_retention=log_retention,
            purpose="the fleet teardown",
        )
        teardown = cdk.CustomResource(
            self,
            "Resource",
            service_token=teardown_provider.service_token,
            resource_type="Custom::GpufleetFleetTeardown",
            properties={"FleetRequestId": fleet.ref},
        )
        for construct in guarded:
            teardown.node.add_dependency(construct)
