"""The launch-template network interfaces of a node: one per network card, EFA where the type has it."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

from gpufleet.catalog import InstanceType


def node_network_interfaces(
    *, instance: InstanceType, efa: bool, subnet_id: str | None, security_group_ids: list[str]
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """One interface per card, of the type InstanceType.interface_types gives it, in subnet_id (None: the subnet comes
    from elsewhere, as an EKS managed node group's does) with security_group_ids. Device indexes as AWS recommends
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): the primary interface at card 0,
    device 0; an `efa-only` interface on a further card at device 0; an `efa` interface on a further card at device
    1 (ParallelCluster's layout before `efa-only`, cli/src/pcluster/templates/queues_stack.py)."""
    return [
        ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
            network_card_index=card,
            device_index=0 if card == 0 or interface_type == "efa-only" else 1,
            interface_type=interface_type,
            subnet_id=subnet_id,
            groups=security_group_ids,
            # An efa-only interface has no IP address, so no public one to refuse.
            associate_public_ip_address=None if interface_type == "efa-only" else False,
            delete_on_termination=True,
            description=f"gpufleet node network card {card}",
        )
        for card, interface_type in enumerate(instance.interface_types(efa))
    ]
