"""gpufleet nccl-report on damaged nccl-tests logs: exit 0, 1 or 2, every stderr line naming the log, in time."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import given

from tests.conftest import FIXTURES
from tests.fuzz.inputs import damaged, fuzz_settings, run_command

LOGS = sorted((FIXTURES / "nccl").glob("*.log"))
EXIT_CODES = {0, 1, 2}
HEADER = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
    " #wrong\n"
)


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"{name} in the JSON: jq and other strict readers refuse it")


@fuzz_settings(examples=150)
@given(data=damaged(log.read_bytes() for log in LOGS))
def test_damaged_logs(tmp_path, data):
    path = tmp_path / "damaged.log"
    path.write_bytes(data)
    code, out, _ = run_command(
        ["nccl-report", str(path), "--json"], exit_codes=EXIT_CODES, names=(str(path),), input_bytes=len(data)
    )
    if out:
        report = json.loads(out, parse_constant=_refuse_constant)
        assert report["passed"] == (code == 0)


@fuzz_settings(examples=40)
@given(data=damaged(log.read_bytes() for log in LOGS))
def test_damaged_logs_on_stdin_as_text(data):
    run_command(["nccl-report"], exit_codes=EXIT_CODES, names=("<stdin>",), input_bytes=len(data), stdin=data)


# Adversarial lines far longer than real ones: each is read in time proportional to its length.
@pytest.mark.parametrize(
    "line",
    [
        " 0: " * 250_000,  # stacked srun labels: removed one at a time, this was quadratic
        "(pid=1 " * 150_000,  # a SkyPilot parenthesis that never closes
        "[1,0]<stdout>:" * 70_000 + "1",
        "1" * 1_000_000,
        "1 " * 500_000,
        "\x1b[" + "1;" * 500_000,
    ],
    ids=["srun labels", "open parenthesis", "mpi tags", "digits", "cells", "colour code"],
)
def test_long_adversarial_lines(tmp_path, line):
    path = tmp_path / "long.log"
    path.write_text(HEADER + line + "\n# Avg bus bandwidth    : 1.0\n")
    run_command(["nccl-report", str(path)], exit_codes=EXIT_CODES, names=(str(path),), input_bytes=len(line))


def test_a_log_far_larger_than_real_ones_is_streamed(tmp_path):
    # 256 MiB of NUL bytes without a line break (sparse: nothing written) is read in 64 KiB pieces, never whole: the
    # memory it takes does not grow with the file (a multi-gigabyte log reads the same way, only for longer).
    path = tmp_path / "huge.log"
    with path.open("wb") as handle:
        handle.truncate(256 << 20)
    tracemalloc.start()
    try:
        code, _, err = run_command(["nccl-report", str(path)], exit_codes={2}, names=(str(path),), input_bytes=4 << 30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.splitlines() == [
        f"{path}: no nccl-tests results table (expected a '#  size  count  type ...' header and rows)"
    ]
    assert peak < 4 << 20


def test_more_rows_than_a_run_prints_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("gpufleet.reports.nccl.MAX_ROWS", 3)
    row = "     1048576   262144   float   sum   -1   87.19   12.03   22.55   0   86.75   12.09   22.67   0\n"
    path = tmp_path / "rows.log"
    path.write_text(HEADER + row * 4)
    _, _, err = run_command(["nccl-report", str(path)], exit_codes={2}, names=(str(path),), input_bytes=0)
    assert err.splitlines() == [f"{path}: line 5: more than 3 table rows (not an nccl-tests log)"]


def test_more_tables_than_a_log_holds_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("gpufleet.reports.nccl.MAX_TABLES", 2)
    path = tmp_path / "tables.log"
    path.write_text(HEADER * 4)
    _, _, err = run_command(["nccl-report", str(path)], exit_codes={2}, names=(str(path),), input_bytes=0)
    assert err.splitlines() == [f"{path}: line 4: more than 2 results tables (not an nccl-tests log)"]
