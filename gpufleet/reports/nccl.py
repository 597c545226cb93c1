"""nccl-tests logs (all_reduce_perf, all_gather_perf, alltoall_perf, ...) parsed into frozen tables.

``parse_nccl_log(text)`` returns one ``CollectiveTable`` per results table in the log. A table starts at its
column-name line (``#       size         count      type   redop    root     time ...``) and ends at the
``# Avg bus bandwidth`` line, or at ``# Collective test concluded: NAME`` (nccl-tests >= 2.16.7) when a log has
that line but lost the average (a filtered copy): the run finished, so the table is complete and its average is
computed the way nccl-tests computes it and marked ``avg_busbw_computed``. A table with neither line is marked
``truncated`` (the run was cut short). The collective's name comes from ``# Collective test starting: NAME`` or
the ``..._perf`` command line, else it is inferred from the rows.

source (nccl-tests v2.19.6, a0b82b2, src/util.cu writeDeviceReport / writeResultFooter): the run prints
``# Collective test starting: %s`` (program_invocation_short_name, e.g. ``all_reduce_perf``) before the
``# nThread`` line and, after the table, ``# Out of bounds values``, ``# Avg bus bandwidth``, ``#`` and
``# Collective test concluded: %s``; both name lines came in dafb704 "Print the name of the program being
executed" (first tag v2.16.7).

Both layouts nccl-tests has printed are understood:

* current (nccl-tests >= 2.11): ``size count type redop root`` then, out-of-place and in-place,
  ``time algbw busbw #wrong``; ``#wrong`` is a count of wrong elements, or ``N/A`` where nothing was checked.
* old (nccl-tests 2.0-2.10, the NCCL 2.7.8 era): no ``root`` column, and ``error`` instead of ``#wrong``: the
  largest deviation seen (``2e-06`` is normal for float sums), so a row carries ``max_error`` and no count; the
  count of failed checks then comes from the ``# Out of bounds values : N`` line.

Lines may carry launcher prefixes, stacked in any order, which are removed first (with ANSI colour codes):

* Open MPI ``--tag-output``: ``[1,0]<stdout>:`` (``[jobid,rank]<stream>:``);
* ``[host:pid]``;
* Slurm ``srun --label``: the task id right-aligned to the width of the highest one, then ``": "``, so
  `` 0: `` beside ``12: ``; a heterogeneous job step puts ``P0 `` before it. source: SchedMD/slurm
  src/common/write_labelled_message.c _build_label (``"%*d: "``, ``"P%u %*d: "``), src/api/step_io.c _wid
  (width = digits of num_tasks - 1), doc/man/man1/srun.1 ``--label``;
* SkyPilot (and Ray, whose log lines it follows): ``(head, rank=0, pid=3808) `` and
  ``(worker1, rank=1, pid=2769, ip=10.100.10.12) ``, in cyan on a terminal, before the ``[1,0]<stdout>:`` tag.
  source: skypilot-org/skypilot examples/gcp_gpu_direct_tcpx/README.md (nccl_rdma_gke_h200 run output).
* ``kubectl logs --prefix`` (an MPIJob's launcher on the eks flavour: ``gpufleet k8s nccl-test``):
  ``[pod/nccl-test-launcher-x7k2p/launcher] `` (``[pod/POD/CONTAINER] ``, the container name empty where kubectl was
  not told it) before the ``[1,0]<stdout>:`` tag. source: kubernetes/kubectl pkg/cmd/logs/logs.go addPrefixIfNeeded
  (``fmt.Sprintf("[pod/%s/%s] ", ref.Name, containerName)``); a pod name is a DNS subdomain (at most 253
  characters), a container name a DNS label (at most 63).

Anything that is not part of a table (NCCL INFO lines, warnings, banners) is ignored, also between the rows of a
table.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable

from gpufleet.input_files import text_lines

# Launchers put these in front of every line of a rank's output (see the module docstring for each one's source).
# One match removes every stacked prefix: each repetition takes the first alternative that matches and never gives
# it back (an atomic group, possessively repeated), so the time is linear in the line whatever it holds; the
# SkyPilot/Ray parenthesis is bounded (real ones are under 60 characters) for the same reason.
_LAUNCHER_PREFIXES = re.compile(
    r"^(?>\[\d+,\d+\]<std(?:out|err)>:"  # Open MPI --tag-output
    r"|\[[\w.-]+:\d+\]\s?"  # [host:pid]
    r"|(?:P\d+ )?\s*\d+: "  # srun --label, padded to the widest task id
    r"|\([^()]{0,256}\bpid=\d+[^()]{0,256}\)\s?"  # SkyPilot / Ray: (head, rank=0, pid=3808)
    r"|\[pod/[a-z0-9.-]{1,253}/[a-z0-9-]{0,63}\] )*+",  # kubectl logs --prefix
    re.ASCII,
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_COLUMN_NAMES = re.compile(r"^#\s+size\s+count\s+type\s+(?P<rest>.*)$")
_DEVICE_LINE = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>\S*)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\S*)")
_RUN_HEADER = re.compile(r"^#\s*nThread\s+\d+")
_TEST_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<program>\S+)")
_TEST_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<program>\S+)")
_BINARY = re.compile(
    r"\b(?P<name>all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoallv|alltoall|sendrecv|gather|scatter"
    r"|hypercube)"
    r"_perf(?:_mpi)?\b"
)
# Cells as nccl-tests prints them, in ASCII digits only (str.isdigit and \d also take other scripts' digits, which
# int() may refuse). Sizes and counts are size_t: at most 20 digits, which also keeps int() and the ratios the
# collective is inferred from far from their limits.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,20}")
_ROOT = re.compile(r"-?[0-9]{1,20}")
# Times, bandwidths, counts and deviations are never negative.
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
# Header columns after "size count type": redop root time algbw busbw #wrong time algbw busbw #wrong.
_COLUMNS_AFTER_TYPE = 10
# A table holds one row per message size: a sweep from 1 B to 16 GiB by factor 2 is 35 rows. Far more rows or
# tables than any run prints means the file is not an nccl-tests log; stopping there keeps memory bounded.
MAX_ROWS = 100_000
MAX_TABLES = 10_000
# Unreadable lines kept per table for the report; the rest are counted.
MAX_UNREADABLE_SHOWN = 10
# Bytes kept of one line: a table line is under 200 characters, and the longest other lines (NCCL INFO listing
# every rank of a ring) stay well under this on thousands of ranks (unconfirmed); the rest of a longer line is
# read past.
MAX_LINE_BYTES = 64 * 1024

# Bytes per element of each type name a row prints. source: nccl-tests v2.19.6 (a0b82b2) src/common.cu
# test_typenames ("f8e4m3", "f8e5m2" for fp8; "char" and "int" on NCCL < 2.0 builds).
_WORD_SIZES = {
    "int8": 1, "uint8": 1, "char": 1, "half": 2, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1,
    "int32": 4, "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One timing of one message size (out-of-place or in-place)."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # wrong elements; None where the log says N/A or uses the old ``error`` column
    max_error: float | None = None  # old layout only: the largest deviation from the expected result


@dataclasses.dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    type: str
    redop: str
    root: int | None  # None in the old layout, and where the column is left blank
    out_of_place: Measurement
    in_place: Measurement


@dataclasses.dataclass(frozen=True)
class UnreadableLine:
    """A line of a table that looks like a row (or a footer line) but cannot be read: reported, never guessed."""

    line: int  # its number in the log (newlines counted)
    problem: str  # what is wrong and what was expected

    def __str__(self) -> str:
        return f"line {self.line}: {self.problem}"


@dataclasses.dataclass(frozen=True)
class CollectiveTable:
    collective: str | None  # all_reduce, all_gather, ... when the log names or implies it
    layout: str  # "current" or "old"
    rows: tuple[Row, ...]
    avg_busbw: float | None  # as the log states it, or computed (see avg_busbw_computed); None when truncated
    out_of_bounds: int | None  # the "# Out of bounds values" count, when present
    ranks: int | None  # from the "#  Rank N ... on HOST device" lines
    hosts: int | None
    truncated: bool
    avg_busbw_computed: bool = False  # True: the log lost its "Avg bus bandwidth" line, avg_busbw is ours
    # Lines of the table that could not be read (the first MAX_UNREADABLE_SHOWN) and how many there were in all:
    # such a table is judged only on what fails for certain (see table_problems), never passed.
    unreadable: tuple[UnreadableLine, ...] = ()
    unreadable_count: int = 0

    @property
    def peak(self) -> tuple[float, int] | None:
        """(busbw, size_bytes) of the highest bus bandwidth in either placement."""
        candidates = [(m.busbw, row.size_bytes) for row in self.rows for m in (row.out_of_place, row.in_place)]
        return max(candidates, default=None)

    @property
    def wrong(self) -> int:
        """Wrong elements over all rows; the old layout counts none, so there the out-of-bounds count stands in."""
        if self.layout == "old":
            return self.out_of_bounds or 0
        return sum(m.wrong or 0 for row in self.rows for m in (row.out_of_place, row.in_place))


class NoTableError(ValueError):
    """The text holds no nccl-tests results table."""


class LogTooLargeError(ValueError):
    """The log holds more rows or tables than any nccl-tests run prints (MAX_ROWS, MAX_TABLES)."""


def strip_launcher_prefix(line: str) -> str:
    """``line`` as the program printed it: colour codes and every stacked launcher prefix removed."""
    line = _ANSI.sub("", line)
    return line[_LAUNCHER_PREFIXES.match(line).end() :]  # type: ignore[union-attr]  # matches at least ""


def parse_nccl_log(text: str) -> tuple[CollectiveTable, ...]:
    """Every results table in ``text``, in order; NoTableError when there is none."""
    return parse_nccl_lines(text_lines(text))


def parse_nccl_lines(lines: Iterable[tuple[int, str]]) -> tuple[CollectiveTable, ...]:
    """Every results table in ``lines`` ((line number, text) pairs, read one at a time), in order; NoTableError
    when there is none, LogTooLargeError past MAX_ROWS rows or MAX_TABLES tables."""
    tables: list[CollectiveTable] = []
    builder: _TableBuilder | None = None
    context = _RunContext()
    named_binary: str | None = None  # from the last "..._perf" command or "Collective test starting" line
    rows = 0

    def finish(table: CollectiveTable) -> None:
        if len(tables) == MAX_TABLES:
            raise LogTooLargeError(f"line {number}: more than {MAX_TABLES} results tables (not an nccl-tests log)")
        tables.append(table)

    for number, raw_line in lines:
        line = strip_launcher_prefix(raw_line)
        if not line.startswith("#") and (binary := _BINARY.search(line)):
            named_binary = binary.group("name")
        if starting := _TEST_STARTING.match(line):
            named_binary = _collective_of(starting.group("program")) or named_binary
        elif _RUN_HEADER.match(line):
            if builder:
                finish(builder.build(truncated=True))
                builder = None
            context = _RunContext(collective=named_binary)
            named_binary = None
        elif device := _DEVICE_LINE.match(line):
            context.ranks.add(device.group("rank"))
            context.hosts.add(device.group("host"))
        elif names := _COLUMN_NAMES.match(line):
            if builder:
                finish(builder.build(truncated=True))
            context.collective = context.collective or named_binary
            builder = _TableBuilder(number, names.group("rest").split(), context)
        elif builder is None:
            continue
        elif oob := _OUT_OF_BOUNDS.match(line):
            builder.read_out_of_bounds(number, oob.group("count"))
        elif avg := _AVG_BUSBW.match(line):
            builder.read_average(number, avg.group("value"))
            finish(builder.build(truncated=False))
            builder = None
            context = _RunContext()
        elif concluded := _TEST_CONCLUDED.match(line):
            context.collective = context.collective or _collective_of(concluded.group("program"))
            finish(builder.build(truncated=False, average_lost=True))
            builder = None
            context = _RunContext()
        elif not line.startswith("#") and builder.add(number, line):
            rows += 1
            if rows > MAX_ROWS:
                raise LogTooLargeError(f"line {number}: more than {MAX_ROWS} table rows (not an nccl-tests log)")
    if builder:
        finish(builder.build(truncated=True))
    if not tables:
        raise NoTableError("no nccl-tests results table (expected a '#  size  count  type ...' header and rows)")
    return tuple(tables)


@dataclasses.dataclass
class _RunContext:
    """What the lines before a table say about the run it belongs to."""

    collective: str | None = None
    ranks: set[str] = dataclasses.field(default_factory=set)  # as printed: only counted
    hosts: set[str] = dataclasses.field(default_factory=set)


class _CellError(ValueError):
    """One cell of a row is not what its column holds."""


class _TableBuilder:
    def __init__(self, number: int, column_names: list[str], context: _RunContext) -> None:
        """``column_names``: those after ``size count type`` on the header line ``number``."""
        self.layout = "old" if "error" in column_names else "current"
        self.context = context
        self.rows: list[Row] = []
        self.avg_busbw: float | None = None
        self.out_of_bounds: int | None = None
        self.unreadable: list[UnreadableLine] = []
        self.unreadable_count = 0
        # nccl-tests v2.19.6 (util.cu writeResultHeader) adds columns with -I 1 (i_min i_max i_p99 i_cv% after each
        # placement) and -S 1 (a timestamp at the end); the last eight cells of a row are then no longer the two
        # placements' time algbw busbw #wrong. One line says so, for the header; its rows are not read.
        self.extra_columns = len(column_names) > _COLUMNS_AFTER_TYPE
        if self.extra_columns:
            self._unreadable(
                number,
                f"the table has {len(column_names) + 3} columns, more than the {_COLUMNS_AFTER_TYPE + 3} this report "
                "reads (size count type redop root, then time algbw busbw #wrong twice): nccl-tests -I 1 and -S 1 "
                "add columns; run it without them",
            )

    def add(self, number: int, line: str) -> bool:
        """Add ``line`` when it is a row of this table (True). A line that starts like a row (its first word starts
        with a digit) but cannot be read as one is recorded as unreadable; anything else is skipped: NCCL INFO and
        WARN lines (their first word is ``host:pid:tid``), warnings, a timestamp (``12:34:56``)."""
        tokens = line.split()
        if self.extra_columns or not tokens or tokens[0][0] not in "0123456789" or ":" in tokens[0]:
            return False
        try:
            row = self._row(tokens)
        except _CellError as error:
            self._unreadable(number, f"table row not read: {error}")
            return False
        self.rows.append(row)
        return True

    def _row(self, tokens: list[str]) -> Row:
        check = "error" if self.layout == "old" else "#wrong"
        leading, out_of_place, in_place = tokens[:-8], tokens[-8:-4], tokens[-4:]
        if len(tokens) < 12 or len(leading) not in (4, 5):
            raise _CellError(
                f"{len(tokens)} cells, expected 12 or 13 (size count type redop [root], then time algbw busbw "
                f"{check} out-of-place and in-place)"
            )
        root = None
        if len(leading) == 5:
            root = int(_matching(_ROOT, leading[4], "root", "a whole number"))
        return Row(
            size_bytes=int(_matching(_WHOLE_NUMBER, leading[0], "size", "a byte count of at most 20 digits")),
            count=int(_matching(_WHOLE_NUMBER, leading[1], "count", "an element count of at most 20 digits")),
            type=leading[2],
            redop=leading[3],
            root=root,
            out_of_place=self._measurement(out_of_place, "out-of-place"),
            in_place=self._measurement(in_place, "in-place"),
        )

    def _measurement(self, cells: list[str], placement: str) -> Measurement:
        time_us, algbw, busbw, check = cells
        wrong: int | None = None
        max_error: float | None = None
        if check != "N/A":
            if self.layout == "old":
                max_error = _finite(check, f"{placement} error", "a number of at least 0, or N/A")
            else:
                # A count, which nccl-tests may print in %g form (1e+06).
                count = _finite(check, f"{placement} #wrong", "a count of wrong elements or N/A")
                if not count.is_integer():
                    raise _CellError(f"{placement} #wrong is {_shown(check)}, expected a count of wrong elements")
                wrong = int(count)
        return Measurement(
            _finite(time_us, f"{placement} time", "a number of at least 0"),
            _finite(algbw, f"{placement} algbw", "a number of at least 0"),
            _finite(busbw, f"{placement} busbw", "a number of at least 0"),
            wrong,
            max_error,
        )

    def read_out_of_bounds(self, number: int, value: str) -> None:
        if _WHOLE_NUMBER.fullmatch(value):
            self.out_of_bounds = int(value)
        else:
            self._unreadable(
                number, f"'Out of bounds values' is {_shown(value)}, expected a count of at most 20 digits"
            )

    def read_average(self, number: int, value: str) -> None:
        try:
            self.avg_busbw = _finite(value, "'Avg bus bandwidth'", "a number of at least 0")
        except _CellError as error:
            self._unreadable(number, str(error))

    def _unreadable(self, number: int, problem: str) -> None:
        self.unreadable_count += 1
        if len(self.unreadable) < MAX_UNREADABLE_SHOWN:
            self.unreadable.append(UnreadableLine(number, problem))

    def build(self, truncated: bool, average_lost: bool = False) -> CollectiveTable:
        """The table; ``average_lost``: the run concluded but the log has no "Avg bus bandwidth" line."""
        rows = tuple(self.rows)
        collective = self.context.collective or _infer_collective(rows, len(self.context.ranks))
        avg_busbw = _average_busbw(rows) if average_lost else self.avg_busbw
        return CollectiveTable(
            collective=collective,
            layout=self.layout,
            rows=rows,
            avg_busbw=avg_busbw,
            out_of_bounds=self.out_of_bounds,
            ranks=len(self.context.ranks) or None,
            hosts=len(self.context.hosts) or None,
            truncated=truncated,
            avg_busbw_computed=average_lost and avg_busbw is not None,
            unreadable=tuple(self.unreadable),
            unreadable_count=self.unreadable_count,
        )


def _matching(pattern: re.Pattern[str], cell: str, column: str, expected: str) -> str:
    if not pattern.fullmatch(cell):
        raise _CellError(f"{column} is {_shown(cell)}, expected {expected}")
    return cell


def _finite(cell: str, column: str, expected: str) -> float:
    """``cell`` as a number; a number too large for a float (hundreds of digits) is refused like a broken one."""
    value = float(_matching(_NUMBER, cell, column, expected))
    if not math.isfinite(value):
        raise _CellError(f"{column} is {_shown(cell)}, out of range (expected {expected})")
    return value


def _shown(cell: str) -> str:
    """``cell`` quoted for a message, control characters escaped, at most 24 characters of it."""
    return repr(cell) if len(cell) <= 24 else f"{cell[:24]!r}... ({len(cell)} characters)"


def _average_busbw(rows: tuple[Row, ...]) -> float | None:
    """The "Avg bus bandwidth" nccl-tests would have printed: the mean busbw over every timing, out-of-place and
    in-place, of every size, printed with %g (6 significant digits).

    source: nccl-tests v2.19.6 src/common.cu: BenchTime runs once out-of-place and once in-place per size and
    adds each busBw to bw[0] (``args->bw[0] += busBw; args->bw_count[0]++``); the end divides
    (``bw[0] /= bw_count[0]``) and util.cu writeResultFooter prints it with ``%g``. The log shows each busbw
    rounded to 2 decimals, so this can differ from the program's own figure in the last digits.
    """
    busbw = [m.busbw for row in rows for m in (row.out_of_place, row.in_place)]
    if not busbw:
        return None
    # Each term divided first: a sum of values near the float limit (a damaged log's) would overflow to infinity.
    return float(f"{sum(value / len(busbw) for value in busbw):.6g}")


def _collective_of(program: str) -> str | None:
    """``all_reduce`` for ``all_reduce_perf`` / ``all_reduce_perf_mpi``; None for a program not known here."""
    binary = _BINARY.fullmatch(program)
    return binary.group("name") if binary else None


def _infer_collective(rows: tuple[Row, ...], ranks: int) -> str | None:
    """Which collective printed ``rows``, from its redop, root and size/count ratio; None when unsure.

    nccl-tests prints the bytes one rank moves and the element count it passes to NCCL: the two agree for
    all_reduce, broadcast and reduce; all_gather and reduce_scatter move ``ranks`` times the count.
    """
    if not rows or rows[-1].type not in _WORD_SIZES:
        return None
    row = rows[-1]
    reduces = row.redop != "none"
    if row.root is not None and row.root >= 0:
        return "reduce" if reduces else "broadcast"
    ratio = row.size_bytes / (row.count * _WORD_SIZES[row.type]) if row.count else 0
    if ratio == 1:
        return "all_reduce" if reduces else None
    if ranks > 1 and ratio == ranks:
        return "reduce_scatter" if reduces else "all_gather"
    return None


def table_problems(table: CollectiveTable, min_busbw: float | None) -> tuple[str, ...]:
    """Why ``table`` fails its verdict (empty when it passes): wrong results, a short run, a low peak.

    A table with unreadable lines fails only on what they cannot change: wrong elements and out-of-bounds checks
    in the rows that were read, a log cut short. A missing row could hold the peak, so a low peak (or no rows) is
    not held against it; it is not passed either (the command reports it as not judged).
    """
    problems: list[str] = []
    name = table.collective or "collective"
    if table.wrong:
        unit = "out-of-bounds checks" if table.layout == "old" else "wrong elements"
        problems.append(f"{name}: {table.wrong} {unit}")
    elif table.out_of_bounds:
        problems.append(f"{name}: {table.out_of_bounds} out-of-bounds checks")
    if table.truncated:
        problems.append(f"{name}: log truncated after {len(table.rows)} rows (no 'Avg bus bandwidth' line)")
    if table.unreadable_count:
        return tuple(problems)
    peak = table.peak
    if peak is None:
        problems.append(f"{name}: table has no rows")
    elif min_busbw is not None and peak[0] < min_busbw:
        problems.append(f"{name}: peak busbw {peak[0]:.2f} GB/s is below --min-busbw {min_busbw:g} GB/s")
    return tuple(problems)
