"""gpufleet acceptance ENV [--fleet-id ID | --group-name NAME] [--report-dir DIR] [--min-nodes N]
[--nccl-timeout SECONDS]: test a deployed cluster before trusting it with jobs (gpufleet.ops.acceptance runs the
checks through SSM Run Command, gpufleet.reports.acceptance judges them).

Every running node of the environment, ready or not, runs the node health check and `fi_info -p efa` (the latter
skipped where the environment has no EFA); a node that never said it is ready fails its `ready` check. Then the head
(the first ready node, on-demand before spot) runs nccl-tests' all_reduce_perf across every ready node as the cluster
user, judged against the catalog's published bus bandwidth less 10%. Needs at least --min-nodes ready nodes (default
2: the all_reduce must cross EFA); with fewer the nccl check fails without running.

The report goes to DIR (default: acceptance-ENV-YYYYMMDDTHHMMSSZ in the current directory), which must not exist or be
empty: acceptance.txt (one line per node per check, then the nccl verdict, also printed on stdout), acceptance.json
(docs/guides/acceptance.md describes its fields), nccl.log (the log as the head sent it back) and busbw.png (where an
nccl-tests table came back). It is written whole or not at all. Progress goes to stderr.

Exit codes: 0 every check passed; 3 a check failed (one stderr line per failed check, naming the node's id and
address, or nccl); 1 could not run: an AWS error (no report), no running node (no report), or no node ready for jobs
(the report is written, naming each node and why); 2 bad input (an unknown environment, an eks environment, a bad
option, a report directory that exists and is not empty).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufleet.commands import add_node_group_options
from gpufleet.errors import GpufleetError

CHECK_FAILED = 3
COULD_NOT_RUN = 1
BAD_INPUT = 2
DEFAULT_MIN_NODES = 2
# How long the nccl-tests run may take on the head. run-nccl-tests.sh sweeps 8 B to 16 GiB by factors of 2 (32 sizes);
# nccl-tests times 20 iterations after 1 to 5 warm-ups, plus a checked one, out-of-place and in-place (nccl-tests
# README, -n, -w, -c defaults), about 52 operations a size. At 16 GiB on 2 p4d nodes (16 ranks, 78 GB/s bus
# bandwidth, so 78 x 16/30 = 42 GB/s algorithm bandwidth) one operation takes 0.4 s: 21 s for the largest size and
# about as much for all the others together, a minute or two with NCCL's start (an estimate from the catalog's
# figures, (unconfirmed) on a real run). 20 minutes is ten times that: a fabric so slow that it needs more fails the
# floor anyway. The option --nccl-timeout changes it.
DEFAULT_NCCL_TIMEOUT_SECONDS = 1200
EXIT_CODES = (
    "exit codes: 0 every check passed; 3 a check failed (one stderr line each, naming the node or nccl); 1 could not "
    "run (an AWS error, no running node, no ready node); 2 bad input"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "acceptance",
        help="test every node (health check, fi_info) and a multi-node nccl-tests all_reduce; write a report",
        epilog=EXIT_CODES,
    )
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    add_node_group_options(parser)
    parser.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="where the report goes: a new or empty directory (default: acceptance-ENV-TIME in the current one)",
    )
    parser.add_argument(
        "--min-nodes",
        type=int,
        default=DEFAULT_MIN_NODES,
        metavar="N",
        help=f"ready nodes the nccl-tests run needs (default: {DEFAULT_MIN_NODES}); with fewer, the nccl check fails",
    )
    parser.add_argument(
        "--nccl-timeout",
        type=int,
        default=DEFAULT_NCCL_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="how long nccl-tests may run on the head before it is cut short "
        f"(default: {DEFAULT_NCCL_TIMEOUT_SECONDS})",
    )
    parser.set_defaults(handler=run)


def _bad_input(*problems: str) -> GpufleetError:
    return GpufleetError(*problems, exit_code=BAD_INPUT)


def _check_report_directory(directory: Path) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise _bad_input(f"--report-dir {directory}: exists and is not an empty directory: name a new one")
    if not directory.parent.is_dir():
        raise _bad_input(f"--report-dir {directory}: {directory.parent} is not a directory: create it first")


def run(args: argparse.Namespace) -> int:
    import datetime as dt

    from gpufleet.aws import Aws, aws_errors
    from gpufleet.catalog import load_catalog
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.ops.acceptance import (
        FI_INFO_SECTION,
        HEALTH_SECTION,
        MAX_NCCL_TIMEOUT_SECONDS,
        NCCL_LOG_SECTION,
        NCCL_SCRIPT_SECTION,
        NODE_CHECKS_EXECUTION_SECONDS,
        nccl_execution_seconds,
        nccl_script,
        node_checks_script,
        run_on_nodes,
    )
    from gpufleet.ops.fleet import find_node_group, group_id_option
    from gpufleet.ops.runs import NodeResult
    from gpufleet.reports.acceptance import (
        EFA,
        HEALTH,
        AcceptanceReport,
        Check,
        NodeReport,
        efa_check,
        efa_skipped,
        health_check,
        nccl_not_run,
        nccl_result,
        not_run,
        ready_check,
        split_sections,
        write_report,
    )
    from gpufleet.user_data import expected_efa_devices, nccl_busbw_floor

    if args.min_nodes < 1:
        raise _bad_input(f"--min-nodes {args.min_nodes}: must be 1 or more")
    if not 60 <= args.nccl_timeout <= MAX_NCCL_TIMEOUT_SECONDS:
        raise _bad_input(
            f"--nccl-timeout {args.nccl_timeout}: must be 60 to {MAX_NCCL_TIMEOUT_SECONDS} seconds "
            "(SSM's executionTimeout is at most 172800, and the report needs a margin)"
        )
    try:
        env = load_environment_for("acceptance", args.env)
        group_id = group_id_option(args, env)
    except GpufleetError as error:
        raise _bad_input(*error.problems) from None
    started = dt.datetime.now(dt.UTC)
    directory = args.report_dir or Path(f"acceptance-{env.name}-{started:%Y%m%dT%H%M%SZ}")
    _check_report_directory(directory)
    instance = load_catalog()[env.instance_type]
    efa_devices = expected_efa_devices(env, instance)
    floor_text = nccl_busbw_floor(instance)
    floor = float(floor_text) if floor_text else None
    comment = f"gpufleet {env.name} acceptance"

    def progress(line: str) -> None:
        print(f"acceptance {env.name}: {line}", file=sys.stderr, flush=True)

    def why_not(result: NodeResult) -> str:
        last = result.output.strip().splitlines()[-1] if result.output.strip() else ""
        return f"{result.detail or result.status}{': ' + last if last else ''}"

    aws = Aws(env.region)
    with aws_errors(env.region):
        group = find_node_group(aws, env, group_id)
        running, ready = group.running, group.ready
        if not running:
            raise GpufleetError(
                f"{group.label} ({env.name}) has no running instances: see `gpufleet status {env.name}`"
            )
        checks = "the health check and fi_info" if efa_devices else "the health check"
        progress(f"{len(running)} running nodes, {len(ready)} ready: {checks} on each")
        ssm = aws.client("ssm")
        answers = run_on_nodes(
            ssm,
            [node.instance_id for node in running],
            node_checks_script(fi_info=efa_devices > 0),
            comment,
            NODE_CHECKS_EXECUTION_SECONDS,
            progress=lambda result: progress(result.line("checked")),
        )
        answer_of = {answer.instance_id: answer for answer in answers}
        nodes = []
        for node in running:
            answer = answer_of[node.instance_id]
            sections = split_sections(answer.output) if answer.ok else {}
            efa: Check
            if not efa_devices:
                efa = efa_skipped(env.instance_type, env.efa)
            elif answer.ok:
                efa = efa_check(sections.get(FI_INFO_SECTION), efa_devices, answer.output)
            else:
                efa = not_run(EFA, why_not(answer))
            health = (
                health_check(sections.get(HEALTH_SECTION), answer.output)
                if answer.ok
                else not_run(HEALTH, why_not(answer))
            )
            nodes.append(
                NodeReport(
                    node.instance_id,
                    node.private_ip,
                    node.lifecycle,
                    node.readiness,
                    (ready_check(node.readiness), health, efa),
                )
            )
        nccl_nodes = [node.instance_id for node in ready]
        if not ready:
            nccl = nccl_not_run("no node is ready for jobs")
        elif len(ready) < args.min_nodes:
            nccl = nccl_not_run(f"{len(ready)} ready node(s), fewer than --min-nodes {args.min_nodes}")
        else:
            head = ready[0]
            progress(
                f"nccl: all_reduce_perf on {len(ready)} nodes from head {head.instance_id} ({head.private_ip}), "
                f"at most {args.nccl_timeout} s"
            )
            (answer,) = run_on_nodes(
                ssm,
                [head.instance_id],
                nccl_script(
                    [node.private_ip for node in ready],
                    instance.gpu.count,
                    env.instance_type,
                    floor_text or "0",
                    args.nccl_timeout,
                ),
                comment,
                nccl_execution_seconds(args.nccl_timeout),
            )
            if answer.ok:
                sections = split_sections(answer.output)
                nccl = nccl_result(
                    sections.get(NCCL_LOG_SECTION),
                    sections.get(NCCL_SCRIPT_SECTION),
                    floor,
                    args.nccl_timeout,
                    answer.output,
                    (len(ready), instance.gpu.count),
                )
            else:
                nccl = nccl_not_run(f"on head {head.instance_id}: {why_not(answer)}")
    report = AcceptanceReport(
        environment=env.name,
        instance_type=env.instance_type,
        started_at=started,
        finished_at=dt.datetime.now(dt.UTC),
        nodes=tuple(nodes),
        nccl=nccl,
        nccl_nodes=tuple(nccl_nodes) if len(ready) >= args.min_nodes else (),
        gpus_per_node=instance.gpu.count,
        published_busbw=instance.nccl_allreduce_busbw_gbs,
        floor=floor,
    )
    try:
        write_report(directory, report)
    except OSError as error:
        raise GpufleetError(f"--report-dir {directory}: the report could not be written: {error}") from None
    print(report.text(), end="")
    progress(f"report in {directory}")
    for failure in report.failures():
        print(f"{env.name}: FAIL {failure}", file=sys.stderr)
    if not ready:
        return COULD_NOT_RUN
    return CHECK_FAILED if report.failures() else 0
