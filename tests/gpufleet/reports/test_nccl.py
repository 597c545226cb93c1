# ruff: noqa: E501 -- table-driven cases hold rows of captured tool output, wider than the line limit
import pytest

from gpufleet.reports.nccl import Measurement, NoTableError, parse_nccl_log, strip_launcher_prefix, table_problems

# (fixture, table index, collective, layout, rows, first size, last size, avg_busbw, peak, wrong, ranks, hosts, truncated)
TABLES = [
    ("p4d_2node_all_reduce.log", 0, "all_reduce", "current", 29, 8, 2 << 30, 27.4285, (78.66, 2 << 30), 0, 16, 2, False),
    ("p4d_all_reduce_mpi_tagged.log", 0, "all_reduce", "current", 28, 8, 1 << 30, 25.2898, (78.05, 1 << 30), 0, 16, 2, False),
    ("p4d_all_reduce_nccl278.log", 0, "all_reduce", "old", 28, 8, 1 << 30, 9.62285, (26.86, 1 << 30), 0, 16, 2, False),
    ("p4d_all_gather_alltoall.log", 0, "all_gather", "current", 29, 0, 2 << 30, 25.922, (80.93, 1 << 30), 0, 16, 2, False),
    ("p4d_all_gather_alltoall.log", 1, "alltoall", "current", 29, 0, 2 << 30, 11.3253, (36.29, 2 << 30), 0, 16, 2, False),
    ("p4d_all_reduce_wrong.log", 0, "all_reduce", "current", 28, 8, 1 << 30, 14.8084, (41.36, 1 << 30), 1027, 16, 2, False),
    ("p4d_all_reduce_truncated.log", 0, "all_reduce", "current", 18, 8, 1 << 20, None, (22.93, 1 << 20), 0, 16, 2, True),
    ("p4d_broadcast_hostpid.log", 0, "broadcast", "current", 26, 8, 256 << 20, 34.5157, (120.27, 256 << 20), 0, 8, 1, False),
    ("p4d_all_reduce_srun_label.log", 0, "all_reduce", "current", 29, 8, 2 << 30, 27.4285, (78.66, 2 << 30), 0, 16, 2, False),
    ("p4d_all_reduce_skypilot_mpi.log", 0, "all_reduce", "current", 28, 8, 1 << 30, 25.2898, (78.05, 1 << 30), 0, 16, 2, False),
    ("p4d_all_reduce_skypilot_srun.log", 0, "all_reduce", "current", 29, 8, 2 << 30, 27.4285, (78.66, 2 << 30), 0, 16, 2, False),
    ("p4d_all_reduce_no_avg.log", 0, "all_reduce", "current", 29, 8, 2 << 30, 27.4279, (78.66, 2 << 30), 0, 16, 2, False),
]  # fmt: skip


@pytest.mark.parametrize(
    "name, index, collective, layout, rows, first, last, avg, peak, wrong, ranks, hosts, truncated", TABLES
)
def test_table_values(nccl_fixture, name, index, collective, layout, rows, first, last, avg, peak, wrong, ranks,
                      hosts, truncated):  # fmt: skip
    table = parse_nccl_log(nccl_fixture(name))[index]
    assert (table.collective, table.layout, len(table.rows)) == (collective, layout, rows)
    assert (table.rows[0].size_bytes, table.rows[-1].size_bytes) == (first, last)
    assert table.avg_busbw == avg
    assert table.peak == peak
    assert table.wrong == wrong
    assert (table.ranks, table.hosts, table.truncated) == (ranks, hosts, truncated)


