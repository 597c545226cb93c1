"""The instance catalog agrees with EC2's DescribeInstanceTypes data (the copy moto bundles)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

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


def test_every_type_gives_secondary_cards_room_for_device_index_1():
    """Launch templates put the EFA interface of every card but 0 at device index 1."""
    for name in CATALOG:
        for card in EC2_INSTANCE_TYPES[name]["NetworkInfo"]["NetworkCards"][1:]:
            assert card["MaximumNetworkInterfaces"] >= 2, (name, card["NetworkCardIndex"])
            assert "efa" in card["InterfaceTypes"]


@pytest.mark.parametrize(
    ("name", "nvswitch", "gdr"),
    [("p4d.24xlarge", True, True), ("p5.48xlarge", True, True), ("g5.48xlarge", False, False)],
)
def test_fabric_facts(name, nvswitch, gdr):
    assert (CATALOG[name].nvswitch, CATALOG[name].gpudirect_rdma) == (nvswitch, gdr)
