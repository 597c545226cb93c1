"""Strict mode, as behaviour: a step of an AMI pipeline script that fails stops the script with that step's exit
status, and nothing after it runs (`set -euo pipefail`). Each case fails one call in the middle of a script with
the fake tools of fake_tools.py and names a later call that must not be made. The gpufleet virtualenv
(GPUFLEET_VENV) is the probe's directory, so its python and gpufleet are wrappers too."""

from __future__ import annotations

import subprocess

import pytest

from tests.scripts.failing_step import FAILED_STATUS, Call, Case, StepProbe, accounted_for, scripts_in
from tests.scripts.pipeline.conftest import SCRIPTS_DIR
from tests.scripts.pipeline.fake_tools import FINGERPRINT

CASES = [
    Case(
        "acceptance-gate.sh",
        fails=Call("python3", "- build/image-manifest.json"),
        must_not_run=Call("aws"),
        why="a cluster deployed from an image id that could not be read",
    ),
    Case(
        "build-image.sh",
        fails=Call("gpufleet", "ami check ubuntu2204-cuda12"),
        must_not_run=Call("packer"),
        why="an image built from a profile that failed its checks",
    ),
    Case(
        "install-gpufleet.sh",
        fails=Call("python", "-m pip install --quiet --disable-pip-version-check -r requirements-lock.txt"),
        must_not_run=Call("python", "* --no-deps *"),
        why="gpufleet installed over dependencies that are not the locked ones",
    ),
    Case(
        "install-tools.sh",
        fails=Call("packer", "version"),
        must_not_run=Call("curl", "* https://s3.amazonaws.com/session-manager-downloads/*"),
        why="the build goes on with a packer that does not run",
    ),
]

# Scripts with no step whose failure strict mode has to catch, and why.
NOTHING_TO_CATCH = {
    "acceptance-teardown.sh": "every AWS call is checked (||, if): each failure ends the script with its own message",
    "publish-image.sh": "every AWS call is checked (if/||): a region that fails is reported and the script exits 1",
}

SETTINGS = {
    "acceptance-gate.sh": {
        "GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json",
        "CODEBUILD_BUILD_ARN": "arn:aws:codebuild:us-east-1:123456789012:build/gpufleet-ami:"
        "5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f",
        "AWS_REGION": "us-east-1",
        "GPUFLEET_ACCEPTANCE_INSTANCE_TYPE": "p4d.24xlarge",
        "GPUFLEET_ACCEPTANCE_NODES": "2",
        "GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS": "3600",
        "GPUFLEET_GATE_EXECUTION_ROLE_ARN": "arn:aws:iam::123456789012:role/gpufleet-ami-pipeline-GateExecutionRole",
        "GPUFLEET_GATE_ASSETS_BUCKET": "gpufleet-ami-pipeline-acceptancegateassets-0a1b2c3d4e5f",
        "GPUFLEET_GATE_BOUNDARY_ARN": "arn:aws:iam::123456789012:policy/gpufleet-ami-pipeline-GateBoundary",
    },
    "build-image.sh": {
        "GPUFLEET_AMI_PROFILE": "ubuntu2204-cuda12",
        "GPUFLEET_BUILD_INSTANCE_PROFILE": "gpufleet-build",
        "AWS_REGION": "us-east-1",
        "CODEBUILD_BUILD_ID": "gpufleet-ami:1",
        "GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json",
    },
    "install-gpufleet.sh": {},
    "install-tools.sh": {
        "GPUFLEET_PACKER_VERSION": "1.11.2",
        "GPUFLEET_HASHICORP_KEY_FINGERPRINT": FINGERPRINT,
        "GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION": "1.2.764.0",
    },
}


def test_every_script_has_a_failing_step_or_a_reason_for_none():
    assert accounted_for(CASES, NOTHING_TO_CATCH) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.script)
def test_a_failing_step_stops_the_script(tools, tmp_path, case):
    # Only the fake tools are handed on to: a python or gpufleet that is not failed or watched does nothing.
    probe = StepProbe(tmp_path / "venv" / "bin", str(tools.bin_dir))
    stopped_at_the_failure = probe.install(case)
    env = tools.env(
        **SETTINGS[case.script], GPUFLEET_VENV=str(tmp_path / "venv"), GPUFLEET_TOOLS_BIN_DIR=str(tmp_path / "tools")
    )
    env["PATH"] = f"{probe.bin_dir}:{env['PATH']}"

    result = subprocess.run(["bash", str(SCRIPTS_DIR / case.script)], env=env, capture_output=True, text=True)

    assert probe.calls() == stopped_at_the_failure, result.stdout + result.stderr
    assert result.returncode == FAILED_STATUS, result.stderr
