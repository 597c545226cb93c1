"""fleet.fallback: a Lambda on an EventBridge schedule that moves missing spot nodes to on-demand and back.

The function (runtime/handler.py beside this file, deciding with gpufleet/fallback.py) reads the fleet or Auto Scaling
group, changes its on-demand part (on a Spot Fleet also its total, and ends the on-demand nodes it hands back to spot
right after their checkpoint hook ran; on a group also MaxSize while it replaces them), and keeps its state in the
SSM parameter /gpufleet/ENV/fallback, which it writes itself: the stack does not declare the parameter, so no deploy
can write an old value back. A custom resource
(runtime/state_cleanup.py) deletes the parameter when the stack goes (or fleet.fallback is removed):
the schedule, the function and its role depend on it, so CloudFormation deletes them first and no run writes the
parameter again afterwards; its Create and Update do nothing, so a deploy leaves the state alone.

Its role, action by action (resource types from the Service Authorization Reference as parliament 1.6.4 bundles it;
tests/stacks/test_iam_resources.py holds every statement to it):
- ssm:GetParameter, ssm:PutParameter: the state parameter only.
- Spot Fleet: ec2:ModifySpotFleetRequest, DescribeSpotFleetInstances, DescribeSpotFleetRequestHistory on this fleet
  request (spot-fleet-request); ec2:TerminateInstances on the environment's instances only (instance, with the
  condition ec2:ResourceTag/gpufleet:environment, a tag the launch template puts on every node), for the hand-back;
  with a checkpoint hook, ssm:SendCommand with the document AWS-RunShellScript on those instances (the condition
  ssm:resourceTag/gpufleet:environment, as stacks/constructs/capacity_block_warning.py grants it) and
  ssm:GetCommandInvocation (no resource type: "*").
- Auto Scaling group: autoscaling:UpdateAutoScalingGroup on this group (autoScalingGroup). The reference lists
  iam:PassRole as its dependent action, which the EC2 Auto Scaling user guide needs "when ... a launch template that
  specifies an instance profile ... is provided", and says ec2:RunInstances permissions "are checked when an Auto
  Scaling group is created or updated using a launch template" (ec2-auto-scaling-api-permissions,
  ec2-auto-scaling-launch-template-permissions); whether an update naming only the distribution and MaxSize is checked
  is not documented, and one was refused ("You are not authorized to use launch template", community.aws#831). So the
  role holds them (gpufleet.fallback.GROUP_LAUNCH_PERMISSIONS): ec2:RunInstances and ec2:CreateTags on "*" with the
  conditions ec2:LaunchTemplate (this group's launch template; a condition key of every resource type RunInstances
  requires, per parliament 1.6.4's reference) and ec2:CreateAction RunInstances, iam:PassRole of the nodes' role with
  iam:PassedToService ec2.amazonaws.com: the role cannot launch anything the group's template would not.
- The reads that take no resource type ("*"): ec2:DescribeSpotFleetRequests, ec2:DescribeInstances,
  autoscaling:DescribeAutoScalingGroups, DescribeScalingActivities, DescribeInstanceRefreshes.

Ready for both backends (fleet.backend, spot-fleet or auto-scaling): node_group_id is the Spot Fleet request id or
the Auto Scaling group name.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.checkpoint_hook import hook_command
from gpufleet.constants import (
    BACKEND_AUTO_SCALING,
    BACKEND_SPOT_FLEET,
    ENVIRONMENT_TAG_KEY,
    FALLBACK_CHECK_INTERVAL_MINUTES,
)
from gpufleet.environment import Fallback
from gpufleet.fallback import GROUP_LAUNCH_PERMISSIONS, HAND_BACK_HOOK_WAIT, parameter_name
from gpufleet.ssm_batches import RUN_SHELL_SCRIPT
from gpufleet.user_data import SETTINGS_FILE
from stacks.constructs.lambda_functions import lambda_base, provider, runtime_code

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
# A run is a handful of describe calls and at most three changes, each call retried by botocore (the handler's
# CLIENT_CONFIG), within two minutes, plus the hand-back's wait for the checkpoint hook of the nodes it is about to end
# (gpufleet.fallback.HAND_BACK_HOOK_WAIT); shorter than the schedule's period, so that a run ends before the next one
# starts.
CALLS_TIMEOUT = cdk.Duration.minutes(2)
HANDLER_TIMEOUT = CALLS_TIMEOUT.plus(cdk.Duration.seconds(int(HAND_BACK_HOOK_WAIT.total_seconds())))
# What Run Command runs on an on-demand node before a Spot Fleet hand-back ends it (gpufleet.fallback): the node's
# settings, then its checkpoint hook, as scripts/node/spot-watcher.sh runs it, with the notice named for the hook. The
# watcher runs the hook on rebalance recommendations that may never be followed by an interruption: a hook is
# already safe to run on a node that stays.
CHECKPOINT_COMMAND = hook_command(SETTINGS_FILE, "capacity-fallback", "hand-back")
# The state cleanup is one DeleteParameter; the Provider's framework function answers CloudFormation. CloudFormation
# waits for a custom resource's answer up to its ServiceTimeout (1 to 3600 seconds, default 3600:
# AWS::CloudFormation::CustomResource); five minutes covers both functions' timeouts with room, so a lost answer fails
# the delete in minutes, not an hour.
STATE_CLEANUP_TIMEOUT = cdk.Duration.minutes(1)
STATE_CLEANUP_SERVICE_TIMEOUT = cdk.Duration.minutes(5)


class CapacityFallback(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        backend: str,
        node_group_id: str,
        environment_name: str,
        target: int,
        on_demand_floor: int,
        fallback: Fallback,
        checkpoint_hook: bool,
        log_retention: logs.RetentionDays,
        launch_template_id: str | None = None,
        node_role_arn: str | None = None,
    ) -> None:
        """target: capacity.target, the fallback's own record of the fleet's size (gpufleet.fallback: never the
        fleet's live value); checkpoint_hook: the nodes have one (node.checkpoint_hook): a Spot Fleet hand-back runs it
        on each node it ends, right before; launch_template_id, node_role_arn: an Auto Scaling group's launch template
        and the role of its instance profile (gpufleet.fallback.GROUP_LAUNCH_PERMISSIONS says why), needed with that
        backend."""
        super().__init__(scope, construct_id)
        if backend not in (BACKEND_SPOT_FLEET, BACKEND_AUTO_SCALING):
            raise ValueError(f"backend {backend!r}: {BACKEND_SPOT_FLEET} or {BACKEND_AUTO_SCALING}")
        if backend == BACKEND_AUTO_SCALING and not (launch_template_id and node_role_arn):
            raise ValueError("an Auto Scaling group's fallback needs its launch template id and node role ARN")
        stack = cdk.Stack.of(self)
        parameter = parameter_name(environment_name)
        code = runtime_code(RUNTIME_DIR)
        base = lambda_base(
            self,
            log_group_id="Logs",
            role_id="Role",
            role_description=f"gpufleet {environment_name} capacity fallback: the fleet's on-demand part and its state",
            code=code,
            log_retention=log_retention,
        )
        role = base.role
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ssm:GetParameter", "ssm:PutParameter"],
                resources=[stack.format_arn(service="ssm", resource="parameter", resource_name=parameter.lstrip("/"))],
            )
        )
        runs_hook = checkpoint_hook and backend == BACKEND_SPOT_FLEET
        unscoped_reads = self._grant_node_group(role, backend, node_group_id, environment_name, runs_hook)
        launches = ""
        if backend == BACKEND_AUTO_SCALING:
            assert launch_template_id and node_role_arn
            self._grant_launch(role, launch_template_id, node_role_arn)
            launches = (
                "; ec2:RunInstances and ec2:CreateTags, which Auto Scaling may check when the fallback updates the "
                "group, are held through the group's launch template only (conditions ec2:LaunchTemplate and "
                "ec2:CreateAction)"
            )
        cdk.Validations.of(role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason=f"{', '.join(unscoped_reads)} support no resource-level permissions (Service Authorization "
                "Reference); the capacity fallback only reads the fleet's nodes, history and checkpoint commands "
                f"with them{launches}",
            )
        )
        self.function = base.function(
            "Function",
            handler="handler.on_schedule",
            timeout=HANDLER_TIMEOUT,
            description=f"gpufleet {environment_name}: spot first, on-demand when spot is missing, spot again",
            environment={
                "BACKEND": backend,
                "NODE_GROUP_ID": node_group_id,
                "PARAMETER_NAME": parameter,
                "TARGET": str(target),
                "FLOOR": str(on_demand_floor),
                "AFTER_MINUTES": str(fallback.after_minutes),
                "RESTORE_AFTER_MINUTES": str(fallback.restore_after_minutes),
                "MAX_EXTRA_ON_DEMAND": str(fallback.max_extra_on_demand),
                **({"CHECKPOINT_COMMAND": CHECKPOINT_COMMAND} if runs_hook else {}),
            },
        )
        # Lambda retries a failed asynchronous invocation twice by default: the next scheduled run is the retry, and
        # no retry overlaps it.
        self.function.configure_async_invoke(retry_attempts=0)
        self.rule = events.Rule(
            self,
            "Schedule",
            schedule=events.Schedule.rate(cdk.Duration.minutes(FALLBACK_CHECK_INTERVAL_MINUTES)),
            description=f"gpufleet {environment_name}: check the fleet's spot capacity",
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )
        self.state_cleanup = self._delete_state_with_the_stack(code, parameter, log_retention)
        for writer in (role, self.function, self.rule):
            writer.node.add_dependency(self.state_cleanup)

    def _delete_state_with_the_stack(
        self, code: lambda_.Code, parameter: str, log_retention: logs.RetentionDays
    ) -> cdk.CustomResource:
        """The custom resource whose Delete removes the state parameter, with a function and role of its own: only
        it may delete the parameter. Keep its construct id: under a new logical id CloudFormation would create a new
        resource and delete the old one, and with it the state."""
        stack = cdk.Stack.of(self)
        base = lambda_base(
            self,
            log_group_id="StateCleanupLogs",
            role_id="StateCleanupRole",
            role_description=f"gpufleet capacity fallback: delete {parameter} with the stack",
            code=code,
            log_retention=log_retention,
        )
        base.role.add_to_policy(
            iam.PolicyStatement(
                actions=["ssm:DeleteParameter"],
                resources=[stack.format_arn(service="ssm", resource="parameter", resource_name=parameter.lstrip("/"))],
            )
        )
        function = base.function(
            "StateCleanupFunction",
            handler="state_cleanup.on_event",
            timeout=STATE_CLEANUP_TIMEOUT,
            description=f"gpufleet: deletes {parameter} when the capacity fallback goes",
        )
        cleanup_provider = provider(
            self,
            "StateCleanupProvider",
            on_event=function,
            log_retention=log_retention,
            purpose="the capacity fallback's state cleanup",
        )
        return cdk.CustomResource(
            self,
            "StateCleanup",
            service_token=cleanup_provider.service_token,
            resource_type="Custom::GpufleetFallbackState",
            properties={"ParameterName": parameter},
            service_timeout=STATE_CLEANUP_SERVICE_TIMEOUT,
        )

    def _grant_launch(self, role: iam.Role, launch_template_id: str, node_role_arn: str) -> None:
        """What UpdateAutoScalingGroup may check of the caller on a group with a launch template
        (gpufleet.fallback.GROUP_LAUNCH_PERMISSIONS): ec2:RunInstances and ec2:CreateTags only through this launch
        template (the condition keys ec2:LaunchTemplate, on every resource type RunInstances takes, and
        ec2:CreateAction), iam:PassRole of the nodes' role to EC2 only (iam:PassedToService)."""
        stack = cdk.Stack.of(self)
        template_arn = stack.format_arn(service="ec2", resource="launch-template", resource_name=launch_template_id)
        run_instances, pass_role, create_tags = GROUP_LAUNCH_PERMISSIONS
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[run_instances],
                resources=["*"],
                conditions={"ArnEquals": {"ec2:LaunchTemplate": template_arn}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[create_tags],
                resources=["*"],
                conditions={"StringEquals": {"ec2:CreateAction": "RunInstances"}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[pass_role],
                resources=[node_role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            )
        )

    def _grant_node_group(
        self, role: iam.Role, backend: str, node_group_id: str, environment_name: str, runs_hook: bool
    ) -> list[str]:
        """Let the role change this one fleet request or group (see the module doc); return the actions granted on
        "*"."""
        stack = cdk.Stack.of(self)
        if backend == BACKEND_SPOT_FLEET:
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=[
                        "ec2:ModifySpotFleetRequest",
                        "ec2:DescribeSpotFleetInstances",
                        "ec2:DescribeSpotFleetRequestHistory",
                    ],
                    resources=[
                        stack.format_arn(service="ec2", resource="spot-fleet-request", resource_name=node_group_id)
                    ],
                )
            )
            nodes = stack.format_arn(service="ec2", resource="instance", resource_name="*")
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["ec2:TerminateInstances"],
                    resources=[nodes],
                    conditions={"StringEquals": {f"ec2:ResourceTag/{ENVIRONMENT_TAG_KEY}": environment_name}},
                )
            )
            reads = ["ec2:DescribeSpotFleetRequests", "ec2:DescribeInstances"]
            if runs_hook:
                document = stack.format_arn(
                    service="ssm", account="", resource="document", resource_name=RUN_SHELL_SCRIPT
                )
                role.add_to_policy(iam.PolicyStatement(actions=["ssm:SendCommand"], resources=[document]))
                role.add_to_policy(
                    iam.PolicyStatement(
                        actions=["ssm:SendCommand"],
                        resources=[nodes],
                        conditions={"StringEquals": {f"ssm:resourceTag/{ENVIRONMENT_TAG_KEY}": environment_name}},
                    )
                )
                reads.append("ssm:GetCommandInvocation")
            cdk.Validations.of(role).acknowledge(
                cdk.Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{nag_rendering(stack, nodes)}]",
                    reason="the capacity fallback ends (and runs the checkpoint hook on) the fleet's on-demand nodes "
                    f"it hands back to spot, whose ids it learns at run time; the condition on {ENVIRONMENT_TAG_KEY} "
                    "limits it to this environment's nodes",
                )
            )
        else:
            # arn:${Partition}:autoscaling:${Region}:${Account}:autoScalingGroup:${GroupId}:autoScalingGroupName/NAME
            # (Service Authorization Reference): the group id is a UUID AWS assigns, so it is the one wildcard.
            group_arn = stack.format_arn(
                service="autoscaling",
                resource="autoScalingGroup",
                resource_name=f"*:autoScalingGroupName/{node_group_id}",
                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
            )
            role.add_to_policy(
                iam.PolicyStatement(actions=["autoscaling:UpdateAutoScalingGroup"], resources=[group_arn])
            )
            cdk.Validations.of(role).acknowledge(
                cdk.Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{nag_rendering(stack, group_arn)}]",
                    reason="the capacity fallback may update this one Auto Scaling group of the environment's nodes, "
                    "named in full; the wildcard is the group id AWS assigns at creation",
                )
            )
            reads = [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeInstanceRefreshes",
                "ec2:DescribeInstances",
            ]
        role.add_to_policy(iam.PolicyStatement(actions=reads, resources=["*"]))
        return reads


def nag_rendering(stack: cdk.Stack, value: str) -> str:
    """A value as cdk-nag names it in a finding: the resolved string, a Ref as <LogicalId>, a pseudo parameter as
    <AWS::Name>, a GetAtt as <LogicalId.Attribute>."""
    resolved = stack.resolve(value)
    if isinstance(resolved, str):
        return resolved
    separator, parts = resolved["Fn::Join"]
    rendered = []
    for part in parts:
        if isinstance(part, str):
            rendered.append(part)
        elif "Ref" in part:
            rendered.append(f"<{part['Ref']}>")
        else:
            rendered.append(f"<{'.'.join(part['Fn::GetAtt'])}>")
    return separator.join(rendered)
