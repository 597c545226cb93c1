"""The shared-kernel guard of `make mutate` (bench/mutation_selection.py): a mutant's run that starts on a jsii kernel
left out of step by an earlier child ends with mutmut's "suspicious" (exit 35, reported "other"), never as
failed tests (a kill)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPOSITORY

# Forks like mutmut's fork server: the kernel is started before forking, each child runs pytest with the plugin.
# The "killed" child writes a request and exits without reading its answer, as a child stopped by its CPU-time limit
# while the kernel worked for it would.
FORK_SERVER = textwrap.dedent(
    """
    import os, sys, time
    os.environ["GPUFLEET_MUTATION_SHARED_KERNEL"] = "1"
    import bench.mutation_shared_kernel
    import pytest
    from jsii._kernel import Kernel

    def in_child(run):
        pid = os.fork()
        if pid == 0:
            os._exit(run())
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    def mutant_tests():
        return int(pytest.main(["-q", "-p", "bench.mutation_selection", "-p", "no:cacheprovider", sys.argv[1]]))

    def killed_mid_call():
        kernel_process = Kernel().provider._process._process
        kernel_process.stdin.write(b'{"api": "stats"}\\n')
        kernel_process.stdin.flush()
        time.sleep(1)  # the answer is in the pipe now, and nobody reads it
        return 0

    print("exit codes:", in_child(mutant_tests), in_child(killed_mid_call), in_child(mutant_tests))
    """
)


def test_a_child_after_one_killed_mid_call_exits_35_instead_of_failing_its_tests(tmp_path: Path):
    passing = tmp_path / "test_passing.py"
    passing.write_text("def test_passing():\n    assert True\n")

    completed = subprocess.run(
        [sys.executable, "-c", FORK_SERVER, str(passing)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert "exit codes: 0 0 35" in completed.stdout
    assert "the shared jsii kernel answers out of step; rerun this mutant" in completed.stdout


def test_a_mutant_runs_every_test_of_the_selected_files_not_only_the_ids_mutmut_names(tmp_path: Path):
    """The second test reads what the first one's module-scoped fixture built, so mutmut's stats never credit it."""
    tests = tmp_path / "test_shared_fixture.py"
    tests.write_text(
        "import pytest\n\n"
        "@pytest.fixture(scope='module')\n"
        "def built():\n    return 'built'\n\n"
        "def test_credited(built):\n    pass\n\n"
        "def test_reads_the_result(built):\n    assert built == 'mutated'\n"
    )
    environment = {
        **os.environ,
        "MUTANT_UNDER_TEST": "stacks.constructs.example.x_build__mutmut_1",
        "GPUFLEET_MUTATION_TESTS": str(tests),
    }

    completed = subprocess.run(
        # As mutmut's runner calls pytest (mutmut/runners/harness.py): options, the credited test's id, the plugin.
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
        + [f"{tests}::test_credited", "-p", "bench.mutation_selection"],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 1, completed.stdout
    assert "1 failed, 1 passed" in completed.stdout
