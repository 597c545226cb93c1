"""docs/reference/ami-profile.md is the reference generated from the profile model: it cannot drift from the parser."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from gpufleet.ami.profile import Profile
from gpufleet.commands.ami_profile_reference import render_reference


def test_committed_reference_matches_the_model():
    """A drift check only: what the rendering must say is stated literally in the test below."""
    committed = Path("docs/reference/ami-profile.md").read_text()
    assert committed == render_reference(), "regenerate: gpufleet ami-profile-reference > docs/reference/ami-profile.md"


def test_components_are_listed_once_each_and_their_keys_once_for_all():
    """Written out from gpufleet/ami/profile.py's Field declarations."""
    lines = render_reference().splitlines()
    assert "| `os.family` | string | required | ubuntu \\| amzn (Amazon Linux). |" in lines
    assert "| `build.root_volume_iops` | integer | `3000` | gp3 IOPS (3000 to 16000). |" in lines
    assert (
        "| `components.driver` | mapping | required | NVIDIA data-center driver runfile (02-nvidia-driver.sh). |"
        in lines
    )
    assert not [line for line in lines if line.startswith("| `components.driver.")]
    component_keys = [line.split("`")[1] for line in lines if line.startswith("| `components.KEY.")]
    assert component_keys == [
        "components.KEY.version",
        "components.KEY.url",
        "components.KEY.sha256",
        "components.KEY.signing_key_url",
        "components.KEY.signing_key_fingerprint",
        "components.KEY.verification",
    ]
    assert (
        "| `components.KEY.sha256` | string or null | required | SHA-256 of the download as the vendor publishes it; "
        "null if unknown. |"
    ) in lines


def test_every_field_is_documented():
    def undocumented(model: type[BaseModel], prefix: str) -> list[str]:
        missing = []
        for name, field in model.model_fields.items():
            if not field.description:
                missing.append(prefix + name)
            nested = field.annotation
            if isinstance(nested, type) and issubclass(nested, BaseModel):
                missing += undocumented(nested, f"{prefix}{name}.")
        return missing

    assert undocumented(Profile, "") == []
