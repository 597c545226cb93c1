"""The instance catalog agrees with EC2's DescribeInstanceTypes data (the copy moto bundles)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import botocore.session
import moto
import pytest

from gpufleet.catalog import load_catalog

EC2_INSTANCE_TYPES = json.loads(
    gzip.decompress((Path(moto.__file__).parent / "ec2/resources/instance_types.json.gz").read_bytes())
)
CATALOG = load_catalog()


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_catalog_entry_matches_describe_instance_types(name):
    entry, ec2 = CATALOG[name], EC2_INSTANCE_TYPES[name]
    (gpus,) = ec2["GpuInfo"]["Gpus"]
    (disks,) = ec2["InstanceStorageInfo"]["Disks"]
    network = ec2["NetworkInfo"]
    assert (entry.gpu.model, entry.gpu.count) == (gpus["Name"], gpus["Count"])
    assert entry.gpu.memory_gib == round(gpus["MemoryInfo"]["SizeInMiB"] / 1024)
    assert entry.vcpus == ec2["VCpuInfo"]["DefaultVCpus"]
    assert entry.memory_gib == ec2["MemoryInfo"]["SizeInMiB"] // 1024
    assert entry.network_cards == network["MaximumNetworkCards"]
    assert entry.max_efa_interfaces == (network["EfaInfo"]["MaximumEfaInterfaces"] if network["EfaSupported"] else 0)
    assert (entry.nvme.count, entry.nvme.size_gb) == (disks["Count"], disks["SizeInGB"])
    assert ec2["InstanceStorageInfo"]["NvmeSupport"] == "required"
    assert sorted(entry.usage_classes) == sorted(ec2["SupportedUsageClasses"])
    assert entry.efa_only_interfaces == all("efa-only" in card["InterfaceTypes"] for card in network["NetworkCards"])


def test_every_card_takes_the_interface_type_the_launch_template_gives_it():
    for name, entry in CATALOG.items():
        cards = EC2_INSTANCE_TYPES[name]["NetworkInfo"]["NetworkCards"]
        for card, interface_type in zip(cards, entry.interface_types(efa=True), strict=True):
            assert interface_type in card["InterfaceTypes"], (name, card["NetworkCardIndex"])


@pytest.mark.parametrize(
    ("name", "efa", "types", "addresses"),
    [
        ("p5.48xlarge", True, ("efa",) + ("efa-only",) * 31, 1),
        ("p4d.24xlarge", True, ("efa", "efa-only", "efa-only", "efa-only"), 1),
        ("g5.48xlarge", True, ("efa",), 1),
        ("p5.48xlarge", False, ("interface",), 1),
    ],
)
def test_interface_types_per_card_and_the_addresses_they_take(name, efa, types, addresses):
    assert CATALOG[name].interface_types(efa) == types
    assert CATALOG[name].addresses_per_node(efa) == addresses


def test_without_efa_only_support_every_card_takes_an_efa_interface_and_an_address():
    p4d = CATALOG["p4d.24xlarge"].model_copy(update={"efa_only_interfaces": False})
    assert (p4d.interface_types(efa=True), p4d.addresses_per_node(efa=True)) == (("efa",) * 4, 4)


@pytest.mark.parametrize(
    ("name", "nvswitch", "gdr"),
    [("p4d.24xlarge", True, True), ("p5.48xlarge", True, True), ("g5.48xlarge", False, False)],
)
def test_fabric_facts(name, nvswitch, gdr):
    assert (CATALOG[name].nvswitch, CATALOG[name].gpudirect_rdma) == (nvswitch, gdr)


def test_every_catalog_type_is_in_botocores_instance_type_enum():
    """The InstanceType enum of botocore's ec2 model (botocore/data/ec2/2016-11-15/service-2.json) lists the types EC2
    had when the pinned botocore was released; `gpufleet validate` accepts only catalog types, so a catalog type
    missing from it (a typo, or a type newer than the pin) would pass validation and fail at deploy."""
    enum = botocore.session.get_session().get_service_model("ec2").shape_for("InstanceType").enum
    assert sorted(set(CATALOG) - set(enum)) == []
