"""Runs the node scripts with fake system commands on PATH (fake_commands.py) and a private GPUFLEET_ROOT."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.scripts.fake_bin import install_fakes

SCRIPTS_DIR = Path(__file__).resolve().parents[3] / "scripts" / "node"
FAKE_COMMANDS = Path(__file__).with_name("fake_commands.py")
# The head of Debian's and Ubuntu's sshd_config (openssh-server's), which a fake node's image carries.
SSHD_CONFIG = "Include /etc/ssh/sshd_config.d/*.conf\nKbdInteractiveAuthentication no\nUsePAM yes\n"
FAKED = (
    "lsblk",
    "udevadm",
    "mdadm",
    "blkid",
    "mkfs.xfs",
    "mountpoint",
    "mount",
    "mount.lustre",
    "nvidia-smi",
    "curl",
    "systemctl",
    "systemd-run",
    "getent",
    "groupadd",
    "useradd",
    "chown",
    "ssh-keygen",
    "runuser",
    "sshd",
)


@dataclass
class FakeNode:
    """A node to run scripts on: fake commands, their shared state, and a log of every call."""

    root: Path
    bin_dir: Path
    state_file: Path
    log_file: Path

    def set_state(self, **state: object) -> None:
        self.state_file.write_text(json.dumps(state))

    @property
    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def calls(self, command: str | None = None) -> list[list[str]]:
        if not self.log_file.exists():
            return []
        calls = [json.loads(line) for line in self.log_file.read_text().splitlines()]
        return [call[1:] for call in calls if call[0] == command] if command else calls

    def clear_log(self) -> None:
        self.log_file.unlink(missing_ok=True)

    def run(
        self, script: str | Path, check: bool = True, args: Sequence[str] = (), **settings: str
    ) -> subprocess.CompletedProcess[str]:
        path = SCRIPTS_DIR / script if isinstance(script, str) else script
        env = {
            "PATH": f"{self.bin_dir}:/usr/bin:/bin",
            "GPUFLEET_ROOT": str(self.root),
            "FAKE_STATE": str(self.state_file),
            "FAKE_LOG": str(self.log_file),
            **settings,
        }
        result = subprocess.run([str(path), *args], env=env, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            pytest.fail(f"{path.name} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    install_fakes(bin_dir, FAKE_COMMANDS, FAKED)
    # efa-env.sh reads the versions manifest with python3; the node image provides it, here the test's Python does.
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python3.chmod(0o755)
    root = tmp_path / "root"
    root.mkdir()
    # The image's sshd configuration, which cluster-user.sh ends with its block.
    (root / "etc/ssh").mkdir(parents=True)
    (root / "etc/ssh/sshd_config").write_text(SSHD_CONFIG)
    fake = FakeNode(root, bin_dir, tmp_path / "state.json", tmp_path / "calls.log")
    fake.set_state()
    return fake


# What cluster-user.sh reads from IMDSv2: the primary interface's MAC, the node subnet through it, the region.
CLUSTER_MAC = "0e:12:34:56:78:9a"
CLUSTER_NODE_METADATA = {
    "mac": [[200, CLUSTER_MAC]],
    f"network/interfaces/macs/{CLUSTER_MAC}/subnet-ipv4-cidr-block": [[200, "10.40.0.0/20"]],
    "placement/region": [[200, "eu-west-1"]],
}
