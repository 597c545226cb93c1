"""The launch-template network interfaces of a node: one per network card, EFA where the type has it."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

from gpufleet.catalog import InstanceType


def node_network_interfaces(
    *, instance: InstanceType, efa: bool, subnet_id: str, security_group_id: str
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """ParallelCluster's layout: card 0 holds the primary interface (device 0); every further card gets its
    interface at device index 1. All interfaces are EFA when EFA is on; without EFA only card 0 is used."""
    cards = range(instance.network_cards) if efa else range(1)
    return [
        ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
            network_card_index=card,
            device_index=0 if card == 0 else 1,
            interface_type="efa" if efa else "interface",
            subnet_id=subnet_id,
            groups=[security_group_id],
            associate_public_ip_address=False,
            delete_on_termination=True,
            description=f"gpufleet node network card {card}",
        )
        for card in cards
    ]
