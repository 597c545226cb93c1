"""gpufleet k8s efa-info|nccl-test ENV [--name NAME] [--workers N] [--output FILE]: the MPIJobs that check an eks
environment's cluster (gpufleet/k8s/mpijobs.py), as YAML for `kubectl apply -f`.

efa-info runs fi_info on every worker: the EFA devices each pod was given. nccl-test runs nccl-tests all_reduce_perf
on every GPU of every worker; its launcher's log (`kubectl logs job/NAME-launcher`) goes to `gpufleet nccl-report`,
with the floor the catalog gives for the instance type (printed on stderr with the commands to run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("k8s", help="MPIJobs that check an eks environment's cluster (YAML for kubectl)")
    k8s_subparsers = parser.add_subparsers(dest="k8s_command", required=True, metavar="K8S_COMMAND")
    helps = {
        "efa-info": "MPIJob: fi_info -p efa on every worker (the EFA devices each pod got)",
        "nccl-test": "MPIJob: nccl-tests all_reduce_perf on every GPU of every worker",
    }
    for command, help_text in helps.items():
        sub = k8s_subparsers.add_parser(command, help=help_text)
        sub.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml), flavour: eks")
        sub.add_argument("--name", default=command, help=f"the MPIJob's name (default: {command})")
        sub.add_argument(
            "--workers", type=int, metavar="N", help="how many GPU nodes take part (default: capacity.target)"
        )
        sub.add_argument("--output", type=Path, metavar="FILE", help="write the YAML to FILE (default: stdout)")
        sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from gpufleet.catalog import load_catalog
    from gpufleet.commands.flavour_guard import load_environment_for
    from gpufleet.errors import GpufleetError
    from gpufleet.k8s.mpijobs import MpiJobError, efa_info_job, nccl_test_job
    from gpufleet.user_data import nccl_busbw_floor

    env = load_environment_for(f"k8s {args.k8s_command}", args.env)
    instance = load_catalog()[env.instance_type]
    build = efa_info_job if args.k8s_command == "efa-info" else nccl_test_job
    try:
        job = build(env, instance, name=args.name, workers=args.workers)
    except MpiJobError as error:
        raise GpufleetError(*(f"gpufleet k8s {args.k8s_command} {env.name}: {p}" for p in error.problems)) from None
    text = yaml.safe_dump(job, sort_keys=False, default_flow_style=False)
    if args.output is None:
        print(text, end="")
        target = "-"
    else:
        try:
            args.output.write_text(text)
        except OSError as error:
            raise GpufleetError(f"--output {args.output}: cannot write it ({error.strerror})") from None
        target = str(args.output)
    steps = [f"kubectl apply -f {target}", f"kubectl logs -f job/{args.name}-launcher"]
    if args.k8s_command == "nccl-test":
        floor = nccl_busbw_floor(instance)
        report = f"gpufleet nccl-report --min-busbw {floor}" if floor else "gpufleet nccl-report"
        steps[-1] = f"kubectl logs job/{args.name}-launcher > {args.name}.log && {report} {args.name}.log"
    print(f"next: {'; then '.join(steps)}", file=sys.stderr)
    return 0
