"""gpufleet plan ENV [--against STACK=FILE | --against DIR] [--cdk-out DIR] [--allow-replace] [--json]: what a
deploy of the environment will do to its resources and above all to running nodes, one line per change.

Exit status 3 when a change replaces or terminates running nodes (unless --allow-replace), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gpufleet.errors import GpufleetError

NODE_CHANGE_EXIT = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="before a deploy: every resource change of an environment and whether it replaces running nodes"
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
        "--allow-replace", action="store_true", help="exit 0 even when running nodes are replaced or terminated"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of one line per change")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpufleet.loading import load_named_environment
    from gpufleet.ops.plan import StackPair, plan_changes

    env = load_named_environment(args.env)
    if args.cdk_out:
        synthesized = read_assembly(args.cdk_out, env.stack_prefix)
    else:
        with tempfile.TemporaryDirectory(prefix="gpufleet-plan-") as outdir:
            synthesized = read_assembly(synthesize(env.name, Path(outdir)), env.stack_prefix)
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
    changes = plan_changes(pairs, env.region)
    node_changes = [change for change in changes if change.affects_running_nodes]
    # What a deploy that resolves a new image does to this fleet (fleet.rollout; a request fleet is always replace-all).
    rollout = env.fleet.image_rollout
    if args.json:
        document = {
            "environment": env.name,
            "region": env.region,
            "compared_with": sources,
            "rollout": rollout,
            "replaces_running_nodes": bool(node_changes),
            "changes": [change.as_dict() for change in changes],
        }
        print(json.dumps(document, indent=2))
    else:
        print(f"Plan {env.name} ({env.region}):")
        for name, source in sources.items():
            print(f"  {name}: against {source}")
        for change in changes:
            print(change.line())
        if not changes:
            print("no changes")
        print(f"fleet.rollout: {rollout}")
        print(
            f"{len(changes)} change(s); {len(node_changes)} replace or terminate running nodes"
            if changes
            else "running nodes unaffected"
        )
    if node_changes and not args.allow_replace:
        print(
            f"{env.name}: this deploy replaces or terminates running nodes; rerun with --allow-replace to accept",
            file=sys.stderr,
        )
        return NODE_CHANGE_EXIT
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
    context = json.loads(cdk_json.read_text()).get("context", {}) if cdk_json.is_file() else {}
    env = os.environ | {"CDK_CONTEXT_JSON": json.dumps(context | {"env": env_name}), "CDK_OUTDIR": str(outdir)}
    result = subprocess.run([sys.executable, "app.py"], cwd=app_dir, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise GpufleetError(*(result.stderr.strip().splitlines() or [f"app.py failed ({result.returncode})"]))
    return outdir


def read_assembly(directory: Path, stack_prefix: str) -> dict[str, dict]:
    """The environment's templates in a cloud assembly, in manifest order, by stack name."""
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        raise GpufleetError(f"{directory}: no manifest.json; pass the cdk.out directory of `cdk synth`")
    artifacts = json.loads(manifest_path.read_text())["artifacts"]
    templates = {
        name: read_template(directory / artifact["properties"]["templateFile"], f"--cdk-out {directory}: {name}")
        for name, artifact in artifacts.items()
        if artifact["type"] == "aws:cloudformation:stack" and name.startswith(f"{stack_prefix}-")
    }
    if not templates:
        raise GpufleetError(f"{directory}: no stack {stack_prefix}-* in this cloud assembly")
    return templates


def read_template(path: Path, label: str) -> dict:
    """A JSON template; label names where it was asked for (an option) in the error lines."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise GpufleetError(f"{label}: no such file") from None
    except json.JSONDecodeError as error:
        raise GpufleetError(f"{label}: not a JSON template (line {error.lineno}: {error.msg})") from None
    if not isinstance(document, dict):
        raise GpufleetError(f"{label}: not a template (expected a JSON object with Resources)")
    return document


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
            found[name] = (file, read_template(Path(file), f"--against {spec}"))
            continue
        directory = Path(spec)
        if not directory.is_dir():
            raise GpufleetError(f"--against {spec}: neither STACK=FILE nor a directory of STACK.template.json files")
        for name in stack_names:
            path = directory / f"{name}.template.json"
            if path.is_file():
                found[name] = (str(path), read_template(path, f"--against {path}"))
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
