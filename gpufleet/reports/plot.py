"""Bus bandwidth against message size, one PNG per report (matplotlib, Agg backend, imported on use)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.reports.nccl import CollectiveTable

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_size(size_bytes: float) -> str:
    """8 -> '8 B', 1024 -> '1 KiB', 1610612736 -> '1.5 GiB'."""
    value, unit = float(size_bytes), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:g} {_UNITS[unit]}"


def title_for(table: CollectiveTable) -> str:
    name = table.collective or "nccl-tests"
    if table.hosts and table.ranks:
        return f"{name}: {table.hosts} nodes x {table.ranks // table.hosts} GPUs ({table.ranks} ranks)"
    if table.ranks:
        return f"{name}: {table.ranks} ranks"
    return name


def plot_busbw(tables: list[CollectiveTable], path: Path, min_busbw: float | None) -> None:
    """Draw busbw (out-of-place and in-place) per table against message size, with threshold and peaks."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    figure, axes = pyplot.subplots(figsize=(11, 6), dpi=110)
    for table in tables:
        rows = [row for row in table.rows if row.size_bytes > 0]
        sizes = [row.size_bytes for row in rows]
        label = table.collective or "nccl-tests"
        outer = axes.plot(sizes, [r.out_of_place.busbw for r in rows], marker="o", markersize=4,
                          label=f"{label} out-of-place")  # fmt: skip
        axes.plot(sizes, [r.in_place.busbw for r in rows], marker="s", markersize=4, linestyle="--",
                  color=outer[0].get_color(), alpha=0.7, label=f"{label} in-place")  # fmt: skip
        peak = table.peak
        if peak:
            busbw, size = peak
            axes.annotate(f"peak {busbw:.1f} GB/s at {human_size(size)}", xy=(size, busbw),
                          xytext=(-20, -70), textcoords="offset points", ha="right", fontsize=10,
                          bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.6"},
                          arrowprops={"arrowstyle": "->", "color": "0.3"})  # fmt: skip
    if min_busbw is not None:
        axes.axhline(min_busbw, color="tab:red", linestyle=":", linewidth=1.5,
                     label=f"threshold {min_busbw:g} GB/s")  # fmt: skip
    axes.set_xscale("log", base=2)
    # A label on every power of 2 would crowd the axis: label every third (8 B, 64 B, 512 B, 4 KiB, ...).
    axes.xaxis.set_major_locator(FixedLocator([2.0**power for power in range(0, 46, 3)]))
    axes.xaxis.set_minor_locator(FixedLocator([2.0**power for power in range(0, 46)]))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: human_size(value)))
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("message size")
    axes.set_ylabel("bus bandwidth (GB/s)")
    all_sizes = [row.size_bytes for table in tables for row in table.rows if row.size_bytes > 0]
    if all_sizes:
        axes.set_xlim(min(all_sizes) / 1.5, max(all_sizes) * 1.5)
    axes.set_ylim(bottom=0)
    axes.grid(True, which="major", alpha=0.4)
    axes.grid(True, which="minor", alpha=0.12)
    titles = sorted({title_for(table) for table in tables})
    axes.set_title("nccl-tests bus bandwidth: " + "; ".join(titles), fontsize=12)
    axes.legend(loc="upper left", fontsize=9)
    figure.tight_layout()
    # Write beside the target and rename, so a failed draw never leaves a half-written PNG behind.
    partial = path.with_name(f".{path.name}.partial")
    try:
        figure.savefig(partial, format="png")
        partial.replace(path)
    finally:
        pyplot.close(figure)
        partial.unlink(missing_ok=True)
