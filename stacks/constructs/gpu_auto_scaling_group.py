"""The Auto Scaling group that keeps the nodes running (fleet.backend: auto-scaling), in the one node subnet, on the
node launch template (which carries the placement group or the Capacity Block, and tags the nodes): an on-demand
base and spot for the rest (a mixed instances policy), or every node in a Capacity Block.

Sizes. CloudFormation marks a group CREATE_COMPLETE "when the desired capacity is reached" (the DesiredCapacity
description in cfn-lint's bundled AWS::AutoScaling::AutoScalingGroup schema, whose create handler may run 360
minutes and update handler 2160). Whether a create whose launches keep failing fails early or waits that long, and
whether an update waits for the desired capacity at all, is (unconfirmed): the handlers' stabilization rules are not
public. So the template never asks for nodes that capacity may not allow: MinSize is 0 (a minimum equal to the
target adds no node, and would forbid the desired capacity of 0 that a Capacity Block group needs until its block
starts) and MaxSize is the target.
- A group without a Capacity Block has no DesiredCapacity in its template: it starts at its MinSize, 0, and the
  GroupCapacity custom resource (stacks/constructs/group_capacity/) sets its desired capacity to the target once
  CloudFormation has created it, and again when the target changes; a deploy completes while capacity is short and
  the nodes launch as it allows (under replace-all, a new group's resource waits for its nodes: see there).
- A Capacity Block group has no DesiredCapacity either: the BlockCapacity custom resource sets it at deploy time
  (below).

A Capacity Block group:
- names the launch template itself (LaunchTemplate, at a fixed version), without a mixed instances policy: "Mixed
  instances groups and warm pools are not supported" (EC2 Auto Scaling user guide,
  launch-template-capacity-blocks.html, "Limitations"); "Launch-template-based targeting of Capacity Blocks ... is
  not supported with mixed instances policies" and "Point your Auto Scaling group to a specific launch template
  version instead of the $Default or $Latest version" (capacity-reservation-create-asg-procedure.html);
- scales out at the block's start and in to zero before its end through scheduled actions ("use scheduled scaling to
  scale out (add instances) and scale in (remove instances) at the appropriate reservation times", the same guide),
  which the BlockCapacity custom resource (stacks/constructs/block_capacity/) puts at deploy time, when
  gpufleet.block_schedule says: AWS refuses an action in the past, and a template may be deployed long after it was
  synthesized. Created at MinSize 0, the group wants no node until the block starts, so a deploy before the start
  waits for no node;
- keeps what a scheduled action set across deploys: "When you update a stack with an Auto Scaling group and
  scheduled action, CloudFormation always sets the min size, max size, and desired capacity properties of your group
  to the values that are defined in the AWS::AutoScaling::AutoScalingGroup section of your template", unless the
  UpdatePolicy AutoScalingScheduledAction's IgnoreUnmodifiedGroupSizeProperties leaves them "unless you modified the
  individual values in your template" (CloudFormation template reference, aws-resource-as-scheduledaction.html).

What a deploy does to a deployed group follows from AWS::AutoScaling::AutoScalingGroup's resource schema (cfn-lint's
bundled copy, read with cfnlint.schema.PROVIDER_SCHEMA_MANAGER): only AutoScalingGroupName and InstanceId are
createOnlyProperties, so capacity, tags, the mixed instances policy and the launch template version all update in
place. The group has no AutoScalingReplacingUpdate or AutoScalingRollingUpdate policy: they act on every change of
LaunchTemplate, VPCZoneIdentifier or PlacementGroup (CloudFormation template reference, "UpdatePolicy attribute",
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-updatepolicy.html), and the
launch template changes with any node setting, not only the image. AutoScalingScheduledAction replaces no node.

Image roll-out follows fleet.rollout, as for the Spot Fleet (stacks/constructs/gpu_spot_fleet.py):
- manual: the group takes the new launch template version in place; running nodes keep their image, new nodes
  (replacements, capacity rebalancing) get the new one;
- replace-all: the group's name carries the node image, resolved by CloudFormation at deploy time. A deploy that
  resolves a new image changes the create-only AutoScalingGroupName, so CloudFormation creates a new group, and
  deletes the old one (and with it its nodes) only after the update has succeeded, that is after the GroupCapacity
  resource has seen the new group's nodes InService; every other change stays in place. Not for a Capacity Block
  group (gpufleet.validators.capacity says why).

A change of OnDemandBaseCapacity (capacity.on_demand) replaces nodes gradually, new ones first (the schema's
description of InstancesDistribution.OnDemandBaseCapacity: "An update to this setting means a gradual replacement of
instances"); `gpufleet plan` says so.

Termination lifecycle hook: every node the group terminates (scale-in, rebalancing, replacement, the group's
deletion) waits in Terminating:Wait until the node watcher (scripts/node/spot-watcher.sh) has run the checkpoint
hook and completed the lifecycle action, or until TERMINATION_HOOK_TIMEOUT_SECONDS pass, after which the termination
goes on (DefaultResult CONTINUE). The node role may complete lifecycle actions of this group only.

Deleting the group terminates its nodes: "When you delete an Auto Scaling group, its desired, minimum, and maximum
values are set to 0. As a result, the instances are terminated." (EC2 Auto Scaling user guide, "Delete your Auto
Scaling infrastructure", https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-process-shutdown.html); the
schema's delete handler has the permissions for it (autoscaling:UpdateAutoScalingGroup, DeleteAutoScalingGroup)
and runs up to 240 minutes. A node waits at most TERMINATION_HOOK_TIMEOUT_SECONDS in Terminating:Wait, so the hook
adds at most that to a deletion, far inside the handler's time. The group depends on the placement group, security
group and launch template it uses, so CloudFormation deletes it, with its nodes, before any of them; its
BlockCapacity resource depends on it and goes first, deleting the scheduled actions it made.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.constants import (
    AUTO_SCALING_ON_DEMAND_ALLOCATION_STRATEGIES,
    AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES,
    ENVIRONMENT_TAG_KEY,
    ROLLOUT_REPLACE_ALL,
    TERMINATION_HOOK_NAME,
    TERMINATION_HOOK_TIMEOUT_SECONDS,
)
from gpufleet.environment import CapacityBlock, CapacityReservation, Fleet
from stacks.constructs.block_capacity.infrastructure import BlockCapacity
from stacks.constructs.capacity_reservations import auto_scaling_capacity_reservation
from stacks.constructs.environment_groups import acknowledge_group_arns, environment_groups_statement, group_arns
from stacks.constructs.group_capacity.infrastructure import GroupCapacity
from stacks.constructs.node_launch_template import NodeLaunchTemplate


def group_name(prefix: str, fleet: Fleet, image_id: str) -> str:
    """The group's name: PREFIX, and under fleet.rollout replace-all carrying the node image (see the module doc)."""
    if fleet.image_rollout == ROLLOUT_REPLACE_ALL:
        return cdk.Fn.join("-", [prefix, image_id])
    return prefix


