"""shellcheck runs once, in `make lint` (which `make test` runs first): its globs must reach every shell script, the
provisioning scripts' shared library included. Strict mode is tested as behaviour: test_strict_mode.py of each script
folder fails a step in the middle of every script and checks that the script stops there."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def shellcheck_globs() -> list[str]:
    (command,) = [
        line.split() for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("\tshellcheck ")
    ]
    return command[1:]


def box_shell_scripts() -> set[str]:
    """The cluster in a box's own shell: its scripts, and the image layer's files that sh or bash run or source."""
    box = REPO / "tests" / "box"
    found = set(box.rglob("*.sh"))
    found |= {
        path
        for path in (box / "image").rglob("*")
        if path.is_file() and path.read_bytes().startswith((b"#!/bin/sh\n", b"#!/bin/bash\n"))
    }
    return {str(path.relative_to(REPO)) for path in found}


def test_make_lint_shellchecks_every_shell_script_in_scripts():
    linted = {str(path.relative_to(REPO)) for pattern in shellcheck_globs() for path in REPO.glob(pattern)}
    assert linted == {str(path.relative_to(REPO)) for path in (REPO / "scripts").rglob("*.sh")} | box_shell_scripts()
    assert {"scripts/ami/lib/common.sh", "scripts/node/run-setup.sh", "scripts/ops/run-nccl-tests.sh"} <= linted
