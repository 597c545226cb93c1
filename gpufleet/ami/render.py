"""Write a profile's Packer build directory, all or nothing: the static HCL2 files of ami/packer plus
gpufleet.auto.pkrvars.json, the profile's values as data.

Nothing here writes HCL: the files in ami/packer are code that `packer fmt -check` and `packer validate` check as
they are (no structure depends on the profile, so there is no template engine), and the profile travels in a JSON
variable file, which Packer loads by itself (*.auto.pkrvars.json) and reads as literal values, so ``${``, ``%{``,
quotes and backslashes in a profile stay what they are.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from packaging.version import Version

from gpufleet.ami import PACKER_DIR, SCRIPTS_DIR
from gpufleet.ami.compatibility import check_profile, gate_errors
from gpufleet.ami.packages import package_environment
from gpufleet.ami.profile import Profile
from gpufleet.catalog import load_catalog
from gpufleet.errors import GpufleetError

VARIABLES_FILE = "gpufleet.auto.pkrvars.json"
PACKER_FILES = ("variables.pkr.hcl", "locals.pkr.hcl", "source.pkr.hcl", "build.pkr.hcl", "plugins.pkr.hcl")
BUILD_FILES = (*PACKER_FILES, VARIABLES_FILE)
# IAM's rule for instance profile names.
INSTANCE_PROFILE_NAME = re.compile(r"[\w+=,.@-]{1,128}", re.ASCII)
# Packer still runs its Go template engine over the amazon builder's strings (ami_description at build time:
# packer-plugin-amazon v1.3.3 builder/common/step_modify_ami_attributes.go, interpolate.Render), so "{{" in a value
# would be read as a template action rather than text.
GO_TEMPLATE_START = "{{"


def check_instance_profile_name(name: str) -> None:
    if not INSTANCE_PROFILE_NAME.fullmatch(name):
        raise GpufleetError(
            f"--instance-profile {name!r}: not an IAM instance profile name (1 to 128 characters: "
            "letters, digits and + = , . @ _ -)"
        )


def cuda_architectures(profile: Profile) -> str:
    """The target GPUs' compute capabilities as NVCC writes them ("8.0" -> "80"), lowest first: 08-nccl.sh builds
    NCCL's kernels for these only. Types missing from the catalog are left to the gate (TARGET-CATALOG)."""
    catalog = load_catalog()
    capabilities = {catalog[name].gpu.compute_capability for name in profile.target.instance_types if name in catalog}
    return " ".join(capability.replace(".", "") for capability in sorted(capabilities, key=Version))


def python_environment(profile: Profile) -> dict[str, str]:
    """GPUFLEET_UV_* and GPUFLEET_PYTORCH_* for 01-build-tools.sh and 17-validate.sh: the profile's python section
    (the PyTorch ones empty where the profile has no pytorch)."""
    uv, pytorch = profile.python.uv, profile.python.pytorch
    return {
        "GPUFLEET_UV_VERSION": uv.version,
        "GPUFLEET_UV_URL": uv.url or "",
        "GPUFLEET_UV_SHA256": uv.sha256 or "",
        "GPUFLEET_PYTORCH_VERSION": pytorch.version if pytorch else "",
        "GPUFLEET_PYTORCH_INDEX_URL": pytorch.index_url if pytorch else "",
        "GPUFLEET_PYTORCH_PYTHON": (pytorch.python or "") if pytorch else "",
    }


def packer_variables(profile: Profile, instance_profile: str | None = None) -> dict[str, object]:
    """Variable name -> value for gpufleet.auto.pkrvars.json: every variable of ami/packer/variables.pkr.hcl that
    has no default, and instance_profile ("" lets Packer create a temporary instance profile)."""
    components = profile.components.items()
    return {
        "profile": profile.name,
        "profile_description": profile.description,
        "os_family": profile.os.family,
        "os_version": profile.os.version,
        "nvswitch": profile.target.nvswitch,
        "cuda_architectures": cuda_architectures(profile),
        "build_instance_type": profile.build.instance_type,
        "source_ami_name": profile.os.base_image.name,
        "source_ami_owner": profile.os.base_image.owner,
        "ssh_username": profile.os.ssh_username,
        "root_device_name": profile.os.root_device_name,
        "root_volume_gib": profile.build.root_volume_gib,
        "root_volume_iops": profile.build.root_volume_iops,
        "root_volume_throughput": profile.build.root_volume_throughput,
        "component_versions": {key: component.version for key, component in components},
        "component_urls": {key: component.url or "" for key, component in components},
        "component_sha256": {key: component.sha256 or "" for key, component in components},
        "component_gpg_key_urls": {key: component.signing_key_url or "" for key, component in components},
        "component_gpg_key_fingerprints": {
            key: component.signing_key_fingerprint or "" for key, component in components
        },
        "package_environment": package_environment(profile),
        "python_environment": python_environment(profile),
        "instance_profile": instance_profile or "",
        # The scripts shipped with this gpufleet, wherever it is installed (-var scripts_dir=... for others).
        "scripts_dir": str(SCRIPTS_DIR),
    }


def _go_template_problems(profile: Profile, variables: dict[str, object]) -> list[str]:
    problems = []
    for name, value in variables.items():
        values = value.items() if isinstance(value, dict) else [(None, value)]
        for key, text in values:
            if isinstance(text, str) and GO_TEMPLATE_START in text:
                where = name if key is None else f"{name}[{key}]"
                problems.append(
                    f"{profile.name}: {where}: '{text}' holds '{GO_TEMPLATE_START}', which Packer reads "
                    "as a template action: remove it"
                )
    return problems


def build_files(profile: Profile, instance_profile: str | None = None) -> dict[str, str]:
    """File name -> content of the build directory."""
    if instance_profile is not None:
        check_instance_profile_name(instance_profile)
    variables = packer_variables(profile, instance_profile)
    problems = _go_template_problems(profile, variables)
    if problems:
        raise GpufleetError(*problems)
    files = {name: (PACKER_DIR / name).read_text() for name in PACKER_FILES}
    files[VARIABLES_FILE] = json.dumps(variables, indent=2) + "\n"
    return files


def refuse_failing_gate(profile: Profile) -> None:
    errors = gate_errors(check_profile(profile))
    if errors:
        raise GpufleetError(
            *(f"{profile.name}: {verdict.rule}: {verdict.message}" for verdict in errors),
            f"{profile.name}: refused: the compatibility gate has errors (see gpufleet ami check)",
        )


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise GpufleetError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir():
        foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in BUILD_FILES)
        if foreign:
            raise GpufleetError(
                f"{out_dir}: holds files a render did not write ({', '.join(foreign)}): "
                "choose an empty or new directory"
            )


def render_profile(profile: Profile, out_dir: Path, instance_profile: str | None = None) -> list[Path]:
    """Gate, write into a temporary sibling directory, then swap it into out_dir; nothing is written on failure."""
    refuse_failing_gate(profile)
    _check_out_dir(out_dir)
    files = build_files(profile, instance_profile=instance_profile)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, content in files.items():
            (staging / name).write_text(content)
        if out_dir.exists():
            for old in out_dir.iterdir():
                old.unlink()
            out_dir.rmdir()
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out_dir / name for name in files]
