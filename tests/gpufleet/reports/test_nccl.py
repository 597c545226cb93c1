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
        # not prefixes: a timestamp, a parenthesis without a pid, an NCCL INFO line's host:pid:tid
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
