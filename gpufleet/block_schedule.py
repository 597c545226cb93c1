"""When the nodes of a Capacity Block run: the Auto Scaling group scales out to capacity.target when the block starts
and in to zero SCALE_IN_LEAD before it ends, through scheduled actions that a custom resource puts at deploy time
(stacks/constructs/block_capacity/).

What AWS says, and what follows:
- "When your Capacity Block reservation begins, use scheduled scaling to launch the same number of instances as your
  Capacity Block reservation"; "Scale in your Auto Scaling group to zero more than 30 minutes before the Capacity
  Block reservation end time. Amazon EC2 will terminate any instances that are still running 30 minutes before the
  end time"; "Leave enough time for the lifecycle action to complete before Amazon EC2 starts forcibly terminating
  your instances" (EC2 Auto Scaling user guide, launch-template-capacity-blocks.html, "Operational guidelines").
  So the scale-in comes SCALE_IN_LEAD before the end: EC2's 30 minutes, the termination hook's full timeout (nodes
  without the AWS CLI always wait all of it) and SCALE_IN_MARGIN for the terminations themselves and for when the
  scheduled action runs. EC2's expiration warning (10 minutes before its terminations) then finds the nodes gone;
  it stays as the fallback for a block whose end the file does not say right (stacks/constructs/capacity_block_
  warning.py).
- "If you create a self-managed node group prior to the capacity reservation becoming active, then set the desired
  capacity to 0" (EKS user guide, capacity-blocks.html): before the block, the group wants no node, and a deploy
  has nothing to wait for (CloudFormation sets an Auto Scaling group CREATE_COMPLETE "when the desired capacity is
  reached": its DesiredCapacity description in cfn-lint's bundled schema).
- "If you try to schedule your action in the past, Amazon EC2 Auto Scaling returns an error message"
  (PutScheduledUpdateGroupAction, EC2 Auto Scaling API reference,
  https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_PutScheduledUpdateGroupAction.html, and botocore's
  autoscaling model). A template cannot know when it is deployed: `cdk deploy --all` synthesizes once and deploys
  the stacks in turn, and an assembly may be deployed later from CI, so an action computed at synthesis may be in the
  past by the time CloudFormation creates it, and the deploy fails. So the schedule is computed at deploy time, by the
  BlockCapacity custom resource's handler (stacks/constructs/block_capacity/), from the block's dates and the time
  the handler runs (block_schedule): an action still ahead is scheduled, one whose time has come is done at once by
  setting the group's desired capacity. The template holds the block's dates only, whatever the time of synthesis.

On the eks flavour the node group of a block follows what EKS documents for managed node groups (EKS user guide,
capacity-blocks-mng.adoc at awsdocs/amazon-eks-user-guide f6004140): "If you specify a non-zero desiredSize in the
create request, Amazon EKS will honor that when creating the Auto Scaling group ... Whenever the reservation becomes
active, then the launch of instances will succeed and the ASG will be scaled up to the desiredSize mentioned at create
time" (the launches fail until then), and EKS itself scales the group in to zero EKS_SCALE_IN_LEAD before the end. So
gpufleet schedules nothing there: the group is created wanting the block's nodes (eks_block_desired_size), and is
made anew for each block (stacks/eks_cluster_stack.py), since that desired size counts "at create time".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gpufleet.constants import (
    CAPACITY_BLOCK_TERMINATION_LEAD_MINUTES,
    FLAVOUR_EKS,
    FLAVOUR_FLEET,
    TERMINATION_HOOK_TIMEOUT_SECONDS,
)

TERMINATION_LEAD = dt.timedelta(minutes=CAPACITY_BLOCK_TERMINATION_LEAD_MINUTES)
# Our choice: time for the terminations to finish after the hook and for the scheduled action to run (AWS gives no
# figure for how late a scheduled action may run).
SCALE_IN_MARGIN = dt.timedelta(minutes=10)
SCALE_IN_LEAD = TERMINATION_LEAD + dt.timedelta(seconds=TERMINATION_HOOK_TIMEOUT_SECONDS) + SCALE_IN_MARGIN
# Our choice: on the eks flavour the node group's desired size is synthesized (eks_block_desired_size), and a scale-in
# due sooner than this after synthesis could be in the past by the time CloudFormation reaches the node group.
SCHEDULE_AHEAD = dt.timedelta(minutes=15)
# Our choice: the handler schedules no action sooner than this after it runs, longer than the handler may run (its
# one-minute timeout: stacks/constructs/block_capacity/infrastructure.py), so that every action it computes is still
# ahead when its call reaches Auto Scaling. A start sooner than that is scheduled at now + ACTION_LEAD (the nodes
# launch that much late at most; launching before the block is active would fail), a scale-in sooner than that is done
# at once (the nodes go that much early at most, inside SCALE_IN_MARGIN).
ACTION_LEAD = dt.timedelta(minutes=5)

# On the eks flavour EKS scales a Capacity Block's managed node group in itself: "Amazon EKS will setup a scheduled
# scale down on the node group 40 minutes prior to their reservation end in order to safely and gracefully evict Pods"
# (EKS user guide, capacity-blocks-mng.adoc at awsdocs/amazon-eks-user-guide f6004140, a scheduled action named
# "Amazon EKS Node Group Capacity Scaledown Before Reservation End").
EKS_SCALE_IN_LEAD = dt.timedelta(minutes=40)

# The scheduled actions' names (ScheduledActionName), unique in the group: the handler finds its own by them.
SCALE_OUT = "gpufleet-block-scale-out"
SCALE_IN = "gpufleet-block-scale-in"


@dataclass(frozen=True)
class ScheduledCapacity:
    """A one-time scheduled action: at this time the group's desired capacity becomes this."""

    name: str  # SCALE_OUT or SCALE_IN
    at: dt.datetime
    desired_capacity: int


