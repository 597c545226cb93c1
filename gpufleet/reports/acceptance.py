"""`gpufleet acceptance`'s verdicts and report: what each node's checks printed (between the marker lines of
gpufleet.ops.acceptance), judged per node and check, the nccl-tests table judged against the catalog's bus bandwidth,
and the report directory (acceptance.json, acceptance.txt, nccl.log, busbw.png) written whole or not at all.

The JSON's fields are documented in docs/guides/acceptance.md (schema_version 1); a change to them is a new version.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gpufleet.constants import ACCEPTANCE_MARKER, READINESS_BOOTING, READINESS_BOOTING_STEP, READINESS_READY
from gpufleet.reports.nccl import CollectiveTable, LogTooLargeError, NoTableError, parse_nccl_log, table_problems
from gpufleet.reports.plot import human_size, plot_busbw

SCHEMA_VERSION = 1
PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
# Per node, in this order.
READY, HEALTH, EFA = "ready", "health", "efa"
NCCL = "nccl"
REPORT_JSON, REPORT_TEXT, NCCL_LOG, BUSBW_PLOT = "acceptance.json", "acceptance.txt", "nccl.log", "busbw.png"
# GNU timeout's exit status when it stopped the command (coreutils timeout(1): "If the command times out, and
# --preserve-status is not set, then exit with status 124").
TIMED_OUT = 124

_MARKER = re.compile(rf"^{re.escape(ACCEPTANCE_MARKER)} (?P<name>[a-z_-]+) (?:begin|exit (?P<status>[0-9]+))$")


@dataclasses.dataclass(frozen=True)
class Section:
    """What one check printed on a node, and its exit status (None: the output stopped before the check ended)."""

    lines: tuple[str, ...]
    exit_status: int | None


def split_sections(output: str) -> dict[str, Section]:
    """OUTPUT's sections by name: the lines between `MARKER NAME begin` and `MARKER NAME exit N`."""
    sections: dict[str, Section] = {}
    name: str | None = None
    lines: list[str] = []
    for line in output.splitlines():
        marker = _MARKER.fullmatch(line)
        if marker is None:
            if name is not None:
                lines.append(line)
            continue
        if marker["status"] is None:
            name, lines = marker["name"], []
        elif name is not None and marker["name"] == name:
            sections[name] = Section(tuple(lines), int(marker["status"]))
            name = None
    if name is not None:
        sections[name] = Section(tuple(lines), None)
    return sections


def _last_line(lines: tuple[str, ...] | list[str]) -> str:
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


@dataclasses.dataclass(frozen=True)
class Check:
    """One check of one node: pass, fail or skipped, a line saying why, and what the node printed for it."""

    name: str
    status: str
    detail: str
    output: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, "output": list(self.output)}


def ready_check(readiness: str) -> Check:
    """The node's own word (its gpufleet:readiness tag, scripts/node/node-ready.sh): a node that never said ready
    fails."""
    if readiness == READINESS_READY:
        return Check(READY, PASS, "ready")
    if readiness == READINESS_BOOTING:
        return Check(READY, FAIL, "still booting: its setup has not finished (see `gpufleet status`)")
    if readiness.startswith(READINESS_BOOTING_STEP):
        step = readiness.removeprefix(READINESS_BOOTING_STEP)
        return Check(READY, FAIL, f"still booting: at setup step {step} (see `gpufleet status`)")
    if not readiness:
        return Check(READY, FAIL, "no readiness tag: its setup never reached node-ready.sh (see its console output)")
    return Check(READY, FAIL, readiness)


def not_run(name: str, why: str) -> Check:
    """A check that could not run on the node (SSM did not deliver it, or the command failed): WHY says which."""
    return Check(name, FAIL, f"not run: {why}")


def _cut_short(section: Section) -> str:
    last = _last_line(section.lines)
    return "cut short: the output ends before the check did" + (f" (last line: {last})" if last else "")


def health_check(section: Section | None, output: str) -> Check:
    """The health check's verdict (scripts/ops/node-health-check.sh: exit 0 healthy; 1 a check failed; 2 a setting
    missing; 3 only GPU resets needed), with its FAIL lines as the detail. OUTPUT: the node's whole output, for the
    last line where the section is missing."""
    if section is None:
        return not_run(HEALTH, f"no health check output (last line: {_last_line(output.splitlines()) or 'none'})")
    if section.exit_status is None:
        return Check(HEALTH, FAIL, _cut_short(section), section.lines)
    if section.exit_status == 0:
        return Check(HEALTH, PASS, _last_line(section.lines) or "node healthy", section.lines)
    if section.exit_status == TIMED_OUT:
        return Check(HEALTH, FAIL, "timed out on the node", section.lines)
    failing = [line[len("FAIL ") :] for line in section.lines if line.startswith("FAIL ")]
    detail = "; ".join(failing) or f"exit {section.exit_status}: {_last_line(section.lines)}"
    return Check(HEALTH, FAIL, detail, section.lines)


