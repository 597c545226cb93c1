"""The AMI pipeline's buildspec run as CodeBuild runs it, on the sources the stack uploads, with the real gpufleet
and fake aws/packer/curl/gpg/unzip/dpkg/session-manager-plugin (fake_tools.py).

CodeBuild semantics this runner follows (sources: https://docs.aws.amazon.com/codebuild/latest/userguide/
build-spec-ref.html, .../view-build-details-phases.html): phases run in the order install, pre_build, build,
post_build, each command in order; a command exiting non-zero fails its phase and the phase's later commands do not
run; "commands in a finally block are run even if a command in the commands block fails"; without on-failure, a
failed install or pre_build phase skips every later phase, and a failed build phase still runs post_build. A command
killed by a signal stands for the build's container going away (a stopped or timed-out build at its worst): the build
is STOPPED and nothing more runs, finally included, since the reference promises finally only after a failed
command. Buildspec version 0.2 runs the commands in one shell instance; this runner starts one bash per
command, which differs only for commands that hand shell state (cd, variables) to the next: the test below holds
every command to a self-contained `bash scripts/pipeline/NAME.sh`.

gpufleet: install-gpufleet.sh runs its real pip commands into a fresh virtualenv that sees the project's installed
dependencies (a .pth file), so only gpufleet itself is built and installed, from the uploaded sources; the
installed package finds its profiles, packer files and scripts in its own gpufleet/data (importlib.resources)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpufleet.ami.pipeline import Acceptance, publish_regions
from gpufleet.loading import environment_files, load_environments, load_pipeline
from stacks.ami_pipeline_stack import AMI_PIPELINE_STACK_NAME, SOURCE_EXCLUDES
from stacks.constructs.ami_build_project import BUILD_INSTANCE_PROFILE_VARIABLE, buildspec
from tests.gate_pipeline import (
    GATE,
    GATE_NAME,
    gate_pipeline_text,
    synthesize_gate_environment,
    synthesize_gate_pipeline,
)
from tests.scripts.pipeline.build_events import backstop, build_state_change, matches, transform
from tests.scripts.pipeline.conftest import FAKE_TOOLS, REPO
from tests.scripts.pipeline.fake_tools import BUILT_IMAGE, copy_id

PIPELINE = load_pipeline(REPO / "ami" / "pipeline.yaml")
SPEC = buildspec(
    packer=PIPELINE.packer,
    session_manager_plugin_version=PIPELINE.session_manager_plugin.version,
    build_subnet_id=PIPELINE.subnet_id,
    # Deployed from the shipped environments' account (CDK_DEFAULT_ACCOUNT; ami/pipeline.yaml names none).
    publish_regions=publish_regions(
        PIPELINE, load_environments(environment_files(REPO / "environments")), "123456789012"
    ),
    acceptance=PIPELINE.acceptance,
)
PHASES = ("install", "pre_build", "build", "post_build")
BUILD_ID = "gpufleet-ami-build:5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
BUILD_ARN = f"arn:aws:codebuild:us-east-1:123456789012:build/{BUILD_ID}"
INSTANCE_PROFILE = "gpufleet-ami-pipeline-AmiBuildBuildInstanceProfile-1A2B3C4D"


def run_build(
    spec: dict, source: Path, env: dict[str, str], after_phase: Callable[[str], None] = lambda phase: None
) -> dict[str, str]:
    """Each phase's status: SUCCEEDED, FAILED, SKIPPED after a failed install or pre_build phase, or STOPPED where a
    command was killed (and then the last). Each command runs in a session of its own, which a stub may kill whole.
    AFTER_PHASE(phase) runs after each phase that ran."""
    statuses: dict[str, str] = {}

    def run(command: str) -> int:
        return subprocess.run(
            [spec["env"]["shell"], "-c", command], cwd=source, env=env, start_new_session=True
        ).returncode

    for phase in (p for p in PHASES if p in spec["phases"]):
        if "FAILED" in (statuses.get("install"), statuses.get("pre_build")):
            statuses[phase] = "SKIPPED"
            continue
        statuses[phase] = "SUCCEEDED"
        for command in spec["phases"][phase]["commands"]:
            status = run(command)
            if status < 0:
                statuses[phase] = "STOPPED"
                return statuses
            if status != 0:
                statuses[phase] = "FAILED"
                break
        for command in spec["phases"][phase].get("finally", []):
            status = run(command)
            if status < 0:
                statuses[phase] = "STOPPED"
                return statuses
            if status != 0:
                statuses[phase] = "FAILED"
        after_phase(phase)
    return statuses


def source_files() -> list[str]:
    """The files and symlinks of the source asset: the working tree's (tracked, or new and not ignored), less the
    stack's excludes (asset staging and git both drop build output and local state)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return [name for name in listed if name and (REPO / name).exists() and name.split("/")[0] not in SOURCE_EXCLUDES]


