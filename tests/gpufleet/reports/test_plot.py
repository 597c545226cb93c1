"""What the bus-bandwidth plot shows: the figure is inspected before it is closed (tests/gpufleet/commands checks the
PNG the command writes)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.colors
import matplotlib.figure
import pytest
from matplotlib import pyplot

from gpufleet.reports.nccl import CollectiveTable, Measurement, Row
from gpufleet.reports.plot import human_size, plot_busbw, title_for


def row(size_bytes: int, out_of_place_busbw: float, in_place_busbw: float) -> Row:
    return Row(
        size_bytes=size_bytes,
        count=size_bytes // 4,
        type="float",
        redop="sum",
        root=-1,
        out_of_place=Measurement(time_us=10.0, algbw=1.0, busbw=out_of_place_busbw, wrong=0),
        in_place=Measurement(time_us=10.0, algbw=1.0, busbw=in_place_busbw, wrong=0),
    )


def table(collective: str | None, rows: tuple[Row, ...], *, ranks: int | None, hosts: int | None) -> CollectiveTable:
    return CollectiveTable(
        collective=collective,
        layout="current",
        rows=rows,
        avg_busbw=None,
        out_of_bounds=0,
        ranks=ranks,
        hosts=hosts,
        truncated=False,
    )


ALL_REDUCE = table(
    "all_reduce",
    (row(0, 0.0, 0.0), row(1024, 1.0, 1.1), row(1048576, 40.0, 41.5), row(1073741824, 90.0, 89.0)),
    ranks=16,
    hosts=2,
)
# One byte is a size nccl-tests can start from (-b 1); only the 0-byte rows stay off the log axis.
UNNAMED = table(None, (row(1, 0.1, 0.1), row(8, 0.5, 0.4), row(4096, 2.0, 2.5)), ranks=8, hosts=None)


@pytest.fixture
def draw(monkeypatch, tmp_path):
    """Draws into tmp_path/busbw.png and returns the axes, kept open until the test ends."""
    drawn = []
    monkeypatch.setattr(pyplot, "close", drawn.append)

    def run(tables: list[CollectiveTable], min_busbw: float | None):
        plot_busbw(tables, tmp_path / "busbw.png", min_busbw)
        (figure,) = drawn
        return figure.axes[0]

    yield run
    monkeypatch.undo()
    for figure in drawn:
        pyplot.close(figure)


def test_each_table_is_two_lines_of_busbw_against_message_size_without_the_empty_size(draw):
    axes = draw([ALL_REDUCE, UNNAMED], None)
    lines = [
        (line.get_label(), list(line.get_xdata()), list(line.get_ydata()), line.get_linestyle(), line.get_marker())
        for line in axes.get_lines()
    ]
    assert lines == [
        ("all_reduce out-of-place", [1024, 1048576, 1073741824], [1.0, 40.0, 90.0], "-", "o"),
        ("all_reduce in-place", [1024, 1048576, 1073741824], [1.1, 41.5, 89.0], "--", "s"),
        ("nccl-tests out-of-place", [1, 8, 4096], [0.1, 0.5, 2.0], "-", "o"),
        ("nccl-tests in-place", [1, 8, 4096], [0.1, 0.4, 2.5], "--", "s"),
    ]
    out_of_place, in_place, other, _ = axes.get_lines()
    assert in_place.get_color() == out_of_place.get_color() != other.get_color()
    assert (in_place.get_alpha(), out_of_place.get_alpha()) == (0.7, None)
    assert [text.get_text() for text in axes.get_legend().get_texts()] == [
        "all_reduce out-of-place",
        "all_reduce in-place",
        "nccl-tests out-of-place",
        "nccl-tests in-place",
    ]


def test_the_threshold_is_a_red_dotted_line_in_the_legend(draw):
    axes = draw([ALL_REDUCE], 70.0)
    threshold = axes.get_lines()[-1]
    assert (threshold.get_label(), list(threshold.get_ydata()), threshold.get_linestyle()) == (
        "threshold 70 GB/s",
        [70.0, 70.0],
        ":",
    )
    assert matplotlib.colors.to_hex(threshold.get_color()) == matplotlib.colors.to_hex("tab:red")
    assert axes.get_legend().get_texts()[-1].get_text() == "threshold 70 GB/s"


def test_each_table_marks_its_peak_in_either_placement(draw):
    axes = draw([ALL_REDUCE, UNNAMED], None)
    assert [(text.get_text(), text.xy) for text in axes.texts] == [
        ("peak 90.0 GB/s at 1 GiB", (1073741824, 90.0)),
        ("peak 2.5 GB/s at 4 KiB", (4096, 2.5)),
    ]


def test_the_size_axis_is_log2_labelled_every_third_power_and_spans_the_sizes(draw):
    axes = draw([ALL_REDUCE, UNNAMED], None)
    assert (axes.get_xscale(), axes.xaxis.get_transform().base) == ("log", 2)
    major = axes.xaxis.get_major_locator()()
    assert list(major) == [2.0**power for power in (0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45)]
    assert [axes.xaxis.get_major_formatter()(value, 0) for value in major] == [
        "1 B", "8 B", "64 B", "512 B", "4 KiB", "32 KiB", "256 KiB", "2 MiB",
        "16 MiB", "128 MiB", "1 GiB", "8 GiB", "64 GiB", "512 GiB", "4 TiB", "32 TiB",
    ]  # fmt: skip
    minor = axes.xaxis.get_minor_locator()()
    assert (len(minor), minor[0], minor[-1]) == (46, 1.0, 2.0**45)
    assert axes.xaxis.get_minor_formatter()(2.0**4, 0) == ""
    assert axes.get_xlim() == (1 / 1.5, 1073741824 * 1.5)
    assert axes.get_ylim()[0] == 0
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("message size", "bus bandwidth (GB/s)")


def test_the_title_names_every_run_once_in_order(draw):
    axes = draw([UNNAMED, ALL_REDUCE, UNNAMED], None)
    assert axes.get_title() == (
        "nccl-tests bus bandwidth: all_reduce: 2 nodes x 8 GPUs (16 ranks); nccl-tests: 8 ranks"
    )


def test_a_failed_draw_leaves_the_earlier_png_and_no_partial_file(monkeypatch, tmp_path):
    target = tmp_path / "busbw.png"
    target.write_bytes(b"earlier")

    def fail_half_way(figure, path: Path, **_: object) -> None:
        Path(path).write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", fail_half_way)
    with pytest.raises(OSError, match="disk full"):
        plot_busbw([ALL_REDUCE], target, None)
    assert target.read_bytes() == b"earlier"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["busbw.png"]


@pytest.mark.parametrize(
    ("size_bytes", "expected"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (1610612736, "1.5 GiB"),
        (2**40, "1 TiB"),
        (2**50, "1024 TiB"),
    ],
)
def test_sizes_read_in_binary_units_up_to_tib(size_bytes, expected):
    assert human_size(size_bytes) == expected


@pytest.mark.parametrize(
    ("collective", "ranks", "hosts", "expected"),
    [
        ("all_reduce", 16, 2, "all_reduce: 2 nodes x 8 GPUs (16 ranks)"),
        ("all_gather", 8, None, "all_gather: 8 ranks"),
        (None, 8, None, "nccl-tests: 8 ranks"),
        (None, None, 2, "nccl-tests"),
        (None, None, None, "nccl-tests"),
    ],
)
def test_a_run_is_titled_by_its_collective_nodes_and_ranks(collective, ranks, hosts, expected):
    assert title_for(table(collective, (), ranks=ranks, hosts=hosts)) == expected
