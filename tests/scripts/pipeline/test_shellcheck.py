"""Every AMI pipeline script is shellcheck clean and in strict mode."""

import subprocess

import pytest

from tests.scripts.pipeline.conftest import SCRIPTS_DIR

SCRIPTS = sorted(SCRIPTS_DIR.glob("*.sh"))


def test_the_pipeline_scripts_are_found():
    assert [path.name for path in SCRIPTS] == ["build-image.sh", "install-gpufleet.sh", "install-tools.sh",
                                              "publish-image.sh"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_script_is_shellcheck_clean_and_strict(script):
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    lines = script.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
