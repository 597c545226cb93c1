"""AMI profiles (ami/profiles/NAME.yaml): one pinned GPU software stack on one OS base, parsed into frozen objects.

Parsing checks shape, types and pinning (exact versions, https download locations, an explicit checksum or
``null`` plus how the vendor lets you verify the download); cross-component rules live in
gpufleet.ami.compatibility.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from gpufleet.ami import COMPONENT_KEYS, PROFILES_DIR, PYTORCH_VENV
from gpufleet.config_file import read_model
from gpufleet.errors import GpufleetError
from gpufleet.rules import OPENPGP_FINGERPRINT

VERSION_PATTERN = re.compile(r"[0-9][0-9A-Za-z.+_-]*")
SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
# Moving targets: a pinned stack never points at them.
FLOATING_REFERENCE = re.compile(r"(^|[/=._-])(latest|master|main|head|nightly|current)($|[/._-])", re.IGNORECASE)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BaseImage(_Section):
    """The source AMI: the newest image whose name matches, published by the owner account."""

    name: StrictStr = Field(description="AMI name pattern, e.g. ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-*")
    owner: StrictStr = Field(description='Account id of the publisher, quoted (Canonical: "099720109477").')

    @model_validator(mode="after")
    def _owner_is_account(self) -> BaseImage:
        if not re.fullmatch(r"\d{12}", self.owner):
            raise ValueError(f"owner '{self.owner}' is not an AWS account id (exactly 12 digits, quoted)")
        return self


class OperatingSystem(_Section):
    family: Literal["ubuntu", "amzn"] = Field(description="ubuntu | amzn (Amazon Linux).")
    version: Literal["18.04", "22.04", "24.04", "2", "2023"] = Field(
        description='18.04 | 22.04 | 24.04 (ubuntu), "2" | "2023" (amzn).'
    )
    base_image: BaseImage = Field(
        description="The source AMI: the newest image whose name matches, published by the owner account."
    )
    ssh_username: StrictStr = Field(description="Login user of the base image: ubuntu or ec2-user.")
    root_device_name: StrictStr = Field(description="/dev/sda1 (Ubuntu) or /dev/xvda (Amazon Linux).")

    @model_validator(mode="after")
    def _version_of_family(self) -> OperatingSystem:
        allowed = {"ubuntu": ("18.04", "22.04", "24.04"), "amzn": ("2", "2023")}[self.family]
        if self.version not in allowed:
            raise ValueError(f"version '{self.version}' is not a {self.family} version (allowed: {', '.join(allowed)})")
        return self


class Target(_Section):
    instance_types: tuple[StrictStr, ...] = Field(description="Instance types of the catalog the image is for.")
    nvswitch: StrictBool = Field(description="The target types have NVSwitch: Fabric Manager is installed and enabled.")


class Build(_Section):
    instance_type: StrictStr = Field(description="Instance type Packer builds on (needs no NVSwitch or EFA).")
    root_volume_gib: StrictInt = Field(description="Size of the encrypted gp3 root volume of the image.")
    root_volume_iops: StrictInt = Field(3000, description="gp3 IOPS (3000 to 16000).")
    root_volume_throughput: StrictInt = Field(250, description="gp3 throughput in MiB/s (125 to 1000).")


class Component(_Section):
    """One pinned piece of the stack and where it comes from."""

    version: StrictStr = Field(description="Exact version, e.g. 450.80.02 (never latest or a branch).")
    url: StrictStr | None = Field(
        description="https download location; null where the script installs the pinned version from the vendor's "
        "signed package repository."
    )
    sha256: StrictStr | None = Field(description="SHA-256 of the download as the vendor publishes it; null if unknown.")
    signing_key_url: StrictStr | None = Field(
        None, description="Vendor's public key for the download's detached signature (URL + .sig)."
    )
    signing_key_fingerprint: StrictStr | None = Field(
        None,
        description="Fingerprint of the vendor key that must have made the detached signature (URL + .sig), as "
        "the vendor publishes it (40 hex digits, upper case). Without signing_key_url the key is the one gpufleet "
        "ships as scripts/ami/lib/keys/FINGERPRINT.asc.",
    )
    verification: StrictStr | None = Field(
        None, description="How the vendor lets you verify this download; required when sha256 is null."
    )

    @model_validator(mode="after")
    def _pinned(self) -> Component:
        if not VERSION_PATTERN.fullmatch(self.version) or FLOATING_REFERENCE.search(self.version):
            raise ValueError(f"version '{self.version}' is not an exact version (digits first, e.g. 2.7.8)")
        for key in ("url", "signing_key_url"):
            value = getattr(self, key)
            if value is None:
                continue
            if not value.startswith("https://"):
                raise ValueError(f"{key} '{value}' is not an https URL")
            if FLOATING_REFERENCE.search(value):
                raise ValueError(f"{key} '{value}' points at a moving target (latest, a branch): pin a release")
        if self.signing_key_fingerprint is not None and not OPENPGP_FINGERPRINT.fullmatch(self.signing_key_fingerprint):
            raise ValueError(
                f"signing_key_fingerprint '{self.signing_key_fingerprint}' is not a key fingerprint (40 upper-case "
                "hex digits, no spaces)"
            )
        if self.sha256 is not None and not SHA256_PATTERN.fullmatch(self.sha256):
            raise ValueError(f"sha256 '{self.sha256}' is not a SHA-256 digest (64 lower-case hex digits)")
        if self.sha256 is None and not self.verification:
            raise ValueError("sha256 is null: add verification (how the vendor lets you check this download)")
        return self

    @property
    def verified(self) -> bool:
        """The download is checked by a checksum or a signature (or there is nothing to download)."""
        return (
            self.url is None
            or self.sha256 is not None
            or self.signing_key_url is not None
            or self.signing_key_fingerprint is not None
        )


class Components(_Section):
    driver: Component = Field(description="NVIDIA data-center driver runfile (02-nvidia-driver.sh).")
    fabric_manager: Component = Field(
        description="NVIDIA Fabric Manager, the driver's exact version; installed only when target.nvswitch is true "
        "(04-fabric-manager.sh)."
    )
    cuda: Component = Field(description="CUDA toolkit runfile, into /usr/local/cuda-X.Y (05-cuda.sh).")
    cudnn: Component = Field(description="cuDNN: a tarball (url set) or pinned packages (06-cudnn.sh).")
    nccl: Component = Field(
        description="NCCL: pinned packages for the CUDA version, or a source build (url set) (08-nccl.sh)."
    )
    efa_installer: Component = Field(description="AWS EFA installer, with GPUDirect RDMA (07-efa-installer.sh).")
    aws_ofi_nccl: Component = Field(
        description="aws-ofi-nccl, NCCL's plugin for EFA: the EFA installer's own without url, else a source build "
        "(09-aws-ofi-nccl.sh)."
    )
    nccl_tests: Component = Field(description="nccl-tests, built with MPI (10-nccl-tests.sh).")
    fsx_lustre: Component = Field(description="FSx for Lustre client for the running kernel (11-fsx-lustre.sh).")
    onednn: Component = Field(description="oneDNN, a source build (12-onednn.sh).")
    container_toolkit: Component = Field(
        description="NVIDIA Container Toolkit, registered as a Docker runtime (13-container-runtime.sh)."
    )
    aws_cli: Component = Field(
        description="AWS CLI version 2, the zip installer into /usr/local/aws-cli with /usr/local/bin/aws "
        "(14-aws-cli.sh)."
    )
    cloudwatch_agent: Component = Field(
        description="Amazon CloudWatch agent, the package for the OS (.deb or .rpm), not started: the node's "
        "cloudwatch-agent setup step configures and starts it (15-cloudwatch-agent.sh)."
    )

    def items(self) -> list[tuple[str, Component]]:
        return [(key, getattr(self, key)) for key in COMPONENT_KEYS]


# The wheel index of a PyTorch CUDA build: download.pytorch.org/whl/cuNNN, NNN the CUDA version without its dot
# (cu130: CUDA 13.0, cu128: 12.8, cu118: 11.8), as https://pytorch.org/get-started/locally/ writes the index URLs.
PYTORCH_CUDA_INDEX = re.compile(r"https://download\.pytorch\.org/whl/cu(?P<cuda>\d{3})/?")
PYTHON_VERSION = re.compile(r"3\.\d{1,2}")


class PyTorch(_Section):
    """A pinned PyTorch in a virtualenv of the image (01-build-tools.sh), which `gpufleet run` puts first on PATH."""

    version: StrictStr = Field(description="Exact PyTorch release, e.g. 2.14.0 (the torch wheel's version).")
    index_url: StrictStr = Field(
        description="PyTorch's wheel index of one CUDA build, https://download.pytorch.org/whl/cuNNN (cu130: CUDA "
        "13.0); the compatibility gate checks the driver supports that CUDA."
    )
    python: StrictStr | None = Field(
        None,
        description='Python minor version of the virtualenv\'s interpreter, e.g. "3.12" (/usr/bin/python3.12, '
        "installed from the OS packages); null: the OS's python3.",
    )

    @model_validator(mode="after")
    def _pinned(self) -> PyTorch:
        if not re.fullmatch(r"\d+\.\d+\.\d+", self.version):
            raise ValueError(
                f"version '{self.version}' is not an exact PyTorch release (MAJOR.MINOR.PATCH, e.g. 2.14.0)"
            )
        if not PYTORCH_CUDA_INDEX.fullmatch(self.index_url):
            raise ValueError(
                f"index_url '{self.index_url}' is not a PyTorch CUDA wheel index "
                "(https://download.pytorch.org/whl/cuNNN, e.g. https://download.pytorch.org/whl/cu130)"
            )
        if self.python is not None and not PYTHON_VERSION.fullmatch(self.python):
            raise ValueError(f"python '{self.python}' is not a Python minor version such as 3.12 (or null)")
        return self

    @property
    def cuda(self) -> str:
        """The CUDA version of the wheel index: cu130 -> 13.0."""
        match = PYTORCH_CUDA_INDEX.fullmatch(self.index_url)
        assert match is not None
        digits = match["cuda"]
        return f"{int(digits[:-1])}.{digits[-1]}"


class Python(_Section):
    uv: Component = Field(
        description="uv, the Python package and virtualenv tool: the release's x86_64-unknown-linux-gnu tarball, "
        "checked against sha256, into /usr/local/bin (01-build-tools.sh). Every image also carries python3 with "
        "venv and pip; 17-validate.sh proves `python3 -m venv` works."
    )
    pytorch: PyTorch | None = Field(
        None, description=f"A pinned PyTorch in the virtualenv {PYTORCH_VENV}; null: no PyTorch on the image."
    )


class EndOfLife(_Section):
    date: dt.date = Field(description="When the stack's OS or driver stopped getting security fixes (YYYY-MM-DD).")
    reason: StrictStr = Field(description="One line: what ended, with its source.")


class Profile(_Section):
    name: StrictStr = Field(description="Profile name; must equal the file name without .yaml.")
    description: StrictStr = Field(description="One line: the stack and what it is for.")
    os: OperatingSystem = Field(description="The OS of the base image and how Packer logs in to it.")
    target: Target = Field(description="What the image is for.")
    build: Build = Field(description="The instance Packer builds on and the image's root volume.")
    components: Components = Field(description="The pinned software stack, one mapping per component.")
    python: Python = Field(description="The Python tools every image carries, and an optional PyTorch.")
    end_of_life: EndOfLife | None = Field(
        None,
        description="Set on a stack kept only to reproduce it: `gpufleet ami check` and `render` print one warning "
        "line with its date and reason; null: a supported stack.",
    )

    def versions(self) -> dict[str, str]:
        return {key: component.version for key, component in self.components.items()}


def profile_files(directory: Path = PROFILES_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def parse_profile(path: Path) -> Profile:
    """Read one profile file; raise GpufleetError with one line per problem, each naming the file and field."""
    profile = read_model(path, Profile, reference="ami/README.md")
    if profile.name != path.stem:
        raise GpufleetError(
            f"{path}: name: '{profile.name}' differs from the file name "
            f"(name it '{path.stem}' or rename the file to {profile.name}.yaml)"
        )
    return profile


def resolve_profile_path(name_or_path: str) -> Path:
    """A shipped profile name (ami/profiles/NAME.yaml) or the path of a profile file."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        return Path(name_or_path)
    path = PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in profile_files()) or "none"
        raise GpufleetError(f"unknown AMI profile '{name_or_path}' (shipped: {known}; or the path of a .yaml file)")
    return path


def load_profile(name_or_path: str) -> Profile:
    return parse_profile(resolve_profile_path(name_or_path))
