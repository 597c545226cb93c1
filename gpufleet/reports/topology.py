"""``nvidia-smi topo -m`` parsed into a frozen matrix, and checked against the instance catalog.

``parse_topology(text)`` reads the header row (GPU0..GPUn, NIC0..NICm or, on old drivers, NIC device names such as
mlx5_0, then CPU Affinity / NUMA Affinity / GPU NUMA ID), one row per device and the ``NIC Legend:`` block
(``NIC0: rdmap16s27`` for EFA, ``mlx5_0`` for Mellanox). ANSI colour/underline codes are removed first; cells may
be separated by tabs (what nvidia-smi writes) or by runs of spaces (what a terminal copy gives).

``Topology.nic_devices`` names each NIC column's device: from the legend for a ``NIC0`` column, the column
itself where an old driver wrote the device name there (``mlx5_0``: NVIDIA/nccl-tests issue #78), and None (not
known) for a ``NIC0`` column the capture has no legend line for: a matrix copied without the lines after it,
as the matrices in NVIDIA/nccl issue #933 and deepseek-ai/DeepEP issue #128 are. Such a matrix is still a whole
matrix: its NICs are counted and reported.

A capture that was cut short (a device row with fewer link cells than the header has device columns, a device
in the header with no row) raises ``TopologyParseError``: it is the capture that is broken, not the node, so the
command reports it as unusable input (exit 2). A GPU the node does not show at all (the header itself has fewer
GPUs than the catalog) is a node problem and goes into ``TopologyCheck.problems`` (exit 1).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re

from gpufleet.catalog import InstanceType

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LINK = re.compile(r"^(?:X|SYS|SOC|NODE|PHB|PXB|PIX|PSB|NV\d+)$")
_GPU = re.compile(r"^GPU\d+$")
_NIC_COLUMN = re.compile(r"^NIC\d+$")
_NIC_LEGEND = re.compile(r"^\s*(?P<nic>NIC\d+):\s*(?P<device>\S+)\s*$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


@dataclasses.dataclass(frozen=True)
class Topology:
    devices: tuple[str, ...]  # column order of the matrix: GPU0..GPUn then NIC columns
    matrix: tuple[tuple[str, ...], ...]  # matrix[i][j]: link from devices[i] to devices[j]; "X" on the diagonal
    cpu_affinity: tuple[tuple[str, str], ...]  # (GPU, "0-23,48-71")
    numa_affinity: tuple[tuple[str, str], ...]  # (GPU, "0")
    nic_legend: tuple[tuple[str, str], ...]  # (NIC0, rdmap16s27)

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if _GPU.match(d))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if not _GPU.match(d))

    @property
    def nic_devices(self) -> tuple[tuple[str, str | None], ...]:
        """(column, device) per NIC column; device None where a NIC# column has no legend line."""
        legend = dict(self.nic_legend)
        return tuple((nic, legend.get(nic) if _NIC_COLUMN.match(nic) else nic) for nic in self.nics)

    def link(self, a: str, b: str) -> str:
        index = self._index
        return self.matrix[index[a]][index[b]]

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        """Each device's position (the first, for a name the header repeats): a lookup in constant time, so that
        checking every GPU pair takes time in proportion to the matrix."""
        index: dict[str, int] = {}
        for position, device in enumerate(self.devices):
            index.setdefault(device, position)
        return index


@dataclasses.dataclass(frozen=True)
class TopologyCheck:
    instance_type: str
    gpus: int
    expected_gpus: int
    links: tuple[tuple[str, str], ...]  # ("GPU0-GPU1", "NV12"), each GPU pair once
    nvlink_pairs: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


class TopologyParseError(ValueError):
    """The text is not a complete ``nvidia-smi topo -m`` matrix."""


