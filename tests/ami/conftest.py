"""Shared fixtures of the AMI generator tests: the shipped profiles and ways to derive broken ones."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.ami import PROFILES_DIR
from gpufleet.ami.profile import Profile, load_profile

REFERENCE = "p4d-ubuntu1804-cuda11"
CURRENT = "ubuntu2204-cuda12"


def _set(document: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        document = document[part]
    document[last] = value


@pytest.fixture
def derive() -> Callable[..., Profile]:
    """derive(NAME, {"components.driver.version": "1.2.3", ...}) -> a shipped profile with those fields changed."""

    def _derive(name: str, changes: dict[str, Any]) -> Profile:
        document = load_profile(name).model_dump()
        for dotted, value in changes.items():
            _set(document, dotted, value)
        return Profile.model_validate(document)

    return _derive


@pytest.fixture
def write_profile(tmp_path: Path) -> Callable[..., Path]:
    """write_profile(NAME, changes=..., text=...) -> tmp_path/NAME.yaml from the reference profile's YAML."""

    def _write(name: str, changes: dict[str, Any] | None = None, text: str | None = None) -> Path:
        path = tmp_path / "profiles" / f"{name}.yaml"
        path.parent.mkdir(exist_ok=True)
        if text is None:
            document = copy.deepcopy(yaml.safe_load((PROFILES_DIR / f"{REFERENCE}.yaml").read_text()))
            document["name"] = name
            for dotted, value in (changes or {}).items():
                _set(document, dotted, value)
            text = yaml.safe_dump(document, sort_keys=False)
        path.write_text(text)
        return path

    return _write