# (fixture, table index, row index, expected row fields)
ROWS = [
    ("p4d_2node_all_reduce.log", 0, -1,
     (2147483648, 536870912, "float", "sum", -1, Measurement(51192.0, 41.95, 78.66, 0), Measurement(51832.0, 41.43, 77.68, 0))),
    ("p4d_2node_all_reduce.log", 0, 0,
     (8, 2, "float", "sum", -1, Measurement(60.64, 0.0, 0.0, 0), Measurement(62.98, 0.0, 0.0, 0))),
    ("p4d_2node_all_reduce.log", 0, 18,
     (2097152, 524288, "float", "sum", -1, Measurement(111.1, 18.88, 35.4, 0), Measurement(114.4, 18.34, 34.38, 0))),
    ("p4d_all_reduce_nccl278.log", 0, 0,
     (8, 2, "float", "sum", None, Measurement(93.51, 0.0, 0.0, None, 2e-07), Measurement(97.37, 0.0, 0.0, None, 2e-07))),
    ("p4d_all_gather_alltoall.log", 1, -1,
     (2147483648, 33554432, "float", "none", -1, Measurement(55484.0, 38.70, 36.29, 0), Measurement(57086.0, 37.62, 35.27, None))),
    ("p4d_all_reduce_wrong.log", 0, 24,
     (134217728, 33554432, "float", "sum", -1, Measurement(6233.2, 21.53, 40.37, 3), Measurement(6162.5, 21.78, 40.84, 0))),
]  # fmt: skip


@pytest.mark.parametrize("name, index, row_index, expected", ROWS)
def test_row_values(nccl_fixture, name, index, row_index, expected):
    row = parse_nccl_log(nccl_fixture(name))[index].rows[row_index]
    assert (row.size_bytes, row.count, row.type, row.redop, row.root, row.out_of_place, row.in_place) == expected


@pytest.mark.parametrize(
    "line, expected",
    [
        ("[1,0]<stdout>:           8             2     float", "           8             2     float"),
        ("[1,12]<stderr>:NCCL version 2.18.5+cuda12.2", "NCCL version 2.18.5+cuda12.2"),
        ("[ip-10-1-33-117:48201] # nThread 1", "# nThread 1"),
        ("0: # Avg bus bandwidth    : 1.5 ", "# Avg bus bandwidth    : 1.5 "),
        ("           8             2     float", "           8             2     float"),
        # srun --label pads the task id to the widest one: " 0: " beside "12: "; "P1 " for a heterogeneous job
        (" 0: # nThread 1 nGpus 1", "# nThread 1 nGpus 1"),
        (
            "12: ip-10-1-38-204:50737:50737 [4] NCCL INFO Bootstrap",
            "ip-10-1-38-204:50737:50737 [4] NCCL INFO Bootstrap",
        ),
        ("  7: # Avg bus bandwidth    : 1.5 ", "# Avg bus bandwidth    : 1.5 "),
        ("P1  3: # nThread 1", "# nThread 1"),
        # SkyPilot / Ray, plain and in the cyan SkyPilot streams to a terminal, before the Open MPI tag
        ("(head, rank=0, pid=3808) [1,0]<stdout>:#  Rank  0", "#  Rank  0"),
        ("(worker1, rank=1, pid=2769, ip=10.100.10.12) Worker nodes", "Worker nodes"),
        ("\x1b[36m(head, rank=0, pid=3808)\x1b[0m [1,0]<stdout>:# nThread 1", "# nThread 1"),
        ("(pid=3808) # nThread 1", "# nThread 1"),
        # stacked in either order
        (" 0: (head, rank=0, pid=3808) [1,0]<stdout>:        1024", "        1024"),
        ("(head, rank=0, pid=3808) 12: [1,12]<stderr>:NCCL version 2.18.5", "NCCL version 2.18.5"),
        # kubectl logs --prefix, before the Open MPI tag; the container name empty where kubectl was not told it
        ("[pod/nccl-test-launcher-x7k2p/launcher] [1,0]<stdout>:# nThread 1", "# nThread 1"),
        ("[pod/nccl-test-launcher-x7k2p/] Warning: Permanently added", "Warning: Permanently added"),
        # not prefixes: a timestamp, a parenthesis without a pid, an NCCL INFO line's host:pid:tid, a pod name in
        # capitals (no pod has one), kubectl's prefix without its space
        ("[pod/Launcher/launcher] text", "[pod/Launcher/launcher] text"),
        ("[pod/launcher/launcher]text", "[pod/launcher/launcher]text"),
        ("12:34:56 started", "12:34:56 started"),
        ("(head, rank=0) text", "(head, rank=0) text"),
        ("ip-10-1-33-117:48211:48211 [0] NCCL INFO", "ip-10-1-33-117:48211:48211 [0] NCCL INFO"),
    ],
)
def test_strip_launcher_prefix(line, expected):
    assert strip_launcher_prefix(line) == expected


