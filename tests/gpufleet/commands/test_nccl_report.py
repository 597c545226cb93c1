# ruff: noqa: E501 -- table-driven cases hold rows of captured tool output, wider than the line limit
import io
import json

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
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'missing.log'}: cannot read (No such file or directory)"


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
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_gather_alltoall.log"), "--json", "--min-busbw", "70"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "rows" not in report and report["passed"] is False
    assert [c["collective"] for c in report["collectives"]] == ["all_gather", "alltoall"]
    assert [c["passed"] for c in report["collectives"]] == [True, False]
    assert report["collectives"][1]["rows"][-1]["in_place"]["wrong"] is None


def test_json_average_computed_where_a_finished_log_lost_it(fixture_path, capsys):
    assert main(["nccl-report", fixture_path("nccl", "p4d_all_reduce_no_avg.log"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["avg_busbw"], report["avg_busbw_computed"], report["truncated"], report["passed"]) == (27.4279, True, False, True)
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
        monkeypatch.setattr("sys.stdin", io.StringIO(handle.read()))
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
    assert main(["nccl-report", fixture_path("nccl", "p4d_2node_all_reduce.log"), "--plot", str(tmp_path / "x.pdf")]) == 2
