"""scripts/pipeline/publish-image.sh with the fake `aws` of fake_tools.py: copies and parameters per region."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.scripts.pipeline.conftest import SCRIPTS_DIR
from tests.scripts.pipeline.fake_tools import BUILT_IMAGE, BUILT_IMAGE_NAME
from tests.scripts.pipeline.fake_tools import copy_id as copy_of

BUILD_ID = "gpufleet-ami:0b1c2d3e"
PROFILE = "ubuntu2204-cuda12"
TAGS = f"{{Key=gpufleet:profile,Value={PROFILE}}},{{Key=gpufleet:build-id,Value={BUILD_ID}}}"


@pytest.fixture
def source(tmp_path) -> Path:
    """The script finds the source tree from its own place: a tree holding only the script and its helpers."""
    root = tmp_path / "src"
    (root / "scripts" / "pipeline").mkdir(parents=True)
    shutil.copy(SCRIPTS_DIR / "publish-image.sh", root / "scripts" / "pipeline")
    shutil.copytree(SCRIPTS_DIR.parent / "lib", root / "scripts" / "lib")
    (root / "build").mkdir()
    return root


def manifest_of(*runs: tuple[str, str], last: str) -> dict:
    return {
        "builds": [{"packer_run_uuid": uuid, "artifact_id": artifact} for uuid, artifact in runs],
        "last_run_uuid": last,
    }


def publish(tools, source: Path, manifest: dict | None, **overrides: str):
    if manifest is not None:
        (source / "build" / "image-manifest.json").write_text(json.dumps(manifest))
    settings = {
        "GPUFLEET_AMI_PROFILE": PROFILE,
        "GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json",
        "CODEBUILD_BUILD_ID": BUILD_ID,
        "AWS_REGION": "us-east-1",
        "GPUFLEET_PUBLISH_REGIONS": f"p4d-al2-cuda11=us-east-1 {PROFILE}=us-east-1,eu-west-1,us-west-2",
        **overrides,
    }
    return tools.run(source / "scripts" / "pipeline" / "publish-image.sh", **settings)


BUILT = manifest_of(("old", "us-east-1:ami-0aaaaaaaaaaaaaaaa"), ("new", f"us-east-1:{BUILT_IMAGE}"), last="new")


def put(region: str, image: str) -> list[str]:
    return [
        "aws",
        "ssm",
        "put-parameter",
        "--region",
        region,
        "--name",
        f"/gpufleet/ami/{PROFILE}",
        "--type",
        "String",
        "--data-type",
        "aws:ec2:image",
        "--value",
        image,
        "--overwrite",
        "--description",
        f"gpufleet AMI of profile {PROFILE} (written by the AMI pipeline)",
    ]


def tag(region: str) -> list[str]:
    return [
        "aws",
        "ssm",
        "add-tags-to-resource",
        "--region",
        region,
        "--resource-type",
        "Parameter",
        "--resource-id",
        f"/gpufleet/ami/{PROFILE}",
        "--tags",
        f"Key=gpufleet:profile,Value={PROFILE}",
        f"Key=gpufleet:build-id,Value={BUILD_ID}",
    ]


def copy(region: str) -> list[str]:
    return [
        "aws",
        "ec2",
        "copy-image",
        "--region",
        region,
        "--source-region",
        "us-east-1",
        "--source-image-id",
        BUILT_IMAGE,
        "--name",
        BUILT_IMAGE_NAME,
        "--encrypted",
        "--copy-image-tags",
        "--tag-specifications",
        f"ResourceType=image,Tags=[{TAGS}]",
        f"ResourceType=snapshot,Tags=[{TAGS}]",
        "--query",
        "ImageId",
        "--output",
        "text",
    ]


def wait(region: str) -> list[str]:
    return ["aws", "ec2", "wait", "image-available", "--region", region, "--image-ids", copy_of(region)]


def state(region: str) -> list[str]:
    return [
        "aws",
        "ec2",
        "describe-images",
        "--region",
        region,
        "--image-ids",
        copy_of(region),
        "--query",
        "Images[0].State",
        "--output",
        "text",
    ]


NAME = [
    "aws",
    "ec2",
    "describe-images",
    "--region",
    "us-east-1",
    "--image-ids",
    BUILT_IMAGE,
    "--query",
    "Images[0].Name",
    "--output",
    "text",
]


def test_copies_to_every_region_of_the_profile_then_publishes_each(tools, source):
    result = publish(tools, source, BUILT)
    assert result.returncode == 0, result.stderr
    assert tools.calls() == [
        NAME,
        copy("eu-west-1"),
        copy("us-west-2"),
        put("us-east-1", BUILT_IMAGE),
        tag("us-east-1"),
        wait("eu-west-1"),
        put("eu-west-1", copy_of("eu-west-1")),
        tag("eu-west-1"),
        wait("us-west-2"),
        put("us-west-2", copy_of("us-west-2")),
        tag("us-west-2"),
    ]
    assert result.stdout.splitlines()[-1] == (
        f"publish-image: published {copy_of('us-west-2')} to /gpufleet/ami/{PROFILE} in us-west-2 (build {BUILD_ID})"
    )


def test_a_profile_without_publish_regions_is_published_in_the_build_region(tools, source):
    result = publish(tools, source, BUILT, GPUFLEET_PUBLISH_REGIONS="p4d-al2-cuda11=us-east-1,us-west-2")
    assert result.returncode == 0, result.stderr
    assert tools.calls() == [put("us-east-1", BUILT_IMAGE), tag("us-east-1")]


def test_a_failed_copy_leaves_that_region_alone_and_fails_after_publishing_the_others(tools, source):
    tools.set_state(fail=["aws ec2 copy-image eu-west-1"])
    result = publish(tools, source, BUILT)
    assert result.returncode == 1
    assert tools.calls() == [
        NAME,
        copy("eu-west-1"),
        copy("us-west-2"),
        put("us-east-1", BUILT_IMAGE),
        tag("us-east-1"),
        wait("us-west-2"),
        put("us-west-2", copy_of("us-west-2")),
        tag("us-west-2"),
    ]
    assert result.stderr.splitlines()[-1] == (
        f"publish-image: error: {PROFILE} is not published in eu-west-1 (the build log above says why)"
    )


def test_a_copy_still_pending_gets_another_wait_and_a_failed_copy_is_not_published(tools, source):
    tools.set_state(
        wait_rounds_exceeded={copy_of("eu-west-1"): 1, copy_of("us-west-2"): 1},
        image_state={copy_of("eu-west-1"): "pending", copy_of("us-west-2"): "failed"},
    )
    result = publish(tools, source, BUILT)
    assert result.returncode == 1
    published = [call[4] for call in tools.calls() if call[2] == "put-parameter"]
    assert published == ["us-east-1", "eu-west-1"]
    waiting = [call for call in tools.calls()[3:] if call[2] not in ("put-parameter", "add-tags-to-resource")]
    assert waiting == [wait("eu-west-1"), state("eu-west-1"), wait("eu-west-1"), wait("us-west-2"), state("us-west-2")]
    assert f"publish-image: error: {copy_of('us-west-2')} in us-west-2 is failed" in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"publish-image: error: {PROFILE} is not published in us-west-2 (the build log above says why)"
    )


@pytest.mark.parametrize(
    ("manifest", "overrides", "message"),
    [
        (
            BUILT,
            {"GPUFLEET_AMI_PROFILE": ""},
            "publish-image: error: GPUFLEET_AMI_PROFILE is not set (set by the AMI pipeline's CodeBuild project, or by "
            "start-build --environment-variables-override)",
        ),
        (
            BUILT,
            {"CODEBUILD_BUILD_ID": ""},
            "publish-image: error: CODEBUILD_BUILD_ID is not set (set by the AMI pipeline's CodeBuild project, or by "
            "start-build --environment-variables-override)",
        ),
        (None, {}, "publish-image: error: build/image-manifest.json not found (did packer build finish?)"),
        (
            manifest_of(("a", f"us-east-1:{BUILT_IMAGE}"), last="b"),
            {},
            "publish-image: error: no AMI id in the last run of build/image-manifest.json (found '')",
        ),
        (
            manifest_of(("a", "us-east-1:snap-0123"), last="a"),
            {},
            "publish-image: error: no AMI id in the last run of build/image-manifest.json (found 'snap-0123')",
        ),
    ],
)
def test_refuses_without_publishing(tools, source, manifest, overrides, message):
    result = publish(tools, source, manifest, **overrides)
    assert result.returncode == 1
    assert result.stderr.strip() == message
    assert tools.calls() == []