@pytest.mark.parametrize(
    "prefixed, plain",
    [
        ("p4d_all_reduce_srun_label.log", "p4d_2node_all_reduce.log"),
        ("p4d_all_reduce_skypilot_srun.log", "p4d_2node_all_reduce.log"),
        ("p4d_all_reduce_skypilot_mpi.log", "p4d_all_reduce_mpi_tagged.log"),
        # An MPIJob launcher's log (gpufleet k8s nccl-test) as `kubectl logs` prints it: the tagged capture with the
        # worker pods' host names and ssh's notes on them, then the same with `kubectl logs --prefix`.
        ("eks_all_reduce_launcher.log", "p4d_all_reduce_mpi_tagged.log"),
        ("eks_all_reduce_launcher_kubectl_prefix.log", "p4d_all_reduce_mpi_tagged.log"),
    ],
)
def test_launcher_prefixed_log_parses_as_its_plain_capture(nccl_fixture, prefixed, plain):
    assert parse_nccl_log(nccl_fixture(prefixed)) == parse_nccl_log(nccl_fixture(plain))


def _without(text: str, *fragments: str) -> str:
    return "\n".join(line for line in text.splitlines() if not any(f in line for f in fragments))


# What ends a table: (lines removed from p4d_all_reduce_srun_label.log, avg_busbw, computed, truncated)
@pytest.mark.parametrize(
    "removed, avg, computed, truncated",
    [
        ((), 27.4285, False, False),  # both lines: the stated average
        (("Collective test concluded",), 27.4285, False, False),  # older nccl-tests: no concluded line
        (("Avg bus bandwidth",), 27.4279, True, False),  # concluded, average lost: computed from the rows
        (("Avg bus bandwidth", "Collective test concluded"), None, False, True),  # neither: the run died
    ],
)
def test_table_end(nccl_fixture, removed, avg, computed, truncated):
    table = parse_nccl_log(_without(nccl_fixture("p4d_all_reduce_srun_label.log"), *removed))[0]
    assert (table.avg_busbw, table.avg_busbw_computed, table.truncated, len(table.rows)) == (
        avg,
        computed,
        truncated,
        29,
    )


def test_computed_average_is_the_mean_of_both_placements(nccl_fixture):
    # The log states 25.2898 from unrounded busbw; the mean of the 56 printed (rounded) values is 25.288928...
    text = _without(nccl_fixture("p4d_all_reduce_mpi_tagged.log"), "Avg bus bandwidth")
    table = parse_nccl_log(text + "\n[1,0]<stdout>:# Collective test concluded: all_reduce_perf_mpi\n")[0]
    assert (table.avg_busbw, table.avg_busbw_computed, table.truncated) == (25.2889, True, False)
    assert table_problems(table, None) == ()


def test_concluded_line_of_a_table_without_rows_computes_nothing():
    table = parse_nccl_log(HEADER + "# Collective test concluded: all_reduce_perf\n")[0]
    assert (table.avg_busbw, table.avg_busbw_computed, table.truncated) == (None, False, False)


def test_tagged_log_matches_plain_parse_of_its_rank0_stdout(nccl_fixture):
    tagged = nccl_fixture("p4d_all_reduce_mpi_tagged.log")
    rank0 = "\n".join(line.removeprefix("[1,0]<stdout>:") for line in tagged.splitlines() if "<stdout>" in line)
    assert parse_nccl_log(tagged) == parse_nccl_log(rank0)


def test_two_collectives_are_separate_tables(nccl_fixture):
    tables = parse_nccl_log(nccl_fixture("p4d_all_gather_alltoall.log"))
    assert [t.collective for t in tables] == ["all_gather", "alltoall"]
    assert all(row.in_place.wrong is None for row in tables[1].rows)  # alltoall prints N/A in place
    assert all(row.in_place.wrong == 0 for row in tables[0].rows)


