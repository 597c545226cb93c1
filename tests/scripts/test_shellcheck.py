"""Every node and AMI pipeline script is shellcheck clean (scripts/ami has its own, in
tests/scripts/ami/test_script_conventions.py). Strict mode is tested as behaviour: test_strict_mode.py of each
script folder fails a step in the middle of every script and checks that the script stops there."""

import subprocess
from pathlib import Path

import pytest

SCRIPTS_ROOT = Path(__file__).resolve().parents[2] / "scripts"
SCRIPTS = sorted(path for folder in ("node", "pipeline") for path in (SCRIPTS_ROOT / folder).glob("*.sh"))


def test_the_scripts_are_found():
    assert {f"{path.parent.name}/{path.name}" for path in SCRIPTS} >= {
        "node/raid0-nvme.sh",
        "node/gpu-clocks.sh",
        "node/mig.sh",
        "node/efa-env.sh",
        "node/spot-watcher.sh",
        "node/run-setup.sh",
        "pipeline/build-image.sh",
        "pipeline/install-gpufleet.sh",
        "pipeline/install-tools.sh",
        "pipeline/publish-image.sh",
    }


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_script_is_shellcheck_clean(script):
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)

    assert lint.returncode == 0, lint.stdout
