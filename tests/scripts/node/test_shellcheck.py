"""Every node script is shellcheck clean and in strict mode."""

import subprocess
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[3] / "scripts" / "node").glob("*.sh"))


def test_the_node_scripts_are_found():
    expected = {"raid0-nvme", "gpu-clocks", "mig", "efa-env", "spot-watcher", "run-setup"}
    assert {path.stem for path in SCRIPTS} >= expected


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_script_is_shellcheck_clean_and_strict(script):
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)

    assert lint.returncode == 0, lint.stdout
    lines = script.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
