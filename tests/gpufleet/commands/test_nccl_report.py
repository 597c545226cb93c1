# ruff: noqa: E501 -- table-driven cases hold rows of captured tool output, wider than the line limit
import io
import json
from pathlib import Path

import pytest

from gpufleet.cli import main


@pytest.mark.parametrize(
    "names, extra, code",
    [
        (["p4d_2node_all_reduce.log"], [], 0),
        (["p4d_2node_all_reduce.log"], ["--min-busbw", "75"], 0),
        (["p4d_2node_all_reduce.log"], ["--min-busbw", "80"], 1),
        (["p4d_all_reduce_mpi_tagged.log"], [], 0),
        (["p4d_all_reduce_nccl278.log"], [], 0),
        (["p4d_broadcast_hostpid.log"], [], 0),
        (["p4d_all_gather_alltoall.log"], [], 0),
        (["p4d_all_gather_alltoall.log"], ["--min-busbw", "70"], 1),
        (["p4d_all_reduce_wrong.log"], [], 1),
        (["p4d_all_reduce_truncated.log"], [], 1),
        (["no_table.log"], [], 2),
        (["p4d_2node_all_reduce.log", "no_table.log"], [], 2),
        (["p4d_all_reduce_srun_label.log"], [], 0),
        (["p4d_all_reduce_skypilot_mpi.log"], [], 0),
        (["p4d_all_reduce_skypilot_srun.log"], ["--min-busbw", "75"], 0),
        (["p4d_all_reduce_skypilot_srun.log"], ["--min-busbw", "80"], 1),
        (["p4d_all_reduce_no_avg.log"], [], 0),
    ],
)
def test_exit_codes(fixture_path, capsys, names, extra, code):
    assert main(["nccl-report", *[fixture_path("nccl", n) for n in names], *extra]) == code


