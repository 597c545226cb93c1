"""The AMI build project on its own: its key, logs and environment, and the publish grant per destination region."""

from __future__ import annotations

from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk.assertions import Template

from gpufleet.ami.pipeline import load_pipeline
from stacks.constructs.ami_build_project import AmiBuildProject


def build_project(stack, tmp_path, publish_regions):
    (tmp_path / "README").write_text("a stand-in for the repository the build checks out\n")
    source = s3_assets.Asset(stack, "Source", path=str(tmp_path))
    pipeline = load_pipeline().model_copy(update={"log_retention_days": 30})
    AmiBuildProject(stack, "AmiBuild", pipeline=pipeline, source=source, publish_regions=publish_regions)
    return Template.from_stack(stack)


def only(template, resource_type):
    (resource,) = template.find_resources(resource_type).values()
    return resource["Properties"]


def publish_sids(template):
    """The Publish* statements, wherever aws-cdk-lib put them (a long policy overflows into managed policies)."""
    return sorted(
        statement["Sid"]
        for resource_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for policy in template.find_resources(resource_type).values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement.get("Sid", "").startswith("Publish")
    )


def test_the_build_encrypts_with_its_own_rotated_key_and_keeps_logs_the_pipelines_retention(stack, tmp_path):
    template = build_project(stack, tmp_path, {"p4d-ubuntu1804-cuda11": ("us-east-1",)})
    assert only(template, "AWS::KMS::Key")["EnableKeyRotation"] is True
    assert only(template, "AWS::KMS::Key")["PendingWindowInDays"] == 7
    assert only(template, "AWS::Logs::LogGroup")["RetentionInDays"] == 30
    project = only(template, "AWS::CodeBuild::Project")
    assert project["TimeoutInMinutes"] == 300
    assert project["Environment"]["ComputeType"] == "BUILD_GENERAL1_SMALL"
    assert project["Environment"]["Image"] == "aws/codebuild/standard:7.0"


def test_a_profile_published_only_in_the_build_region_writes_its_parameter_and_copies_nothing(stack, tmp_path):
    template = build_project(stack, tmp_path, {"p4d-ubuntu1804-cuda11": ("us-east-1",)})
    assert publish_sids(template) == ["PublishAmiId"]


def test_a_profile_published_in_another_region_may_also_copy_its_images_there_and_wait(stack, tmp_path):
    template = build_project(stack, tmp_path, {"p4d-ubuntu1804-cuda11": ("us-east-1", "us-west-2")})
    assert publish_sids(template) == [
        "PublishAmiId",
        "PublishCreateTaggedCopy",
        "PublishTagCopyAtCreation",
        "PublishWaitForCopies",
    ]
