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

import pytest

SELECTION_VARIABLE = "GPUFLEET_MUTATION_TESTS"
SHARED_KERNEL_VARIABLE = "GPUFLEET_MUTATION_SHARED_KERNEL"  # set by bench/mutation.py


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


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under a shared jsii kernel, refuse to run on a kernel that answers out of step.

    A child killed while the kernel was answering it (a timeout) leaves that answer in the pipe, and the next child
    would read it as the answer to its own first request: its tests would fail for a reason that has nothing to do
    with its mutant. Exit 4 (a usage error) is reported as "other", so such a run shows up instead of counting as kills.
    """
    if not os.environ.get(SHARED_KERNEL_VARIABLE):
        return
    try:
        import aws_cdk

        in_step = aws_cdk.Stack(aws_cdk.App(), "KernelProbe").stack_name == "KernelProbe"
    except Exception:  # any answer meant for another request
        in_step = False
    if not in_step:
        pytest.exit("the shared jsii kernel answers out of step; rerun this mutant", returncode=4)
