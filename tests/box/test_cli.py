"""`make box`'s commands (python -m tests.box) where no box is up: one line saying so, exit 1. Bringing one up by hand
is the documented walkthrough (docs/development/cluster-in-a-box.md); the fixture the other tests share is the same
BoxCluster `up` drives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def box(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tests.box", *args], cwd=REPOSITORY, capture_output=True, text=True, timeout=60
    )


def test_shell_and_down_without_a_box_say_so(tmp_path):
    shell = box("shell", "--dir", str(tmp_path))
    assert (shell.returncode, shell.stdout, shell.stderr) == (
        1,
        "",
        f"box: no node is running in {tmp_path} (make box brings them up)\n",
    )
    down = box("down", "--dir", str(tmp_path))
    assert (down.returncode, down.stderr) == (1, f"box: no box is up in {tmp_path}\n")
