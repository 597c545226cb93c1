"""When the nodes of a Capacity Block run: the Auto Scaling group scales out to capacity.target when the block starts
and in to zero SCALE_IN_LEAD before it ends, through scheduled actions (stacks/constructs/gpu_auto_scaling_group.py).

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
  (PutScheduledUpdateGroupAction, botocore's autoscaling model), so the template holds only the actions still ahead
  at synthesis, SCHEDULE_AHEAD counted for the deploy to reach them, and the group's DesiredCapacity is what the
  actions already passed would have set. The template therefore depends on the time of synthesis: it holds at most
  three shapes over a block's life (before the start, inside the window, after the scale-in).

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
# Our choice: an action due sooner than this after synthesis could be in the past by the time CloudFormation creates
# it (the stack's other resources come first); the group is synthesized as if it had run.
SCHEDULE_AHEAD = dt.timedelta(minutes=15)

# On the eks flavour EKS scales a Capacity Block's managed node group in itself: "Amazon EKS will setup a scheduled
# scale down on the node group 40 minutes prior to their reservation end in order to safely and gracefully evict Pods"
# (EKS user guide, capacity-blocks-mng.adoc at awsdocs/amazon-eks-user-guide f6004140, a scheduled action named
# "Amazon EKS Node Group Capacity Scaledown Before Reservation End").
EKS_SCALE_IN_LEAD = dt.timedelta(minutes=40)

SCALE_OUT = "ScaleOut"
SCALE_IN = "ScaleIn"


@dataclass(frozen=True)
class ScheduledCapacity:
    """A one-time scheduled action: at this time the group's desired capacity becomes this."""

    name: str  # SCALE_OUT or SCALE_IN
    at: dt.datetime
    desired_capacity: int


@dataclass(frozen=True)
class BlockSchedule:
    """The group's DesiredCapacity in the template, and the scheduled actions still ahead."""

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
    """The schedule of TARGET nodes in the block [START, END) as synthesized at NOW."""
    ahead = now + SCHEDULE_AHEAD
    scale_in = scale_in_time(end, FLAVOUR_FLEET)
    actions = []
    if start > ahead:
        desired = 0
        actions.append(ScheduledCapacity(SCALE_OUT, start, target))
    else:
        desired = target if scale_in > ahead else 0
    if scale_in > ahead:
        actions.append(ScheduledCapacity(SCALE_IN, scale_in, 0))
    return BlockSchedule(desired, tuple(actions))


def eks_block_desired_size(*, end: dt.datetime, target: int, now: dt.datetime) -> int:
    """The desired size of an eks Capacity Block node group synthesized at NOW: TARGET until EKS's scale-in is
    SCHEDULE_AHEAD away (EKS would set its scale-in action in the past), 0 after."""
    return target if scale_in_time(end, FLAVOUR_EKS) > now + SCHEDULE_AHEAD else 0
