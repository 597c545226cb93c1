"""A sandbox for the AMI pipeline's scripts: the fake tools of fake_tools.py on PATH, recording their calls."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.scripts.fake_bin import install_fakes

REPO = Path(__file__).resolve().parents[3]
SCRIPTS_DIR = REPO / "scripts" / "pipeline"
FAKE_TOOLS = Path(__file__).with_name("fake_tools.py")
TOOLS = ("aws", "packer", "curl", "gpg", "unzip", "dpkg", "session-manager-plugin", "npm", "cdk")


@dataclass
class Tools:
    bin_dir: Path
    state_file: Path
    log_file: Path
    tmp_dir: Path

    def set_state(self, **state: object) -> None:
        self.state_file.write_text(json.dumps(state))

    def calls(self, tool: str | None = None) -> list[list[str]]:
        if not self.log_file.exists():
            return []
        calls = [json.loads(line) for line in self.log_file.read_text().splitlines()]
        return [call for call in calls if tool is None or call[0] == tool]

    def env(self, **settings: str) -> dict[str, str]:
        """A clean environment: the fake tools first on PATH, then the system's (bash, python3, sha256sum, grep).
        install-tools.sh unpacks packer into GPUFLEET_TOOLS_BIN_DIR, /usr/local/bin by default: a test's own
        directory, unless the test names another, so that no test puts its fake packer on the machine's PATH."""
        return {
            "PATH": f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.tmp_dir),
            "TMPDIR": str(self.tmp_dir),
            "FAKE_STATE": str(self.state_file),
            "FAKE_LOG": str(self.log_file),
            "FAKE_BIN": str(self.bin_dir),
            "GPUFLEET_TOOLS_BIN_DIR": str(self.tmp_dir / "tools-bin"),
            **settings,
        }

    def run(self, script: Path | str, **settings: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(script)], env=self.env(**settings), capture_output=True, text=True)


@pytest.fixture
def tools(tmp_path: Path) -> Tools:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    install_fakes(bin_dir, FAKE_TOOLS, TOOLS)
    tmp_dir = tmp_path / "tmp"
    tmp_dir.mkdir()
    fake = Tools(bin_dir, tmp_path / "state.json", tmp_path / "calls.log", tmp_dir)
    fake.set_state()
    return fake
