"""Run the real `packer validate` on a rendered profile, in the syntax the installed Packer understands."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from gpufleet.ami import SCRIPTS_DIR
from gpufleet.ami.profile import Profile
from gpufleet.ami.render import render_profile
from gpufleet.errors import GpufleetError

REQUIRED_PLUGINS_SINCE = Version("1.7.0")


@dataclass(frozen=True)
class ValidationResult:
    packer_version: Version
    files: tuple[str, ...]
    returncode: int
    output: str


def packer_version(packer: str) -> Version:
    result = subprocess.run([packer, "version"], capture_output=True, text=True, check=False)
    match = re.search(r"(\d+\.\d+\.\d+)", result.stdout)
    if result.returncode != 0 or match is None:
        detail = (result.stderr or result.stdout).strip()
        raise GpufleetError(f"{packer} version: cannot tell the Packer version ({detail})")
    return Version(match.group(1))


def find_packer() -> str:
    packer = shutil.which("packer")
    if packer is None:
        raise GpufleetError("packer not found on PATH: install Packer (Debian: apt-get install packer, 1.6.6; or "
                            "Packer >= 1.7 from HashiCorp) and run again")
    return packer


def validate_profile(profile: Profile, scripts_dir: Path = SCRIPTS_DIR,
                     instance_profile: str | None = None) -> ValidationResult:
    """Render into a temporary directory and run `packer validate` there, from the repository's point of view."""
    packer = find_packer()
    version = packer_version(packer)
    packer_1_6 = version < REQUIRED_PLUGINS_SINCE
    with tempfile.TemporaryDirectory(prefix="gpufleet-ami-") as work:
        out_dir = Path(work) / profile.name
        files = render_profile(profile, out_dir, packer_1_6=packer_1_6, instance_profile=instance_profile)
        result = subprocess.run(
            [packer, "validate", "-var", f"scripts_dir={scripts_dir.resolve()}", str(out_dir)],
            capture_output=True, text=True, check=False, cwd=work,
        )
    output = (result.stdout + result.stderr).replace(str(out_dir), profile.name).strip()
    return ValidationResult(version, tuple(path.name for path in files), result.returncode, output)
