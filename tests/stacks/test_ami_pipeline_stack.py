"""The AMI pipeline stack, synthesized once with cdk-nag attached (synthesis raises on unacknowledged findings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import hcl2
import pytest
from aws_cdk.assertions import Capture, Match, Template
from hcl2.utils import SerializationOptions

from gpufleet.ami import SSM_AGENT_ACTIONS
from gpufleet.cli import main
from gpufleet.loading import environment_files, load_environments, load_pipeline
from stacks.ami_pipeline_stack import AMI_PIPELINE_STACK_NAME, SOURCE_EXCLUDES, AmiPipelineStack
from stacks.constructs.ami_build_project import pipeline_image_statements

ROOT = Path(__file__).resolve().parents[2]
CFN_LINT = Path(sys.executable).with_name("cfn-lint")
CDK_CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
PIPELINE = load_pipeline(ROOT / "ami" / "pipeline.yaml")
ENVIRONMENTS = load_environments(environment_files(ROOT / "environments"), PIPELINE)


@pytest.fixture(scope="module")
def out_dir(ami_pipeline_assembly) -> Path:
    return ami_pipeline_assembly.directory


@pytest.fixture(scope="module")
def template_json(out_dir) -> dict:
    return json.loads((out_dir / f"{AMI_PIPELINE_STACK_NAME}.template.json").read_text())


@pytest.fixture(scope="module")
def template(template_json) -> Template:
    return Template.from_json(template_json)


def only(template: Template, resource_type: str) -> tuple[str, dict]:
    ((logical_id, resource),) = template.find_resources(resource_type).items()
    return logical_id, resource


def buildspec(template: Template) -> dict:
    _, project = only(template, "AWS::CodeBuild::Project")
    return json.loads(project["Properties"]["Source"]["BuildSpec"])


def statements(template: Template) -> list[dict]:
    """Every identity-policy statement; aws-cdk-lib moves what exceeds a role's inline policy size into an
    overflow AWS::IAM::ManagedPolicy of the same role."""
    return [
        s
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for _, policy in template.find_resources(kind).items()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def test_buildspec_runs_the_pipeline_scripts_with_the_pinned_tools_and_the_publish_regions(template):
    spec = buildspec(template)
    assert spec["env"]["variables"] == {
        "GPUFLEET_PACKER_VERSION": "1.11.2",
        "GPUFLEET_PACKER_SHA256": "",
        "GPUFLEET_HASHICORP_KEY_FINGERPRINT": "C874011F0AB405110D02105534365D9472D7468F",
        "GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION": "1.2.764.0",
        "GPUFLEET_BUILD_SUBNET_ID": "",
        "GPUFLEET_PACKER_MANIFEST": "build/image-manifest.json",
        # environments/h100.yaml deploys in us-west-2, environments/p5-block.yaml in us-east-2; both read
        # /gpufleet/ami/ubuntu2204-cuda12.
        "GPUFLEET_PUBLISH_REGIONS": "p4d-ubuntu1804-cuda11=us-east-1 p4d-al2-cuda11=us-east-1 "
        "ubuntu2204-cuda12=us-east-1,us-east-2,us-west-2 "
        "ubuntu2404-cuda13=us-east-1 al2023-cuda13=us-east-1",
    }
    assert spec["phases"] == {
        "install": {
            "runtime-versions": {"python": "3.11"},
            "commands": ["bash scripts/pipeline/install-tools.sh", "bash scripts/pipeline/install-gpufleet.sh"],
        },
        "build": {"commands": ["bash scripts/pipeline/build-image.sh", "bash scripts/pipeline/publish-image.sh"]},
    }


def arn(text: str) -> dict:
    """A partition-qualified ARN as the template writes it (text from ':service:...')."""
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, text]]}


def test_ssm_parameter_writes_are_limited_to_the_ami_prefix_in_each_publish_region(template):
    writes = [s for s in statements(template) if "ssm:PutParameter" in as_list(s["Action"])]
    assert [(s["Sid"], as_list(s["Resource"])) for s in writes] == [
        (
            "PublishAmiId",
            [
                arn(":ssm:us-east-1:123456789012:parameter/gpufleet/ami/*"),
                arn(":ssm:us-east-2:123456789012:parameter/gpufleet/ami/*"),
                arn(":ssm:us-west-2:123456789012:parameter/gpufleet/ami/*"),
            ],
        ),
    ]
    for statement in statements(template):
        if any(a in ("ssm:*", "*") or a.startswith("ssm:Put") for a in as_list(statement["Action"])):
            assert "*" not in as_list(statement["Resource"]), statement


def test_instance_actions_need_the_profile_tag(template):
    by_sid = {s.get("Sid"): s for s in statements(template)}
    launch = by_sid["PackerLaunchTaggedInstance"]
    assert launch["Condition"] == {"Null": {"aws:RequestTag/gpufleet:profile": "false"}}
    control = by_sid["PackerControlBuildInstance"]
    assert "ec2:TerminateInstances" in control["Action"]
    assert control["Condition"] == {"Null": {"aws:ResourceTag/gpufleet:profile": "false"}}
    ec2_star = [s for s in statements(template) if s["Resource"] == "*"]
    assert all(a.startswith("ec2:Describe") for s in ec2_star for a in as_list(s["Action"]))


def region_arn(region: str, resource: str) -> dict:
    """An image or snapshot ARN as the template writes it: partition by Ref, no account."""
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":ec2:{region}::{resource}/*"]]}


IMAGES, SNAPSHOTS = region_arn("us-east-1", "image"), region_arn("us-east-1", "snapshot")
UNFINISHED_BUILD = {
    "Null": {"aws:ResourceTag/gpufleet:profile": "false", "aws:ResourceTag/gpufleet:source-ami": "true"}
}
FINISHING = {"aws:RequestTag/gpufleet:source-ami": "false"}


def has_statement(template: Template, statement: dict) -> None:
    template.has_resource_properties(
        "AWS::IAM::Policy", {"PolicyDocument": {"Statement": Match.array_with([Match.object_like(statement)])}}
    )


@pytest.mark.parametrize(
    "statement",
    [
        # Packer's CreateImage carries run_tags (gpufleet:profile) as TagSpecifications for the image and its snapshots.
        {
            "Sid": "PackerCreateTaggedImage",
            "Effect": "Allow",
            "Action": "ec2:CreateImage",
            "Resource": [IMAGES, SNAPSHOTS],
            "Condition": {"Null": {"aws:RequestTag/gpufleet:profile": "false"}},
        },
        {
            "Sid": "PackerTagOnCreate",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": [IMAGES, SNAPSHOTS],
            "Condition": {"StringEquals": {"ec2:CreateAction": ["CreateImage", "CopyImage"]}},
        },
        {
            "Sid": "PackerTagFinishedImage",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": IMAGES,
            "Condition": {"Null": {"aws:ResourceTag/gpufleet:profile": "false", **FINISHING}},
        },
        {
            "Sid": "PackerTagFinishedSnapshots",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": SNAPSHOTS,
            "Condition": {"Null": {"aws:RequestTag/gpufleet:profile": "false", **FINISHING}},
        },
        {
            "Sid": "PackerDiscardIntermediateImage",
            "Effect": "Allow",
            "Action": "ec2:DeregisterImage",
            "Resource": IMAGES,
            "Condition": UNFINISHED_BUILD,
        },
        {
            "Sid": "PackerDiscardIntermediateSnapshots",
            "Effect": "Allow",
            "Action": "ec2:DeleteSnapshot",
            "Resource": SNAPSHOTS,
            "Condition": UNFINISHED_BUILD,
        },
        {
            "Sid": "PackerSetCopiedImageAttributes",
            "Effect": "Allow",
            "Action": "ec2:ModifyImageAttribute",
            "Resource": IMAGES,
            "Condition": UNFINISHED_BUILD,
        },
    ],
)
def test_image_and_snapshot_changes_need_the_pipelines_tags(template, statement):
    has_statement(template, statement)


def test_no_image_or_snapshot_can_be_shared_with_everyone(template):
    has_statement(
        template,
        {
            "Sid": "DenyImageSharing",
            "Effect": "Deny",
            "Action": "ec2:ModifyImageAttribute",
            "Resource": region_arn("*", "image"),
            "Condition": {"StringEqualsIgnoreCase": {"ec2:Attribute": "launchPermission"}},
        },
    )
    has_statement(
        template,
        {
            "Sid": "DenyPublicSnapshots",
            "Effect": "Deny",
            "Action": "ec2:ModifySnapshotAttribute",
            "Resource": region_arn("*", "snapshot"),
            "Condition": {"StringEquals": {"ec2:Add/group": "all"}},
        },
    )
    allowed = {a for s in statements(template) if s["Effect"] == "Allow" for a in as_list(s["Action"])}
    assert not allowed & {"ec2:ModifySnapshotAttribute", "ec2:RegisterImage", "ec2:CreateSnapshot"}


def test_every_image_or_snapshot_change_is_conditional_but_the_copy(template):
    """Only CopyImage, which creates, is granted on images and snapshots without a tag condition."""
    unconditional = Capture()
    has_statement(
        template,
        {"Sid": "PackerEncryptedCopy", "Effect": "Allow", "Action": unconditional, "Resource": [IMAGES, SNAPSHOTS]},
    )
    assert unconditional.as_string() == "ec2:CopyImage"
    for statement in statements(template):
        resources = json.dumps(statement["Resource"])
        touches_images = "::image/" in resources or "::snapshot/" in resources
        if statement["Effect"] == "Allow" and touches_images and statement["Sid"] != "PackerLaunchResources":
            assert "Condition" in statement or as_list(statement["Action"]) == ["ec2:CopyImage"], statement
    (launch,) = [s for s in statements(template) if s.get("Sid") == "PackerLaunchResources"]
    assert launch["Action"] == "ec2:RunInstances"


def test_image_statements_for_another_region_follow_the_same_pattern():
    """The shape a cross-region copy's statements take: the same tag conditions, the other region's ARNs."""
    app = cdk.App(context=CDK_CONTEXT)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account="123456789012", region="us-east-1"))
    home = [stack.resolve(s.to_statement_json()) for s in pipeline_image_statements(stack, "us-east-1")]
    other = [stack.resolve(s.to_statement_json()) for s in pipeline_image_statements(stack, "us-west-2")]
    assert [s["Sid"] for s in other] == [f"{s['Sid']}UsWest2" for s in home]
    assert [s.get("Condition") for s in other] == [s.get("Condition") for s in home]
    assert [s["Resource"] for s in other] == json.loads(
        json.dumps([s["Resource"] for s in home]).replace(":ec2:us-east-1::", ":ec2:us-west-2::")
    )
    assert "us-east-1" not in json.dumps(other)


def test_templates_tag_as_the_build_role_expects(tmp_path):
    """The policy tells an unfinished build's image (run_tags: gpufleet:profile) from a finished one (tags and
    snapshot_tags add gpufleet:source-ami), and relies on encrypted volumes and no sharing settings."""
    out_dir = tmp_path / "rendered"
    assert main(["ami", "render", PIPELINE.profiles[0], "--out", str(out_dir), "--instance-profile", "probe"]) == 0
    options = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
    (source,) = hcl2.loads((out_dir / "source.pkr.hcl").read_text(), serialization_options=options)["source"]
    settings = source["amazon-ebs"]["gpufleet"]
    (local_values,) = hcl2.loads((out_dir / "locals.pkr.hcl").read_text(), serialization_options=options)["locals"]
    assert "gpufleet:profile" in local_values["image_tags"] and "gpufleet:source-ami" not in local_values["image_tags"]
    assert settings["run_tags"] == "${local.image_tags}"
    for key in ("tags", "snapshot_tags"):
        assert settings[key].startswith("${merge(local.image_tags, ") and '"gpufleet:source-ami"' in settings[key]
    assert settings["encrypt_boot"] is True
    assert all(mapping["encrypted"] is True for mapping in settings["launch_block_device_mappings"])
    sharing = {
        "ami_users",
        "ami_groups",
        "ami_org_arns",
        "ami_ou_arns",
        "snapshot_users",
        "snapshot_groups",
        "ami_regions",
        "force_deregister",
        "force_delete_snapshot",
    }
    assert not sharing & set(settings)


def all_statements(template_json: dict) -> list[dict]:
    """Every statement of every policy document in the template: policies, inline role policies, trust policies."""
    found = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if "Statement" in node:
                found.extend(as_list(node["Statement"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(template_json["Resources"])
    return found


def build_instance_role(template: Template) -> tuple[str, dict]:
    roles = {
        logical_id: role
        for logical_id, role in template.find_resources("AWS::IAM::Role").items()
        if role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        == {"Service": "ec2.amazonaws.com"}
    }
    ((logical_id, role),) = roles.items()
    return logical_id, role


@pytest.mark.parametrize(
    "action",
    [
        "iam:CreateRole",
        "iam:PutRolePolicy",
        "iam:CreateInstanceProfile",
        "iam:AttachRolePolicy",
        "iam:AddRoleToInstanceProfile",
        "iam:CreatePolicy",
    ],
)
def test_no_role_or_policy_can_be_created(template_json, action):
    actions = {a for s in all_statements(template_json) for a in as_list(s.get("Action", []))}
    assert actions, "the walk finds the template's statements"
    assert action not in actions
    assert not {a for a in actions if a in ("*", "iam:*") or (a.startswith("iam:") and "*" in a)}
    assert "packer-" not in json.dumps(template_json)


def test_build_role_may_only_pass_the_build_instance_role_to_ec2(template, template_json):
    role_id, _ = build_instance_role(template)
    (profile_id, _) = only(template, "AWS::IAM::InstanceProfile")
    iam_statements = [
        s for s in all_statements(template_json) if any(a.startswith("iam:") for a in as_list(s["Action"]))
    ]
    by_action = {a: s for s in iam_statements for a in as_list(s["Action"])}
    assert sorted(by_action) == ["iam:GetInstanceProfile", "iam:PassRole"]
    pass_role = by_action["iam:PassRole"]
    assert as_list(pass_role["Action"]) == ["iam:PassRole"]
    assert pass_role["Resource"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    # Packer reads the named profile before launching; a read of that one profile, nothing else.
    assert by_action["iam:GetInstanceProfile"]["Resource"] == {"Fn::GetAtt": [profile_id, "Arn"]}


def test_build_instance_role_grants_only_the_ssm_agent_actions(template):
    _, role = build_instance_role(template)
    (policy,) = role["Properties"]["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Allow" and statement["Resource"] == "*"
    assert (
        sorted(as_list(statement["Action"]))
        == sorted(SSM_AGENT_ACTIONS)
        == sorted(
            [
                "ssm:UpdateInstanceInformation",
                "ssmmessages:CreateControlChannel",
                "ssmmessages:CreateDataChannel",
                "ssmmessages:OpenControlChannel",
                "ssmmessages:OpenDataChannel",
            ]
        )
    )
    assert "ManagedPolicyArns" not in role["Properties"]
    role_id, _ = build_instance_role(template)
    for policy in template.find_resources("AWS::IAM::ManagedPolicy").values():
        assert {"Ref": role_id} not in policy["Properties"].get("Roles", [])


def test_build_instance_profile_is_the_stacks_and_reaches_render(template):
    role_id, role = build_instance_role(template)
    profile_id, profile = only(template, "AWS::IAM::InstanceProfile")
    assert profile["Properties"]["Roles"] == [{"Ref": role_id}]
    for resource in (role, profile):
        assert resource.get("DeletionPolicy", "Delete") == "Delete"
    _, project = only(template, "AWS::CodeBuild::Project")
    variables = project["Properties"]["Environment"]["EnvironmentVariables"]
    # build-image.sh renders with it (tests/scripts/pipeline/test_buildspec_run.py).
    assert {"Name": "GPUFLEET_BUILD_INSTANCE_PROFILE", "Type": "PLAINTEXT", "Value": {"Ref": profile_id}} in variables


def test_one_schedule_rule_per_profile_starts_the_project_with_its_profile(template):
    project_id, _ = only(template, "AWS::CodeBuild::Project")
    rules = template.find_resources("AWS::Events::Rule").values()
    profiles = []
    for rule in rules:
        assert rule["Properties"]["ScheduleExpression"] == "cron(0 6 ? * SUN *)"  # ami/pipeline.yaml: schedule
        (target,) = rule["Properties"]["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": [project_id, "Arn"]}
        (override,) = json.loads(target["Input"])["environmentVariablesOverride"]
        assert override["name"] == "GPUFLEET_AMI_PROFILE"
        profiles.append(override["value"])
    assert sorted(profiles) == [
        "al2023-cuda13",
        "p4d-al2-cuda11",
        "p4d-ubuntu1804-cuda11",
        "ubuntu2204-cuda12",
        "ubuntu2404-cuda13",
    ]


def test_manual_only_pipeline_has_no_rule():
    app = cdk.App(context=CDK_CONTEXT)
    stack = AmiPipelineStack(
        app,
        "Probe",
        pipeline=PIPELINE.model_copy(update={"schedule": None}),
        environments=ENVIRONMENTS,
        env=cdk.Environment(account="123456789012", region="us-east-1"),
    )
    Template.from_stack(stack).resource_count_is("AWS::Events::Rule", 0)


def test_copies_to_other_regions_need_the_profile_tag_and_change_no_image():
    """Copies carry the gpufleet:profile tag in the request, are tagged only as they are created, and are waited for
    with a read limited to the publish regions (the source side is the build's own CopyImage grant: CopyImage has
    no aws:ResourceTag key to narrow it with)."""
    app = cdk.App(context=CDK_CONTEXT)
    stack = AmiPipelineStack(
        app,
        "Probe",
        pipeline=PIPELINE,
        environments=ENVIRONMENTS,
        env=cdk.Environment(account="123456789012", region="us-east-1"),
    )
    published = {s["Sid"]: s for s in statements(Template.from_stack(stack)) if s.get("Sid", "").startswith("Publish")}
    assert published == {
        "PublishAmiId": {
            "Action": ["ssm:PutParameter", "ssm:AddTagsToResource"],
            "Effect": "Allow",
            "Sid": "PublishAmiId",
            "Resource": [
                arn(":ssm:us-east-1:123456789012:parameter/gpufleet/ami/*"),
                arn(":ssm:us-east-2:123456789012:parameter/gpufleet/ami/*"),
                arn(":ssm:us-west-2:123456789012:parameter/gpufleet/ami/*"),
            ],
        },
        "PublishCreateTaggedCopy": {
            "Action": "ec2:CopyImage",
            "Effect": "Allow",
            "Sid": "PublishCreateTaggedCopy",
            "Resource": [
                arn(":ec2:us-east-2::image/*"),
                arn(":ec2:us-east-2::snapshot/*"),
                arn(":ec2:us-west-2::image/*"),
                arn(":ec2:us-west-2::snapshot/*"),
            ],
            "Condition": {"Null": {"aws:RequestTag/gpufleet:profile": "false"}},
        },
        "PublishTagCopyAtCreation": {
            "Action": "ec2:CreateTags",
            "Effect": "Allow",
            "Sid": "PublishTagCopyAtCreation",
            "Resource": [
                arn(":ec2:us-east-2::image/*"),
                arn(":ec2:us-east-2::snapshot/*"),
                arn(":ec2:us-west-2::image/*"),
                arn(":ec2:us-west-2::snapshot/*"),
            ],
            "Condition": {"StringEquals": {"ec2:CreateAction": "CopyImage"}},
        },
        "PublishWaitForCopies": {
            "Action": "ec2:DescribeImages",
            "Effect": "Allow",
            "Sid": "PublishWaitForCopies",
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:RequestedRegion": ["us-east-1", "us-east-2", "us-west-2"]}},
        },
    }
    assert not {a for s in published.values() for a in as_list(s["Action"])} & {
        "ec2:ModifyImageAttribute",
        "ec2:ModifySnapshotAttribute",
        "ec2:DeregisterImage",
        "ec2:DeleteSnapshot",
    }


def test_a_pipeline_whose_environments_share_its_region_grants_no_copy():
    app = cdk.App(context=CDK_CONTEXT)
    same_region = [env for env in ENVIRONMENTS if env.region == PIPELINE.region]
    stack = AmiPipelineStack(
        app,
        "Probe",
        pipeline=PIPELINE,
        environments=same_region,
        env=cdk.Environment(account="123456789012", region="us-east-1"),
    )
    actions = {a for s in statements(Template.from_stack(stack)) for a in as_list(s["Action"])}
    assert "ssm:PutParameter" in actions
    assert not {
        sid
        for s in statements(Template.from_stack(stack))
        if (sid := s.get("Sid", "")).startswith(("PublishCopy", "PublishCreate", "PublishTag", "PublishWait"))
    }


def test_logs_keep_the_configured_days_and_go_with_the_stack(template):
    log_id, log_group = only(template, "AWS::Logs::LogGroup")
    assert log_group["Properties"]["RetentionInDays"] == 90  # ami/pipeline.yaml: log_retention_days
    assert log_group["DeletionPolicy"] == "Delete"
    _, project = only(template, "AWS::CodeBuild::Project")
    logs = project["Properties"]["LogsConfig"]["CloudWatchLogs"]
    assert logs == {"GroupName": {"Ref": log_id}, "Status": "ENABLED"}


def test_build_output_is_encrypted_with_a_rotated_key(template):
    key_id, key = only(template, "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True
    _, project = only(template, "AWS::CodeBuild::Project")
    assert project["Properties"]["EncryptionKey"] == {"Fn::GetAtt": [key_id, "Arn"]}


def test_source_asset_holds_the_sources_but_no_local_state(out_dir):
    (asset,) = [p for p in out_dir.iterdir() if p.name.startswith("asset.")]
    names = {p.name for p in asset.iterdir()}
    assert {"gpufleet", "ami", "scripts", "pyproject.toml", "requirements-lock.txt", "README.md"} <= names
    assert not names & {".venv", "node_modules", "cdk.out", "tests", ".git", "build", "mutants"}
    assert not list(asset.rglob("__pycache__"))


def test_source_asset_leaves_out_everything_git_ignores():
    """.gitignore names the local state (virtualenv, caches, build output); in the asset it would be hashed, copied
    and uploaded on every synthesis, whether or not it exists in the checkout the tests run in."""
    lines = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    ignored = {line.strip("/") for line in lines if line and not line.startswith("#")}
    assert ignored - {pattern.removeprefix("**/") for pattern in SOURCE_EXCLUDES} == set()


def test_source_asset_carries_the_package_data_as_plain_files(out_dir):
    """gpufleet/data/ami and gpufleet/data/scripts are symlinks in the repository; the asset holds copies, so
    `pip install .` on the build host ships the profiles and scripts whatever its unzip does with symlinks."""
    (asset,) = [p for p in out_dir.iterdir() if p.name.startswith("asset.")]
    assert not [path for path in asset.rglob("*") if path.is_symlink()]
    profiles = sorted(path.name for path in (asset / "gpufleet" / "data" / "ami" / "profiles").iterdir())
    assert profiles == [
        "al2023-cuda13.yaml",
        "p4d-al2-cuda11.yaml",
        "p4d-ubuntu1804-cuda11.yaml",
        "ubuntu2204-cuda12.yaml",
        "ubuntu2404-cuda13.yaml",
    ]
    assert (asset / "gpufleet" / "data" / "scripts" / "ami" / "lib" / "common.sh").is_file()


def test_cfn_lint_passes(out_dir):
    template_file = out_dir / f"{AMI_PIPELINE_STACK_NAME}.template.json"
    result = subprocess.run(
        [CFN_LINT, "--config-file", str(ROOT / ".cfnlintrc.yaml"), "--", str(template_file)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_acknowledgements_are_granular_and_specific(template_json):
    rules = [
        rule
        for resource in template_json["Resources"].values()
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
        if rule["id"].startswith("AwsSolutions-")
    ]
    assert rules, "the role's IAM5 acknowledgements are written to the template"
    for rule in rules:
        assert rule["id"].startswith("AwsSolutions-IAM5[") and rule["id"].endswith("]"), rule
        assert "gpufleet" in rule["reason"] and len(rule["reason"]) >= 60, rule


def test_without_the_gate_nothing_of_the_gate_is_made(template, template_json):
    """ami/pipeline.yaml ships the acceptance gate off: no gate bucket, boundary or execution role, and no gate
    settings on the build (tests/stacks/test_ami_acceptance_gate.py has the stack with the gate on)."""
    assert not [key for key in template_json["Resources"] if key.startswith("AcceptanceGate")]
    assert template.find_resources("AWS::S3::Bucket") == {}
    assert (
        template.find_resources(
            "AWS::IAM::ManagedPolicy", {"Properties": {"Description": Match.string_like_regexp("acceptance gate")}}
        )
        == {}
    )
    _, project = only(template, "AWS::CodeBuild::Project")
    assert [v["Name"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]] == [
        "GPUFLEET_BUILD_INSTANCE_PROFILE"
    ]
