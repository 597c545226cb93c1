"""pytest plugin for `make mutate`: collect only the test files named in GPUFLEET_MUTATION_TESTS.

mutmut takes its test selection from pyproject.toml, where a change discards every cached result, so a run limited to
a few modules narrows the suite here instead (bench/mutation.py sets the variable; without it nothing is skipped).
Files outside the selection are not even imported, which keeps a CDK test module from starting a jsii kernel in a
process that mutmut later forks (the forked children would share that one node process and corrupt each other's
constructs).
"""

from __future__ import annotations

import os
from pathlib import Path

SELECTION_VARIABLE = "GPUFLEET_MUTATION_TESTS"


def selected_paths() -> list[Path]:
    return [Path(entry).resolve() for entry in os.environ.get(SELECTION_VARIABLE, "").split()]


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    selection = selected_paths()
    if not selection:
        return None
    path = collection_path.resolve()
    # Keep a path inside a selected folder or file, and every folder on the way to one.
    if any(path == selected or selected in path.parents or path in selected.parents for selected in selection):
        return None
    return True
