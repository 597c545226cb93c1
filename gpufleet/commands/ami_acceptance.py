"""gpufleet ami acceptance-environment: the environment file of the AMI pipeline's acceptance gate for a new image,
written only when the gate's nodes stay within acceptance.max_cost_usd at the current on-demand price
(scripts/pipeline/acceptance-gate.sh runs it after `packer build`, before launching anything).

And the gate's staging step, `python -m gpufleet.commands.ami_acceptance` (stage_gate_stack; a step of the
pipeline's script, not a command of the gpufleet CLI): the synthesized gate stack made deployable with the gate's
execution role alone."""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from gpufleet.constants import ENVIRONMENT_TAG_KEY
from gpufleet.errors import GpufleetError

PRICE_LIST_HELP = (
    "the JSON `aws pricing get-products --service-code AmazonEC2 --output json` printed for the gate's instance type "
    "(the filters of gpufleet/ops/cost.py ON_DEMAND_FILTERS)"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "acceptance-environment",
        help="write the AMI pipeline acceptance gate's environment file for a new image (refused when its nodes "
        "could cost more than acceptance.max_cost_usd)",
    )
    parser.add_argument("--name", required=True, help="environment name (the stack is gpufleet-NAME-cluster)")
    parser.add_argument("--image", required=True, metavar="AMI", help="the new image's id")
    parser.add_argument("--price-list", type=Path, required=True, metavar="FILE", help=PRICE_LIST_HELP)
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write NAME.yaml into")
    parser.add_argument(
        "--account",
        metavar="ACCOUNT",
        help="the account the gate deploys in, the build's own (default: ami/pipeline.yaml's account; required when "
        "it names none)",
    )
    parser.set_defaults(handler=run_acceptance_environment)