def efa_domains(lines: tuple[str, ...]) -> list[str]:
    """The EFA devices fi_info lists: the domains of its RDM endpoints of provider efa, each once, in order. Entries
    start at `provider:` with their fields on the lines after it, indented or not (both forms are in the EC2 user
    guide's efa-start pages); `efa;ofi_rxd` entries and DGRAM endpoints are not devices of their own."""
    domains: list[str] = []
    entry: dict[str, str] = {}
    for line in [*lines, "provider: end"]:
        key, _, value = line.strip().partition(":")
        if key == "provider":
            if entry.get("provider") == "efa" and entry.get("type") == "FI_EP_RDM" and entry.get("domain"):
                if entry["domain"] not in domains:
                    domains.append(entry["domain"])
            entry = {}
        if key in ("provider", "domain", "type"):
            entry[key] = value.strip()
    return domains


def efa_check(section: Section | None, expected: int, output: str) -> Check:
    """fi_info's EFA devices against EXPECTED, the catalog's count for the instance type."""
    if section is None:
        return not_run(EFA, f"no fi_info output (last line: {_last_line(output.splitlines()) or 'none'})")
    if section.exit_status is None:
        return Check(EFA, FAIL, _cut_short(section), section.lines)
    if section.exit_status != 0:
        first = next((line.strip() for line in section.lines if line.strip()), f"exit {section.exit_status}")
        return Check(EFA, FAIL, f"fi_info -p efa found no EFA provider ({first})", section.lines)
    domains = efa_domains(section.lines)
    status = PASS if len(domains) == expected else FAIL
    named = f": {', '.join(domains)}" if domains else ""
    return Check(EFA, status, f"{len(domains)} EFA devices (expected {expected}){named}", section.lines)


def efa_skipped(instance_type: str, efa: bool) -> Check:
    why = "the environment sets efa: false" if efa is False else f"{instance_type} has no EFA"
    return Check(EFA, SKIPPED, f"not checked: {why}")


@dataclasses.dataclass(frozen=True)
class NcclResult:
    """The multi-node all_reduce's verdict: the tables read from the head's log, the problems found, the exit status
    of run-nccl-tests.sh (None where it did not run), and the log as it came back."""

    status: str
    detail: str
    problems: tuple[str, ...] = ()
    tables: tuple[CollectiveTable, ...] = ()
    exit_status: int | None = None
    log: str = ""


def nccl_not_run(why: str) -> NcclResult:
    return NcclResult(FAIL, f"not run: {why}", (f"not run: {why}",))


def nccl_result(
    log: Section | None,
    script: Section | None,
    floor: float | None,
    timeout_seconds: int,
    output: str,
    scale: tuple[int, int],
) -> NcclResult:
    """The head's answer judged (SCALE: the nodes and GPUs per node it ran on, for the detail: the log comes back
    without its per-rank lines): every table of the log (gpufleet.reports.nccl.table_problems: wrong elements, a run
    cut short, a peak below FLOOR; a table with unreadable lines is not passed), a run the timeout stopped, and an
    exit status of run-nccl-tests.sh that says it failed where the tables do not say why."""
    if log is None or log.exit_status is None:
        last = _last_line(output.splitlines()) or "none"
        return nccl_not_run(f"no nccl-tests log came back from the head (last line: {last})")
    text = "\n".join(log.lines)
    script_last = _last_line(script.lines) if script else ""
    problems: list[str] = []
    tables: tuple[CollectiveTable, ...] = ()
    try:
        tables = parse_nccl_log(text)
    except (NoTableError, LogTooLargeError) as error:
        problems.append(f"{error}" + (f" (run-nccl-tests.sh: {script_last})" if script_last else ""))
    for table in tables:
        problems += table_problems(table, floor)
        if table.unreadable_count:
            problems.append(f"{table.unreadable_count} lines of the table could not be read: not judged")
    if log.exit_status == TIMED_OUT:
        problems.append(f"cut short: nccl-tests ran past {timeout_seconds} s (--nccl-timeout)")
    elif log.exit_status != 0 and not problems:
        problems.append(f"run-nccl-tests.sh exit {log.exit_status}: {script_last or 'no output'}")
    if problems:
        return NcclResult(FAIL, "; ".join(problems), tuple(problems), tables, log.exit_status, text)
    peak = tables[0].peak
    assert peak is not None  # table_problems fails a table without rows
    floor_text = f"floor {floor:g} GB/s" if floor is not None else "no floor: the catalog publishes no bus bandwidth"
    name = tables[0].collective or "nccl-tests"
    detail = (
        f"{name} on {scale[0]} nodes x {scale[1]} GPUs: peak busbw {peak[0]:.2f} GB/s at {human_size(peak[1])} "
        f"({floor_text})"
    )
    return NcclResult(PASS, detail, (), tables, log.exit_status, text)


