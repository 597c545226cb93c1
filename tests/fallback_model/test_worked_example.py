"""docs/guides/capacity.md shows the model's output for both markets short, then spot returning, as it is."""

from __future__ import annotations

from tests.conftest import REPOSITORY
from tests.fallback_model.worked_example import table


def test_the_capacity_guide_shows_the_models_output():
    guide = (REPOSITORY / "docs" / "guides" / "capacity.md").read_text()
    for backend in ("spot-fleet", "auto-scaling"):
        assert table(backend) in guide, f"{backend}: run python -m tests.fallback_model.worked_example"


def test_the_worked_example_shows_the_revert_and_the_hand_back():
    rows = table("spot-fleet").splitlines()
    actions = [row.split(" | ")[4] for row in rows[2:]]
    assert actions == [
        "hold",
        "hold",
        "raise",
        "hold",
        "revert",
        "hold",
        "hold",
        "probe",
        "hand-back",
        "settle",
        "hold",
    ]
