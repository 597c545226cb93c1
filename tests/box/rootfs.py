"""The box's root file system: Debian bookworm built by mmdebstrap from Debian's packages, cached, keyed on its package
list and its customize hook (tests/box/image/customize-rootfs.sh).

The packages follow what the image profiles install for what the node side runs (scripts/ami/01-build-tools.sh: jq,
curl, python3, ...; 07-efa-installer.sh: Open MPI, laid out by the hook where the EFA installer puts it; 14-aws-cli.sh:
the AWS CLI v2, here Debian's build of it), plus what an Ubuntu or Amazon Linux base image already has (systemd,
OpenSSH, cloud-init) and the PyTorch the torchrun journey runs (Debian's python3-torch, CPU only). The tools a running
node needs from 01-build-tools.sh's list come from that list itself (profile_packages): what the images lack, the box
lacks.
Facts about building and booting such a root file system on this machine: ../shared/reference/nodes-in-a-box.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

IMAGE_DIR = Path(__file__).resolve().parent / "image"
BUILD_TOOLS = Path(__file__).resolve().parents[2] / "scripts" / "ami" / "01-build-tools.sh"
CUSTOMIZE_HOOK = IMAGE_DIR / "customize-rootfs.sh"
SUITE = "bookworm"
KEPT_BUILDS = 2
# What a node runs that scripts/ami/01-build-tools.sh installs on Ubuntu images: the box has each of these exactly when
# that script installs it (profile_packages), so a package the images lack is missing in the box too. The rest of its
# list (compilers, headers, DKMS) builds the image and is not needed by a running node.
RUNTIME_TOOLS = ("jq", "curl", "ca-certificates", "python3", "python3-venv", "python3-pip", "unzip")
# package: why a node has it (the base image or image step that puts it there).
BASE_PACKAGES: dict[str, str] = {
    "systemd": "PID 1 on every image",
    "systemd-sysv": "/sbin/init",
    "dbus": "systemctl and systemd-run talk to PID 1 over D-Bus on every base image",
    "libpam-systemd": "logind sessions for ssh logins, as on Ubuntu's and Amazon Linux's base images",
    "openssh-server": "sshd: the cluster user's SSH trust (scripts/node/cluster-user.sh)",
    "openssh-client": "ssh and ssh-keygen (cluster-user.sh, mpirun's remote start)",
    "iproute2": "ip, on every base image",
    "procps": "ps, pgrep, on every base image",
    "awscli": "the AWS CLI v2 the node scripts call (14-aws-cli.sh installs AWS's build; this is Debian's build)",
    "cloud-init": "reads the user data from IMDS and runs it, as on Ubuntu's and Amazon Linux's base images",
    "openmpi-bin": "Open MPI 4.1 (07-efa-installer.sh installs Amazon's under /opt/amazon/openmpi; the hook moves it)",
    "python3-torch": "torchrun for the elastic journey (a user's --setup installs PyTorch on a real node)",
    "tar": "operator-scripts.sh unpacks the operator scripts",
    "gzip": "the operator scripts archive and the user data",
    "util-linux": "mountpoint, runuser, setpriv",
    "kmod": "modprobe, which the EFA and Lustre setups call (they skip here by their own conditions)",
}


def profile_packages(build_tools: str) -> list[str]:
    """The RUNTIME_TOOLS that 01-build-tools.sh's Ubuntu package list names."""
    match = re.search(r"if is_ubuntu; then\s+packages=\((.*?)\)", build_tools, re.DOTALL)
    if match is None:
        raise RuntimeError(f"{BUILD_TOOLS}: no Ubuntu package list (packages=(...)) found")
    listed = match.group(1).split()
    return [tool for tool in RUNTIME_TOOLS if tool in listed]


def packages() -> dict[str, str]:
    from_profiles = {name: f"{BUILD_TOOLS.name} installs it" for name in profile_packages(BUILD_TOOLS.read_text())}
    return {**BASE_PACKAGES, **from_profiles}


def cache_root() -> Path:
    return Path(os.environ.get("GPUFLEET_BOX_CACHE", Path.home() / ".cache" / "gpufleet-box"))


def cache_key() -> str:
    """The package list and the customize hook: a change to either builds a new root file system."""
    digest = hashlib.sha256()
    digest.update(SUITE.encode())
    for package in sorted(packages()):
        digest.update(package.encode() + b"\n")
    digest.update(CUSTOMIZE_HOOK.read_bytes())
    return digest.hexdigest()[:16]


def build_command(target: Path) -> list[str]:
    return [
        "mmdebstrap",
        "--variant=minbase",
        "--include=" + ",".join(sorted(packages())),
        "--aptopt=APT::Install-Recommends false",
        # Documentation and translations are not read by anything in the box.
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        f'--customize-hook=chroot "$1" /bin/sh -s < {CUSTOMIZE_HOOK}',
        SUITE,
        str(target),
    ]


def ensure_rootfs(progress=print) -> Path:
    """The cached root file system, built first when the cache has none for this key (about 100 s; one build at a
    time: a lock file serialises concurrent callers)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"rootfs-{cache_key()}"
    if (target / ".complete").exists():
        return target
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError("the box needs mmdebstrap: apt-get install mmdebstrap (make setup installs it as root)")
    with open(root / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        partial = root / f"building-{cache_key()}"
        shutil.rmtree(partial, ignore_errors=True)
        progress(f"box: building the root file system {target.name} with mmdebstrap (about 2 minutes, cached)")
        log = root / f"{target.name}.log"
        with open(log, "w") as output:
            done = subprocess.run(build_command(partial), stdout=output, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise RuntimeError(f"mmdebstrap failed (exit {done.returncode}); its output: {log}")
        (partial / ".complete").write_text(cache_key() + "\n")
        partial.rename(target)
        # Two kept: switching between two branches' package lists builds nothing again.
        builds = sorted(
            (path for path in root.glob("rootfs-*") if path.is_dir()), key=lambda path: path.stat().st_mtime
        )
        for old in builds[:-KEPT_BUILDS]:
            shutil.rmtree(old, ignore_errors=True)
            old.with_name(old.name + ".log").unlink(missing_ok=True)
    return target
