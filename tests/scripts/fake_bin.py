"""Stand-ins for outside programs on PATH: one executable per name that runs a Python fake with the name first."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path


def install_fakes(bin_dir: Path, fake: Path, names: Iterable[str]) -> None:
    """bin_dir/NAME for each name: `exec python -S FAKE NAME "$@"`, with the test's interpreter."""
    for name in names:
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{fake}" {name} "$@"\n')
        wrapper.chmod(0o755)
