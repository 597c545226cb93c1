"""The AMI build project on its own: its key, logs and environment, and the publish grant per destination region."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk.assertions import Template

from gpufleet.loading import load_pipeline
from stacks.constructs.ami_build_project import AmiBuildProject, buildspec, pipeline_image_statements
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT


def build_project(stack, tmp_path, publish_regions):
    (tmp_path / "README").write_text("a stand-in for the repository the build checks out\n")
    source = s3_assets.Asset(stack, "Source", path=str(tmp_path))
    add_build_project(stack, load_pipeline(), source, publish_regions)
    return Template.from_stack(stack)


def add_build_project(stack, pipeline, source, publish_regions) -> AmiBuildProject:
    return AmiBuildProject(
        stack,
        "AmiBuild",
        packer=pipeline.packer,
        session_manager_plugin_version=pipeline.session_manager_plugin.version,
        build_subnet_id=pipeline.subnet_id,
        log_retention=logs.RetentionDays.ONE_MONTH,
        source=source,
        publish_regions=publish_regions,
        acceptance=None,
    )


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


# A synthesis with cdk-nag attached of a pipeline that pins a packer checksum and a build subnet (the shipped one leaves
# both null), built in us-east-1 and publishing one profile in two other regions. Synthesized once for the file:
# `make mutate` runs a mutant against whole files (bench/mutation_selection.py), so every test reading it still runs
# against each mutant.
PACKER_SHA256 = "0123456789abcdef" * 4
BUILD_SUBNET = "subnet-0a1b2c3d4e5f60718"
PUBLISH_REGIONS = {
    "p4d-ubuntu1804-cuda11": ("us-east-1",),
    "ubuntu2204-cuda12": ("us-east-1", "us-west-2", "eu-west-1"),
}


@pytest.fixture(scope="module")
def checked_template(tmp_path_factory) -> dict:
    """The template as `cdk synth` writes it: synthesis fails on any finding the construct does not acknowledge."""
    app = cdk.App(context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account="123456789012", region="us-east-1"))
    sources = tmp_path_factory.mktemp("source")
    (sources / "README").write_text("a stand-in for the repository the build checks out\n")
    shipped = load_pipeline()
    pipeline = shipped.model_copy(
        update={"subnet_id": BUILD_SUBNET, "packer": shipped.packer.model_copy(update={"sha256": PACKER_SHA256})}
    )
    source = s3_assets.Asset(stack, "Source", path=str(sources))
    add_build_project(stack, pipeline, source, PUBLISH_REGIONS)
    return app.synth().get_stack_by_name("Probe").template


def resource(template: dict, logical_id: str) -> dict:
    return template["Resources"][logical_id]


def compact(value):
    """An ARN as 'arn:${Partition}:...' text, a Fn::GetAtt as 'LogicalId.Arn': the template's values, shorter."""
    if isinstance(value, dict) and list(value) == ["Fn::Join"]:
        separator, (prefix, partition, rest) = value["Fn::Join"]
        assert (separator, prefix, partition) == ("", "arn:", {"Ref": "AWS::Partition"}), value
        return f"arn:${{Partition}}{rest}"
    if isinstance(value, dict) and list(value) == ["Fn::GetAtt"]:
        logical_id, attribute = value["Fn::GetAtt"]
        return f"{logical_id}.{attribute}"
    return value


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def named_statements(template: dict) -> list[tuple]:
    """(Sid, Effect, actions, resources, condition) of every statement the construct writes itself (aws-cdk-lib's own
    grants carry no Sid), in template order: the default policy first, then its overflow managed policy."""
    policies = [
        policy
        for resource_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for policy in template["Resources"].values()
        if policy["Type"] == resource_type
    ]
    return [
        (
            statement["Sid"],
            statement["Effect"],
            as_list(statement["Action"]),
            [compact(arn) for arn in as_list(statement["Resource"])],
            statement.get("Condition"),
        )
        for policy in policies
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "Sid" in statement
    ]