@dataclass(frozen=True)
class BlockSchedule:
    """The desired capacity to set at once, and the scheduled actions to put."""

    desired_capacity: int
    actions: tuple[ScheduledCapacity, ...]


def scale_in_lead(flavour: str) -> dt.timedelta:
    """How long before a block's end its nodes are scaled in to zero: by gpufleet's scheduled action on the fleet
    flavour, by EKS's on the eks flavour."""
    return EKS_SCALE_IN_LEAD if flavour == FLAVOUR_EKS else SCALE_IN_LEAD


def scale_in_time(end: dt.datetime, flavour: str) -> dt.datetime:
    """When the nodes scale in to zero, for a block that ends at END."""
    return end - scale_in_lead(flavour)


def block_schedule(*, start: dt.datetime, end: dt.datetime, target: int, now: dt.datetime) -> BlockSchedule:
    """The schedule of TARGET nodes in the block [START, END) as the handler makes it at NOW: inside the window the
    group wants the nodes at once; before it, it wants none until a scale-out action; either way a scale-in action
    ends the window, unless that is less than ACTION_LEAD away (then the window is over: no node, no action)."""
    scale_in = scale_in_time(end, FLAVOUR_FLEET)
    if scale_in <= now + ACTION_LEAD:
        return BlockSchedule(0, ())
    scale_in_action = ScheduledCapacity(SCALE_IN, scale_in, 0)
    if start <= now:
        return BlockSchedule(target, (scale_in_action,))
    return BlockSchedule(0, (ScheduledCapacity(SCALE_OUT, max(start, now + ACTION_LEAD), target), scale_in_action))


def eks_block_desired_size(*, end: dt.datetime, target: int, now: dt.datetime) -> int:
    """The desired size of an eks Capacity Block node group synthesized at NOW: TARGET until EKS's scale-in is
    SCHEDULE_AHEAD away (EKS would set its scale-in action in the past), 0 after."""
    return target if scale_in_time(end, FLAVOUR_EKS) > now + SCHEDULE_AHEAD else 0