@pytest.fixture(scope="module")
def uploaded(tmp_path_factory) -> Path:
    """The asset as the stack stages it: symlinks (gpufleet/data/ami, gpufleet/data/scripts) followed and copied as
    plain files and directories (SymlinkFollowMode.BLOCK_EXTERNAL in stacks/ami_pipeline_stack.py)."""
    root = tmp_path_factory.mktemp("asset")
    for name in source_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, root / name)
        else:
            shutil.copy2(REPO / name, root / name)
    return root


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A virtualenv without gpufleet whose Python also sees the test's installed packages (pip among them)."""
    directory = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    site_packages = subprocess.run(
        [str(directory / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site_packages, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return directory


@pytest.fixture
def build(tools, uploaded, venv, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(uploaded, source)

    def start(
        profile: str, spec: dict = SPEC, after_phase: Callable[[str], None] = lambda phase: None, **overrides: str
    ) -> dict[str, str]:
        settings = dict(
            # What CodeBuild sets, then the buildspec's variables, the project's and the build's override.
            CODEBUILD_SRC_DIR=str(source),
            CODEBUILD_BUILD_ID=BUILD_ID,
            CODEBUILD_BUILD_ARN=BUILD_ARN,
            AWS_REGION=PIPELINE.region,
            AWS_DEFAULT_REGION=PIPELINE.region,
            CODEBUILD_BUILD_SUCCEEDING="1",
            **spec["env"]["variables"],
            **{BUILD_INSTANCE_PROFILE_VARIABLE: INSTANCE_PROFILE},
            GPUFLEET_AMI_PROFILE=profile,
            # The test's own: where install-tools.sh unpacks packer, the virtualenv, pip's configuration.
            GPUFLEET_TOOLS_BIN_DIR=str(tmp_path / "tools"),
            GPUFLEET_VENV=str(venv),
            # pip builds gpufleet with the setuptools the virtualenv sees (the test environment's) rather than
            # installing one into a fresh isolated build environment for every build: the same wheel, in a third
            # of the time. The 0 means --no-build-isolation (pip's inverted PIP_NO_* variables, pypa/pip#5735).
            PIP_NO_BUILD_ISOLATION="0",
            **{key: value for key, value in os.environ.items() if key.startswith("PIP_")},
        )
        env = tools.env(**(settings | overrides))
        env["PATH"] = f"{tmp_path / 'tools'}:{env['PATH']}"
        return run_build(spec, source, env, after_phase)

    start.source = source
    return start


def steps(tools) -> list[str]:
    """The calls in order, each as its tool and subcommand (aws: service, command, region)."""
    named = []
    for tool, *args in tools.calls():
        if tool == "aws":
            named.append(f"aws {args[0]} {args[1]} {args[args.index('--region') + 1]}")
        elif tool in ("packer", "dpkg", "unzip", "session-manager-plugin", "npm", "cdk", "gpufleet"):
            named.append(f"{tool} {args[0]}")
        else:
            named.append(tool)
    return named


INSTALL = [
    "curl",
    "curl",
    "curl",
    "curl",
    "gpg",
    "gpg",
    "unzip -o",
    "packer version",
    "curl",
    "dpkg -i",
    "session-manager-plugin --version",
]


def test_every_command_is_a_self_contained_pipeline_script():
    assert {phase: SPEC["phases"][phase]["commands"] for phase in SPEC["phases"]} == {
        "install": ["bash scripts/pipeline/install-tools.sh", "bash scripts/pipeline/install-gpufleet.sh"],
        "build": ["bash scripts/pipeline/build-image.sh", "bash scripts/pipeline/publish-image.sh"],
    }
    assert not any("on-failure" in phase for phase in SPEC["phases"].values())


def test_build_installs_checks_renders_builds_copies_and_publishes_in_order(build, tools, venv):
    assert build("ubuntu2204-cuda12") == {"install": "SUCCEEDED", "build": "SUCCEEDED"}
    assert steps(tools) == [
        *INSTALL,
        "packer init",
        "packer build",
        "aws ec2 describe-images us-east-1",
        "aws ec2 copy-image us-east-2",
        "aws ec2 copy-image us-west-2",
        "aws ssm put-parameter us-east-1",
        "aws ssm add-tags-to-resource us-east-1",
        "aws ec2 wait us-east-2",
        "aws ssm put-parameter us-east-2",
        "aws ssm add-tags-to-resource us-east-2",
        "aws ec2 wait us-west-2",
        "aws ssm put-parameter us-west-2",
        "aws ssm add-tags-to-resource us-west-2",
    ]
    # gpufleet came from the uploaded sources into the build's virtualenv, and rendered what packer ran.
    assert (venv / "bin" / "gpufleet").exists()
    imported_from = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import gpufleet; print(gpufleet.__file__)"],
        cwd=venv,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert imported_from.startswith(str(venv)), imported_from
    rendered = build.source / "build" / "ubuntu2204-cuda12"
    (init,) = [call for call in tools.calls("packer") if call[1] == "init"]
    (packer_build,) = [call for call in tools.calls("packer") if call[1] == "build"]
    assert init[-1] == packer_build[-1] == "build/ubuntu2204-cuda12"
    assert json.loads((rendered / "gpufleet.auto.pkrvars.json").read_text())["instance_profile"] == INSTANCE_PROFILE
    assert [arg for arg in packer_build if arg.startswith(("region=", "build_id=", "manifest_path="))] == [
        "region=us-east-1",
        f"build_id={BUILD_ID}",
        f"manifest_path={build.source}/build/image-manifest.json",
    ]
    puts = [call for call in tools.calls("aws") if call[2] == "put-parameter"]
    assert [(call[call.index("--region") + 1], call[call.index("--value") + 1]) for call in puts] == [
        ("us-east-1", BUILT_IMAGE),
        ("us-east-2", copy_id("us-east-2")),
        ("us-west-2", copy_id("us-west-2")),
    ]


def test_a_failing_check_builds_and_publishes_nothing(build, tools):
    assert build("p5-no-such-profile") == {"install": "SUCCEEDED", "build": "FAILED"}
    assert steps(tools) == INSTALL
    assert not (build.source / "build" / "p5-no-such-profile").exists()


def test_a_failing_packer_build_publishes_nothing(build, tools):
    tools.set_state(fail=["packer build"])
    assert build("ubuntu2204-cuda12") == {"install": "SUCCEEDED", "build": "FAILED"}
    assert steps(tools) == [*INSTALL, "packer init", "packer build"]


def test_a_failing_copy_publishes_nothing_in_that_region_but_the_build_region_still_gets_the_image(build, tools):
    tools.set_state(fail=["aws ec2 copy-image us-west-2"])
    assert build("ubuntu2204-cuda12") == {"install": "SUCCEEDED", "build": "FAILED"}
    assert steps(tools)[-8:] == [
        "aws ec2 describe-images us-east-1",
        "aws ec2 copy-image us-east-2",
        "aws ec2 copy-image us-west-2",
        "aws ssm put-parameter us-east-1",
        "aws ssm add-tags-to-resource us-east-1",
        "aws ec2 wait us-east-2",
        "aws ssm put-parameter us-east-2",
        "aws ssm add-tags-to-resource us-east-2",
    ]


def test_a_failed_install_skips_the_build(build, tools):
    tools.set_state(packer_zip="a tampered zip")
    assert build("ubuntu2204-cuda12") == {"install": "FAILED", "build": "SKIPPED"}
    assert steps(tools) == ["curl", "curl", "curl", "curl", "gpg", "gpg"]


# The acceptance gate (scripts/pipeline/acceptance-gate.sh, acceptance-teardown.sh): the same build with the gate on
# in the uploaded ami/pipeline.yaml, against the world of fake_tools.py (stacks and their instances). Until
# the build's gpufleet answers `gpufleet status` and `gpufleet acceptance` (which need AWS) with the stubs of
# fake_tools.py and hands every other command on to the installed gpufleet.
GATE_SPEC = buildspec(
    packer=PIPELINE.packer,
    session_manager_plugin_version=PIPELINE.session_manager_plugin.version,
    build_subnet_id=PIPELINE.subnet_id,
    publish_regions={},
    acceptance=Acceptance(**GATE),
)
GATE_STACK = f"gpufleet-{GATE_NAME}-cluster"
# The gate's settings, as the pipeline stack's project sets them (stacks/constructs/ami_acceptance_gate.py
# AmiAcceptanceGate.variables): its execution role, bucket and permissions boundary.
EXECUTION_ROLE = "arn:aws:iam::123456789012:role/gpufleet-ami-pipeline-AcceptanceGateExecutionRole-1A2B3C4D5E6F"
GATE_BUCKET = "gpufleet-ami-pipeline-acceptancegateassets-0a1b2c3d4e5f"
BOUNDARY = "arn:aws:iam::123456789012:policy/gpufleet-ami-pipeline-AcceptanceGateBoundary-6F5E4D3C2B1A"
GATE_SETTINGS = {
    "GPUFLEET_GATE_EXECUTION_ROLE_ARN": EXECUTION_ROLE,
    "GPUFLEET_GATE_ASSETS_BUCKET": GATE_BUCKET,
    "GPUFLEET_GATE_BOUNDARY_ARN": BOUNDARY,
}
GATE_NODES = [f"i-0{hashlib.sha256(f'{GATE_STACK}/{n}'.encode()).hexdigest()[:16]}" for n in (0, 1)]
# No sts assume-role anywhere: the build deletes with its own credentials, naming the gate's execution role.
TEARDOWN = [
    "aws cloudformation describe-stacks us-east-1",
    "aws cloudformation delete-stack us-east-1",
    "aws cloudformation wait us-east-1",
]
# The finally's teardown after the gate's own: the stack is gone already.
NOTHING_LEFT_TO_TEAR_DOWN = ["aws cloudformation describe-stacks us-east-1"]
GATE_UNTIL_DEPLOY = [
    *INSTALL,
    "packer init",
    "packer build",
    "aws pricing get-products us-east-1",
    "npm ci",
    "cdk synth",
    "aws s3 cp us-east-1",
    "aws cloudformation create-stack us-east-1",
    "aws cloudformation wait us-east-1",
]
GATE_UNTIL_ACCEPTANCE = [*GATE_UNTIL_DEPLOY, "gpufleet status", "gpufleet acceptance"]
PUBLISHED = ["aws ssm put-parameter us-east-1", "aws ssm add-tags-to-resource us-east-1"]


@pytest.fixture(scope="module")
def gate_cdk_out(tmp_path_factory) -> Path:
    """The cloud assembly `cdk synth -c env=accept-5f0c1d2e` writes in the build (the fake cdk copies it): the gate's
    environment for the image the fake packer builds, synthesized by the real app's stacks."""
    return synthesize_gate_environment(tmp_path_factory.mktemp("gate-environment"), BUILT_IMAGE).directory


def gate_build(build, venv, tools, **overrides: str) -> dict[str, str]:
    """A build of ubuntu2204-cuda12 with the gate on (the project's gate settings and, for the fake cdk, the
    synthesized assembly among OVERRIDES)."""
    for copy in ("ami", "gpufleet/data/ami"):
        (build.source / copy / "pipeline.yaml").write_text(gate_pipeline_text())

    def stub_acceptance(phase: str) -> None:
        if phase != "install":
            return
        installed = venv / "bin" / "gpufleet"
        installed.replace(venv / "bin" / "gpufleet-installed")
        installed.write_text(
            "#!/bin/sh\n"
            f'case "$1" in acceptance | status) exec "{sys.executable}" -S "{FAKE_TOOLS}" gpufleet "$@" ;; esac\n'
            f'exec "{venv / "bin" / "gpufleet-installed"}" "$@"\n'
        )
        installed.chmod(0o755)

    return build("ubuntu2204-cuda12", GATE_SPEC, stub_acceptance, **(GATE_SETTINGS | overrides))


def world(tools) -> dict:
    state = json.loads(tools.state_file.read_text())
    return {key: state.get(key) for key in ("stacks", "terminated", "deleted_with")}


TORN_DOWN = {"stacks": {}, "terminated": GATE_NODES, "deleted_with": [[GATE_STACK, EXECUTION_ROLE]]}


def test_a_passing_gate_tears_the_nodes_down_and_publishes(build, tools, venv, gate_cdk_out):
    tools.set_state(acceptance="pass")
    assert gate_build(build, venv, tools, FAKE_CDK_OUT=str(gate_cdk_out)) == {
        "install": "SUCCEEDED",
        "build": "SUCCEEDED",
    }
    assert steps(tools) == [
        *GATE_UNTIL_ACCEPTANCE,
        *TEARDOWN,
        "aws ssm put-parameter us-east-1",
        "aws ssm add-tags-to-resource us-east-1",
        *NOTHING_LEFT_TO_TEAR_DOWN,
    ]
    assert world(tools) == TORN_DOWN
    (synth,) = tools.calls("cdk")
    work = f"{build.source}/build/acceptance"
    assert synth[1:] == [
        "synth",
        "--app",
        f"{venv}/bin/python app.py",
        "-c",
        "env=accept-5f0c1d2e",
        "--output",
        f"{work}/cdk.out",
        "--quiet",
    ]
    (upload, create) = [
        call for call in tools.calls("aws") if call[1] in ("s3", "cloudformation") and call[2] != "describe-stacks"
    ][:2]
    assert upload[1:5] == ["s3", "cp", f"{work}/stack", f"s3://{GATE_BUCKET}/{GATE_NAME}"]
    assert create[1:] == [
        "cloudformation",
        "create-stack",
        "--region",
        "us-east-1",
        "--stack-name",
        GATE_STACK,
        "--template-url",
        f"https://{GATE_BUCKET}.s3.us-east-1.amazonaws.com/{GATE_NAME}/template.json",
        "--role-arn",
        EXECUTION_ROLE,
        "--capabilities",
        "CAPABILITY_NAMED_IAM",
        "--output",
        "text",
    ]
    state = json.loads(tools.state_file.read_text())
    assert state["created_with"] == [
        [GATE_STACK, EXECUTION_ROLE, "CAPABILITY_NAMED_IAM", f"{GATE_BUCKET}/{GATE_NAME}/template.json"]
    ]
    # What CloudFormation got: the staged template (every role bounded, nothing in the CDK bootstrap's bucket) and
    # the assets it names, uploaded beside it.
    uploaded = tools.state_file.parent / "s3" / GATE_BUCKET / GATE_NAME
    template = json.loads((uploaded / "template.json").read_text())
    assert "cdk-hnb659fds" not in json.dumps(template)
    roles = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role"]
    assert roles and {role["PermissionsBoundary"] for role in roles} == {BOUNDARY}
    code = [r["Properties"]["Code"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert code and {c["S3Bucket"] for c in code} == {GATE_BUCKET}
    assert all((uploaded / c["S3Key"].removeprefix(f"{GATE_NAME}/")).is_file() for c in code)
    (status, acceptance) = tools.calls("gpufleet")
    assert status[1:] == ["status", "accept-5f0c1d2e", "--json"]
    report = f"{build.source}/build/acceptance/report"
    assert acceptance[1:] == ["acceptance", "accept-5f0c1d2e", "--report-dir", report, "--min-nodes", "2"]
    assert json.loads(Path(report, "acceptance.json").read_text())["verdict"] == "pass"
    environment = yaml.safe_load((build.source / "build/acceptance/environments/accept-5f0c1d2e.yaml").read_text())
    assert environment["ami"] == {"id": BUILT_IMAGE}


def test_a_failing_gate_tears_the_nodes_down_and_publishes_nothing(build, tools, venv, gate_cdk_out):
    tools.set_state(acceptance="fail")
    assert gate_build(build, venv, tools, FAKE_CDK_OUT=str(gate_cdk_out)) == {"install": "SUCCEEDED", "build": "FAILED"}
    assert steps(tools) == [*GATE_UNTIL_ACCEPTANCE, *TEARDOWN, *NOTHING_LEFT_TO_TEAR_DOWN]
    assert world(tools) == TORN_DOWN


def test_a_gate_that_times_out_tears_the_nodes_down_and_publishes_nothing(build, tools, venv, gate_cdk_out):
    tools.set_state(acceptance="hang")
    started = time.monotonic()
    assert gate_build(build, venv, tools, GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS="3", FAKE_CDK_OUT=str(gate_cdk_out)) == {
        "install": "SUCCEEDED",
        "build": "FAILED",
    }
    # The stub would hang for 10 minutes: `timeout` ended it, the deploy and the acceptance together.
    assert time.monotonic() - started < 300
    assert steps(tools) == [*GATE_UNTIL_ACCEPTANCE, *TEARDOWN, *NOTHING_LEFT_TO_TEAR_DOWN]
    assert world(tools) == TORN_DOWN


def test_a_failed_deploy_is_rolled_back_and_its_stack_deleted(build, tools, venv, gate_cdk_out):
    tools.set_state(create_fails=True)
    assert gate_build(build, venv, tools, FAKE_CDK_OUT=str(gate_cdk_out)) == {"install": "SUCCEEDED", "build": "FAILED"}
    assert steps(tools) == [*GATE_UNTIL_DEPLOY, *TEARDOWN, *NOTHING_LEFT_TO_TEAR_DOWN]
    assert world(tools) == {"stacks": {}, "terminated": [], "deleted_with": [[GATE_STACK, EXECUTION_ROLE]]}


def test_a_gate_over_its_cost_bound_launches_nothing(build, tools, venv):
    tools.set_state(hourly_usd="40.9660000000")
    assert gate_build(build, venv, tools) == {"install": "SUCCEEDED", "build": "FAILED"}
    assert steps(tools) == [*GATE_UNTIL_DEPLOY[:-5], *NOTHING_LEFT_TO_TEAR_DOWN]
    assert world(tools) == {"stacks": None, "terminated": None, "deleted_with": None}


@pytest.fixture(scope="module")
def gate_stack(tmp_path_factory) -> dict:
    assembly = synthesize_gate_pipeline(tmp_path_factory.mktemp("gate-pipeline"))
    return assembly.template_json(AMI_PIPELINE_STACK_NAME)


def test_a_build_killed_mid_acceptance_is_torn_down_by_the_backstop(
    build, tools, venv, gate_stack, gate_cdk_out, tmp_path
):
    tools.set_state(acceptance="kill-build")
    assert gate_build(build, venv, tools, FAKE_CDK_OUT=str(gate_cdk_out)) == {
        "install": "SUCCEEDED",
        "build": "STOPPED",
    }
    assert steps(tools) == GATE_UNTIL_ACCEPTANCE
    # Nothing in the build ran after the kill: the nodes are still up.
    assert world(tools) == {"stacks": {GATE_STACK: {"status": "CREATE_COMPLETE", "instances": GATE_NODES}}} | {
        "terminated": None,
        "deleted_with": None,
    }

    # CodeBuild then sends the build's state change; the rule starts the teardown project with its input.
    event = build_state_change(BUILD_ARN, "STOPPED")
    rule, teardown_project = backstop(gate_stack)
    assert matches(rule["EventPattern"], event, gate_stack)
    start_build = transform(rule["Targets"][0]["InputTransformer"], event)
    assert start_build == {
        "environmentVariablesOverride": [{"name": "GPUFLEET_GATE_BUILD_ARN", "value": BUILD_ARN, "type": "PLAINTEXT"}]
    }
    teardown_spec = json.loads(teardown_project["Properties"]["Source"]["BuildSpec"])
    overrides = {item["name"]: item["value"] for item in start_build["environmentVariablesOverride"]}
    # The teardown project's own setting: the gate's execution role (here the stand-in ARN the build had).
    (project_setting,) = teardown_project["Properties"]["Environment"]["EnvironmentVariables"]
    assert project_setting["Name"] == "GPUFLEET_GATE_EXECUTION_ROLE_ARN"
    assert gate_stack["Resources"][project_setting["Value"]["Fn::GetAtt"][0]]["Type"] == "AWS::IAM::Role"
    teardown_source = tmp_path / "teardown-src"
    shutil.copytree(build.source, teardown_source)
    statuses = run_build(
        teardown_spec,
        teardown_source,
        tools.env(
            AWS_REGION="us-east-1",
            CODEBUILD_BUILD_ARN="arn:aws:codebuild:us-east-1:123456789012:build/gpufleet-teardown:"
            "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9",
            GPUFLEET_GATE_EXECUTION_ROLE_ARN=EXECUTION_ROLE,
            **overrides,
        ),
    )
    assert statuses == {"build": "SUCCEEDED"}
    assert steps(tools)[len(GATE_UNTIL_ACCEPTANCE) :] == TEARDOWN
    assert world(tools) == TORN_DOWN