class GpuAutoScalingGroup(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        name_prefix: str,
        instance_type: str,
        target: int,
        on_demand: int,
        fleet: Fleet,
        reservation: CapacityReservation | None,
        capacity_block: CapacityBlock | None,
        launch_template: NodeLaunchTemplate,
        subnet_id: str,
        log_retention: logs.RetentionDays,
    ) -> None:
        """name_prefix: the group's name, or its prefix under replace-all (Environment.auto_scaling_group_prefix);
        target, on_demand: the nodes the group keeps and its on-demand base; capacity_block: the block every node
        launches into (capacity.capacity_block), None for a group without one; log_retention: of the GroupCapacity or
        BlockCapacity handlers' logs."""
        super().__init__(scope, construct_id)
        arns = group_arns(cdk.Stack.of(self), name_prefix, fleet)
        template = launch_template.launch_template
        template_version = autoscaling.CfnAutoScalingGroup.LaunchTemplateSpecificationProperty(
            launch_template_id=template.ref, version=template.attr_latest_version_number
        )
        name = group_name(name_prefix, fleet, launch_template.image_id)
        self.group = autoscaling.CfnAutoScalingGroup(
            self,
            "Resource",
            auto_scaling_group_name=name,
            min_size="0",
            max_size=str(target),
            # The one node subnet: EFA traffic stays inside one subnet. The placement group comes with the launch
            # template (Placement.GroupName), as for the Spot Fleet.
            vpc_zone_identifier=[subnet_id],
            capacity_rebalance=fleet.capacity_rebalance is not None,
            launch_template=template_version if capacity_block else None,
            mixed_instances_policy=None
            if capacity_block
            else autoscaling.CfnAutoScalingGroup.MixedInstancesPolicyProperty(
                launch_template=autoscaling.CfnAutoScalingGroup.LaunchTemplateProperty(
                    launch_template_specification=template_version,
                    overrides=[
                        autoscaling.CfnAutoScalingGroup.LaunchTemplateOverridesProperty(instance_type=instance_type)
                    ],
                ),
                instances_distribution=autoscaling.CfnAutoScalingGroup.InstancesDistributionProperty(
                    on_demand_base_capacity=on_demand,
                    on_demand_percentage_above_base_capacity=0,
                    on_demand_allocation_strategy=AUTO_SCALING_ON_DEMAND_ALLOCATION_STRATEGIES[
                        fleet.on_demand_allocation_strategy
                    ],
                    spot_allocation_strategy=AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES[fleet.allocation_strategy],
                ),
            ),
            capacity_reservation_specification=auto_scaling_capacity_reservation(reservation),
            lifecycle_hook_specification_list=[
                autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty(
                    lifecycle_hook_name=TERMINATION_HOOK_NAME,
                    lifecycle_transition="autoscaling:EC2_INSTANCE_TERMINATING",
                    heartbeat_timeout=TERMINATION_HOOK_TIMEOUT_SECONDS,
                    default_result="CONTINUE",
                )
            ],
            # The launch template tags the nodes, their volumes and interfaces with every environment tag; the group
            # carries the environment tag for operator tools and the node role's condition, not copied to nodes
            # (PropagateAtLaunch false), so a node has each tag once, from one place.
            tags=[
                autoscaling.CfnAutoScalingGroup.TagPropertyProperty(
                    key=ENVIRONMENT_TAG_KEY, value=environment_name, propagate_at_launch=False
                )
            ],
        )
        if capacity_block is not None:
            self._schedule(capacity_block, arns, environment_name, target, log_retention)
        else:
            GroupCapacity(
                self,
                "Capacity",
                group=self.group,
                group_arns=arns,
                environment_name=environment_name,
                target=target,
                rollout=fleet.image_rollout,
                log_retention=log_retention,
            )
        for rule, reason in (
            (
                "AwsSolutions-AS3",
                "gpufleet status reads the group's scaling activities (DescribeScalingActivities) and the node "
                "watcher sees terminations through instance metadata; an SNS topic per environment would add a "
                "resource nobody subscribes to",
            ),
            (
                # The rule cannot follow the launch template reference (it reports "Rule threw an error").
                "AwsSolutions::AwsSolutions-EC26",
                "the node launch template, the group's only source of volumes, encrypts the gp3 root volume "
                "(NodeLaunchTemplate; tests/stacks/test_cluster_stack.py checks it) and nodes attach no others",
            ),
        ):
            cdk.Validations.of(self.group).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))
        self._let_nodes_complete_their_lifecycle_action(launch_template.role, environment_name, arns)

    def _schedule(
        self,
        block: CapacityBlock,
        arns: dict[str, str],
        environment_name: str,
        target: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        """The block's schedule, made at deploy time, and the update policy that keeps what it sets across deploys."""
        self.group.cfn_options.update_policy = cdk.CfnUpdatePolicy(
            auto_scaling_scheduled_action=cdk.CfnAutoScalingScheduledAction(
                ignore_unmodified_group_size_properties=True
            )
        )
        BlockCapacity(
            self,
            "BlockCapacity",
            group=self.group,
            group_arns=arns,
            environment_name=environment_name,
            target=target,
            start=block.start,
            end=block.end,
            log_retention=log_retention,
        )

    def _let_nodes_complete_their_lifecycle_action(
        self, role: iam.IRole, environment_name: str, arns: dict[str, str]
    ) -> None:
        """autoscaling:CompleteLifecycleAction on this group only (ARNS: group_arns). The statement names the group by
        its name, not by a reference to it, and the policy outlives the group: CloudFormation deletes the group, whose
        nodes complete their lifecycle actions as they go, before the policy (the group depends on it). The
        environment tag condition keeps other environments' groups out."""
        policy = iam.Policy(
            self,
            "CompleteLifecycleAction",
            statements=[environment_groups_statement(["autoscaling:CompleteLifecycleAction"], arns, environment_name)],
        )
        policy.attach_to_role(role)
        self.group.node.add_dependency(policy)
        acknowledge_group_arns(
            policy,
            arns,
            environment_name,
            limits="the nodes to completing lifecycle actions of their own environment's group",
        )
