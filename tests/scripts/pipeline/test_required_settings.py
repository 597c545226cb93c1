"""Every AMI pipeline script checks its settings the same way (require_settings of scripts/lib/helpers.sh): each
missing or empty one gets its own line, naming it and where it comes from, all of them at once, before the script
runs any tool (the whole build is run by test_buildspec_run.py)."""

from __future__ import annotations

import pytest

from tests.scripts.failing_step import scripts_in
from tests.scripts.pipeline.conftest import SCRIPTS_DIR

FROM = "(set by the AMI pipeline's CodeBuild project, or by start-build --environment-variables-override)"

# Each script with settings left out (missing, or set but empty), and the lines it answers with.
CASES = {
    "acceptance-gate.sh": (
        {"GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json", "AWS_REGION": "us-east-1"},
        [
            f"acceptance-gate: error: CODEBUILD_BUILD_ARN is not set {FROM}",
            f"acceptance-gate: error: GPUFLEET_ACCEPTANCE_INSTANCE_TYPE is not set {FROM}",
            f"acceptance-gate: error: GPUFLEET_ACCEPTANCE_NODES is not set {FROM}",
            f"acceptance-gate: error: GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS is not set {FROM}",
            f"acceptance-gate: error: GPUFLEET_GATE_EXECUTION_ROLE_ARN is not set {FROM}",
            f"acceptance-gate: error: GPUFLEET_GATE_ASSETS_BUCKET is not set {FROM}",
            f"acceptance-gate: error: GPUFLEET_GATE_BOUNDARY_ARN is not set {FROM}",
        ],
    ),
    "acceptance-teardown.sh": (
        {"CODEBUILD_BUILD_ARN": ""},
        [
            f"acceptance-teardown: error: GPUFLEET_GATE_BUILD_ARN is not set {FROM}",
            f"acceptance-teardown: error: GPUFLEET_GATE_EXECUTION_ROLE_ARN is not set {FROM}",
            f"acceptance-teardown: error: AWS_REGION is not set {FROM}",
        ],
    ),
    "build-image.sh": (
        {"GPUFLEET_AMI_PROFILE": "", "AWS_REGION": "us-east-1", "CODEBUILD_BUILD_ID": "gpufleet-ami:1"},
        [
            f"build-image: error: GPUFLEET_AMI_PROFILE is not set {FROM}",
            f"build-image: error: GPUFLEET_BUILD_INSTANCE_PROFILE is not set {FROM}",
            f"build-image: error: GPUFLEET_PACKER_MANIFEST is not set {FROM}",
        ],
    ),
    "install-tools.sh": (
        {"GPUFLEET_PACKER_VERSION": "1.11.2"},
        [
            f"install-tools: error: GPUFLEET_HASHICORP_KEY_FINGERPRINT is not set {FROM}",
            f"install-tools: error: GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION is not set {FROM}",
        ],
    ),
    "publish-image.sh": (
        {"GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json", "CODEBUILD_BUILD_ID": ""},
        [
            f"publish-image: error: GPUFLEET_AMI_PROFILE is not set {FROM}",
            f"publish-image: error: CODEBUILD_BUILD_ID is not set {FROM}",
            f"publish-image: error: AWS_REGION is not set {FROM}",
        ],
    ),
}
# Scripts that require no setting, and why.
NOTHING_REQUIRED = {"install-gpufleet.sh": "its one setting, GPUFLEET_VENV, has a default (.venv)"}


def test_every_script_has_a_case_or_a_reason_for_none():
    assert sorted([*CASES, *NOTHING_REQUIRED]) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("script", sorted(CASES))
def test_missing_settings_are_named_together_and_nothing_runs(tools, script):
    settings, lines = CASES[script]

    result = tools.run(SCRIPTS_DIR / script, **settings)

    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (1, lines, "")
    assert tools.calls() == []