def run_acceptance_environment(args: argparse.Namespace) -> int:
    import yaml

    from gpufleet.ami.pipeline import acceptance_environment
    from gpufleet.loading import load_environment, load_pipeline, pipeline_file
    from gpufleet.ops.cost import PriceUnavailable, single_on_demand_price

    pipeline = load_pipeline()
    gate = pipeline.acceptance
    if gate is None:
        raise GpufleetError(f"{pipeline_file()}: acceptance: null, the gate is off (nothing to deploy)", exit_code=2)
    try:
        price_list = json.loads(args.price_list.read_text())["PriceList"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GpufleetError(
            f"{args.price_list}: not the output of `aws pricing get-products --output json` ({error})"
        ) from None
    try:
        price = single_on_demand_price(price_list, gate.instance_type, pipeline.region)
    except PriceUnavailable as error:
        raise GpufleetError(f"{args.price_list}: {error}") from None
    bound, most = gate.cost_bound(price), Decimal(str(gate.max_cost_usd))
    what = f"{gate.nodes} x {gate.instance_type} at {price:f} USD/h for up to {gate.node_minutes_bound} minutes"
    if bound > most:
        raise GpufleetError(
            f"{pipeline_file()}: acceptance.max_cost_usd: {what} may cost {bound:.2f} USD, more than {most:f} "
            "(raise max_cost_usd, or lower nodes or timeout_minutes)"
        )
    account = pipeline.account or args.account
    if account is None:
        raise GpufleetError(
            f"{pipeline_file()}: account: null and no --account: give the account the gate deploys in "
            "(the build's own)",
            exit_code=2,
        )
    if pipeline.account is not None and args.account is not None and args.account != pipeline.account:
        raise GpufleetError(
            f"--account {args.account}: ami/pipeline.yaml pins account {pipeline.account}, where the images are built"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name}.yaml"
    document = acceptance_environment(pipeline, args.name, args.image, account)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    load_environment(path, pipeline)
    print(f"{path}: {what}: at most {bound:.2f} USD (max_cost_usd {most:f})")
    return 0


# The gate's stack, staged for CloudFormation (scripts/pipeline/acceptance-gate.sh; docs/guides/ami-pipeline.md,
# "Acceptance gate"). The gate deploys without any CDK bootstrap role: the build synthesizes the environment with the
# project's app (`cdk synth`, no AWS call), this step rewrites the one template so that everything it creates is the
# gate's by name or tag, and the build then creates the stack itself (CloudFormation CreateStack) with the pipeline
# stack's execution role (stacks/constructs/ami_acceptance_gate.py says what that role and the build role may do).
# The rewrite:
# - moves the file assets (the Lambda functions' code, the nodes' operator scripts archive) from the CDK bootstrap's
#   assets bucket, which the gate may not write (every environment's assets are there, the nodes' operator scripts
#   among them), to the pipeline's gate bucket under NAME/, in the template and in the nodes' gzip-compressed user
#   data (GPUFLEET_OPERATOR_SCRIPTS; the nodes check the archive's SHA-256 wherever it is fetched from);
# - drops the bootstrap version parameter and its rule (no bootstrap is read);
# - names every role, instance profile, function, log group and state machine gpufleet-NAME-..., the names the
#   execution role may create, and gives every role the gate's permissions boundary, without which the execution
#   role may create none;
# - tags the launch template with the environment (its data tags the instances, not the template itself), so the
#   execution role may delete it by tag, and drops the dashboard's tags (the Service Authorization Reference that
#   parliament 1.6.4 bundles lists no dashboard resource for cloudwatch:TagResource, only alarm, insight-rule and
#   slo, so the execution role has no cloudwatch:TagResource);
# then refuses the template if anything is left that the execution role may not create (gate_scope_problems).
STAGED_TEMPLATE = "template.json"
# Types whose names CloudFormation would generate (stack name, logical id and a random suffix: the CloudFormation user
# guide's "Name type" shows the form but promises none), so the rewrite names them: (name property, longest name)
# (the properties' documented limits: IAM role 64, instance profile 128, Lambda function 64, log group 512, state
# machine 80).
GENERATED_NAMES: dict[str, tuple[str, int]] = {
    "AWS::IAM::Role": ("RoleName", 64),
    "AWS::IAM::InstanceProfile": ("InstanceProfileName", 128),
    "AWS::Lambda::Function": ("FunctionName", 64),
    "AWS::Logs::LogGroup": ("LogGroupName", 512),
    "AWS::StepFunctions::StateMachine": ("StateMachineName", 80),
}
# Types the stack's constructs name themselves (gpufleet-NAME-..., or /gpufleet/NAME/... for the nodes' log group).
CONSTRUCT_NAMES: dict[str, str] = {
    "AWS::SecretsManager::Secret": "Name",
    "AWS::SSM::Document": "Name",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::AutoScaling::AutoScalingGroup": "AutoScalingGroupName",
}
# EC2 resources are named by id: the execution role may change or delete them only while they carry the environment
# tag, and may create them only with it.
TAGGED_TYPES = ("AWS::EC2::SecurityGroup", "AWS::EC2::PlacementGroup", "AWS::EC2::LaunchTemplate")
# Resources that act on one of the above (its rules, its policy, its metric filter) or are handled by one of the
# gate's functions (custom resources).
DEPENDENT_TYPES = (
    "AWS::EC2::SecurityGroupIngress",
    "AWS::EC2::SecurityGroupEgress",
    "AWS::IAM::Policy",
    "AWS::SecretsManager::ResourcePolicy",
    "AWS::Logs::MetricFilter",
)
CUSTOM_TYPE_PREFIX = "Custom::Gpufleet"
BOOTSTRAP_ASSETS_BUCKET = re.compile(r"cdk-[a-z0-9]+-assets-\d{12}-[a-z0-9-]+")
GZIP_MAGIC = b"\x1f\x8b"


def gate_resource_types() -> tuple[str, ...]:
    """Every resource type the staged stack may hold, custom resources aside (stacks/constructs/ami_acceptance_gate.py
    allows exactly these in CreateStack's cloudformation:ResourceTypes; a test holds the two together)."""
    return (*GENERATED_NAMES, *CONSTRUCT_NAMES, *TAGGED_TYPES, *DEPENDENT_TYPES)


def gate_physical_name(name: str, logical_id: str, longest: int) -> str:
    """gpufleet-NAME-LOGICALID, the logical id cut to fit and then followed by 8 hex digits of its SHA-256 (logical
    ids are unique in a template; their cut prefixes need not be)."""
    prefix = f"gpufleet-{name}-"
    digest = hashlib.sha256(logical_id.encode()).hexdigest()[:8]
    return f"{prefix}{logical_id[: longest - len(prefix) - len(digest) - 1]}-{digest}"


@dataclass(frozen=True)
class FileAsset:
    source: Path  # a file, or a directory to zip
    packaging: str  # "file" or "zip"
    bucket: str
    key: str


def _stack_artifacts(cdk_out: Path, stack: str) -> tuple[Path, list[FileAsset]]:
    """The stack's template and its file assets (the template's own copy left out), from the cloud assembly."""
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    artifacts = manifest.get("artifacts", {})
    if artifacts.get(stack, {}).get("type") != "aws:cloudformation:stack":
        raise GpufleetError(f"{cdk_out}: no stack {stack} in the cloud assembly")
    template_file = artifacts[stack]["properties"]["templateFile"]
    asset_manifests = [
        artifacts[dependency]["properties"]["file"]
        for dependency in artifacts[stack].get("dependencies", [])
        if artifacts.get(dependency, {}).get("type") == "cdk:asset-manifest"
    ]
    assets: list[FileAsset] = []
    for asset_manifest in asset_manifests:
        document = json.loads((cdk_out / asset_manifest).read_text())
        if document.get("dockerImages"):
            raise GpufleetError(f"{cdk_out / asset_manifest}: container image assets: the gate stages file assets only")
        for asset in document.get("files", {}).values():
            if asset["source"]["path"] == template_file:
                continue
            for destination in asset["destinations"].values():
                assets.append(
                    FileAsset(
                        cdk_out / asset["source"]["path"],
                        asset["source"].get("packaging", "file"),
                        destination["bucketName"],
                        destination["objectKey"],
                    )
                )
    return cdk_out / template_file, assets


def _write_asset(asset: FileAsset, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if asset.packaging == "file":
        shutil.copyfile(asset.source, path)
        return
    if asset.packaging != "zip":
        raise GpufleetError(f"{asset.source}: asset packaging {asset.packaging!r}: the gate stages file and zip only")
    # What cdk-assets uploads for a directory asset: its files, relative to it, in one zip; here in a fixed order with
    # a fixed time, each readable.
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(p for p in asset.source.rglob("*") if p.is_file()):
            member = zipfile.ZipInfo(file.relative_to(asset.source).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            member.external_attr = ((file.stat().st_mode & 0o777) | 0o444) << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, file.read_bytes())


def _rewritten(value, strings):
    """VALUE with every string passed through STRINGS, dictionaries and lists walked."""
    if isinstance(value, dict):
        return {key: _rewritten(item, strings) for key, item in value.items()}
    if isinstance(value, list):
        return [_rewritten(item, strings) for item in value]
    if isinstance(value, str):
        return strings(value)
    return value


def _user_data(encoded: str) -> str | None:
    """The text of base64, gzip-compressed user data (gpufleet/user_data.py compresses it); None for anything else."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError:
        return None
    if not raw.startswith(GZIP_MAGIC):
        return None
    return gzip.decompress(raw).decode()


def _as_user_data(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode()


def _strings(template: dict) -> list[str]:
    """Every string of the template, and the text of its compressed user data."""
    found: list[str] = []

    def collect(value: str) -> str:
        found.append(value)
        if (text := _user_data(value)) is not None:
            found.append(text)
        return value

    _rewritten(template, collect)
    return found


def stage_gate_stack(cdk_out: Path, name: str, *, bucket: str, boundary_arn: str, out: Path) -> list[str]:
    """Writes the staged template (OUT/template.json) and the stack's file assets (OUT/KEY) for the gate's environment
    NAME, whose stack gpufleet-NAME-cluster is in the cloud assembly CDK_OUT, to be uploaded to s3://BUCKET/NAME/;
    returns the file names written. Raises GpufleetError when the staged template holds anything the gate's execution
    role may not create (gate_scope_problems)."""
    stack = f"gpufleet-{name}-cluster"
    template_path, assets = _stack_artifacts(cdk_out, stack)
    template = json.loads(template_path.read_text())
    moved = {f"{asset.bucket}/{asset.key}": f"{bucket}/{name}/{asset.key}" for asset in assets}
    keys = {asset.key: f"{name}/{asset.key}" for asset in assets}
    buckets = {asset.bucket for asset in assets}

    def relocate(value: str) -> str:
        if value in buckets:
            return bucket
        if value in keys:
            return keys[value]
        if (text := _user_data(value)) is not None:
            relocated = relocate(text)
            return value if relocated == text else _as_user_data(relocated)
        for old, new in moved.items():
            value = value.replace(old, new)
        return value

    template = _rewritten(template, relocate)
    parameters = template.get("Parameters", {})
    if parameters.get("BootstrapVersion", {}).get("Default", "").startswith("/cdk-bootstrap/"):
        del parameters["BootstrapVersion"]
        template.get("Rules", {}).pop("CheckBootstrapVersion", None)
    for key in ("Parameters", "Rules"):
        if key in template and not template[key]:
            del template[key]
    for logical_id, resource in template.get("Resources", {}).items():
        properties = resource.setdefault("Properties", {})
        if resource["Type"] in GENERATED_NAMES:
            name_property, longest = GENERATED_NAMES[resource["Type"]]
            properties.setdefault(name_property, gate_physical_name(name, logical_id, longest))
        if resource["Type"] == "AWS::IAM::Role":
            properties.setdefault("PermissionsBoundary", boundary_arn)
        if resource["Type"] == "AWS::EC2::LaunchTemplate" and "TagSpecifications" not in properties:
            properties["TagSpecifications"] = [
                {"ResourceType": "launch-template", "Tags": [{"Key": ENVIRONMENT_TAG_KEY, "Value": name}]}
            ]
        if resource["Type"] == "AWS::CloudWatch::Dashboard":
            properties.pop("Tags", None)
    problems = gate_scope_problems(template, name, boundary_arn)
    if problems:
        raise GpufleetError(*(f"{template_path}: {problem}" for problem in problems))
    out.mkdir(parents=True, exist_ok=True)
    (out / STAGED_TEMPLATE).write_text(json.dumps(template, indent=1, sort_keys=True) + "\n")
    for asset in assets:
        _write_asset(asset, out / asset.key)
    return [STAGED_TEMPLATE, *(asset.key for asset in assets)]


def _tag_value(tags, key: str) -> object:
    return next((tag.get("Value") for tag in tags or [] if isinstance(tag, dict) and tag.get("Key") == key), None)


def gate_scope_problems(template: dict, name: str, boundary_arn: str) -> list[str]:
    """What in a staged template the gate's execution role may not create, one line each: a resource of another type,
    a name outside gpufleet-NAME-, an EC2 resource without the environment tag, a role without the gate's boundary, a
    reference to a CDK bootstrap bucket."""
    prefix = f"gpufleet-{name}-"
    problems = []
    for logical_id, resource in template.get("Resources", {}).items():
        kind, properties = resource["Type"], resource.get("Properties", {})
        if kind in GENERATED_NAMES or kind in CONSTRUCT_NAMES:
            property_name = GENERATED_NAMES[kind][0] if kind in GENERATED_NAMES else CONSTRUCT_NAMES[kind]
            physical = properties.get(property_name)
            allowed = (prefix, f"/gpufleet/{name}/") if kind == "AWS::Logs::LogGroup" else (prefix,)
            if not (isinstance(physical, str) and (physical == f"gpufleet-{name}" or physical.startswith(allowed))):
                problems.append(f"{logical_id} ({kind}): {property_name} {physical!r} is not {prefix}...")
        elif kind in TAGGED_TYPES:
            tags = properties.get("Tags")
            if kind == "AWS::EC2::LaunchTemplate":
                tags = next(
                    (
                        s.get("Tags")
                        for s in properties.get("TagSpecifications", [])
                        if s.get("ResourceType") == "launch-template"
                    ),
                    None,
                )
            if _tag_value(tags, ENVIRONMENT_TAG_KEY) != name:
                problems.append(f"{logical_id} ({kind}): not tagged {ENVIRONMENT_TAG_KEY}={name}")
        elif kind not in DEPENDENT_TYPES and not kind.startswith(CUSTOM_TYPE_PREFIX):
            problems.append(f"{logical_id} ({kind}): not a type the gate may create")
        if kind == "AWS::IAM::Role" and properties.get("PermissionsBoundary") != boundary_arn:
            problems.append(f"{logical_id} ({kind}): its permissions boundary is not {boundary_arn}")
    leftovers = sorted({match for value in _strings(template) for match in BOOTSTRAP_ASSETS_BUCKET.findall(value)})
    problems.extend(f"still refers to the CDK bootstrap bucket {bucket}" for bucket in leftovers)
    return problems


def stage_main(argv: list[str] | None = None) -> int:
    """`python -m gpufleet.commands.ami_acceptance --cdk-out DIR --name NAME --bucket BUCKET --boundary ARN --out DIR`:
    a step of scripts/pipeline/acceptance-gate.sh, not a command of the gpufleet CLI."""
    parser = argparse.ArgumentParser(prog="python -m gpufleet.commands.ami_acceptance", description=stage_main.__doc__)
    parser.add_argument("--cdk-out", type=Path, required=True, help="the cloud assembly `cdk synth` wrote")
    parser.add_argument("--name", required=True, help="the gate's environment (its stack: gpufleet-NAME-cluster)")
    parser.add_argument("--bucket", required=True, help="the pipeline's gate bucket")
    parser.add_argument("--boundary", required=True, help="the ARN of the gate's permissions boundary policy")
    parser.add_argument("--out", type=Path, required=True, help="where to write the template and the assets")
    args = parser.parse_args(argv)
    try:
        written = stage_gate_stack(
            args.cdk_out, args.name, bucket=args.bucket, boundary_arn=args.boundary, out=args.out
        )
    except GpufleetError as error:
        print("\n".join(error.problems), file=sys.stderr)
        return error.exit_code
    print(f"{args.out}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(stage_main())
