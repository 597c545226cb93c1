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
    nvme: NvmeSpec
    gpudirect_rdma: bool
    mig_profiles: tuple[str, ...]
    nccl_allreduce_busbw_gbs: float | None

    @property
    def efa_supported(self) -> bool:
        return self.max_efa_interfaces > 0


@functools.cache
def load_catalog() -> dict[str, InstanceType]:
    entries = yaml.safe_load(CATALOG_FILE.read_text())
    return {name: InstanceType(name=name, **fields) for name, fields in entries.items()}
