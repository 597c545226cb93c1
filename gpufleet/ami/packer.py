"""Run the real `packer validate` on a profile's build directory.

The build directory is meant for Packer >= 1.7 with the amazon plugin pinned in plugins.pkr.hcl. Debian's Packer
1.6.6 (amazon builder built in) rejects a few named constructs of it; below 1.7 exactly those are cut out of a
copy before it is validated, and the caller is told which. Everything else is validated as written.
"""

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
class NewerPackerConstruct:
    """An attribute or block of the build directory that Packer 1.6.6 rejects, and where it is defined."""

    file: str
    name: str
    source: str


# What Packer 1.6.6 rejects, each checked in the upstream source of the version the build directory pins.
NEWER_PACKER_ONLY: tuple[NewerPackerConstruct, ...] = (
    NewerPackerConstruct(
        "plugins.pkr.hcl", "required_plugins", "hashicorp/packer v1.7.0 hcl2template/parser.go (absent in v1.6.6)"
    ),
    NewerPackerConstruct(
        "source.pkr.hcl",
        "include_deprecated",
        "packer-plugin-amazon v1.3.3 builder/common/ami_filter.go (AmiFilterOptions.IncludeDeprecated)",
    ),
    NewerPackerConstruct(
        "source.pkr.hcl",
        "metadata_options",
        "packer-plugin-amazon v1.3.3 builder/common/run_config.go (RunConfig.Metadata)",
    ),
    NewerPackerConstruct(
        "source.pkr.hcl",
        "imds_support",
        "packer-plugin-amazon v1.3.3 builder/common/ami_config.go (AMIConfig.AMIIMDSSupport)",
    ),
)


@dataclass(frozen=True)
class ValidationResult:
    packer_version: Version
    files: tuple[str, ...]
    left_out: tuple[NewerPackerConstruct, ...]
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
        raise GpufleetError(
            "packer not found on PATH: install Packer (Debian: apt-get install packer, 1.6.6; or "
            "Packer >= 1.7 from HashiCorp) and run again"
        )
    return packer


def without_construct(text: str, name: str) -> str:
    """text less the one attribute line `name = ...` or block `name { ... }` (its closing brace at the block's
    indentation) of that name. Raises when there is not exactly one: NEWER_PACKER_ONLY no longer fits the files."""
    attribute = re.compile(rf"^[ \t]*{re.escape(name)}[ \t]*=.*\n", re.MULTILINE)
    block = re.compile(rf"^([ \t]*){re.escape(name)}[ \t]*\{{[ \t]*\n.*?^\1\}}[ \t]*\n", re.MULTILINE | re.DOTALL)
    matches = [*attribute.finditer(text), *block.finditer(text)]
    if len(matches) != 1:
        raise GpufleetError(
            f"{name}: found {len(matches)} times where exactly one was expected: "
            "NEWER_PACKER_ONLY in gpufleet/ami/packer.py no longer fits ami/packer"
        )
    (match,) = matches
    return text[: match.start()] + text[match.end() :]


def leave_out_newer_constructs(directory: Path) -> tuple[NewerPackerConstruct, ...]:
    """Cut NEWER_PACKER_ONLY out of the files in directory (a copy meant for Packer 1.6.6)."""
    for construct in NEWER_PACKER_ONLY:
        path = directory / construct.file
        path.write_text(without_construct(path.read_text(), construct.name))
    return NEWER_PACKER_ONLY


def run_packer_validate(packer: str, directory: Path, scripts_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [packer, "validate", "-var", f"scripts_dir={scripts_dir.resolve()}", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        cwd=directory.parent,
    )


def validate_profile(
    profile: Profile, scripts_dir: Path = SCRIPTS_DIR, instance_profile: str | None = None
) -> ValidationResult:
    """Render into a temporary directory and run `packer validate` there."""
    packer = find_packer()
    version = packer_version(packer)
    with tempfile.TemporaryDirectory(prefix="gpufleet-ami-") as work:
        out_dir = Path(work) / profile.name
        files = render_profile(profile, out_dir, instance_profile=instance_profile)
        left_out = leave_out_newer_constructs(out_dir) if version < REQUIRED_PLUGINS_SINCE else ()
        result = run_packer_validate(packer, out_dir, scripts_dir)
    output = (result.stdout + result.stderr).replace(str(out_dir), profile.name).strip()
    return ValidationResult(version, tuple(path.name for path in files), left_out, result.returncode, output)
