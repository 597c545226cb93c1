"""Where the nodes' capacity comes from, as launch template and Auto Scaling group properties: On-Demand Capacity
Reservations (capacity.reservation) and EC2 Capacity Blocks for ML (capacity.capacity_block).

Who targets the reservation depends on the backend, because the launch template is shared by every node the backend
launches:
- A Capacity Block: the launch template, with market type capacity-block and the block's reservation as target
  (EC2 user guide, capacity-blocks-launch.html: `--instance-market-options MarketType='capacity-block'` and the
  reservation id; EC2 Auto Scaling user guide, launch-template-capacity-blocks.html: "When you create your launch
  template, specify the Capacity Block's reservation ID"). Every node is in the block (gpufleet.validators).
- Reservations with the spot-fleet backend (preference only, every node on-demand): the launch template, with the
  preference capacity-reservations-only and the target. The EC2 API takes a preference and a target together only
  for capacity-reservations-only (API_CapacityReservationSpecification: "You can only specify
  CapacityReservationPreference and CapacityReservationTarget if the CapacityReservationPreference is
  capacity-reservations-only"); the target holds one id or one resource group (API_CapacityReservationTarget).
- Reservations with the auto-scaling backend: the group's CapacityReservationSpecification
  (auto_scaling_capacity_reservation), whose preference says "reservations, then on-demand" too
  (capacity-reservations-first) and whose target lists ids or resource groups (cfn-lint's bundled
  AWS::AutoScaling::AutoScalingGroup schema). The launch template stays without one, so the group's spot nodes do
  not carry a reservation target.

Permissions: launching into a reservation is ec2:RunInstances on its capacity-reservation resource (Service
Authorization Reference, as bundled by parliament: RunInstances lists `capacity-reservation` among its resources).
The roles that launch the nodes have ec2:RunInstances on every resource: AmazonEC2SpotFleetTaggingRole (the Spot
Fleet role) and AutoScalingServiceRolePolicy (the Auto Scaling service-linked role, AWS managed policy reference).
ParallelCluster grants resource-groups:ListGroupResources on the group to the principal that launches into a
resource group (cli/src/pcluster/templates/cdk_builder_utils.py); whether the two AWS-managed launch roles need or
have it is (unconfirmed).
"""

from __future__ import annotations

from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2

from gpufleet.constants import (
    AUTO_SCALING_RESERVATION_PREFERENCES,
    BACKEND_SPOT_FLEET,
    CAPACITY_BLOCK_MARKET_TYPE,
    LAUNCH_TEMPLATE_RESERVATIONS_ONLY,
)
from gpufleet.environment import CapacityReservation


def launch_template_market_options(
    capacity_block_id: str | None,
) -> ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty | None:
    if capacity_block_id is None:
        return None
    return ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type=CAPACITY_BLOCK_MARKET_TYPE)


def launch_template_capacity_reservation(
    *, capacity_block_id: str | None, reservation: CapacityReservation | None, backend: str
) -> ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty | None:
    """The launch template's reservation targeting: a Capacity Block's, or the reservations of a spot-fleet
    environment (backend: its fleet.backend). None leaves EC2's default (open: any open reservation that matches)."""
    if capacity_block_id is not None:
        return launch_template_capacity_block(capacity_block_id)
    if reservation is None or backend != BACKEND_SPOT_FLEET:
        return None
    return launch_template_reservations_only(reservation)


def launch_template_capacity_block(
    capacity_block_id: str,
) -> ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty:
    """A launch template's target in a Capacity Block, as AWS's examples launch into one (the EC2 user guide's and the
    EKS user guide's, capacity-blocks-mng): the target alone."""
    return ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
        capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
            capacity_reservation_id=capacity_block_id
        )
    )


def launch_template_reservations_only(
    reservation: CapacityReservation,
) -> ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty:
    """A launch template that every node launches from into the reservations: the spot-fleet backend's, and an EKS
    managed node group's. gpufleet.validators leaves them preference only, with one id or a group."""
    return ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
        capacity_reservation_preference=LAUNCH_TEMPLATE_RESERVATIONS_ONLY,
        capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
            capacity_reservation_id=reservation.ids[0] if reservation.ids else None,
            capacity_reservation_resource_group_arn=reservation.resource_group_arn,
        ),
    )


def auto_scaling_capacity_reservation(
    reservation: CapacityReservation | None,
) -> autoscaling.CfnAutoScalingGroup.CapacityReservationSpecificationProperty | None:
    """The Auto Scaling group's CapacityReservationSpecification for the auto-scaling backend; None where the group
    leaves it to the launch template (no reservation, or a Capacity Block, which the launch template targets)."""
    if reservation is None:
        return None
    return autoscaling.CfnAutoScalingGroup.CapacityReservationSpecificationProperty(
        capacity_reservation_preference=AUTO_SCALING_RESERVATION_PREFERENCES[reservation.preference],
        capacity_reservation_target=autoscaling.CfnAutoScalingGroup.CapacityReservationTargetProperty(
            capacity_reservation_ids=list(reservation.ids) if reservation.ids else None,
            capacity_reservation_resource_group_arns=[reservation.resource_group_arn]
            if reservation.resource_group_arn
            else None,
        ),
    )
