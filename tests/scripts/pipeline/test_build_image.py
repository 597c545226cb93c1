"""scripts/pipeline/build-image.sh refuses to start without its settings (the whole build is run by
test_buildspec_run.py)."""

from __future__ import annotations

import pytest

from tests.scripts.pipeline.conftest import SCRIPTS_DIR

SETTINGS = {
    "PROFILE": "ubuntu2204-cuda12",
    "BUILD_INSTANCE_PROFILE": "gpufleet-build",
    "AWS_REGION": "us-east-1",
    "CODEBUILD_BUILD_ID": "gpufleet-ami:1",
    "PACKER_MANIFEST": "build/image-manifest.json",
}


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        (
            "PROFILE",
            "build-image: PROFILE is not set (start the build with --environment-variables-override "
            "name=PROFILE,value=NAME)",
        ),
        ("BUILD_INSTANCE_PROFILE", "build-image: BUILD_INSTANCE_PROFILE is not set"),
        ("PACKER_MANIFEST", "build-image: PACKER_MANIFEST is not set"),
    ],
)
def test_refuses_without_its_settings(tools, missing, message):
    result = tools.run(SCRIPTS_DIR / "build-image.sh", **{**SETTINGS, missing: ""})
    assert result.returncode == 1
    assert result.stderr.strip() == message
    assert tools.calls() == []
