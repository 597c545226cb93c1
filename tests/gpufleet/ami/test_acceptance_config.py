"""The acceptance gate's section of ami/pipeline.yaml (gpufleet/ami/pipeline.py Acceptance and the acceptance rules
of gpufleet/validators/pipeline.py): each problem one line, with its exact message; and the gate's cost bound."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.loading import load_pipeline
from tests.gate_pipeline import GATE
from tests.gpufleet.ami.pipeline_files import problems, write


def test_the_shipped_file_has_the_gate_off():
    assert load_pipeline().acceptance is None


def test_a_complete_gate_loads(tmp_path):
    gate = load_pipeline(write(tmp_path, acceptance=GATE)).acceptance
    assert gate is not None
    assert (gate.instance_type, gate.nodes, gate.timeout_minutes, gate.node_minutes_bound) == (
        "p4d.24xlarge",
        2,
        60,
        90,
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"spot": True},
            [
                "acceptance.spot: unknown key (allowed here: instance_type, availability_zone, vpc_id, "
                "subnet_id, nodes, timeout_minutes, max_cost_usd)"
            ],
        ),
        ({"nodes": 1}, ["acceptance.nodes: 1 is out of range (from 2 to 8 nodes)"]),
        ({"nodes": 9}, ["acceptance.nodes: 9 is out of range (from 2 to 8 nodes)"]),
        ({"timeout_minutes": 14}, ["acceptance.timeout_minutes: 14 is out of range (from 15 to 480 minutes)"]),
        ({"timeout_minutes": 481}, ["acceptance.timeout_minutes: 481 is out of range (from 15 to 480 minutes)"]),
        ({"max_cost_usd": 0.5}, ["acceptance.max_cost_usd: 0.5 is out of range (from 1 to 5000 USD)"]),
        ({"max_cost_usd": 5001}, ["acceptance.max_cost_usd: 5001 is out of range (from 1 to 5000 USD)"]),
        (
            {"vpc_id": "vpc-1"},
            ["acceptance.vpc_id: 'vpc-1' is not a vpc id (vpc- followed by 8 or 17 hex digits)"],
        ),
        (
            {"instance_type": "p9.48xlarge"},
            [
                "acceptance.instance_type: 'p9.48xlarge' is not in the catalog (allowed: g5.48xlarge, "
                "g5.8xlarge, p4d.24xlarge, p4de.24xlarge, p5.48xlarge; see gpufleet/instance_types.yaml)"
            ],
        ),
        (
            {"availability_zone": "us-west-2a"},
            [
                "acceptance.availability_zone: 'us-west-2a' is not an availability zone of us-east-1, where the "
                "image is built (e.g. us-east-1a)"
            ],
        ),
        (
            {"nodes": 0, "timeout_minutes": 5},
            [
                "acceptance.nodes: 0 is out of range (from 2 to 8 nodes)",
                "acceptance.timeout_minutes: 5 is out of range (from 15 to 480 minutes)",
            ],
        ),
    ],
)
def test_each_problem_is_one_line(tmp_path, changes, expected):
    assert problems(write(tmp_path, acceptance={**GATE, **changes})) == expected


def test_every_key_is_required(tmp_path):
    gate = {key: value for key, value in GATE.items() if key != "max_cost_usd"}
    assert problems(write(tmp_path, acceptance=gate)) == ["acceptance.max_cost_usd: required key is missing"]


def test_the_cost_bound_counts_every_node_for_the_timeout_and_the_teardown(tmp_path):
    gate = load_pipeline(write(tmp_path, acceptance=GATE)).acceptance
    assert gate is not None
    # 2 nodes x 32.7726 USD/h x (60 + 30) minutes
    assert gate.cost_bound(Decimal("32.7726")) == Decimal("98.3178")
