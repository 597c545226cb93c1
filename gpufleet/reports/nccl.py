"""nccl-tests logs (all_reduce_perf, all_gather_perf, alltoall_perf, ...) parsed into frozen tables.

``parse_nccl_log(text)`` returns one ``CollectiveTable`` per results table in the log. A table starts at its
column-name line (``#       size         count      type   redop    root     time ...``) and ends at the
``# Avg bus bandwidth`` line; a table with no such line is marked ``truncated`` (the run was cut short).

Both layouts nccl-tests has printed are understood:

* current (nccl-tests >= 2.11): ``size count type redop root`` then, out-of-place and in-place,
  ``time algbw busbw #wrong``; ``#wrong`` is a count of wrong elements, or ``N/A`` where nothing was checked.
* old (nccl-tests 2.0-2.10, the NCCL 2.7.8 era): no ``root`` column, and ``error`` instead of ``#wrong``: the
  largest deviation seen (``2e-06`` is normal for float sums), so a row carries ``max_error`` and no count; the
  count of failed checks then comes from the ``# Out of bounds values : N`` line.

Lines may carry launcher prefixes, which are removed first: Open MPI ``--tag-output`` (``[1,0]<stdout>:``),
``[host:pid]`` and Slurm ``srun --label`` (``0: ``). Anything that is not part of a table (NCCL INFO lines,
warnings, banners) is ignored, also between the rows of a table.
"""

from __future__ import annotations

import dataclasses
import re

# Launchers put these in front of every line of a rank's output.
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\[[\w.-]+:\d+\]\s?|\d+: )")
_COLUMN_NAMES = re.compile(r"^#\s+size\s+count\s+type\s+(?P<rest>.*)$")
_DEVICE_LINE = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d+)")
_RUN_HEADER = re.compile(r"^#\s*nThread\s+\d+")
_BINARY = re.compile(
    r"\b(?P<name>all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv|gather|scatter|hypercube)"
    r"_perf(?:_mpi)?\b"
)
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")

_WORD_SIZES = {
    "int8": 1, "uint8": 1, "char": 1, "half": 2, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1,
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
class CollectiveTable:
    collective: str | None  # all_reduce, all_gather, ... when the log names or implies it
    layout: str  # "current" or "old"
    rows: tuple[Row, ...]
    avg_busbw: float | None  # as the log states it; None when the line is missing
    out_of_bounds: int | None  # the "# Out of bounds values" count, when present
    ranks: int | None  # from the "#  Rank N ... on HOST device" lines
    hosts: int | None
    truncated: bool

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


def strip_launcher_prefix(line: str) -> str:
    return _LAUNCHER_PREFIX.sub("", line, count=1)


def parse_nccl_log(text: str) -> tuple[CollectiveTable, ...]:
    """Every results table in ``text``, in order; NoTableError when there is none."""
    tables: list[CollectiveTable] = []
    builder: _TableBuilder | None = None
    context = _RunContext()
    named_binary: str | None = None  # the last "..._perf" command line seen outside a table
    for raw_line in text.splitlines():
        line = strip_launcher_prefix(raw_line)
        if not line.startswith("#") and (binary := _BINARY.search(line)):
            named_binary = binary.group("name")
        if _RUN_HEADER.match(line):
            if builder:
                tables.append(builder.build(truncated=True))
                builder = None
            context = _RunContext(collective=named_binary)
            named_binary = None
        elif device := _DEVICE_LINE.match(line):
            context.ranks.add(int(device.group("rank")))
            context.hosts.add(device.group("host"))
        elif names := _COLUMN_NAMES.match(line):
            if builder:
                tables.append(builder.build(truncated=True))
            context.collective = context.collective or named_binary
            builder = _TableBuilder(names.group("rest").split(), context)
        elif builder is None:
            continue
        elif oob := _OUT_OF_BOUNDS.match(line):
            builder.out_of_bounds = int(oob.group("count"))
        elif avg := _AVG_BUSBW.match(line):
            builder.avg_busbw = float(avg.group("value"))
            tables.append(builder.build(truncated=False))
            builder = None
            context = _RunContext()
        elif not line.startswith("#"):
            builder.add(line)
    if builder:
        tables.append(builder.build(truncated=True))
    if not tables:
        raise NoTableError("no nccl-tests results table (expected a '#  size  count  type ...' header and rows)")
    return tuple(tables)


@dataclasses.dataclass
class _RunContext:
    """What the lines before a table say about the run it belongs to."""

    collective: str | None = None
    ranks: set[int] = dataclasses.field(default_factory=set)
    hosts: set[str] = dataclasses.field(default_factory=set)


class _TableBuilder:
    def __init__(self, column_names: list[str], context: _RunContext) -> None:
        self.has_root = "root" in column_names
        self.layout = "old" if "error" in column_names else "current"
        self.context = context
        self.rows: list[Row] = []
        self.avg_busbw: float | None = None
        self.out_of_bounds: int | None = None

    def add(self, line: str) -> None:
        """Add ``line`` when it is a row of this table; anything else (NCCL INFO, warnings) is skipped."""
        tokens = line.split()
        if len(tokens) < 12 or not tokens[0].isdigit() or not tokens[1].isdigit():
            return
        leading, out_of_place, in_place = tokens[:-8], tokens[-8:-4], tokens[-4:]
        if len(leading) not in (4, 5) or not all(_NUMBER.match(t) for t in out_of_place[:3] + in_place[:3]):
            return
        root = int(leading[4]) if len(leading) == 5 and re.fullmatch(r"-?\d+", leading[4]) else None
        self.rows.append(
            Row(
                size_bytes=int(leading[0]),
                count=int(leading[1]),
                type=leading[2],
                redop=leading[3],
                root=root,
                out_of_place=self._measurement(out_of_place),
                in_place=self._measurement(in_place),
            )
        )

    def _measurement(self, cells: list[str]) -> Measurement:
        time_us, algbw, busbw, check = cells
        wrong: int | None = None
        max_error: float | None = None
        if check != "N/A":
            if self.layout == "old":
                max_error = float(check)
            else:
                wrong = int(float(check))
        return Measurement(float(time_us), float(algbw), float(busbw), wrong, max_error)

    def build(self, truncated: bool) -> CollectiveTable:
        rows = tuple(self.rows)
        collective = self.context.collective or _infer_collective(rows, len(self.context.ranks))
        return CollectiveTable(
            collective=collective,
            layout=self.layout,
            rows=rows,
            avg_busbw=self.avg_busbw,
            out_of_bounds=self.out_of_bounds,
            ranks=len(self.context.ranks) or None,
            hosts=len(self.context.hosts) or None,
            truncated=truncated,
        )


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
    """Why ``table`` fails its verdict (empty when it passes): wrong results, a short run, a low peak."""
    problems: list[str] = []
    name = table.collective or "collective"
    if table.wrong:
        unit = "out-of-bounds checks" if table.layout == "old" else "wrong elements"
        problems.append(f"{name}: {table.wrong} {unit}")
    elif table.out_of_bounds:
        problems.append(f"{name}: {table.out_of_bounds} out-of-bounds checks")
    if table.truncated:
        problems.append(f"{name}: log truncated after {len(table.rows)} rows (no 'Avg bus bandwidth' line)")
    peak = table.peak
    if peak is None:
        problems.append(f"{name}: table has no rows")
    elif min_busbw is not None and peak[0] < min_busbw:
        problems.append(f"{name}: peak busbw {peak[0]:.2f} GB/s is below --min-busbw {min_busbw:g} GB/s")
    return tuple(problems)
