"""gpufleet topo-check [FILE] --instance-type TYPE [--json]: check ``nvidia-smi topo -m`` against the catalog.

``--json`` lists every NIC column of the matrix under ``nics`` as ``{"nic": "NIC0", "device": "rdmap16s27"}``;
``device`` is null where the capture has no "NIC Legend" line for that column.

Exit codes: 0 the matrix matches the catalog; 1 problems found (a non-NVLink pair on an NVSwitch type, fewer
NVLinks on one pair, missing GPUs or EFA devices); 2 unusable input (unreadable file, no matrix, a matrix cut
short, a file over 1 MiB) or an instance type the catalog does not know. Bytes that are not UTF-8 are read as
U+FFFD.
"""

from __future__ import annotations

import argparse
import json

from gpufleet.catalog import load_catalog
from gpufleet.errors import GpufleetError
from gpufleet.input_files import MIB, display_name, read_limited
from gpufleet.reports.topology import (
    Topology,
    TopologyCheck,
    TopologyParseError,
    check_topology,
    parse_topology,
)

UNUSABLE_INPUT = 2
# A capture of the largest catalog type (p5.48xlarge: 8 GPUs and 32 NICs) is about 10 KB; the limit leaves room for
# a capture inside a longer log.
MAX_CAPTURE_BYTES = 1 * MIB


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topo-check", help="check 'nvidia-smi topo -m' output against the instance catalog")
    parser.add_argument("file", nargs="?", default="-", metavar="FILE", help="captured output (default: stdin)")
    parser.add_argument("--instance-type", required=True, metavar="TYPE", help="e.g. p4d.24xlarge")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    instance = catalog.get(args.instance_type)
    if instance is None:
        raise GpufleetError(
            f"--instance-type {args.instance_type}: not in the catalog (known: {', '.join(sorted(catalog))})",
            exit_code=UNUSABLE_INPUT,
        )
    name = display_name(args.file)
    data = read_limited(
        args.file,
        limit=MAX_CAPTURE_BYTES,
        expected="an nvidia-smi topo -m capture (a few KB)",
        exit_code=UNUSABLE_INPUT,
    )
    text = data.decode("utf-8", errors="replace")
    try:
        topology = parse_topology(text)
    except TopologyParseError as error:
        raise GpufleetError(f"{name}: {error}", exit_code=UNUSABLE_INPUT) from None
    check = check_topology(topology, instance)
    if args.json:
        print(json.dumps(_as_json(check, topology), indent=2))
    else:
        _print_text(name, check, topology)
    return 0 if check.ok else 1


def _as_json(check: TopologyCheck, topology: Topology) -> dict:
    return {
        "instance_type": check.instance_type,
        "gpus": check.gpus,
        "expected_gpus": check.expected_gpus,
        "links": dict(check.links),
        "nvlink_pairs": check.nvlink_pairs,
        "nics": [{"nic": nic, "device": device} for nic, device in topology.nic_devices],
        "cpu_affinity": dict(topology.cpu_affinity),
        "numa_affinity": dict(topology.numa_affinity),
        "problems": list(check.problems),
        "ok": check.ok,
    }


def _print_text(name: str, check: TopologyCheck, topology: Topology) -> None:
    kinds: dict[str, int] = {}
    for _, link in check.links:
        kinds[link] = kinds.get(link, 0) + 1
    summary = ", ".join(f"{count} x {link}" for link, count in sorted(kinds.items()))
    print(f"{name}: {check.gpus} GPUs ({check.expected_gpus} expected for {check.instance_type})")
    print(f"GPU pairs: {len(check.links)} ({summary}); NVLink pairs: {check.nvlink_pairs}")
    nics = ", ".join(f"{nic}={device}" if device else nic for nic, device in topology.nic_devices) or "none"
    unknown = any(device is None for _, device in topology.nic_devices)
    print(f"NICs: {len(topology.nics)} ({nics})" + ("; device names unknown: no NIC Legend" if unknown else ""))
    for problem in check.problems:
        print(f"problem: {problem}")
    count = len(check.problems)
    print("verdict: " + ("OK" if check.ok else f"FAIL ({count} problem{'' if count == 1 else 's'})"))
