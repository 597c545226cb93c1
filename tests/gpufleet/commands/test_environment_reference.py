"""environments/README.md is the reference generated from the model: it cannot drift from the parser."""

from __future__ import annotations

from pathlib import Path

from gpufleet.commands.environment_reference import render_reference
from gpufleet.environment import Environment


def test_committed_reference_matches_the_model():
    committed = Path("environments/README.md").read_text()
    assert committed == render_reference(), "regenerate: gpufleet environment-reference > environments/README.md"


def test_every_field_is_documented():
    reference = render_reference()
    for name, field in Environment.model_fields.items():
        assert f"| `{name}` |" in reference
        assert field.description, f"{name} has no description"