@dataclasses.dataclass(frozen=True)
class NodeReport:
    instance_id: str
    private_ip: str
    lifecycle: str
    readiness: str
    checks: tuple[Check, ...]

    @property
    def label(self) -> str:
        return f"{self.instance_id} ({self.private_ip})"


@dataclasses.dataclass(frozen=True)
class AcceptanceReport:
    environment: str
    instance_type: str
    started_at: dt.datetime
    finished_at: dt.datetime
    nodes: tuple[NodeReport, ...]
    nccl: NcclResult
    nccl_nodes: tuple[str, ...]  # the instance ids the all_reduce ran on, head first
    gpus_per_node: int
    published_busbw: float | None
    floor: float | None

    @property
    def passed(self) -> bool:
        return not self.failures()

    def failures(self) -> list[str]:
        """One line per failed check, naming the node (id and address) or nccl."""
        lines = [
            f"{node.label} {check.name}: {check.detail}"
            for node in self.nodes
            for check in node.checks
            if check.status == FAIL
        ]
        if self.nccl.status == FAIL:
            lines.append(f"{NCCL}: {self.nccl.detail}")
        return lines

    def as_json(self) -> dict[str, Any]:
        table = self.nccl.tables[0] if self.nccl.tables else None
        peak = table.peak if table else None
        return {
            "schema_version": SCHEMA_VERSION,
            "environment": self.environment,
            "instance_type": self.instance_type,
            "started_at": _moment(self.started_at),
            "finished_at": _moment(self.finished_at),
            "passed": self.passed,
            "nodes": [
                {
                    "instance_id": node.instance_id,
                    "private_ip": node.private_ip,
                    "lifecycle": node.lifecycle,
                    "readiness": node.readiness,
                    "passed": all(check.status != FAIL for check in node.checks),
                    "checks": {check.name: check.as_json() for check in node.checks},
                }
                for node in self.nodes
            ],
            NCCL: {
                "status": self.nccl.status,
                "detail": self.nccl.detail,
                "problems": list(self.nccl.problems),
                "instance_ids": list(self.nccl_nodes),
                "gpus_per_node": self.gpus_per_node,
                "published_busbw_gbs": self.published_busbw,
                "floor_busbw_gbs": self.floor,
                "peak_busbw_gbs": peak[0] if peak else None,
                "peak_size_bytes": peak[1] if peak else None,
                "avg_busbw_gbs": table.avg_busbw if table else None,
                "wrong": table.wrong if table else None,
                "truncated": table.truncated if table else None,
                "exit_status": self.nccl.exit_status,
                "log_file": NCCL_LOG if self.nccl.log else None,
                "plot_file": BUSBW_PLOT if self.nccl.tables else None,
            },
            "failures": self.failures(),
        }

    def text(self) -> str:
        ready = sum(node.readiness == READINESS_READY for node in self.nodes)
        lines = [
            f"acceptance {self.environment} ({self.instance_type}), {_moment(self.started_at)}: "
            f"{len(self.nodes)} running nodes, {ready} ready"
        ]
        for node in self.nodes:
            lines += [f"{node.label} {check.name}: {check.status.upper()} {check.detail}" for check in node.checks]
        lines.append(f"{NCCL}: {self.nccl.status.upper()} {self.nccl.detail}")
        count = len(self.failures())
        lines.append("verdict: " + ("PASS" if not count else f"FAIL ({count} failed check{'s' if count > 1 else ''})"))
        return "\n".join(lines) + "\n"


def _moment(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_report(directory: Path, report: AcceptanceReport) -> None:
    """REPORT into DIRECTORY, which must not exist or be empty: written into a new directory beside it, then renamed
    to DIRECTORY (rename(2) replaces an empty directory), so a reader sees the whole report or none."""
    partial = Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    try:
        partial.chmod(0o755)  # mkdtemp's 0700 is for a secret; a report is read by whoever reads the directory
        (partial / REPORT_JSON).write_text(json.dumps(report.as_json(), indent=2) + "\n")
        (partial / REPORT_TEXT).write_text(report.text())
        if report.nccl.log:
            (partial / NCCL_LOG).write_text(report.nccl.log + "\n")
        if report.nccl.tables:
            plot_busbw(list(report.nccl.tables), partial / BUSBW_PLOT, report.floor)
        partial.rename(directory)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
