"""The interface layout of the launch template for catalog entries the shipped environments do not use."""

from __future__ import annotations

from gpufleet.catalog import load_catalog
from stacks.constructs.node_network_interfaces import node_network_interfaces


def layout(instance, efa):
    interfaces = node_network_interfaces(instance=instance, efa=efa, subnet_id="subnet-1", security_group_ids=["sg-1"])
    return [(i.network_card_index, i.device_index, i.interface_type, i.associate_public_ip_address) for i in interfaces]


def test_a_type_without_efa_only_gets_efa_interfaces_at_device_1_on_further_cards():
    p4d = load_catalog()["p4d.24xlarge"].model_copy(update={"efa_only_interfaces": False})
    assert layout(p4d, efa=True) == [
        (0, 0, "efa", False),
        (1, 1, "efa", False),
        (2, 1, "efa", False),
        (3, 1, "efa", False),
    ]


def test_without_efa_a_node_has_one_plain_interface():
    assert layout(load_catalog()["p5.48xlarge"], efa=False) == [(0, 0, "interface", False)]


def test_p5_gets_efa_on_card_0_and_efa_only_on_the_31_others():
    assert layout(load_catalog()["p5.48xlarge"], efa=True) == [(0, 0, "efa", False)] + [
        (card, 0, "efa-only", None) for card in range(1, 32)
    ]


def test_every_interface_sits_in_the_node_subnet_and_group_and_goes_with_its_node():
    """The subnet and security group are the EFA ones (EFA traffic stays inside one subnet and the group that allows
    it); an interface left behind by a terminated node would keep its address and count against the account."""
    interfaces = node_network_interfaces(
        instance=load_catalog()["p5.48xlarge"], efa=True, subnet_id="subnet-1", security_group_ids=["sg-1"]
    )
    assert {(i.subnet_id, tuple(i.groups), i.delete_on_termination) for i in interfaces} == {
        ("subnet-1", ("sg-1",), True)
    }
    assert (len(interfaces), interfaces[0].description, interfaces[31].description) == (
        32,
        "gpufleet node network card 0",
        "gpufleet node network card 31",
    )


def test_a_plain_interface_is_described_by_its_card():
    (plain,) = node_network_interfaces(
        instance=load_catalog()["g5.8xlarge"], efa=False, subnet_id="subnet-1", security_group_ids=["sg-1"]
    )
    assert (plain.description, plain.subnet_id, plain.groups, plain.delete_on_termination) == (
        "gpufleet node network card 0",
        "subnet-1",
        ["sg-1"],
        True,
    )


def test_an_eks_node_group_layout_names_no_subnet_and_both_groups_on_every_interface():
    """An EKS managed node group's launch template may not name a subnet on an interface, and with security groups on
    the interfaces EKS adds no cluster security group: every interface carries the EFA group and the cluster's (EKS
    user guide, launch-templates)."""
    interfaces = node_network_interfaces(
        instance=load_catalog()["p5.48xlarge"], efa=True, subnet_id=None, security_group_ids=["sg-efa", "sg-cluster"]
    )
    assert {(i.subnet_id, tuple(i.groups)) for i in interfaces} == {(None, ("sg-efa", "sg-cluster"))}