BUILD_STATEMENTS = [
    (
        "PackerDescribe",
        "Allow",
        [
            "ec2:DescribeImages",
            "ec2:DescribeImageAttribute",
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceStatus",
            "ec2:DescribeRegions",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeSnapshots",
            "ec2:DescribeSubnets",
            "ec2:DescribeVpcs",
            "ec2:DescribeTags",
            "ec2:DescribeVolumes",
            "ec2:DescribeKeyPairs",
        ],
        ["*"],
        None,
    ),
    (
        "PackerLaunchTaggedInstance",
        "Allow",
        ["ec2:RunInstances"],
        ["arn:${Partition}:ec2:us-east-1:123456789012:instance/*"],
        {"Null": {"aws:RequestTag/gpufleet:profile": "false"}},
    ),
    (
        "PackerLaunchResources",
        "Allow",
        ["ec2:RunInstances"],
        [
            "arn:${Partition}:ec2:us-east-1:123456789012:volume/*",
            "arn:${Partition}:ec2:us-east-1:123456789012:network-interface/*",
            "arn:${Partition}:ec2:us-east-1:123456789012:security-group/*",
            "arn:${Partition}:ec2:us-east-1:123456789012:subnet/*",
            "arn:${Partition}:ec2:us-east-1:123456789012:key-pair/packer_*",
            "arn:${Partition}:ec2:us-east-1::image/*",
        ],
        None,
    ),
    (
        "PackerControlBuildInstance",
        "Allow",
        ["ec2:StopInstances", "ec2:TerminateInstances", "ec2:ModifyInstanceAttribute", "ec2:CreateImage"],
        ["arn:${Partition}:ec2:us-east-1:123456789012:instance/*"],
        {"Null": {"aws:ResourceTag/gpufleet:profile": "false"}},
    ),
    (
        "PackerTagAtLaunch",
        "Allow",
        ["ec2:CreateTags"],
        [
            "arn:${Partition}:ec2:us-east-1:123456789012:instance/*",
            "arn:${Partition}:ec2:us-east-1:123456789012:volume/*",
            "arn:${Partition}:ec2:us-east-1:123456789012:network-interface/*",
        ],
        {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
    ),
    (
        "PackerCreateTaggedImage",
        "Allow",
        ["ec2:CreateImage"],
        ["arn:${Partition}:ec2:us-east-1::image/*", "arn:${Partition}:ec2:us-east-1::snapshot/*"],
        {"Null": {"aws:RequestTag/gpufleet:profile": "false"}},
    ),
    (
        "PackerEncryptedCopy",
        "Allow",
        ["ec2:CopyImage"],
        ["arn:${Partition}:ec2:us-east-1::image/*", "arn:${Partition}:ec2:us-east-1::snapshot/*"],
        None,
    ),
    (
        "PackerTagOnCreate",
        "Allow",
        ["ec2:CreateTags"],
        ["arn:${Partition}:ec2:us-east-1::image/*", "arn:${Partition}:ec2:us-east-1::snapshot/*"],
        {"StringEquals": {"ec2:CreateAction": ["CreateImage", "CopyImage"]}},
    ),
    (
        "PackerTagFinishedImage",
        "Allow",
        ["ec2:CreateTags"],
        ["arn:${Partition}:ec2:us-east-1::image/*"],
        {"Null": {"aws:ResourceTag/gpufleet:profile": "false", "aws:RequestTag/gpufleet:source-ami": "false"}},
    ),
    (
        "PackerTagFinishedSnapshots",
        "Allow",
        ["ec2:CreateTags"],
        ["arn:${Partition}:ec2:us-east-1::snapshot/*"],
        {"Null": {"aws:RequestTag/gpufleet:profile": "false", "aws:RequestTag/gpufleet:source-ami": "false"}},
    ),
    (
        "PackerDiscardIntermediateImage",
        "Allow",
        ["ec2:DeregisterImage"],
        ["arn:${Partition}:ec2:us-east-1::image/*"],
        {"Null": {"aws:ResourceTag/gpufleet:profile": "false", "aws:ResourceTag/gpufleet:source-ami": "true"}},
    ),
    (
        "PackerDiscardIntermediateSnapshots",
        "Allow",
        ["ec2:DeleteSnapshot"],
        ["arn:${Partition}:ec2:us-east-1::snapshot/*"],
        {"Null": {"aws:ResourceTag/gpufleet:profile": "false", "aws:ResourceTag/gpufleet:source-ami": "true"}},
    ),
    (
        "PackerSetCopiedImageAttributes",
        "Allow",
        ["ec2:ModifyImageAttribute"],
        ["arn:${Partition}:ec2:us-east-1::image/*"],
        {"Null": {"aws:ResourceTag/gpufleet:profile": "false", "aws:ResourceTag/gpufleet:source-ami": "true"}},
    ),
    (
        "PackerTemporaryKeyPair",
        "Allow",
        ["ec2:CreateKeyPair", "ec2:DeleteKeyPair", "ec2:CreateTags"],
        ["arn:${Partition}:ec2:us-east-1:123456789012:key-pair/packer_*"],
        None,
    ),
    (
        "PackerCreateTemporarySecurityGroup",
        "Allow",
        ["ec2:CreateSecurityGroup"],
        [
            "arn:${Partition}:ec2:us-east-1:123456789012:security-group/*",
            "arn:${Partition}:ec2:us-east-1:123456789012:vpc/*",
        ],
        None,
    ),
    (
        "PackerTemporarySecurityGroup",
        "Allow",
        ["ec2:AuthorizeSecurityGroupIngress", "ec2:DeleteSecurityGroup", "ec2:CreateTags"],
        ["arn:${Partition}:ec2:us-east-1:123456789012:security-group/*"],
        None,
    ),
    (
        "PackerReadBuildInstanceProfile",
        "Allow",
        ["iam:GetInstanceProfile"],
        ["AmiBuildBuildInstanceProfile7C4501CF.Arn"],
        None,
    ),
    (
        "PackerPassBuildInstanceRole",
        "Allow",
        ["iam:PassRole"],
        ["AmiBuildBuildInstanceRoleBB0891A9.Arn"],
        {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
    ),
    (
        "PackerSessionToBuildInstance",
        "Allow",
        ["ssm:StartSession"],
        ["arn:${Partition}:ec2:us-east-1:123456789012:instance/*"],
        {"Null": {"ssm:resourceTag/gpufleet:profile": "false"}},
    ),
    (
        "PackerSessionDocument",
        "Allow",
        ["ssm:StartSession"],
        ["arn:${Partition}:ssm:us-east-1::document/AWS-StartPortForwardingSession"],
        None,
    ),
    (
        "PackerEndSession",
        "Allow",
        ["ssm:TerminateSession", "ssm:ResumeSession"],
        ["arn:${Partition}:ssm:us-east-1:123456789012:session/*"],
        None,
    ),
    (
        "DenyImageSharing",
        "Deny",
        ["ec2:ModifyImageAttribute"],
        ["arn:${Partition}:ec2:*::image/*"],
        {"StringEqualsIgnoreCase": {"ec2:Attribute": "launchPermission"}},
    ),
    (
        "DenyPublicSnapshots",
        "Deny",
        ["ec2:ModifySnapshotAttribute"],
        ["arn:${Partition}:ec2:*::snapshot/*"],
        {"StringEquals": {"ec2:Add/group": "all"}},
    ),
    (
        "PublishWaitForCopies",
        "Allow",
        ["ec2:DescribeImages"],
        ["*"],
        {"StringEquals": {"aws:RequestedRegion": ["us-east-1", "eu-west-1", "us-west-2"]}},
    ),
    (
        "PublishAmiId",
        "Allow",
        ["ssm:PutParameter", "ssm:AddTagsToResource"],
        [
            "arn:${Partition}:ssm:eu-west-1:123456789012:parameter/gpufleet/ami/*",
            "arn:${Partition}:ssm:us-east-1:123456789012:parameter/gpufleet/ami/*",
            "arn:${Partition}:ssm:us-west-2:123456789012:parameter/gpufleet/ami/*",
        ],
        None,
    ),
    (
        "PublishCreateTaggedCopy",
        "Allow",
        ["ec2:CopyImage"],
        [
            "arn:${Partition}:ec2:eu-west-1::image/*",
            "arn:${Partition}:ec2:eu-west-1::snapshot/*",
            "arn:${Partition}:ec2:us-west-2::image/*",
            "arn:${Partition}:ec2:us-west-2::snapshot/*",
        ],
        {"Null": {"aws:RequestTag/gpufleet:profile": "false"}},
    ),
    (
        "PublishTagCopyAtCreation",
        "Allow",
        ["ec2:CreateTags"],
        [
            "arn:${Partition}:ec2:eu-west-1::image/*",
            "arn:${Partition}:ec2:eu-west-1::snapshot/*",
            "arn:${Partition}:ec2:us-west-2::image/*",
            "arn:${Partition}:ec2:us-west-2::snapshot/*",
        ],
        {"StringEquals": {"ec2:CreateAction": "CopyImage"}},
    ),
]
PROJECT_ROLE_ACKNOWLEDGEMENTS = {
    "AwsSolutions-IAM5[Action::s3:GetObject*]": (
        "CodeBuild reads the gpufleet source asset (one object of the CDK assets bucket); the wildcard comes "
        "from aws-cdk-lib's read grant, limited to that bucket"
    ),
    "AwsSolutions-IAM5[Action::s3:GetBucket*]": (
        "CodeBuild reads the gpufleet source asset's bucket location and metadata through aws-cdk-lib's read "
        "grant on the CDK assets bucket only"
    ),
    "AwsSolutions-IAM5[Action::s3:List*]": (
        "aws-cdk-lib's read grant on the CDK assets bucket that holds the gpufleet source asset; limited to that bucket"
    ),
    "AwsSolutions-IAM5[Action::kms:ReEncrypt*]": (
        "aws-cdk-lib's grant on the gpufleet AMI pipeline's own KMS key (rotation on), which encrypts the "
        "build's output; no other key"
    ),
    "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]": (
        "aws-cdk-lib's grant on the gpufleet AMI pipeline's own KMS key, which CodeBuild uses to encrypt "
        "build output; no other key"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:us-east-1:123456789012:log-group:/aws/codebuild/"
    "<AmiBuildProject9D0985DD>:*]": (
        "aws-cdk-lib grants the default log group of this gpufleet AMI build project; the build logs to the "
        "stack's own log group (with the configured retention), so this one stays unused"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:codebuild:us-east-1:123456789012:report-group/"
    "<AmiBuildProject9D0985DD>-*]": (
        "aws-cdk-lib grants test report groups named after this gpufleet AMI build project; no other project's"
    ),
    "AwsSolutions-IAM5[Resource::*]": (
        "Packer's amazon-ebs builder (gpufleet AMI builds) needs EC2 Describe* calls (images, instances, "
        "subnets, security groups, snapshots), which support no resource-level permissions; all are read-only"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1:123456789012:instance/*]": (
        "the gpufleet AMI build instance's id is unknown before Packer launches it; RunInstances requires the"
        " gpufleet:profile tag and every later action (stop, terminate, create image, SSM session) requires "
        "that tag on the instance"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1:123456789012:volume/*]": (
        "the root volume of the gpufleet AMI build instance is created by RunInstances and snapshotted into "
        "the image; its id is unknown in advance"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1:123456789012:network-interface/*]": (
        "RunInstances creates the build instance's network interface; gpufleet cannot know its id in advance"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1:123456789012:security-group/*]": (
        "Packer creates a temporary security group per gpufleet AMI build (random id) and deletes it afterwards"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1:123456789012:subnet/*]": (
        "the gpufleet AMI build instance launches into ami/pipeline.yaml's subnet_id or, when null, the "
        "default VPC's subnet that Packer picks"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1:123456789012:vpc/*]": (
        "CreateSecurityGroup names the VPC of the gpufleet AMI build subnet, which is the default VPC when "
        "ami/pipeline.yaml leaves subnet_id null"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1::snapshot/*]": (
        "snapshots of gpufleet AMIs are created by the build (ids unknown in advance); creating needs the "
        "gpufleet:profile request tag, deleting needs an unfinished gpufleet build's tags, and tagging an "
        "existing snapshot marks it finished (undeletable)"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1:123456789012:key-pair/packer_*]": (
        "Packer's temporary SSH key pair for the gpufleet AMI build is named packer_<random uuid>"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-1::image/*]": (
        "RunInstances reads the profile's base image (Canonical or Amazon owned, newest match); the gpufleet "
        "build creates, copies and tags its new AMI (id unknown in advance) and may deregister or modify only"
        " an unfinished gpufleet build's image (tag conditions)"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:us-east-1:123456789012:parameter/gpufleet/ami/*]": (
        "a gpufleet AMI build publishes /gpufleet/ami/PROFILE for the profile it is started with; only that "
        "prefix is writable"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:us-east-1:123456789012:session/*]": (
        "Packer ends the SSM port-forwarding session it opened to the gpufleet AMI build instance; session "
        "ids are generated by SSM"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:eu-west-1::image/*]": (
        "the copy of a gpufleet AMI in eu-west-1 gets a new id; CopyImage there requires the gpufleet:profile"
        " tag in the request, CreateTags only at creation"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:eu-west-1::snapshot/*]": (
        "the snapshots of a gpufleet AMI copy in eu-west-1 get new ids; created and tagged only by CopyImage "
        "with the gpufleet:profile tag"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:eu-west-1:123456789012:parameter/gpufleet/ami/*]": (
        "a gpufleet AMI build publishes /gpufleet/ami/PROFILE in eu-west-1, where environments read it; only "
        "that prefix is writable"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-west-2::image/*]": (
        "the copy of a gpufleet AMI in us-west-2 gets a new id; CopyImage there requires the gpufleet:profile"
        " tag in the request, CreateTags only at creation"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-west-2::snapshot/*]": (
        "the snapshots of a gpufleet AMI copy in us-west-2 get new ids; created and tagged only by CopyImage "
        "with the gpufleet:profile tag"
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:us-west-2:123456789012:parameter/gpufleet/ami/*]": (
        "a gpufleet AMI build publishes /gpufleet/ami/PROFILE in us-west-2, where environments read it; only "
        "that prefix is writable"
    ),
}


def test_the_buildspec_runs_the_pipeline_scripts_with_the_pipelines_pins_and_publish_regions(checked_template):
    project = resource(checked_template, "AmiBuildProject9D0985DD")["Properties"]
    assert json.loads(project["Source"]["BuildSpec"]) == {
        "version": "0.2",
        "env": {
            "shell": "bash",
            "variables": {
                "GPUFLEET_PACKER_VERSION": "1.11.2",
                "GPUFLEET_PACKER_SHA256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "GPUFLEET_HASHICORP_KEY_FINGERPRINT": "C874011F0AB405110D02105534365D9472D7468F",
                "GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION": "1.2.764.0",
                "GPUFLEET_BUILD_SUBNET_ID": "subnet-0a1b2c3d4e5f60718",
                "GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json",
                # PROFILE=REGION,REGION entries in the order given, space-separated (publish-image.sh reads them).
                "GPUFLEET_PUBLISH_REGIONS": (
                    "p4d-ubuntu1804-cuda11=us-east-1 ubuntu2204-cuda12=us-east-1,us-west-2,eu-west-1"
                ),
            },
        },
        "phases": {
            "install": {
                "runtime-versions": {"python": "3.11"},
                "commands": ["bash scripts/pipeline/install-tools.sh", "bash scripts/pipeline/install-gpufleet.sh"],
            },
            "build": {
                "commands": ["bash scripts/pipeline/build-image.sh", "bash scripts/pipeline/publish-image.sh"],
            },
        },
    }


def test_the_project_builds_the_s3_source_on_a_small_standard_7_image_with_five_hours_and_its_own_key_and_logs(
    checked_template,
):
    project = resource(checked_template, "AmiBuildProject9D0985DD")["Properties"]
    assert project["Description"] == (
        "gpufleet AMI build: packer build of the profile named by the GPUFLEET_AMI_PROFILE environment variable"
    )
    assert project["Source"]["Type"] == "S3"
    assert project["Source"]["Location"].startswith("cdk-hnb659fds-assets-123456789012-us-east-1/")
    assert project["Environment"] == {
        "ComputeType": "BUILD_GENERAL1_SMALL",
        "EnvironmentVariables": [
            {
                "Name": "GPUFLEET_BUILD_INSTANCE_PROFILE",
                "Type": "PLAINTEXT",
                "Value": {"Ref": "AmiBuildBuildInstanceProfile7C4501CF"},
            }
        ],
        "Image": "aws/codebuild/standard:7.0",
        "ImagePullCredentialsType": "CODEBUILD",
        "PrivilegedMode": False,
        "Type": "LINUX_CONTAINER",
    }
    assert project["TimeoutInMinutes"] == 300
    assert project["EncryptionKey"] == {"Fn::GetAtt": ["AmiBuildKeyAAF98AAB", "Arn"]}
    assert project["LogsConfig"] == {
        "CloudWatchLogs": {"GroupName": {"Ref": "AmiBuildLogs276B8F01"}, "Status": "ENABLED"}
    }


def test_the_key_rotates_and_the_key_and_logs_go_with_the_stack(checked_template):
    key = resource(checked_template, "AmiBuildKeyAAF98AAB")
    assert key["Properties"]["Description"] == "gpufleet AMI pipeline: encrypts CodeBuild build output"
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["Properties"]["PendingWindowInDays"] == 7
    assert (key["DeletionPolicy"], key["UpdateReplacePolicy"]) == ("Delete", "Delete")
    logs = resource(checked_template, "AmiBuildLogs276B8F01")
    assert logs["Properties"] == {"RetentionInDays": 30}
    assert (logs["DeletionPolicy"], logs["UpdateReplacePolicy"]) == ("Delete", "Delete")


def test_the_build_instance_role_is_ec2s_with_only_the_ssm_agent_actions_in_its_profile(checked_template):
    role = resource(checked_template, "AmiBuildBuildInstanceRoleBB0891A9")
    assert role["Properties"] == {
        "AssumeRolePolicyDocument": {
            "Statement": [
                {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}}
            ],
            "Version": "2012-10-17",
        },
        "Description": "gpufleet AMI build instance: what its SSM agent needs for Packer's Session Manager tunnel",
        "Policies": [
            {
                "PolicyDocument": {
                    "Statement": [
                        {
                            "Action": [
                                "ssm:UpdateInstanceInformation",
                                "ssmmessages:CreateControlChannel",
                                "ssmmessages:CreateDataChannel",
                                "ssmmessages:OpenControlChannel",
                                "ssmmessages:OpenDataChannel",
                            ],
                            "Effect": "Allow",
                            "Resource": "*",
                            "Sid": "SsmAgent",
                        }
                    ],
                    "Version": "2012-10-17",
                },
                "PolicyName": "SsmAgent",
            }
        ],
    }
    assert role["Metadata"]["cdk_nag"]["rules_to_suppress"] == [
        {
            "id": "AwsSolutions-IAM5[Resource::*]",
            "reason": "the gpufleet AMI build instance's SSM agent registers itself and opens Session Manager channels "
            "(ssm:UpdateInstanceInformation, ssmmessages:*Channel); these actions support no resource-level "
            "permissions, and the role grants nothing else",
        }
    ]
    profile = resource(checked_template, "AmiBuildBuildInstanceProfile7C4501CF")
    assert profile["Properties"] == {"Roles": [{"Ref": "AmiBuildBuildInstanceRoleBB0891A9"}]}


def test_the_build_role_grants_packers_steps_and_the_publish_steps_as_the_service_authorization_reference_names_them(
    checked_template,
):
    assert named_statements(checked_template) == BUILD_STATEMENTS


def test_every_wildcard_of_the_build_role_is_acknowledged_with_its_reason(checked_template):
    """The audit trail `cdk synth` writes into the template: one reason per wildcard finding (the fixture's synthesis
    already fails on a finding without one)."""
    suppressions = resource(checked_template, "AmiBuildProjectRole0DB54243")["Metadata"]["cdk_nag"]["rules_to_suppress"]
    assert {rule["id"]: rule["reason"] for rule in suppressions} == PROJECT_ROLE_ACKNOWLEDGEMENTS
    assert len(suppressions) == len(PROJECT_ROLE_ACKNOWLEDGEMENTS)


def test_a_pipeline_without_checksum_subnet_or_publish_regions_passes_empty_values_to_the_build():
    """install-tools.sh and build-image.sh read an empty GPUFLEET_PACKER_SHA256 / GPUFLEET_BUILD_SUBNET_ID as "not
    set"."""
    shipped = load_pipeline()
    assert (shipped.packer.sha256, shipped.subnet_id) == (None, None)
    spec = buildspec(
        packer=shipped.packer,
        session_manager_plugin_version=shipped.session_manager_plugin.version,
        build_subnet_id=shipped.subnet_id,
        publish_regions={},
        acceptance=None,
    )
    assert spec["env"]["variables"] == {
        "GPUFLEET_PACKER_VERSION": "1.11.2",
        "GPUFLEET_PACKER_SHA256": "",
        "GPUFLEET_HASHICORP_KEY_FINGERPRINT": "C874011F0AB405110D02105534365D9472D7468F",
        "GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION": "1.2.764.0",
        "GPUFLEET_BUILD_SUBNET_ID": "",
        "GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json",
        "GPUFLEET_PUBLISH_REGIONS": "",
    }


def test_image_statements_for_another_region_name_its_arns_and_carry_its_name_in_their_sids():
    """A cross-region copy's statements: the region in CamelCase after each Sid (IAM Sids are alphanumeric), its
    image and snapshot ARNs, the same conditions as at home."""
    stack = cdk.Stack(
        cdk.App(context=CDK_CONTEXT), "Probe", env=cdk.Environment(account="123456789012", region="us-east-1")
    )
    resolved = [
        stack.resolve(statement.to_statement_json()) for statement in pipeline_image_statements(stack, "ap-southeast-2")
    ]
    images, snapshots = (
        "arn:${Partition}:ec2:ap-southeast-2::image/*",
        "arn:${Partition}:ec2:ap-southeast-2::snapshot/*",
    )
    unfinished = {"Null": {"aws:ResourceTag/gpufleet:profile": "false", "aws:ResourceTag/gpufleet:source-ami": "true"}}
    assert [
        (s["Sid"], as_list(s["Action"]), [compact(arn) for arn in as_list(s["Resource"])], s.get("Condition"))
        for s in resolved
    ] == [
        (
            "PackerCreateTaggedImageApSoutheast2",
            ["ec2:CreateImage"],
            [images, snapshots],
            {"Null": {"aws:RequestTag/gpufleet:profile": "false"}},
        ),
        ("PackerEncryptedCopyApSoutheast2", ["ec2:CopyImage"], [images, snapshots], None),
        (
            "PackerTagOnCreateApSoutheast2",
            ["ec2:CreateTags"],
            [images, snapshots],
            {"StringEquals": {"ec2:CreateAction": ["CreateImage", "CopyImage"]}},
        ),
        (
            "PackerTagFinishedImageApSoutheast2",
            ["ec2:CreateTags"],
            [images],
            {"Null": {"aws:ResourceTag/gpufleet:profile": "false", "aws:RequestTag/gpufleet:source-ami": "false"}},
        ),
        (
            "PackerTagFinishedSnapshotsApSoutheast2",
            ["ec2:CreateTags"],
            [snapshots],
            {"Null": {"aws:RequestTag/gpufleet:profile": "false", "aws:RequestTag/gpufleet:source-ami": "false"}},
        ),
        ("PackerDiscardIntermediateImageApSoutheast2", ["ec2:DeregisterImage"], [images], unfinished),
        ("PackerDiscardIntermediateSnapshotsApSoutheast2", ["ec2:DeleteSnapshot"], [snapshots], unfinished),
        ("PackerSetCopiedImageAttributesApSoutheast2", ["ec2:ModifyImageAttribute"], [images], unfinished),
    ]