def test_no_table_names_the_file_in_one_line(fixture_path, capsys):
    path = fixture_path("nccl", "no_table.log")
    assert main(["nccl-report", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{path}: no nccl-tests results table")


def test_unreadable_file(capsys, tmp_path):
    assert main(["nccl-report", str(tmp_path / "missing.log")]) == 2
    assert (
        capsys.readouterr().err.strip() == f"{tmp_path / 'missing.log'}: cannot read file (No such file or directory)"
    )


def test_json_single_table(fixture_path, capsys):
    assert main(["nccl-report", fixture_path("nccl", "p4d_2node_all_reduce.log"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"rows", "avg_busbw", "peak_busbw", "wrong", "passed", "collectives"} <= set(report)
    assert (report["avg_busbw"], report["peak_busbw"], report["wrong"], report["passed"]) == (27.4285, 78.66, 0, True)
    assert len(report["rows"]) == 29 and len(report["collectives"]) == 1
    last = report["rows"][-1]
    assert last == {
        "size_bytes": 2147483648, "count": 536870912, "type": "float", "redop": "sum", "root": -1,
        "out_of_place": {"time_us": 51192.0, "algbw": 41.95, "busbw": 78.66, "wrong": 0, "max_error": None},
        "in_place": {"time_us": 51832.0, "algbw": 41.43, "busbw": 77.68, "wrong": 0, "max_error": None},
    }  # fmt: skip
    assert report["collectives"][0]["collective"] == "all_reduce"


def test_json_two_collectives(fixture_path, capsys):
    assert (
        main(["nccl-report", fixture_path("nccl", "p4d_all_gather_alltoall.log"), "--json", "--min-busbw", "70"]) == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert "rows" not in report and report["passed"] is False
    assert [c["collective"] for c in report["collectives"]] == ["all_gather", "alltoall"]
    assert [c["passed"] for c in report["collectives"]] == [True, False]
    assert report["collectives"][1]["rows"][-1]["in_place"]["wrong"] is None


def test_json_average_computed_where_a_finished_log_lost_it(fixture_path, capsys):
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_reduce_no_avg.log"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["avg_busbw"], report["avg_busbw_computed"], report["truncated"], report["passed"]) == (
        27.4279,
        True,
        False,
        True,
    )
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_reduce_srun_label.log"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["avg_busbw"], report["avg_busbw_computed"], report["collective"]) == (27.4285, False, "all_reduce")


def test_text_report_marks_computed_average(fixture_path, capsys):
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_reduce_no_avg.log")]) == 0
    out = capsys.readouterr().out
    assert "avg busbw (computed from the rows: the log has no 'Avg bus bandwidth' line): 27.4279 GB/s" in out
    assert "verdict: PASS" in out


def test_json_truncated_and_wrong(fixture_path, capsys):
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_reduce_truncated.log"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["avg_busbw"], report["truncated"], len(report["rows"])) == (None, True, 18)
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_reduce_wrong.log"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["wrong"] == 1027


@pytest.mark.parametrize("argv", [["nccl-report"], ["nccl-report", "-"]])
def test_stdin(fixture_path, capsys, monkeypatch, argv):
    with open(fixture_path("nccl", "p4d_all_reduce_mpi_tagged.log")) as handle:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(handle.read().encode())))
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["collectives"][0]["source"] == "<stdin>"


def test_text_report(fixture_path, capsys):
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_reduce_truncated.log")]) == 1
    out = capsys.readouterr().out
    assert "all_reduce: 2 nodes x 8 GPUs (16 ranks)" in out
    assert "peak busbw: 22.93 GB/s at 1 MiB" in out
    assert "avg busbw (as the log states it): not stated (log truncated)" in out
    assert "verdict: FAIL: all_reduce: log truncated after 18 rows" in out


def test_plot(fixture_path, capsys, tmp_path):
    from matplotlib import image

    target = tmp_path / "busbw.png"
    argv = ["nccl-report", fixture_path("nccl", "p4d_2node_all_reduce.log"), "--plot", str(target), "--min-busbw", "70"]
    assert main(argv) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = image.imread(target).shape
    assert (width, height) == (1210, 660)
    assert not list(tmp_path.glob(".*partial"))


def test_plot_needs_png_name(fixture_path, capsys, tmp_path):
    assert (
        main(["nccl-report", fixture_path("nccl", "p4d_2node_all_reduce.log"), "--plot", str(tmp_path / "x.pdf")]) == 2
    )


# Damaged logs (issue 23): each case ended in a traceback before (OverflowError or ValueError). The damaged line is
# named on stderr, its table is not judged (exit 2), and the damaged row is left out, not guessed.
LAST_ROW = "  2147483648     536870912     float     sum      -1    51192   41.95   78.66      0    51832   41.43   77.68      0"


def _damaged(fixture_path, tmp_path, name: str, old: str, new: str) -> str:
    text = Path(fixture_path("nccl", name)).read_text()
    assert text.count(old) == 1
    path = tmp_path / "damaged.log"
    path.write_text(text.replace(old, new))
    return str(path)


@pytest.mark.parametrize(
    "old, new, problem",
    [
        (LAST_ROW, LAST_ROW[:-1] + "9" * 400,
         "line 56: table row not read: in-place #wrong is '999999999999999999999999'... (400 characters), out of range "
         "(expected a count of wrong elements or N/A)"),
        (LAST_ROW, LAST_ROW.replace("2147483648", "9" * 400),
         "line 56: table row not read: size is '999999999999999999999999'... (400 characters), expected a byte count "
         "of at most 20 digits"),
        (LAST_ROW, LAST_ROW.replace("78.66      0", "78.66 4!1943e+06"),
         "line 56: table row not read: out-of-place #wrong is '4!1943e+06', expected a count of wrong elements or N/A"),
        (LAST_ROW, LAST_ROW[:-1] + "\x1a0",
         "line 56: table row not read: in-place #wrong is '\\x1a0', expected a count of wrong elements or N/A"),
        (LAST_ROW, LAST_ROW.replace("41.95", "4" * 400),
         "line 56: table row not read: out-of-place algbw is '444444444444444444444444'... (400 characters), "
         "out of range (expected a number of at least 0)"),
        # str.isdigit() takes it for a digit, int() does not
        (LAST_ROW, LAST_ROW.replace("536870912", "²"),
         "line 56: table row not read: count is '²', expected an element count of at most 20 digits"),
    ],
    ids=["400-digit count", "400-digit size", "broken number", "control character", "400-digit algbw", "superscript"],
)  # fmt: skip
def test_damaged_row_is_named_and_its_table_not_judged(fixture_path, capsys, tmp_path, old, new, problem):
    path = _damaged(fixture_path, tmp_path, "p4d_2node_all_reduce.log", old, new)
    assert main(["nccl-report", path]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"{path}: {problem}"]
    assert captured.out.splitlines()[-1] == "verdict: NOT JUDGED: 1 line of the table could not be read (see stderr)"
    assert "     2 GiB " not in captured.out


@pytest.mark.parametrize(
    "old, new, problem",
    [
        ("# Avg bus bandwidth    : 27.4285 ", "# Avg bus bandwidth    : 27.4!85",
         "line 59: 'Avg bus bandwidth' is '27.4!85', expected a number of at least 0"),
        ("# Out of bounds values : 0 OK", "# Out of bounds values : " + "9" * 5000,
         "line 58: 'Out of bounds values' is '999999999999999999999999'... (5000 characters), expected a count of at "
         "most 20 digits"),
    ],
    ids=["average", "out of bounds"],
)  # fmt: skip
def test_damaged_footer_line_is_named_and_its_table_not_judged(fixture_path, capsys, tmp_path, old, new, problem):
    path = _damaged(fixture_path, tmp_path, "p4d_2node_all_reduce.log", old, new)
    assert main(["nccl-report", path]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"{path}: {problem}"]
    assert "verdict: NOT JUDGED: 1 line of the table could not be read (see stderr)" in captured.out


def test_the_other_tables_of_a_damaged_log_are_judged(fixture_path, capsys, tmp_path):
    first_row = "           0             0     float    none      -1    54.13    0.00    0.00      0    54.66"
    path = _damaged(
        fixture_path, tmp_path, "p4d_all_gather_alltoall.log", first_row, first_row.replace("54.13", "5?13")
    )
    assert main(["nccl-report", path, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"{path}: line 25: table row not read: out-of-place time is '5?13', expected a number of at least 0"
    ]
    report = json.loads(captured.out)
    assert [(t["collective"], len(t["rows"]), t["passed"]) for t in report["collectives"]] == [
        ("all_gather", 28, False),
        ("alltoall", 29, True),
    ]
    assert report["collectives"][0]["unreadable_lines"] == [
        "line 25: table row not read: out-of-place time is '5?13', expected a number of at least 0"
    ]
    assert (report["problems"], report["passed"]) == ([], False)


def test_a_table_that_fails_on_the_rows_read_fails_despite_a_damaged_row(fixture_path, capsys, tmp_path):
    row = "           8             2     float     sum      -1    63.09    0.00    0.00      0    61.94"
    path = _damaged(fixture_path, tmp_path, "p4d_all_reduce_wrong.log", row, row.replace("63.09", "[1,3]<stdout>:"))
    assert main(["nccl-report", path]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"{path}: line 24: table row not read: out-of-place time is '[1,3]<stdout>:', expected a number of at least 0"
    ]
    assert captured.out.splitlines()[-1] == "verdict: FAIL: all_reduce: 1027 wrong elements"


def test_a_low_peak_with_a_damaged_row_is_not_judged(fixture_path, capsys, tmp_path):
    # The row that cannot be read could hold the peak: failing on --min-busbw would be a guess.
    path = _damaged(fixture_path, tmp_path, "p4d_2node_all_reduce.log", LAST_ROW, LAST_ROW.replace("78.66", "78.6.6"))
    assert main(["nccl-report", path, "--min-busbw", "78.5"]) == 2
    assert capsys.readouterr().out.splitlines()[-1] == (
        "verdict: NOT JUDGED: 1 line of the table could not be read (see stderr)"
    )


def test_many_damaged_rows_are_counted_after_the_first_ten(capsys, tmp_path):
    path = tmp_path / "damaged.log"
    path.write_text(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
        " #wrong\n" + "".join(f"{size} broken\n" for size in range(12)) + "# Avg bus bandwidth    : 1.0\n"
    )
    assert main(["nccl-report", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 11
    assert err[0] == (
        f"{path}: line 2: table row not read: 2 cells, expected 12 or 13 (size count type redop [root], then time "
        "algbw busbw #wrong out-of-place and in-place)"
    )
    assert err[10] == f"{path}: 2 more unreadable lines in the same table after line 11"


def test_stdin_bytes_that_are_not_utf8_under_a_strict_locale(fixture_path, capsys, monkeypatch):
    # sys.stdin decodes strictly under a UTF-8 locale other than C.UTF-8 (en_US.UTF-8): the report reads the bytes.
    data = Path(fixture_path("nccl", "p4d_2node_all_reduce.log")).read_bytes()
    damaged = data.replace(b"Destroy COMPLETE", b"Destroy \xff\xfe COMPLETE")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(damaged), encoding="utf-8", errors="strict"))
    assert main(["nccl-report", "-"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verdict: PASS"
