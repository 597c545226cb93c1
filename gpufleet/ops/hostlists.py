"""Host lists for launchers (OpenMPI hostfile, torchrun arguments, Slurm node list), from ordered private IPs."""

from __future__ import annotations

import ipaddress
from itertools import groupby

from gpufleet.ops.torchrun import rendezvous_options

TORCHRUN_PORT = 29500


def hostname(private_ip: str) -> str:
    """The EC2 default private DNS host name of an IP: 10.0.0.5 -> ip-10-0-0-5."""
    return "ip-" + private_ip.replace(".", "-")


def mpi_hostfile(private_ips: list[str], slots: int) -> str:
    return "".join(f"{ip} slots={slots}\n" for ip in private_ips)


def torchrun_arguments(private_ips: list[str], gpus_per_node: int, env_name: str) -> str:
    """Rendezvous on the first host (gpufleet.ops.fleet.job_order puts a ready on-demand node there), so every node
    computes the same endpoint and it is one that spot cannot take; options spelled as gpufleet.ops.torchrun spells
    them (with underscores, the spelling every torchrun accepts)."""
    options = rendezvous_options(
        nodes=str(len(private_ips)),
        processes_per_node=gpus_per_node,
        endpoint=f"{private_ips[0]}:{TORCHRUN_PORT}",
        rendezvous_id=f"gpufleet-{env_name}",
    )
    return " ".join(options) + "\n"


def _ranges(numbers: list[int]) -> str:
    parts = []
    for _, run in groupby(enumerate(numbers), key=lambda pair: pair[1] - pair[0]):
        values = [number for _, number in run]
        parts.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
    return ",".join(parts)


def slurm_nodelist(private_ips: list[str]) -> str:
    """Slurm hostlist syntax over the EC2 host names, in IP order, compressed on the last octet.

    Hosts sharing the first three octets fold into one bracket expression (ip-10-0-0-[5-7,9]); a lone host
    stays plain. Slurm sorts node lists itself, so numeric IP order (not launch order) is used here.
    """
    addresses = sorted({ipaddress.IPv4Address(ip) for ip in private_ips})
    groups = []
    for prefix, members in groupby(addresses, key=lambda address: str(address).rsplit(".", 1)[0]):
        last_octets = [int(str(address).rsplit(".", 1)[1]) for address in members]
        stem = hostname(prefix) + "-"
        suffix = str(last_octets[0]) if len(last_octets) == 1 else f"[{_ranges(last_octets)}]"
        groups.append(stem + suffix)
    return ",".join(groups) + "\n"
