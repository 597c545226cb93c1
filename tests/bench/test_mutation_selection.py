"""The shared-kernel guard of `make mutate` (bench/mutation_selection.py): a mutant's run that starts on a jsii kernel
left out of step by an earlier child ends as a usage error (exit 4, reported "other"), never as
failed tests (a kill)."""

from __future__ import annotations

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


def test_a_child_after_one_killed_mid_call_exits_4_instead_of_failing_its_tests(tmp_path: Path):
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
    assert "exit codes: 0 0 4" in completed.stdout
    assert "the shared jsii kernel answers out of step; rerun this mutant" in completed.stdout
