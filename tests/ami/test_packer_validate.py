"""`packer validate` (the real binary, Debian's 1.6.6 here) on every shipped profile via `gpufleet ami validate`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpufleet.ami import SCRIPT_NAMES, SCRIPTS_DIR
from gpufleet.ami.packer import REQUIRED_PLUGINS_SINCE, find_packer, packer_version
from gpufleet.ami.profile import load_profile
from gpufleet.ami.render import render_profile
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


def test_packer_validate_passes_with_an_instance_profile(capsys, scripts_dir):
    assert main(["ami", "validate", "p4d-ubuntu1804-cuda11", "--scripts-dir", str(scripts_dir),
                 "--instance-profile", "gpufleet-ami-build"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "p4d-ubuntu1804-cuda11: valid"


@pytest.mark.parametrize("attribute", ["iam_instance_profile", "iam_instance_profil"])
def test_packer_validates_the_instance_profile_rendering(tmp_path, scripts_dir, attribute):
    """The rendering packer sees holds iam_instance_profile and is valid; the misspelt attribute is rejected,
    which shows this packer does check the source block's attributes."""
    packer = find_packer()
    out_dir = tmp_path / "rendered"
    render_profile(load_profile("ubuntu2204-cuda12"), out_dir,
                   packer_1_6=packer_version(packer) < REQUIRED_PLUGINS_SINCE, instance_profile="gpufleet-ami-build")
    source = out_dir / "source.pkr.hcl"
    text = source.read_text()
    assert 'iam_instance_profile = "gpufleet-ami-build"' in text and "temporary_iam" not in text
    source.write_text(text.replace("iam_instance_profile =", f"{attribute} =", 1))
    result = subprocess.run([packer, "validate", "-var", f"scripts_dir={scripts_dir.resolve()}", str(out_dir)],
                            capture_output=True, text=True, cwd=tmp_path)
    output = result.stdout + result.stderr
    if attribute == "iam_instance_profile":
        assert result.returncode == 0, output
    else:
        assert result.returncode != 0 and attribute in output