def parse_topology(text: str) -> Topology:
    lines = [_ANSI.sub("", line).rstrip("\r\n") for line in text.splitlines()]
    header_index, devices, affinity_columns = _find_header(lines)
    known = set(devices)
    rows: dict[str, tuple[str, ...]] = {}
    affinities: dict[str, tuple[str, ...]] = {}
    for line in lines[header_index + 1 :]:
        cells = _cells(line)
        if not cells or cells[0] not in known or cells[0] in rows:
            continue
        label, values = cells[0], cells[1:]
        links = values[: len(devices)]
        if len(links) < len(devices) or not all(_LINK.match(cell) for cell in links):
            raise TopologyParseError(
                f"row {_shown(label)} has {sum(bool(_LINK.match(c)) for c in links)} of {len(devices)} link cells "
                "(capture cut short?)"
            )
        rows[label] = tuple(links)
        affinities[label] = tuple(values[len(devices) : len(devices) + len(affinity_columns)])
    missing = [device for device in devices if device not in rows]
    if missing:
        named = ", ".join(_shown(device) for device in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise TopologyParseError(f"no row for {named}{more} (capture cut short?)")
    gpus = [d for d in devices if _GPU.match(d)]

    def affinity(column: str) -> tuple[tuple[str, str], ...]:
        if column not in affinity_columns:
            return ()
        position = affinity_columns.index(column)
        return tuple((gpu, affinities[gpu][position]) for gpu in gpus if len(affinities[gpu]) > position)

    return Topology(
        devices=devices,
        matrix=tuple(rows[device] for device in devices),
        cpu_affinity=affinity("CPU Affinity"),
        numa_affinity=affinity("NUMA Affinity"),
        nic_legend=tuple(
            (match.group("nic"), match.group("device")) for line in lines if (match := _NIC_LEGEND.match(line))
        ),
    )


def _shown(device: str) -> str:
    """A device name for a message, cut to 40 characters (a damaged header can hold anything)."""
    return device if len(device) <= 40 else f"{device[:40]}..."


def _cells(line: str) -> list[str]:
    """Cells of a matrix line: tab-separated as nvidia-smi prints it, else whitespace-separated."""
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t")]
    return line.split()


def _find_header(lines: list[str]) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    for index, line in enumerate(lines):
        if "\t" in line:
            cells = [cell.strip() for cell in line.split("\t") if cell.strip()]
        else:
            cells = re.split(r"\s{2,}", line.strip())
        if "GPU0" not in cells or (cells and cells[0] != "GPU0"):
            continue
        devices: list[str] = []
        for cell in cells:
            if cell.startswith("CPU Affinity") or cell == "CPU":
                break
            devices.extend(cell.split())
        affinity_columns = tuple(name for name in _AFFINITY_COLUMNS if name in line)
        return index, tuple(devices), affinity_columns
    raise TopologyParseError("no 'nvidia-smi topo -m' header row (a line of GPU0 GPU1 ... column names)")


def check_topology(topology: Topology, instance: InstanceType) -> TopologyCheck:
    """Compare ``topology`` with what the catalog says ``instance`` has: GPU count, NVSwitch, EFA devices."""
    problems: list[str] = []
    gpus = topology.gpus
    if len(gpus) != instance.gpu.count:
        problems.append(f"{len(gpus)} GPUs in the matrix, {instance.name} has {instance.gpu.count} (catalog)")
    links: list[tuple[str, str]] = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            forward, backward = topology.link(a, b), topology.link(b, a)
            if forward != backward:
                problems.append(f"{a}-{b}: {a} row says {forward}, {b} row says {backward}")
            links.append((f"{a}-{b}", forward))
    nvlink_counts = [int(link[2:]) for _, link in links if link.startswith("NV")]
    if instance.nvswitch:
        for pair, link in links:
            if not link.startswith("NV"):
                problems.append(f"{pair}: {link}, expected an NVLink (NV#) on NVSwitch {instance.name}")
        if nvlink_counts:
            usual = collections.Counter(nvlink_counts).most_common(1)[0][0]
            for pair, link in links:
                if link.startswith("NV") and int(link[2:]) < usual:
                    problems.append(f"{pair}: {link}, fewer NVLinks than the other pairs (NV{usual})")
    if instance.gpudirect_rdma and len(topology.nics) != instance.max_efa_interfaces:
        problems.append(
            f"{len(topology.nics)} NICs in the matrix, {instance.name} has {instance.max_efa_interfaces} EFA "
            "devices (catalog): check that every EFA interface is attached and the efa driver is loaded"
        )
    return TopologyCheck(
        instance_type=instance.name,
        gpus=len(gpus),
        expected_gpus=instance.gpu.count,
        links=tuple(links),
        nvlink_pairs=len(nvlink_counts),
        problems=tuple(problems),
    )
