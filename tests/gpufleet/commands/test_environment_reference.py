"""docs/reference/environment.md is the reference generated from the model: it cannot drift from the parser."""

from __future__ import annotations

from pathlib import Path

from gpufleet.commands.environment_reference import render_reference
from gpufleet.environment import Environment


def test_committed_reference_matches_the_model():
    """A drift check only: the committed file is written by the renderer it is compared with, so what the rendering
    must say is stated literally in test_reference_rows_state_the_model below."""
    committed = Path("docs/reference/environment.md").read_text()
    assert committed == render_reference(), "regenerate: gpufleet environment-reference > docs/reference/environment.md"


def test_reference_rows_state_the_model():
    """One row per kind of field, written out from gpufleet/environment.py's Field declarations: required, a bool
    default spelled as YAML, an integer default, an optional list, a nested mapping before its own keys, a default
    factory, a datetime, and a description whose "|" is escaped so the Markdown cell does not end there."""
    lines = render_reference().splitlines()
    assert lines[6:9] == [
        "| key | type | default | meaning |",
        "|---|---|---|---|",
        "| `name` | string | required | Environment name; must equal the file name without .yaml. |",
    ]
    expected_rows = [
        '| `account` | string | required | AWS account id, 12 digits, quoted ("123456789012"). |',
        "| `network.nat_gateway` | boolean | `false` | Add a public subnet and one NAT gateway for outbound "
        "internet. |",
        "| `network.flow_log_retention_days` | integer | `90` | Days to keep VPC flow logs in CloudWatch Logs. |",
        "| `efa` | boolean | `true` | One EFA interface per network card. |",
        "| `capacity.reservation` | mapping (optional) | see below | On-Demand Capacity Reservations the on-demand "
        "nodes launch into. |",
        "| `capacity.reservation.ids` | list of string (optional) | none | Capacity Reservation ids (cr-...); more "
        "than one needs fleet.backend: auto-scaling. |",
        "| `fleet.valid_until` | datetime (optional) | none | Time (UTC) after which the fleet stops; its nodes are "
        "terminated. |",
        "| `tags` | mapping of string to string | {} | Tags on every resource and node. |",
        "| `fleet.on_demand_allocation_strategy` | string | `lowestPrice` | lowestPrice \\| prioritized. |",
    ]
    for row in expected_rows:
        assert row in lines, row
    keys = [line.split("`")[1] for line in lines if line.startswith("| `")]
    assert keys[:6] == ["name", "flavour", "account", "region", "availability_zone", "network"]
    assert keys[keys.index("capacity.reservation") + 1 : keys.index("capacity.reservation") + 4] == [
        "capacity.reservation.ids",
        "capacity.reservation.resource_group_arn",
        "capacity.reservation.preference",
    ]


def test_every_field_is_documented():
    reference = render_reference()
    for name, field in Environment.model_fields.items():
        assert f"| `{name}` |" in reference
        assert field.description, f"{name} has no description"
