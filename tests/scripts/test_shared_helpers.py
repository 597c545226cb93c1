"""No copy of the scripts' helpers: every script of scripts/node, scripts/ops and scripts/pipeline sources
scripts/lib/helpers.sh the same way, from its own directory, and no script defines log, warn, error, die or
require_settings of its own (the AMI build's scripts share scripts/ami/lib/common.sh, which Packer uploads with
them)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE_LINE = 'source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"'
FOLDERS = ("node", "ops", "pipeline")
# Scripts that need none of it, and why.
WITHOUT_HELPERS = {"pipeline/install-gpufleet.sh": "it requires no setting and prints nothing of its own"}


def scripts() -> list[str]:
    return sorted(
        str(path.relative_to(REPO / "scripts"))
        for folder in FOLDERS
        for path in (REPO / "scripts" / folder).glob("*.sh")
    )


@pytest.mark.parametrize("script", scripts())
def test_every_script_sources_the_library_from_its_own_directory(script):
    lines = (REPO / "scripts" / script).read_text().splitlines()

    assert (SOURCE_LINE in lines) == (script not in WITHOUT_HELPERS)


def test_no_script_defines_helpers_of_its_own():
    """The AMI build's library excepted, the helpers exist once: in scripts/lib/helpers.sh."""
    definition = re.compile(r"^\s*(log|warn|error|die|require_settings)\s*\(\)", re.MULTILINE)
    defining = sorted(
        str(path.relative_to(REPO)) for path in (REPO / "scripts").rglob("*.sh") if definition.search(path.read_text())
    )

    assert defining == ["scripts/ami/lib/common.sh", "scripts/lib/helpers.sh"]


def test_a_script_run_through_a_link_finds_the_library(tmp_path):
    """readlink -f: an operator may link a script into a directory on PATH."""
    link = tmp_path / "node-health-check"
    link.symlink_to(REPO / "scripts" / "ops" / "node-health-check.sh")

    result = subprocess.run([str(link)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)

    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "node-health-check: error: GPUFLEET_GPU_COUNT is not set (see the header of scripts/ops/node-health-check.sh)"
    )
