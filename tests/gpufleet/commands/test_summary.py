"""gpufleet summary reads the clusters back from a synthesized cloud assembly."""

from __future__ import annotations

import json

from gpufleet.cli import main


def test_summary_table_lists_each_environment(assembly, capsys):
    assert main(["summary", str(assembly.directory)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "ENVIRONMENT",
        "BACKEND",
        "INSTANCE",
        "TYPE",
        "NODES",
        "OD/SPOT",
        "GPUS",
        "EFA/NODE",
        "PLACEMENT",
        "AZ",
    ]
    rows = {line.split()[0]: " ".join(line.split()) for line in lines[1:]}
    # A Capacity Block's nodes are placed by EC2, not by the placement group.
    assert rows == {
        "dev": "dev spot-fleet p4d.24xlarge 1/1 16 x A100 4 cluster us-east-1a",
        "h100": "h100 spot-fleet p5.48xlarge 2/0 16 x H100 32 cluster us-west-2d",
        "p5-block": "p5-block auto-scaling p5.48xlarge 2/0 16 x H100 32 capacity-block us-east-2a",
        "prod": "prod spot-fleet p4d.24xlarge 2/6 64 x A100 4 cluster us-east-1b",
    }


def test_summary_json(assembly, capsys):
    assert main(["summary", str(assembly.directory), "--json"]) == 0
    by_name = {entry["environment"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert by_name["h100"]["efa_interfaces_per_node"] == 32
    assert by_name["dev"]["stack"] == "gpufleet-dev-cluster"
    assert {name: entry["backend"] for name, entry in by_name.items()} == {
        "dev": "spot-fleet",
        "h100": "spot-fleet",
        "p5-block": "auto-scaling",
        "prod": "spot-fleet",
    }


def test_summary_without_an_assembly_says_to_synthesize(tmp_path, capsys):
    assert main(["summary", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == f"{tmp_path}: no cloud assembly here (run `cdk synth` first)"
