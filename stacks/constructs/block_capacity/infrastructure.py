"""A custom resource that gives a Capacity Block's Auto Scaling group its scale-out and scale-in at deploy time: the
scheduled actions still ahead when the deploy reaches it, and the desired capacity of those whose time has come.

Why not AWS::AutoScaling::ScheduledAction resources: their StartTime is fixed at synthesis, and "If you try to
schedule the action in the past, Amazon EC2 Auto Scaling returns an error message" (ScheduledUpdateGroupActionRequest
StartTime, EC2 Auto Scaling API reference; PutScheduledUpdateGroupAction says the same). `cdk deploy --all`
synthesizes once and then deploys the stacks in turn (the storage stack, which may take long, before the cluster),
and an assembly may be deployed from CI long after it was made: a template synthesized before the block's start but
deployed after it fails. The handler (runtime/handler.py) computes the schedule when it runs
(gpufleet.block_schedule), so the template holds the block's dates and target only, whatever the time of synthesis.

The resource references the group, so CloudFormation creates or updates the group first and deletes it last. The
group has no DesiredCapacity in its template: it starts at its MinSize, 0, and the handler sets what the schedule
says. Its UpdatePolicy AutoScalingScheduledAction with IgnoreUnmodifiedGroupSizeProperties stays: "When you update a
stack with an Auto Scaling group and scheduled action, CloudFormation always sets the min size, max size, and desired
capacity properties of your group to the values that are defined in the AWS::AutoScaling::AutoScalingGroup section of
your template" (CloudFormation template reference, aws-resource-as-scheduledaction.html); whether that sentence also
covers actions made outside the template is not said (unconfirmed), and the policy keeps what the actions set either
way.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.constants import BLOCK_CAPACITY_RESOURCE_TYPE
from stacks.constructs.environment_groups import acknowledge_group_arns, environment_groups_statement
from stacks.constructs.lambda_functions import lambda_base, provider, runtime_code

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
# A handler call is a few Auto Scaling calls; gpufleet.block_schedule.ACTION_LEAD is longer than this.
HANDLER_TIMEOUT = cdk.Duration.minutes(1)
# The block's dates as the handler reads them (datetime.fromisoformat), in UTC.
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class BlockCapacity(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        group: autoscaling.CfnAutoScalingGroup,
        group_arns: dict[str, str],
        environment_name: str,
        target: int,
        start: dt.datetime,
        end: dt.datetime,
        log_retention: logs.RetentionDays,
    ) -> None:
        """group_arns: every ARN the environment's group may have, each with the form cdk-nag gives it in a finding
        (environment_groups.group_arns); start, end: the block's (capacity.capacity_block)."""
        super().__init__(scope, construct_id)
        base = lambda_base(
            self,
            log_group_id="HandlerLogs",
            role_id="HandlerRole",
            role_description=f"gpufleet {environment_name}: schedule the Capacity Block group's nodes",
            code=runtime_code(RUNTIME_DIR),
            log_retention=log_retention,
        )
        role = base.role
        # The three act on the autoScalingGroup resource type and take aws:ResourceTag/${TagKey} (Service
        # Authorization Reference as parliament 1.6.4 bundles it; tests/stacks/test_iam_resources.py holds the
        # statements to it).
        writes = [
            "autoscaling:DeleteScheduledAction",
            "autoscaling:PutScheduledUpdateGroupAction",
            "autoscaling:SetDesiredCapacity",
        ]
        role.add_to_policy(environment_groups_statement(writes, group_arns, environment_name))
        # Neither supports resource-level permissions (no resource type in the same reference).
        reads = ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScheduledActions"]
        role.add_to_policy(iam.PolicyStatement(actions=reads, resources=["*"]))
        cdk.Validations.of(role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason=f"{', '.join(reads)} support no resource-level permissions and are read-only; the handler reads "
                "the node group's desired capacity and finds its own scheduled actions",
            )
        )
        acknowledge_group_arns(role, group_arns, environment_name, limits="the handler to the environment's own group")
        on_event = base.function(
            "OnEventHandler",
            handler="handler.on_event",
            timeout=HANDLER_TIMEOUT,
            description="Schedules the gpufleet Capacity Block group's nodes from the time of the deploy",
            environment={"ENVIRONMENT_NAME": environment_name},
        )
        schedule_provider = provider(
            self,
            "Provider",
            on_event=on_event,
            log_retention=log_retention,
            purpose="the Capacity Block node group's schedule",
        )
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=schedule_provider.service_token,
            resource_type=BLOCK_CAPACITY_RESOURCE_TYPE,
            properties={
                "AutoScalingGroupName": group.ref,
                "Target": target,
                "Start": start.astimezone(dt.UTC).strftime(TIME_FORMAT),
                "End": end.astimezone(dt.UTC).strftime(TIME_FORMAT),
            },
        )
