"""A custom resource that sets an Auto Scaling group's desired capacity once CloudFormation has created or updated the
group, so that a deploy does not wait for nodes that capacity may not allow (a group without a Capacity Block).

Why not DesiredCapacity in the group's template: CloudFormation marks a group CREATE_COMPLETE "when the desired
capacity is reached" (the DesiredCapacity description in cfn-lint's bundled AWS::AutoScaling::AutoScalingGroup
schema), and the schema's create handler may run 360 minutes: a deploy while spot or on-demand capacity is short
would hang for hours and could fail. Without it the group starts at its MinSize, 0 ("If you do not specify a desired
capacity when creating the stack, the default is the minimum size of the group", the same description), which
CloudFormation has nothing to wait for. A later deploy leaves the desired capacity as it is: "When you update the
stack, the current Desired size of ASG will remain the same if there is no DesiredCapacity set" (AWS Support, quoted
in Bayer-Group/cloudformation-template-generator#194; aws-cdk #5507 leaves it out for that reason: "in which case it
will remain untouched during a deployment"), which holds, (unconfirmed) for want of a primary source, for a template
that drops the DesiredCapacity it had too. MaxSize stays the target: a lower target lowers the desired capacity with
it ("If you specify a new value for MaxSize without specifying a value for DesiredCapacity, and the new MaxSize is
smaller than the current size of the group, this sets the group's DesiredCapacity to the new MaxSize value",
UpdateAutoScalingGroup, botocore's autoscaling model).

So this resource sets the desired capacity to the target (SetDesiredCapacity) on Create, and on an Update that names
another group or another target; a redeploy that changes neither sends it nothing ("A custom resource is updated
whenever any of its properties change. It is not re-executed when its source code changes", aws-cdk
docs/CLOUDFORMATION.md, "Custom Resources"), so what the capacity fallback or an operator set stays. It references
the group, so CloudFormation creates or updates the group (its MaxSize first) before it. Delete does nothing:
deleting the group terminates its nodes.

Under fleet.rollout replace-all a new image is a new group. "A Stack Update is done in 2 phases: first rollback-able
changes and then deletes": new resources and updates in UPDATE_IN_PROGRESS, "delete replaced resources" in
UPDATE_COMPLETE_CLEANUP_IN_PROGRESS; on a rollback, UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS "will do deletes,
including for resources that got created in this update" (the same document, "Failing Resource Deletions",
"Rollbacks"). The new group's resource (an Update naming the new group, in the first phase) waits until the new group
has `target` nodes InService, polled by the Provider's is_complete, for at most WAIT; then it fails, and CloudFormation
rolls the update back: it deletes the new group with its nodes and the old group, never deleted, keeps its own
(runtime/handler.py says how the handler tells a swap from a first deploy or a rollback). Under manual it returns at
once.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.constants import GROUP_CAPACITY_RESOURCE_TYPE
from stacks.constructs.environment_groups import acknowledge_group_arns, environment_groups_statement
from stacks.constructs.lambda_functions import LONGEST_POLLING, lambda_base, provider, runtime_code

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
# Each handler call is one or two Auto Scaling calls; the waiting is the Provider's.
HANDLER_TIMEOUT = cdk.Duration.minutes(1)
QUERY_INTERVAL = cdk.Duration.seconds(30)  # the Provider needs LONGEST_POLLING / QUERY_INTERVAL to be whole
# The handler's own deadline comes before the Provider's, so that the deploy fails with the handler's reason (the
# nodes InService, the last launch failure) rather than the framework's "Operation timed out".
WAIT = LONGEST_POLLING.minus(cdk.Duration.minutes(5))


class GroupCapacity(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        group: autoscaling.CfnAutoScalingGroup,
        group_arns: dict[str, str],
        environment_name: str,
        target: int,
        rollout: str,
        log_retention: logs.RetentionDays,
    ) -> None:
        """group_arns: every ARN the environment's group may have, each with the form cdk-nag gives it in a finding
        (gpu_auto_scaling_group.GpuAutoScalingGroup); rollout: fleet.rollout."""
        super().__init__(scope, construct_id)
        base = lambda_base(
            self,
            log_group_id="HandlerLogs",
            role_id="HandlerRole",
            role_description=f"gpufleet {environment_name}: set the node group's desired capacity",
            code=runtime_code(RUNTIME_DIR),
            log_retention=log_retention,
        )
        role = base.role
        # SetDesiredCapacity acts on the autoScalingGroup resource type and takes aws:ResourceTag/${TagKey} (Service
        # Authorization Reference as parliament 1.6.4 bundles it; tests/stacks/test_iam_resources.py holds the
        # statement to it). The names are the node role's for CompleteLifecycleAction: the environment's group, or
        # under replace-all both the old and the new one.
        role.add_to_policy(
            environment_groups_statement(["autoscaling:SetDesiredCapacity"], group_arns, environment_name)
        )
        # Neither supports resource-level permissions (no resource type in the same reference).
        reads = ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities"]
        role.add_to_policy(iam.PolicyStatement(actions=reads, resources=["*"]))
        cdk.Validations.of(role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason=f"{', '.join(reads)} support no resource-level permissions and are read-only; the handler "
                "counts the group's nodes InService and reads why launches failed",
            )
        )
        acknowledge_group_arns(
            role, group_arns, environment_name, limits="SetDesiredCapacity to the environment's own group"
        )
        environment = {
            "ENVIRONMENT_NAME": environment_name,
            "WAIT_SECONDS": str(int(WAIT.to_seconds())),
        }
        on_event = base.function(
            "OnEventHandler",
            handler="handler.on_event",
            timeout=HANDLER_TIMEOUT,
            description="Sets the gpufleet node group's desired capacity to its target",
            environment=environment,
        )
        is_complete = base.function(
            "IsCompleteHandler",
            handler="handler.is_complete",
            timeout=HANDLER_TIMEOUT,
            description="Says whether a new gpufleet node group has its nodes InService (rollout replace-all)",
            environment=environment,
        )
        capacity_provider = provider(
            self,
            "Provider",
            on_event=on_event,
            is_complete=is_complete,
            total_timeout=LONGEST_POLLING,
            query_interval=QUERY_INTERVAL,
            log_retention=log_retention,
            purpose="the node group's capacity",
        )
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=capacity_provider.service_token,
            resource_type=GROUP_CAPACITY_RESOURCE_TYPE,
            properties={"AutoScalingGroupName": group.ref, "Target": target, "Rollout": rollout},
        )
