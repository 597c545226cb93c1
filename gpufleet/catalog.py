"""The instance catalog (instance_types.yaml), parsed into frozen objects."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

CATALOG_FILE = Path(__file__).with_name("instance_types.yaml")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSpec(_Frozen):
    model: str
    count: int
    memory_gib: int
    compute_capability: str


class NvmeSpec(_Frozen):
    count: int
    size_gb: int


class InstanceType(_Frozen):
    name: str
    vcpus: int
    memory_gib: int
    gpu: GpuSpec
    nvswitch: bool
    network_cards: int
    max_efa_interfaces: int
    network_gbps: int
    efa_only_interfaces: bool
    nvme: NvmeSpec
    gpudirect_rdma: bool
    mig_profiles: tuple[str, ...]
    nccl_allreduce_busbw_gbs: float | None
    usage_classes: tuple[str, ...]

    @property
    def efa_supported(self) -> bool:
        return self.max_efa_interfaces > 0

    def interface_types(self, efa: bool) -> tuple[str, ...]:
        """The interface type of a node's launch template on each network card it uses, card 0 first.

        Card 0 holds the primary interface, which routes the node's IP traffic and cannot be `efa-only`: `efa` (EFA
        with ENA) when EFA is on. Every further card gets `efa-only` where the type supports it, an EFA device
        without an IP address; AWS recommends it to save private addresses ("Maximize network bandwidth on Amazon
        EC2 instances with multiple network cards",
        https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html). Without EFA only card 0 is
        used."""
        if not efa:
            return ("interface",)
        secondary = "efa-only" if self.efa_only_interfaces else "efa"
        return ("efa",) + (secondary,) * (self.network_cards - 1)

    def addresses_per_node(self, efa: bool) -> int:
        """Private IPv4 addresses a node takes in its subnet: one per interface that has an ENA device."""
        return sum(interface_type != "efa-only" for interface_type in self.interface_types(efa))


@functools.cache
def load_catalog() -> dict[str, InstanceType]:
    entries = yaml.safe_load(CATALOG_FILE.read_text())
    return {name: InstanceType(name=name, **fields) for name, fields in entries.items()}
