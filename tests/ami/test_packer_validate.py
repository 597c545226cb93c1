"""`packer validate` (the real binary, Debian's 1.6.6 here) on every shipped profile via `gpufleet ami validate`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet.ami import SCRIPT_NAMES, SCRIPTS_DIR
from gpufleet.cli import main

pytestmark = pytest.mark.skipif(shutil.which("packer") is None,
                                reason="packer is not on PATH (make setup installs it)")
SHIPPED = ["p4d-al2-cuda11", "p4d-ubuntu1804-cuda11", "ubuntu2204-cuda12"]


@pytest.fixture
def scripts_dir(tmp_path: Path) -> Path:
    """scripts/ami when it exists; before it does, empty stand-ins named as the contract fixes (Packer only checks
    that each script file exists)."""
    if SCRIPTS_DIR.is_dir():
        return SCRIPTS_DIR
    stand_ins = tmp_path / "scripts"
    (stand_ins / "lib").mkdir(parents=True)
    for name in SCRIPT_NAMES:
        (stand_ins / name).touch()
    return stand_ins


@pytest.mark.parametrize("name", SHIPPED)
def test_packer_validate_passes(capsys, scripts_dir, name):
    assert main(["ami", "validate", name, "--scripts-dir", str(scripts_dir)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"{name}: valid"


def test_packer_validate_fails_for_real(capsys, tmp_path):
    assert main(["ami", "validate", "ubuntu2204-cuda12", "--scripts-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "ubuntu2204-cuda12: INVALID"
    # packer wraps its messages at 80 columns: look for the pieces.
    assert "Bad script" in captured.err and "00-os-update.sh" in captured.err


def test_missing_packer_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["ami", "validate", "ubuntu2204-cuda12"]) == 1
    assert capsys.readouterr().err.startswith("packer not found on PATH: install Packer")
