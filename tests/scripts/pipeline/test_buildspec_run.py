"""The AMI pipeline's buildspec run as CodeBuild runs it, on the sources the stack uploads, with the real gpufleet
and fake aws/packer/curl/gpg/unzip/dpkg/session-manager-plugin (fake_tools.py).

CodeBuild semantics this runner follows (sources: https://docs.aws.amazon.com/codebuild/latest/userguide/
build-spec-ref.html, .../view-build-details-phases.html): phases run in the order install, pre_build, build,
post_build, each command in order; a command exiting non-zero fails its phase and the phase's later commands do not
run; without on-failure, a failed install or pre_build phase skips every later phase, and a failed build phase still
runs post_build. Buildspec version 0.2 runs the commands in one shell instance; this runner starts one bash per
command, which differs only for commands that hand shell state (cd, variables) to the next: the test below holds
every command to a self-contained `bash scripts/pipeline/NAME.sh`.

gpufleet: install-gpufleet.sh runs its real pip commands into a fresh virtualenv that sees the project's installed
dependencies (a .pth file), so only gpufleet itself is built and installed, from the uploaded sources; the
installed package finds its profiles, packer files and scripts in its own gpufleet/data (importlib.resources)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gpufleet.ami.pipeline import publish_regions
from gpufleet.loading import environment_files, load_environments, load_pipeline
from stacks.ami_pipeline_stack import SOURCE_EXCLUDES
from stacks.constructs.ami_build_project import BUILD_INSTANCE_PROFILE_VARIABLE, buildspec
from tests.scripts.pipeline.conftest import REPO
from tests.scripts.pipeline.fake_tools import BUILT_IMAGE, copy_id

PIPELINE = load_pipeline(REPO / "ami" / "pipeline.yaml")
SPEC = buildspec(
    packer=PIPELINE.packer,
    session_manager_plugin_version=PIPELINE.session_manager_plugin.version,
    build_subnet_id=PIPELINE.subnet_id,
    publish_regions=publish_regions(PIPELINE, load_environments(environment_files(REPO / "environments"))),
    acceptance=PIPELINE.acceptance,
)
PHASES = ("install", "pre_build", "build", "post_build")
BUILD_ID = "gpufleet-ami-build:5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
INSTANCE_PROFILE = "gpufleet-ami-pipeline-AmiBuildBuildInstanceProfile-1A2B3C4D"


def run_build(spec: dict, source: Path, env: dict[str, str]) -> dict[str, str]:
    """Each phase's status: SUCCEEDED, FAILED, or SKIPPED after a failed install or pre_build phase."""
    statuses: dict[str, str] = {}
    for phase in (p for p in PHASES if p in spec["phases"]):
        if "FAILED" in (statuses.get("install"), statuses.get("pre_build")):
            statuses[phase] = "SKIPPED"
            continue
        statuses[phase] = "SUCCEEDED"
        for command in spec["phases"][phase]["commands"]:
            if subprocess.run([spec["env"]["shell"], "-c", command], cwd=source, env=env).returncode != 0:
                statuses[phase] = "FAILED"
                break
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

    def start(profile: str, spec: dict = SPEC) -> dict[str, str]:
        env = tools.env(
            # What CodeBuild sets, then the buildspec's variables, the project's and the build's override.
            CODEBUILD_SRC_DIR=str(source),
            CODEBUILD_BUILD_ID=BUILD_ID,
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
        env["PATH"] = f"{tmp_path / 'tools'}:{env['PATH']}"
        return run_build(spec, source, env)

    start.source = source
    return start


def steps(tools) -> list[str]:
    """The calls in order, each as its tool and subcommand (aws: service, command, region)."""
    named = []
    for tool, *args in tools.calls():
        if tool == "aws":
            named.append(f"aws {args[0]} {args[1]} {args[args.index('--region') + 1]}")
        elif tool in ("packer", "dpkg", "unzip", "session-manager-plugin"):
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
