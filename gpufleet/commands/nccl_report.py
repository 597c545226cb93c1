"""gpufleet nccl-report LOG... [--json] [--plot FILE.png] [--min-busbw GBPS]: judge nccl-tests logs.

Reads each LOG (``-`` or no LOG: stdin), finds every results table (one per collective run), also behind
launcher prefixes (Open MPI --tag-output, srun --label, SkyPilot/Ray), and prints per message size the
out-of-place and in-place time, algbw, busbw and #wrong, the peak busbw, the average the log states on its "Avg
bus bandwidth" line (or, where a finished run's log lost that line, the average computed from the rows, marked
as computed), and a verdict.

A table fails when it has wrong elements (or, in the old nccl-tests layout, out-of-bounds checks), when it was
cut short (neither an "Avg bus bandwidth" nor a "Collective test concluded" line: the run died), or when its
peak busbw is below ``--min-busbw`` (applied
to every table). Exit codes: 0 every table passed; 1 a table failed; 2 unusable input (unreadable file, or a
file with no nccl-tests table: its name is printed).

``--json`` prints one object. It always has ``collectives`` (one entry per table, in order, each with
``source``, ``collective``, ``layout``, ``ranks``, ``hosts``, ``rows``, ``avg_busbw``, ``avg_busbw_computed``
(true where avg_busbw is computed here, not stated by the log), ``peak_busbw``, ``peak_size_bytes``, ``wrong``,
``out_of_bounds``, ``truncated``, ``problems``, ``passed``) and the totals
``wrong``, ``problems`` and ``passed``. When the input holds exactly one table (the common case) that table's
fields are also copied to the top level, so ``jq .peak_busbw`` works without indexing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpufleet.errors import GpufleetError
from gpufleet.reports.nccl import CollectiveTable, Measurement, NoTableError, parse_nccl_log, table_problems
from gpufleet.reports.plot import human_size, plot_busbw, title_for

UNUSABLE_INPUT = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("nccl-report", help="parse nccl-tests logs: busbw per size, peak, verdict")
    parser.add_argument("logs", nargs="*", default=["-"], metavar="LOG", help="nccl-tests output (default/-: stdin)")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="draw busbw against message size")
    parser.add_argument("--min-busbw", type=float, metavar="GBPS", help="fail when the peak busbw is below this")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise GpufleetError(f"--plot {args.plot}: must name a .png file", exit_code=UNUSABLE_INPUT)
    found: list[tuple[str, CollectiveTable]] = []
    errors: list[str] = []
    for log in args.logs:
        name, text = _read(log)
        try:
            found.extend((name, table) for table in parse_nccl_log(text))
        except NoTableError as error:
            errors.append(f"{name}: {error}")
    if errors:
        raise GpufleetError(*errors, exit_code=UNUSABLE_INPUT)
    problems = {id(table): table_problems(table, args.min_busbw) for _, table in found}
    if args.json:
        print(json.dumps(_report_json(found, problems), indent=2))
    else:
        _print_text(found, problems)
    if args.plot is not None:
        plot_busbw([table for _, table in found], args.plot, args.min_busbw)
        if not args.json:
            print(f"plot: {args.plot}")
    return 1 if any(problems.values()) else 0


def _read(log: str) -> tuple[str, str]:
    if log == "-":
        return "<stdin>", sys.stdin.read()
    try:
        return log, Path(log).read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise GpufleetError(f"{log}: cannot read ({error.strerror})", exit_code=UNUSABLE_INPUT) from None


def _measurement_json(m: Measurement) -> dict:
    return {"time_us": m.time_us, "algbw": m.algbw, "busbw": m.busbw, "wrong": m.wrong, "max_error": m.max_error}


def _table_json(source: str, table: CollectiveTable, problems: tuple[str, ...]) -> dict:
    peak = table.peak
    return {
        "source": source,
        "collective": table.collective,
        "layout": table.layout,
        "ranks": table.ranks,
        "hosts": table.hosts,
        "rows": [
            {
                "size_bytes": row.size_bytes,
                "count": row.count,
                "type": row.type,
                "redop": row.redop,
                "root": row.root,
                "out_of_place": _measurement_json(row.out_of_place),
                "in_place": _measurement_json(row.in_place),
            }
            for row in table.rows
        ],
        "avg_busbw": table.avg_busbw,
        "avg_busbw_computed": table.avg_busbw_computed,
        "peak_busbw": peak[0] if peak else None,
        "peak_size_bytes": peak[1] if peak else None,
        "wrong": table.wrong,
        "out_of_bounds": table.out_of_bounds,
        "truncated": table.truncated,
        "problems": list(problems),
        "passed": not problems,
    }


def _report_json(found: list[tuple[str, CollectiveTable]], problems: dict[int, tuple[str, ...]]) -> dict:
    collectives = [_table_json(source, table, problems[id(table)]) for source, table in found]
    every_problem = [f"{entry['source']}: {p}" for entry in collectives for p in entry["problems"]]
    report: dict = collectives[0].copy() if len(collectives) == 1 else {}
    report.update(
        collectives=collectives,
        wrong=sum(entry["wrong"] for entry in collectives),
        problems=every_problem,
        passed=not every_problem,
    )
    return report


def _fmt_wrong(m: Measurement) -> str:
    if m.wrong is not None:
        return str(m.wrong)
    return f"{m.max_error:.0e}" if m.max_error is not None else "N/A"


def _print_text(found: list[tuple[str, CollectiveTable]], problems: dict[int, tuple[str, ...]]) -> None:
    for index, (source, table) in enumerate(found):
        if index:
            print()
        layout = "" if table.layout == "current" else " [old nccl-tests layout: 'error' is the largest deviation]"
        print(f"{source}: {title_for(table)}{layout}")
        wrong_heading = "error" if table.layout == "old" else "#wrong"
        print(f"{'size':>10}  {'time(us)':>9} {'algbw':>7} {'busbw':>7} {wrong_heading:>6}"
              f"  {'time(us)':>9} {'algbw':>7} {'busbw':>7} {wrong_heading:>6}")  # fmt: skip
        print(f"{'':>10}  {'out-of-place':-^33}  {'in-place':-^33}")
        for row in table.rows:
            cells = [f"{human_size(row.size_bytes):>10}"]
            for m in (row.out_of_place, row.in_place):
                cells.append(f"{m.time_us:>9g} {m.algbw:>7.2f} {m.busbw:>7.2f} {_fmt_wrong(m):>6}")
            print("  ".join(cells))
        peak = table.peak
        if peak:
            print(f"peak busbw: {peak[0]:.2f} GB/s at {human_size(peak[1])}")
        if table.avg_busbw_computed:
            source = "computed from the rows: the log has no 'Avg bus bandwidth' line"
            avg = f"{table.avg_busbw:g} GB/s"
        else:
            source = "as the log states it"
            avg = f"{table.avg_busbw:g} GB/s" if table.avg_busbw is not None else "not stated (log truncated)"
        print(f"avg busbw ({source}): {avg}")
        print(f"wrong: {table.wrong}")
        table_problems_ = problems[id(table)]
        print("verdict: " + ("PASS" if not table_problems_ else "FAIL: " + "; ".join(table_problems_)))
    if len(found) > 1:
        failed = sum(1 for _, table in found if problems[id(table)])
        print(f"\noverall: {'PASS' if not failed else 'FAIL'} ({len(found) - failed} of {len(found)} tables passed)")
