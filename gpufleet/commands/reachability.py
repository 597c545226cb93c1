"""gpufleet reachability [CDK_OUT]: can every resource that runs code in a VPC reach what its code calls, read from
every template of a synthesized cloud assembly (gpufleet.reachability). `make synth` runs it after `cdk synth`.

Prints one line per call without a route (caller, destination, subnet and why), then one line per caller that the
assembly does not describe fully (an existing VPC's subnets): "not checked here", which `gpufleet preflight` checks
against the described network. Exit codes: 0 every call checked here has a route; 1 a call has none, a caller in a
VPC declares no calls, or the assembly cannot be read (one line per problem naming the file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpufleet.commands.cloud_assembly import assembly_file, stack_artifacts
from gpufleet.errors import GpufleetError
from gpufleet.input_files import quoted
from gpufleet.reachability.rules import Findings, check
from gpufleet.reachability.templates import StackTemplate, read_assembly

_FIX = "synthesize it again (make synth)"
# A stack artifact's environment, aws://ACCOUNT/REGION; an environment-agnostic stack's is
# aws://unknown-account/unknown-region (aws-cdk-lib 2.275.0 cx-api, EnvironmentPlaceholders / UNKNOWN_REGION).
ENVIRONMENT_PREFIX = "aws://"
UNKNOWN_REGION = "unknown-region"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reachability",
        help="check that every call made from inside a VPC has a route (a synthesized cloud assembly)",
        description="For every resource of the assembly that runs code in a VPC (Lambda functions, CodeBuild "
        "projects, launch templates, EKS node groups), check that each service and host it declares it calls "
        "(stacks/constructs/calls.py) is reachable from every subnet it may run in: through a gateway endpoint on "
        "the subnet's route table, an interface endpoint with private DNS that admits HTTPS from it, or a NAT or "
        "internet gateway, with its security groups letting HTTPS out. Callers in subnets the assembly does not "
        "describe (an existing VPC) are listed as not checked here: gpufleet preflight checks them.",
        epilog="exit codes: 0 every call checked here has a route; 1 a call has none, a caller in a VPC declares no "
        "calls, or the assembly cannot be read",
    )
    parser.add_argument("cdk_out", nargs="?", type=Path, default=Path("cdk.out"), metavar="CDK_OUT")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    findings = assembly_findings(args.cdk_out)
    for line in findings.problems + findings.not_checked:
        print(line)
    if findings.problems:
        print(f"reachability: {len(findings.problems)} problem(s) above")
        return 1
    print("reachability: every call checked here has a route")
    return 0


def assembly_findings(cdk_out: Path) -> Findings:
    network, callers = read_assembly(assembly_stacks(cdk_out))
    return check(network, callers)


def assembly_stacks(cdk_out: Path) -> list[StackTemplate]:
    """Every stack template of the assembly at CDK_OUT, with its region."""
    manifest_file = cdk_out / "manifest.json"
    if not manifest_file.is_file():
        raise GpufleetError(f"{cdk_out}: no cloud assembly here (run `cdk synth` first)")
    manifest = assembly_file(manifest_file, _FIX)
    stacks = []
    for name, artifact in stack_artifacts(manifest, lambda _: True).items():
        path = ("artifacts", name)
        environment = manifest.get(artifact, (*path, "environment"), str)
        if not environment.startswith(ENVIRONMENT_PREFIX) or environment.count("/") != 3:
            raise manifest.problem((*path, "environment"), "aws://ACCOUNT/REGION", environment)
        region = environment.rsplit("/", 1)[1]
        properties = manifest.get(artifact, (*path, "properties"), dict)
        template_file = manifest.get(properties, (*path, "properties", "templateFile"), str)
        if Path(template_file).name != template_file:
            raise manifest.error((*path, "properties", "templateFile"), f"{quoted(template_file)} is not a file name")
        template = assembly_file(cdk_out / template_file, _FIX)
        if not isinstance(template.document, dict):
            raise template.problem((), "an object", template.document)
        stacks.append(StackTemplate(name, None if region == UNKNOWN_REGION else region, template.document))
    return stacks
