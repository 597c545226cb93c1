"""gpufleet nccl-report LOG... [--json] [--plot FILE.png] [--min-busbw GBPS]: judge nccl-tests logs.

Reads each LOG (``-`` or no LOG: stdin), finds every results table (one per collective run), also behind
launcher prefixes (Open MPI --tag-output, srun --label, SkyPilot/Ray, kubectl logs --prefix), and prints per message
size the out-of-place and in-place time, algbw, busbw and #wrong, the peak busbw, the average the log states on its
"Avg bus bandwidth" line (or, where a finished run's log lost that line, the average computed from the rows, marked
as computed), and a verdict.

A table fails when it has wrong elements (or, in the old nccl-tests layout, out-of-bounds checks), when it was
cut short (neither an "Avg bus bandwidth" nor a "Collective test concluded" line: the run died), or when its
peak busbw is below ``--min-busbw`` (applied
to every table). A line of a table that starts like a row (a byte count) but cannot be read as one (launcher
output cut into it, a damaged number), and a damaged "Avg bus bandwidth" or "Out of bounds values" line, is
printed on stderr as ``LOG: line N: what is wrong, what was expected``; its table still fails on what the lines
read show for certain (wrong elements, a run cut short) but is never passed: it is "not judged".

Exit codes: 0 every table passed; 1 a table failed; 2 unusable input: an unreadable file, a file with no
nccl-tests table or with more rows or tables than any run prints (its name is printed), or a table not judged
when none failed. A log is read one line at a time (of a line over 64 KiB only the start is looked at), so a
log of any size is read in bounded memory.

``--json`` prints one object. It always has ``collectives`` (one entry per table, in order, each with
``source``, ``collective``, ``layout``, ``ranks``, ``hosts``, ``rows``, ``avg_busbw``, ``avg_busbw_computed``
(true where avg_busbw is computed here, not stated by the log), ``peak_busbw``, ``peak_size_bytes``, ``wrong``,
``out_of_bounds``, ``truncated``, ``problems``, ``unreadable_lines`` (the first 10, ``line N: ...``),
``unreadable_line_count``, ``passed``) and the totals ``wrong``, ``problems``, ``unreadable_lines`` (each with
its source) and ``passed``. When the input holds exactly one table (the common case) that table's fields are also
copied to the top level, so ``jq .peak_busbw`` works without indexing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpufleet.errors import GpufleetError
from gpufleet.input_files import display_name, numbered_lines
from gpufleet.reports.nccl import (
    MAX_LINE_BYTES,
    CollectiveTable,
    LogTooLargeError,
    Measurement,
    NoTableError,
    parse_nccl_lines,
    table_problems,
)
from gpufleet.reports.plot import human_size, plot_busbw, title_for

FAILED = 1
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
        name = display_name(log)
        lines = numbered_lines(log, max_line=MAX_LINE_BYTES, exit_code=UNUSABLE_INPUT)
        try:
            found.extend((name, table) for table in parse_nccl_lines(lines))
        except (NoTableError, LogTooLargeError) as error:
            errors.append(f"{name}: {error}")
    if errors:
        raise GpufleetError(*errors, exit_code=UNUSABLE_INPUT)
    for line in _unreadable_lines(found):
        print(line, file=sys.stderr)
    problems = {id(table): table_problems(table, args.min_busbw) for _, table in found}
    if args.json:
        print(json.dumps(_report_json(found, problems), indent=2))
    else:
        _print_text(found, problems)
    if args.plot is not None:
        plot_busbw([table for _, table in found], args.plot, args.min_busbw)
        if not args.json:
            print(f"plot: {args.plot}")
    if any(problems.values()):
        return FAILED
    return UNUSABLE_INPUT if any(table.unreadable_count for _, table in found) else 0


def _unreadable_lines(found: list[tuple[str, CollectiveTable]]) -> list[str]:
    """One line per unreadable line of every table, then how many more a table had than it lists."""
    lines: list[str] = []
    for source, table in found:
        lines.extend(f"{source}: {unreadable}" for unreadable in table.unreadable)
        if table.unreadable_count > len(table.unreadable):
            lines.append(
                f"{source}: {table.unreadable_count - len(table.unreadable)} more unreadable lines in the same "
                f"table after line {table.unreadable[-1].line}"
            )
    return lines


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
        "unreadable_lines": [str(unreadable) for unreadable in table.unreadable],
        "unreadable_line_count": table.unreadable_count,
        "passed": not problems and not table.unreadable_count,
    }


def _report_json(found: list[tuple[str, CollectiveTable]], problems: dict[int, tuple[str, ...]]) -> dict:
    collectives = [_table_json(source, table, problems[id(table)]) for source, table in found]
    every_problem = [f"{entry['source']}: {p}" for entry in collectives for p in entry["problems"]]
    report: dict = collectives[0].copy() if len(collectives) == 1 else {}
    report.update(
        collectives=collectives,
        wrong=sum(entry["wrong"] for entry in collectives),
        problems=every_problem,
        unreadable_lines=[f"{entry['source']}: {line}" for entry in collectives for line in entry["unreadable_lines"]],
        passed=all(entry["passed"] for entry in collectives),
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
            avg = f"{table.avg_busbw:g} GB/s" if table.avg_busbw is not None else _missing_average(table)
        print(f"avg busbw ({source}): {avg}")
        print(f"wrong: {table.wrong}")
        print(f"verdict: {_verdict(table, problems[id(table)])}")
    if len(found) > 1:
        verdicts = [_verdict(table, problems[id(table)]).split(":")[0] for _, table in found]
        overall = next((verdict for verdict in ("FAIL", "NOT JUDGED") if verdict in verdicts), "PASS")
        print(f"\noverall: {overall} ({verdicts.count('PASS')} of {len(found)} tables passed)")


def _missing_average(table: CollectiveTable) -> str:
    return "not stated (log truncated)" if table.truncated else "not read (see stderr)"


def _verdict(table: CollectiveTable, table_problems_: tuple[str, ...]) -> str:
    if table_problems_:
        return "FAIL: " + "; ".join(table_problems_)
    if table.unreadable_count:
        count = table.unreadable_count
        return f"NOT JUDGED: {count} line{'' if count == 1 else 's'} of the table could not be read (see stderr)"
    return "PASS"
