"""A custom resource whose Delete cancels the fleet, terminates its nodes and waits for them.

CloudFormation's own Spot Fleet delete handler is not documented to terminate running instances (Terraform had
exactly that bug); this makes `cdk destroy` leave no node, network interface or fleet request behind. It depends
on the fleet, the placement group and the security group, so CloudFormation deletes it, and so waits for the
nodes, before any of them.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

HANDLER_DIR = Path(__file__).resolve().parent.parent / "fleet_teardown"
# Lambda's ceiling; p4d nodes usually take one to three minutes to terminate.
HANDLER_TIMEOUT = cdk.Duration.minutes(15)


class FleetTeardown(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        fleet: ec2.CfnSpotFleet,
        environment_tag: tuple[str, str],
        guarded: list[Construct],
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        log_group = logs.LogGroup(
            self, "HandlerLogs", retention=log_retention, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        role = iam.Role(
            self,
            "HandlerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="gpufleet fleet teardown: cancel the fleet and terminate its nodes",
        )
        log_group.grant_write(role)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:CancelSpotFleetRequests"],
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
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:DescribeSpotFleetInstances", "ec2:DescribeInstances"],
                resources=["*"],
            )
        )
        handler = lambda_.Function(
            self,
            "Handler",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="handler.lambda_handler",
            code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["__pycache__", "*.pyc"]),
            timeout=HANDLER_TIMEOUT,
            role=role,
            log_group=log_group,
            description="Cancels the gpufleet Spot Fleet and waits until its nodes are terminated",
        )
        for finding, reason in (
            (
                "Resource::*",
                "DescribeSpotFleetInstances and DescribeInstances support no resource-level "
                "permissions; both are read-only",
            ),
            (
                f"Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:instance/*",
                f"TerminateInstances is limited by the condition aws:ResourceTag/{tag_key}={tag_value} to this "
                "environment's nodes, whose ids are not known before the fleet launches them",
            ),
        ):
            cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))
        teardown = cdk.CustomResource(
            self,
            "Resource",
            service_token=handler.function_arn,
            resource_type="Custom::GpufleetFleetTeardown",
            properties={"FleetRequestId": fleet.ref},
        )
        for construct in guarded:
            teardown.node.add_dependency(construct)
