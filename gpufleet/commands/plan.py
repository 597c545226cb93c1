"""gpufleet plan ENV [--against STACK=FILE | --against DIR] [--cdk-out DIR] [--allow-replace] [--json]: what a
deploy of the environment will do to its resources and above all to running nodes, one line per change; then, where
`cdk destroy --all` of it would keep a stack or a resource, what it deletes and what it keeps (gpufleet/ops/destroy.py).

Exit codes: 0 running nodes unaffected; 3 a change replaces or terminates running nodes; 4 cannot tell: an SSM
parameter the deploy resolves could not be read, and a new value there would replace or terminate running nodes
(--allow-replace turns 3 and 4 into 0); 1 bad input, or AWS failed. A file plan cannot read (the cloud assembly's
manifest.json and templates, an --against template, the checkout's cdk.json) is bad input: one line naming the file,
where in it (``line L column C`` of JSON that does not parse, else the path of keys to the value) and the fix. Each
file is read whole, up to 16 MiB; a template must have the shape the comparison relies on
(gpufleet/ops/template_shape.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from gpufleet.commands.cloud_assembly import assembly_file, stack_artifacts
from gpufleet.errors import GpufleetError
from gpufleet.input_files import MIB, JsonFile

if TYPE_CHECKING:
    from gpufleet.ops.destroy import DestroyedStack
    from gpufleet.ops.plan import DeployTimeParameter

NODE_CHANGE_EXIT = 3
CANNOT_TELL_EXIT = 4
EXIT_CODES = (
    "exit codes: 0 running nodes unaffected; 3 the deploy replaces or terminates running nodes; 4 cannot tell: an "
    "SSM parameter the deploy resolves could not be read, and a new value would replace or terminate running nodes "
    "(--allow-replace turns 3 and 4 into 0); 1 bad input, or AWS failed"
)
# Why --against cannot say what a Systems Manager parameter resolves to.
OFFLINE = "--against reads nothing from AWS"
# What to do about a damaged file, by where it came from.
CDK_OUT_FIX = "synthesize it again (make synth), or leave out --cdk-out"
SYNTHESIZED_FIX = "app.py wrote it so: look into what `cdk synth` writes, and pass that with --cdk-out"
AGAINST_FIX = "save the template again, or leave out --against to compare with the deployed stacks"
CDK_JSON_FIX = "restore the checkout's cdk.json (git checkout cdk.json)"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="before a deploy: every resource change of an environment and whether it replaces running nodes; "
        "what cdk destroy would keep",
        epilog=EXIT_CODES,
    )
    parser.add_argument("env", metavar="ENV", help="environment name (environments/ENV.yaml)")
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="STACK=FILE|DIR",
        help="compare with this template file for STACK, or with STACK.template.json files in DIR (a saved cdk.out), "
        "instead of the deployed stacks (repeatable)",
    )
    parser.add_argument(
        "--cdk-out", type=Path, metavar="DIR", help="use this synthesized cloud assembly instead of synthesizing"
    )
    parser.add_argument(
        "--allow-replace",
        action="store_true",
        help="exit 0 even when running nodes are replaced or terminated, or may be (exit codes 3 and 4)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of one line per change")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.loading import load_named_environment
    from gpufleet.ops.destroy import destroy_outcome
    from gpufleet.ops.plan import StackPair, plan_deploy

    env = load_named_environment(args.env)
    if args.cdk_out:
        stacks = read_assembly(args.cdk_out, env.stack_prefix, CDK_OUT_FIX)
    else:
        with tempfile.TemporaryDirectory(prefix="gpufleet-plan-") as outdir:
            stacks = read_assembly(synthesize(env.name, Path(outdir)), env.stack_prefix, SYNTHESIZED_FIX)
    synthesized = {stack.name: stack.template for stack in stacks}
    destroyed = destroy_outcome(stacks)
    saved = saved_templates(args.against, env.name, list(synthesized))
    sources, old_templates = {}, {}
    for name in synthesized:
        if name in saved:
            sources[name], old_templates[name] = saved[name]
        elif args.against and all("=" not in spec for spec in args.against):
            sources[name], old_templates[name] = "not in the saved templates: new stack", {}
        elif args.against:
            raise GpufleetError(f"--against: no template given for {name}; add --against {name}=FILE")
        else:
            sources[name], old_templates[name] = deployed_template(name, env.region)
    pairs = [StackPair(name, old_templates[name], synthesized[name]) for name in synthesized]
    parameters = [
        parameter
        for pair in pairs
        for parameter in read_deploy_time_parameters(
            pair.name, pair.old, pair.new, None if args.against else env.region
        )
    ]
    plan = plan_deploy(pairs, parameters, env.region)
    changes = plan.changes
    node_changes = [change for change in changes if change.affects_running_nodes]
    # What a deploy that resolves a new image does to this fleet (fleet.rollout; a request fleet is always replace-all).
    rollout = env.fleet.image_rollout
    unread = " or ".join(dict.fromkeys(parameter.logical_id for parameter in parameters if parameter.cannot_tell))
    if args.json:
        document = {
            "environment": env.name,
            "region": env.region,
            "compared_with": sources,
            "rollout": rollout,
            "replaces_running_nodes": bool(node_changes),
            "cannot_tell_whether_running_nodes_are_replaced": bool(plan.possible),
            "parameters": [parameter.as_dict() for parameter in parameters],
            "changes": [change.as_dict() for change in changes],
            "changes_if_unread_parameters_are_new": [change.as_dict() for change in plan.possible],
            "destroy": [outcome.as_dict() for outcome in destroyed],
        }
        print(json.dumps(document, indent=2))
    else:
        print(f"Plan {env.name} ({env.region}):")
        for name, source in sources.items():
            print(f"  {name}: against {source}")
        for parameter in parameters:
            print(f"  {parameter.line()}")
        for change in changes:
            print(change.line())
        if not changes:
            print("no changes")
        for change in plan.possible:
            print(f"if {unread} resolves to a new value: {change.line()}")
        # Only where it keeps something: otherwise cdk destroy removes the whole environment, as the docs say.
        if any(not o.deleted or o.kept_resources or o.service_leftovers for o in destroyed):
            print(f"cdk destroy --all -c env={env.name} keeps some of it:")
            for outcome in destroyed:
                print(outcome.line())
        print(f"fleet.rollout: {rollout}")
        if changes:
            print(f"{len(changes)} change(s); {len(node_changes)} replace or terminate running nodes")
        if plan.possible:
            print(
                f"cannot tell whether running nodes are replaced: {len(plan.possible)} change(s) replace or terminate "
                f"them if {unread} resolves to a new value"
            )
        elif not changes:
            print("running nodes unaffected")
    if args.allow_replace:
        return 0
    if node_changes:
        print(
            f"{env.name}: this deploy replaces or terminates running nodes; rerun with --allow-replace to accept",
            file=sys.stderr,
        )
        return NODE_CHANGE_EXIT
    if plan.possible:
        print(
            f"{env.name}: cannot tell whether this deploy replaces running nodes ({unread} not read); "
            "rerun with --allow-replace to accept",
            file=sys.stderr,
        )
        return CANNOT_TELL_EXIT
    return 0


def synthesize(env_name: str, outdir: Path) -> Path:
    """Run app.py as the CDK CLI does (cdk.json's context plus env=NAME in CDK_CONTEXT_JSON, output to CDK_OUTDIR)
    from the current directory: the checkout with app.py, cdk.json and environments/."""
    app_dir = Path.cwd()
    if not (app_dir / "app.py").is_file():
        raise GpufleetError(
            f"{app_dir}: no app.py here; run gpufleet plan in the gpufleet checkout, or pass --cdk-out DIR"
        )
    cdk_json = app_dir / "cdk.json"
    context = {}
    if cdk_json.is_file():
        settings = JsonFile(cdk_json, limit=MIB, expected="a cdk.json (a few KB)", fix=CDK_JSON_FIX, exit_code=1)
        context = settings.get(settings.document, ("context",), dict, default={})
    env = os.environ | {"CDK_CONTEXT_JSON": json.dumps(context | {"env": env_name}), "CDK_OUTDIR": str(outdir)}
    result = subprocess.run([sys.executable, "app.py"], cwd=app_dir, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise GpufleetError(*(result.stderr.strip().splitlines() or [f"app.py failed ({result.returncode})"]))
    return outdir


def read_assembly(directory: Path, stack_prefix: str, fix: str) -> list[DestroyedStack]:
    """The environment's stacks in a cloud assembly, in manifest order: template, termination protection and
    dependencies; ``fix`` says what to do about a damaged file of it."""
    from gpufleet.ops.destroy import DestroyedStack

    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        raise GpufleetError(f"{directory}: no manifest.json; pass the cdk.out directory of `cdk synth`")
    manifest = assembly_file(manifest_path, fix)
    stacks = []
    for name, artifact in stack_artifacts(manifest, lambda name: name.startswith(f"{stack_prefix}-")).items():
        where = ("artifacts", name)
        properties = manifest.get(artifact, (*where, "properties"), dict)
        protection = manifest.get(properties, (*where, "properties", "terminationProtection"), bool, default=False)
        dependencies = manifest.get(artifact, (*where, "dependencies"), list, default=[])
        stacks.append(
            DestroyedStack(
                name,
                read_template(template_file(manifest, name, artifact), fix),
                termination_protection=protection,
                dependencies=tuple(str(dependency) for dependency in dependencies),
            )
        )
    if not stacks:
        raise GpufleetError(f"{directory}: no stack {stack_prefix}-* in this cloud assembly")
    return stacks


def template_file(manifest: JsonFile, name: str, artifact: dict) -> Path:
    """The template file of a stack artifact: its templateFile, "a file relative to the assembly root" (aws-cdk-lib
    2.275.0, aws_cdk.cloud_assembly_schema.AwsCloudFormationStackProperties), so none outside the assembly."""
    path = ("artifacts", name, "properties", "templateFile")
    file = manifest.get(manifest.get(artifact, path[:-1], dict), path, str)
    relative = PurePosixPath(file)
    if not file or "\0" in file or relative.is_absolute() or ".." in relative.parts:
        raise manifest.problem(path, "a file in the cloud assembly", file)
    return manifest.path.parent / file


def read_template(path: Path, fix: str) -> dict:
    """A template, checked to have the shape the comparison relies on; ``fix`` says what to do about a damaged one."""
    from gpufleet.ops.template_shape import checked_template

    return checked_template(assembly_file(path, fix))


def saved_templates(specs: list[str], env_name: str, stack_names: list[str]) -> dict[str, tuple[str, dict]]:
    """Templates from --against: STACK=FILE, or DIR holding STACK.template.json files (those of stack_names; a
    saved cdk.out holds every environment's). By stack name: (source, template)."""
    found: dict[str, tuple[str, dict]] = {}
    for spec in specs:
        if "=" in spec:
            name, _, file = spec.partition("=")
            if name not in stack_names:
                raise GpufleetError(
                    f"--against {spec}: no stack {name} in {env_name} (stacks: {', '.join(stack_names)})"
                )
            found[name] = (file, read_template(Path(file), AGAINST_FIX))
            continue
        directory = Path(spec)
        if not directory.is_dir():
            raise GpufleetError(f"--against {spec}: neither STACK=FILE nor a directory of STACK.template.json files")
        for name in stack_names:
            path = directory / f"{name}.template.json"
            if path.is_file():
                found[name] = (str(path), read_template(path, AGAINST_FIX))
    return found


def deployed_template(stack_name: str, region: str) -> tuple[str, dict]:
    """The deployed stack's template as submitted (GetTemplate, TemplateStage Original); {} if not deployed."""
    from botocore.exceptions import ClientError

    from gpufleet.aws import Aws, aws_errors, error_code

    with aws_errors(region):
        client = Aws(region).client("cloudformation")
        try:
            body = client.get_template(StackName=stack_name, TemplateStage="Original")["TemplateBody"]
        except ClientError as error:
            # source: https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_GetTemplate.html
            # (a missing stack answers ValidationError "Stack with id NAME does not exist")
            if error_code(error) == "ValidationError" and "does not exist" in str(error):
                return "nothing deployed: new stack", {}
            raise
    # boto3 hands JSON template bodies over already parsed; other bodies come as text.
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            raise GpufleetError(f"{stack_name}: the deployed template is not JSON; compare with --against") from None
    return f"deployed stack {stack_name}", dict(body)


def read_deploy_time_parameters(stack_name: str, old: dict, new: dict, region: str | None) -> list[DeployTimeParameter]:
    """The deployed stack's parameters that CloudFormation resolves from Parameter Store at the deploy and that some
    resource refers to, with the value the stack resolved at its last deploy (DescribeStacks) and the one the key
    holds now (GetParameter); region None (--against): nothing is read. A parameter the deployed stack does not have
    shows up as a template change already (a new Ref)."""
    from gpufleet.ops.plan import DeployTimeParameter, ssm_parameter_defaults

    saved_keys = {name: str(parameter.get("Default", "")) for name, parameter in old.get("Parameters", {}).items()}
    declared = {name: default for name, default in ssm_parameter_defaults(new).items() if name in saved_keys}
    if not declared:
        return []
    stack_parameters, unreadable = deployed_parameters(stack_name, region) if region else ({}, OFFLINE)
    found = []
    for logical_id, default in declared.items():
        deployed = stack_parameters.get(logical_id, {})
        key = deployed.get("ParameterValue", saved_keys[logical_id])
        ignored_default = default if default != key else ""
        resolved = deployed.get("ResolvedValue")
        if region is None or unreadable or resolved is None:
            why = unreadable or "DescribeStacks shows no value the stack resolved"
            found.append(DeployTimeParameter(stack_name, logical_id, key, None, None, why, ignored_default))
            continue
        current, why = parameter_value(key, region)
        found.append(DeployTimeParameter(stack_name, logical_id, key, resolved, current, why, ignored_default))
    return found


def deployed_parameters(stack_name: str, region: str) -> tuple[dict[str, dict], str]:
    """The deployed stack's parameters by logical id (DescribeStacks), or why they cannot be read."""
    from botocore.exceptions import ClientError

    from gpufleet.aws import Aws, aws_errors, describe_failure, is_unavailable

    with aws_errors(region):
        try:
            (stack,) = Aws(region).client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
        except ClientError as error:
            if not is_unavailable(error):
                raise
            return {}, describe_failure(error, region)
    return {parameter["ParameterKey"]: parameter for parameter in stack.get("Parameters", [])}, ""


def parameter_value(key: str, region: str) -> tuple[str | None, str]:
    """What the SSM parameter holds now, or why that cannot be read."""
    from botocore.exceptions import ClientError

    from gpufleet.aws import Aws, aws_errors, describe_failure, error_code, is_unavailable

    with aws_errors(region):
        try:
            return str(Aws(region).client("ssm").get_parameter(Name=key)["Parameter"]["Value"]), ""
        except ClientError as error:
            # source: botocore's ssm model, GetParameter errors (ParameterNotFound); the CloudFormation user guide
            # page cited in gpufleet/ops/plan.py: "If a specified parameter doesn't exist in Parameter Store under
            # the caller's AWS account, CloudFormation returns a validation error."
            if error_code(error) == "ParameterNotFound":
                return None, f"it does not exist in {region} (ParameterNotFound), so the deploy fails until it does"
            if is_unavailable(error):
                return None, describe_failure(error, region)
            raise