@pytest.mark.parametrize("name", ["no_table.log"])
def test_log_without_table_raises(nccl_fixture, name):
    with pytest.raises(NoTableError):
        parse_nccl_log(nccl_fixture(name))


def test_empty_text_raises():
    with pytest.raises(NoTableError):
        parse_nccl_log("")


HEADER = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"


@pytest.mark.parametrize(
    "first_line, collective",
    [
        ("# Collective test starting: alltoall_perf\n", "alltoall"),
        ("# Collective test starting: alltoallv_perf_mpi\n", "alltoallv"),
        ("# Collective test starting: my_own_perf\n", None),
        ("", None),
    ],
)
def test_collective_named_by_starting_line(first_line, collective):
    # redop none, root -1 and size == count * 4: nothing in the row tells alltoall from others
    row = "    33554432       8388608     float    none      -1    869.0   38.61   38.61      0    856.3   39.18   39.18    N/A"
    text = (
        first_line
        + "# nThread 1 nGpus 1 minBytes 8 maxBytes 33554432 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    )
    assert parse_nccl_log(text + HEADER + row + "\n# Avg bus bandwidth    : 38.9 \n")[0].collective == collective


@pytest.mark.parametrize(
    "row, collective",
    [
        ("    33554432       8388608     float     sum      -1    869.0   38.61   72.40      0    856.3   39.18   73.47      0", "all_reduce"),
        ("    33554432        524288     float     sum      -1    869.0   38.61   36.20      0    856.3   39.18   36.73      0", "reduce_scatter"),
        ("    33554432       8388608     float    none       0    869.0   38.61   38.61      0    856.3   39.18   39.18      0", "broadcast"),
        ("    33554432       8388608     float     sum       0    869.0   38.61   38.61      0    856.3   39.18   39.18      0", "reduce"),
        ("    33554432       8388608     float    none      -1    869.0   38.61   38.61      0    856.3   39.18   39.18    N/A", None),
    ],
)  # fmt: skip
def test_collective_inferred_when_log_does_not_name_it(row, collective):
    ranks = "".join(
        f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on node-{r // 8} device {r % 8:2d} [0x10] GPU\n" for r in range(16)
    )
    table = parse_nccl_log(ranks + HEADER + row + "\n# Avg bus bandwidth    : 1.0 \n")[0]
    assert table.collective == collective


def test_blank_root_column_is_none():
    row = "      1048576         16384     float    none           87.19   12.03   11.28      0    86.75   12.09   11.33    N/A"
    table = parse_nccl_log(HEADER + row + "\n# Avg bus bandwidth    : 11.3 \n")[0]
    assert (table.rows[0].root, table.rows[0].redop, table.rows[0].out_of_place.busbw) == (None, "none", 11.28)


def test_noise_inside_table_is_skipped(nccl_fixture):
    table = parse_nccl_log(nccl_fixture("p4d_all_reduce_nccl278.log"))[0]
    assert table.rows[0].size_bytes == 8  # "NCCL INFO Launch mode Parallel" sits between header and rows


@pytest.mark.parametrize(
    "name, min_busbw, expected",
    [
        ("p4d_2node_all_reduce.log", 75.0, ()),
        ("p4d_2node_all_reduce.log", None, ()),
        ("p4d_2node_all_reduce.log", 78.66, ()),  # a peak equal to the bound passes
        ("p4d_2node_all_reduce.log", 78.67, ("all_reduce: peak busbw 78.66 GB/s is below --min-busbw 78.67 GB/s",)),
        ("p4d_2node_all_reduce.log", 80.0, ("all_reduce: peak busbw 78.66 GB/s is below --min-busbw 80 GB/s",)),
        ("p4d_all_reduce_wrong.log", None, ("all_reduce: 1027 wrong elements",)),
        ("p4d_all_reduce_truncated.log", None, ("all_reduce: log truncated after 18 rows (no 'Avg bus bandwidth' line)",)),
        ("p4d_all_reduce_nccl278.log", 20.0, ()),
        ("p4d_all_reduce_no_avg.log", None, ()),
        ("p4d_all_reduce_srun_label.log", 80.0, ("all_reduce: peak busbw 78.66 GB/s is below --min-busbw 80 GB/s",)),
    ],
)  # fmt: skip
def test_table_problems(nccl_fixture, name, min_busbw, expected):
    assert table_problems(parse_nccl_log(nccl_fixture(name))[0], min_busbw) == expected


def test_old_layout_failure_comes_from_out_of_bounds_line(nccl_fixture):
    text = nccl_fixture("p4d_all_reduce_nccl278.log").replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED"
    )
    table = parse_nccl_log(text)[0]
    assert table.wrong == 3
    assert table_problems(table, None) == ("all_reduce: 3 out-of-bounds checks",)


def _rank_lines(ranks: int) -> str:
    """The "#  Rank" device lines of a run over `ranks` GPUs, 8 to a node."""
    return "".join(
        f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on node-{r // 8} device {r % 8:2d} [0x10] GPU\n"
        for r in range(ranks)
    )


# Rows of unnamed tables whose collective only the size/count ratio can tell (redop, root -1, size / (count * word)).
@pytest.mark.parametrize(
    "ranks, row, collective",
    [
        # all_gather moves ranks x count: 33554432 = 524288 floats x 4 B x 16 ranks
        (16, "    33554432        524288     float    none      -1    869.0   38.61   36.20      0    856.3   39.18   36.73      0", "all_gather"),
        # two GPUs: the ratio is 2, still all_gather / reduce_scatter
        (2, "    33554432       4194304     float    none      -1    869.0   38.61   19.31      0    856.3   39.18   19.59      0", "all_gather"),
        (2, "    33554432       4194304     float     sum      -1    869.0   38.61   19.31      0    856.3   39.18   19.59      0", "reduce_scatter"),
        # a run with -b 0 cut after its first row: 0 bytes of 0 elements tell nothing
        (16, "           0             0     float     sum      -1    25.14    0.00    0.00      0    25.09    0.00    0.00      0", None),
        # ratio 8 with 16 ranks is neither all_reduce (1) nor all_gather (16)
        (16, "    33554432       1048576     float    none      -1    869.0   38.61   36.20      0    856.3   39.18   36.73      0", None),
        # fp8 as nccl-tests names it (src/common.cu test_typenames: "f8e4m3", "f8e5m2"): one byte a word
        (16, "    33554432      33554432    f8e4m3     sum      -1    869.0   38.61   72.40      0    856.3   39.18   73.47      0", "all_reduce"),
        (16, "    33554432      33554432    f8e5m2     sum      -1    869.0   38.61   72.40      0    856.3   39.18   73.47      0", "all_reduce"),
    ],
)  # fmt: skip
def test_collective_inferred_from_the_ratio(ranks, row, collective):
    table = parse_nccl_log(_rank_lines(ranks) + HEADER + row + "\n# Avg bus bandwidth    : 1.0 \n")[0]
    assert (table.collective, table.ranks) == (collective, ranks)


def test_unnamed_table_without_rows_is_reported_as_collective():
    table = parse_nccl_log(HEADER + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0 \n")[0]
    assert (table.collective, table.rows, table.truncated) == (None, (), False)
    assert table_problems(table, 10.0) == ("collective: table has no rows",)


def test_unnamed_truncated_table_is_reported_as_collective():
    row = "    33554432       8388608     float    none      -1    869.0   38.61   38.61      0    856.3   39.18   39.18    N/A"
    assert table_problems(parse_nccl_log(HEADER + row + "\n")[0], None) == (
        "collective: log truncated after 1 rows (no 'Avg bus bandwidth' line)",
    )


@pytest.mark.parametrize(
    "name, out_of_bounds",
    [("p4d_2node_all_reduce.log", 0), ("p4d_all_reduce_wrong.log", 2), ("p4d_all_reduce_truncated.log", None)],
)
def test_out_of_bounds_count_as_the_log_states_it(nccl_fixture, name, out_of_bounds):
    assert parse_nccl_log(nccl_fixture(name))[0].out_of_bounds == out_of_bounds


def test_current_layout_out_of_bounds_without_wrong_elements_fails(nccl_fixture):
    # The footer's count stands on its own: rows that show no wrong element (the failing rows filtered out of the
    # copy) do not hide it.
    text = nccl_fixture("p4d_2node_all_reduce.log").replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED"
    )
    table = parse_nccl_log(text)[0]
    assert (table.wrong, table.out_of_bounds) == (0, 3)
    assert table_problems(table, None) == ("all_reduce: 3 out-of-bounds checks",)


def test_checks_off_rows_say_na_in_both_placements():
    # -c 0: util.cu writeBenchmarkLineBody prints "N/A" instead of the wrong-element count (nccl-tests v2.19.6)
    rows = (
        "     1048576        262144     float     sum      -1    87.19   12.03   22.55    N/A    86.75   12.09   22.67    N/A\n"
        "     2097152        524288     float     sum      -1    111.1   18.88   35.40    N/A    114.4   18.34   34.38    N/A\n"
    )
    table = parse_nccl_log(HEADER + rows + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 28.75 \n")[0]
    assert [(row.size_bytes, row.out_of_place.wrong, row.in_place.wrong) for row in table.rows] == [
        (1048576, None, None),
        (2097152, None, None),
    ]
    assert (table.wrong, table.peak) == (0, (35.4, 2097152))
    assert table_problems(table, None) == ()


# nccl-tests v2.19.6 (util.cu writeResultHeader, writePerIterReport, writeTimestamp) can print more cells than the
# parser reads: -I 1 adds i_min i_max i_p99 i_cv% after each placement, -S 1 ends a row with "%Y-%m-%d %H:%M:%S".
# The last eight cells are then no longer time algbw busbw #wrong twice, so no row is taken from them: the header
# is reported, and the table is not judged (neither passed nor failed for having no rows).
@pytest.mark.parametrize(
    "header, row, columns",
    [
        (
            "#       size         count      type   redop    root     time   algbw   busbw #wrong    i_min    i_max"
            "    i_p99    i_cv%     time   algbw   busbw #wrong    i_min    i_max    i_p99    i_cv%\n",
            "    33554432       8388608     float     sum      -1    869.0   38.61   72.40      0    851.2    901.7"
            "    899.0     1.62    856.3   39.18   73.47      0    850.1    880.4    879.9     0.98\n",
            21,
        ),
        (
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
            " #wrong           timestamp\n",
            "    33554432       8388608     float     sum      -1    869.0   38.61   72.40      0    856.3   39.18   73.47"
            "      0  2026-11-23 07:40:11\n",
            14,
        ),
    ],
    ids=["per-iteration timing", "timestamps"],
)
def test_rows_with_extra_cells_are_not_misread(header, row, columns):
    table = parse_nccl_log(header + row + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 72.9 \n")[0]
    assert table.rows == ()
    assert [str(line) for line in table.unreadable] == [
        f"line 1: the table has {columns} columns, more than the 13 this report reads (size count type redop root, "
        "then time algbw busbw #wrong twice): nccl-tests -I 1 and -S 1 add columns; run it without them"
    ]
    assert table_problems(table, None) == ()


def test_monitoring_lines_inside_a_table_are_not_rows():
    # A sampler writing into the same log between two rows: a "GPU 0 <fields>" line shaped like dcgmi dmon's samples
    # (that format is from memory, unconfirmed): its first cell is not a size, so it is no row.
    rows = (
        "    16777216       4194304     float     sum      -1    493.8   33.98   63.71      0    489.4   34.28   64.28      0\n"
        "GPU 0     68.412   35    44    1410   1593    0.912    0.000    0.455   0.000   0.000\n"
        "    33554432       8388608     float     sum      -1    869.0   38.61   72.40      0    856.3   39.18   73.47      0\n"
    )
    table = parse_nccl_log(HEADER + rows + "# Avg bus bandwidth    : 68.5 \n")[0]
    assert [row.size_bytes for row in table.rows] == [16777216, 33554432]


AR_ROW = "    33554432       8388608     float     sum      -1    869.0   38.61   72.40      0    856.3   39.18   73.47      0\n"
AVG = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 72.935 \n"
CONCLUDED = "# Out of bounds values : 0 OK\n#\n# Collective test concluded: all_reduce_perf\n"


# Tables pasted back to back without their run lines (as they are quoted in issues): what ends the first one.
@pytest.mark.parametrize(
    "first_end, first",
    [
        ("", (None, False, True)),  # a new header while a table is open: the first was cut short
        (AVG, (72.935, False, False)),
        (CONCLUDED, (72.935, True, False)),  # average lost: computed, mean of 72.40 and 73.47
    ],
)
def test_pasted_tables_back_to_back(first_end, first):
    tables = parse_nccl_log(HEADER + AR_ROW + first_end + HEADER + AR_ROW + AVG)
    assert [(t.avg_busbw, t.avg_busbw_computed, t.truncated) for t in tables] == [first, (72.935, False, False)]
    assert [(t.collective, len(t.rows), t.ranks) for t in tables] == [("all_reduce", 1, None), ("all_reduce", 1, None)]


def test_run_that_died_then_a_new_run(nccl_fixture):
    # The first mpirun aborted mid-table; the job script ran the test again into the same log.
    text = nccl_fixture("p4d_all_reduce_truncated.log") + nccl_fixture("p4d_2node_all_reduce.log")
    tables = parse_nccl_log(text)
    assert [(t.collective, len(t.rows), t.avg_busbw, t.truncated, t.out_of_bounds) for t in tables] == [
        ("all_reduce", 18, None, True, None),
        ("all_reduce", 29, 27.4285, False, 0),
    ]
    assert table_problems(tables[0], None) == ("all_reduce: log truncated after 18 rows (no 'Avg bus bandwidth' line)",)


def test_job_log_with_three_runs(nccl_fixture):
    # After the concluded line of the first run comes the next run's "+ mpirun ..." trace and its NCCL INFO lines.
    text = nccl_fixture("p4d_all_reduce_no_avg.log") + "\n" + nccl_fixture("p4d_all_gather_alltoall.log")
    tables = parse_nccl_log(text)
    assert [(t.collective, len(t.rows), t.avg_busbw, t.avg_busbw_computed) for t in tables] == [
        ("all_reduce", 29, 27.4279, True),
        ("all_gather", 29, 25.922, False),
        ("alltoall", 29, 11.3253, False),
    ]


def test_collective_named_only_by_the_concluded_line():
    # No starting line (filtered copy), no average: alltoall's rows (none, -1, ratio 1) could be any collective.
    row = "    33554432       2097152     float    none      -1    869.0   38.61   36.20      0    856.3   39.18   36.73    N/A\n"
    text = "# nThread 1 nGpus 1 minBytes 8 maxBytes 33554432 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    table = parse_nccl_log(
        text + HEADER + row + "# Out of bounds values : 0 OK\n#\n# Collective test concluded: alltoall_perf\n"
    )[0]
    assert (table.collective, table.avg_busbw, table.avg_busbw_computed) == ("alltoall", 36.465, True)


def test_previous_runs_concluded_line_does_not_name_the_next_table():
    none_row = "    33554432       8388608     float    none      -1    869.0   38.61   38.61      0    856.3   39.18   39.18    N/A\n"
    gather_row = "    33554432        524288     float    none      -1    869.0   38.61   36.20      0    856.3   39.18   36.73      0\n"
    run = "# nThread 1 nGpus 1 minBytes 8 maxBytes 33554432 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    text = (
        "# Collective test starting: all_gather_perf\n" + run + HEADER + gather_row + AVG
        + "#\n# Collective test concluded: all_gather_perf\n"
        + "# Collective test starting: my_own_perf\n" + run + HEADER + none_row + AVG
        + "#\n# Collective test concluded: my_own_perf\n"
    )  # fmt: skip
    assert [t.collective for t in parse_nccl_log(text)] == ["all_gather", None]


def test_no_table_message_in_full(nccl_fixture):
    with pytest.raises(NoTableError) as raised:
        parse_nccl_log(nccl_fixture("no_table.log"))
    assert str(raised.value) == "no nccl-tests results table (expected a '#  size  count  type ...' header and rows)"
