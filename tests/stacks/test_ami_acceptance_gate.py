"""The AMI pipeline stack with the acceptance gate on (stacks/constructs/ami_acceptance_gate.py), synthesized once
with cdk-nag (synthesis raises on unacknowledged findings) and checked with cfn-lint: the backstop rule against the
documented build state change event, its teardown target, the roles' grants, the time bounds; and the gate's
environment, whose one stack is the one the teardown deletes."""

from __future__ import annotations

import base64
import datetime as dt
import fnmatch
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import cfnlint
import pytest
from aws_cdk.assertions import Match
from moto.iam.aws_managed_policies import aws_managed_policies_data

from gpufleet.ami.pipeline import acceptance_environment
from gpufleet.commands.ami_acceptance import (
    GENERATED_NAMES,
    STAGED_TEMPLATE,
    gate_resource_types,
    gate_scope_problems,
    stage_gate_stack,
)
from gpufleet.environment import Environment
from stacks.ami_pipeline_stack import AMI_PIPELINE_STACK_NAME
from stacks.constructs.ami_acceptance_gate import GATE_RESOURCE_TYPES
from stacks.environment_stacks import add_environment_stacks
from tests.conftest import CDK_CONTEXT, REPOSITORY
from tests.gate_pipeline import GATE_NAME, gate_pipeline, synthesize_gate_environment, synthesize_gate_pipeline
from tests.scripts.pipeline.build_events import (
    backstop,
    build_project_id,
    build_state_change,
    matches,
    transform,
)

IMAGE = "ami-0123456789abcdef0"
BUILD_ARN = "arn:aws:codebuild:us-east-1:123456789012:build/gpufleet-ami-build:5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
CFN_LINT = Path(sys.executable).with_name("cfn-lint")


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    return synthesize_gate_pipeline(tmp_path_factory.mktemp("gate"))


@pytest.fixture(scope="module")
def template(synthesized) -> dict:
    return synthesized.template_json(AMI_PIPELINE_STACK_NAME)


def joined(value) -> str:
    """An ARN built with Fn::Join, in the aws partition."""
    if isinstance(value, str):
        return value
    separator, parts = value["Fn::Join"]
    return separator.join("aws" if part == {"Ref": "AWS::Partition"} else part for part in parts)


def role_statements(template: dict, role_id: str) -> list[dict]:
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        and {"Ref": role_id} in resource["Properties"].get("Roles", [])
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def by_sid(statements: list[dict]) -> dict[str, dict]:
    return {statement["Sid"]: statement for statement in statements if "Sid" in statement}


def project_role(template: dict, project_id: str) -> str:
    return template["Resources"][project_id]["Properties"]["ServiceRole"]["Fn::GetAtt"][0]


def test_the_stack_passes_cfn_lint(synthesized):
    template_file = synthesized.template_file(AMI_PIPELINE_STACK_NAME)
    result = subprocess.run(
        [str(CFN_LINT), "--config-file", str(REPOSITORY / ".cfnlintrc.yaml"), "--", str(template_file)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "STOPPED", "FAULT", "TIMED_OUT"])
def test_every_ended_build_of_the_ami_project_starts_the_teardown(template, status):
    rule, _ = backstop(template)
    assert matches(rule["EventPattern"], build_state_change(BUILD_ARN, status), template)


def test_a_running_build_or_another_project_starts_nothing(template):
    rule, _ = backstop(template)
    assert not matches(rule["EventPattern"], build_state_change(BUILD_ARN, "IN_PROGRESS"), template)
    teardown_event = build_state_change(BUILD_ARN, "SUCCEEDED")
    teardown_event["detail"]["project-name"] = "AcceptanceGateTeardown-1A2B3C"
    assert not matches(rule["EventPattern"], teardown_event, template)
    assert rule["EventPattern"]["detail"]["project-name"] == [{"Ref": build_project_id(template)}]


def test_the_teardown_build_gets_the_ended_builds_arn_and_runs_the_teardown_script(template):
    rule, teardown = backstop(template)
    assert transform(rule["Targets"][0]["InputTransformer"], build_state_change(BUILD_ARN, "TIMED_OUT")) == {
        "environmentVariablesOverride": [{"name": "GPUFLEET_GATE_BUILD_ARN", "value": BUILD_ARN, "type": "PLAINTEXT"}]
    }
    assert json.loads(teardown["Properties"]["Source"]["BuildSpec"])["phases"] == {
        "build": {"commands": ["bash scripts/pipeline/acceptance-teardown.sh"]}
    }
    # The rule's role may start that project and nothing else.
    events_role = rule["Targets"][0]["RoleArn"]["Fn::GetAtt"][0]
    teardown_id = rule["Targets"][0]["Arn"]["Fn::GetAtt"][0]
    assert [(s["Action"], s["Resource"]) for s in role_statements(template, events_role)] == [
        ("codebuild:StartBuild", {"Fn::GetAtt": [teardown_id, "Arn"]})
    ]


def test_the_build_phase_runs_the_gate_before_publishing_and_the_teardown_finally(template):
    spec = json.loads(template["Resources"][build_project_id(template)]["Properties"]["Source"]["BuildSpec"])
    assert spec["phases"]["build"] == {
        "commands": [
            "bash scripts/pipeline/build-image.sh",
            "bash scripts/pipeline/acceptance-gate.sh",
            "bash scripts/pipeline/publish-image.sh",
        ],
        "finally": ["bash scripts/pipeline/acceptance-teardown.sh"],
    }
    assert {key: spec["env"]["variables"][key] for key in spec["env"]["variables"] if "ACCEPTANCE" in key} == {
        "GPUFLEET_ACCEPTANCE_INSTANCE_TYPE": "p4d.24xlarge",
        "GPUFLEET_ACCEPTANCE_NODES": "2",
        "GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS": "3600",
    }


def test_no_build_outlives_its_bounds(template):
    timeouts = {
        logical_id: resource["Properties"]["TimeoutInMinutes"]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::CodeBuild::Project"
    }
    build = build_project_id(template)
    # 5 hours of build and publication, plus the gate's 60 minutes and 30 of teardown.
    assert timeouts.pop(build) == 390
    assert list(timeouts.values()) == [75]


# The gate deploys with no CDK bootstrap role (issue 29, finding 5): what each of its roles may do, read off the
# synthesized pipeline stack.


def every_statement(template: dict) -> list[dict]:
    """Every statement of every identity policy in the template: inline role policies, policies and managed policies."""
    found = []
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            found.extend(properties["PolicyDocument"]["Statement"])
        if resource["Type"] == "AWS::IAM::Role":
            for policy in properties.get("Policies", []):
                found.extend(policy["PolicyDocument"]["Statement"])
    return found


def actions_of(statement: dict) -> list[str]:
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


def resources_of(statement: dict) -> list[str]:
    return [
        joined(r)
        for r in (statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]])
    ]


def logical_id_of(template: dict, resource_type: str, construct: str) -> str:
    (found,) = [
        key
        for key, value in template["Resources"].items()
        if value["Type"] == resource_type and key.startswith(construct)
    ]
    return found


def execution_role_id(template: dict) -> str:
    return logical_id_of(template, "AWS::IAM::Role", "AcceptanceGateExecutionRole")


def execution_statements(template: dict) -> dict[str, dict]:
    (policy,) = template["Resources"][execution_role_id(template)]["Properties"]["Policies"]
    return by_sid(policy["PolicyDocument"]["Statement"])


def boundary_id(template: dict) -> str:
    return logical_id_of(template, "AWS::IAM::ManagedPolicy", "AcceptanceGateBoundary")


def bucket_id(template: dict) -> str:
    return logical_id_of(template, "AWS::S3::Bucket", "AcceptanceGateAssets")


def test_no_role_of_the_pipeline_may_assume_any_role(template):
    """Before: the build role could assume cdk-hnb659fds-deploy-role (able to update or delete any stack through the
    AdministratorAccess execution role), file-publishing-role and lookup-role, and the teardown role the deploy role."""
    assumed = [s for s in every_statement(template) if any(a.startswith("sts:") for a in actions_of(s))]
    assert assumed == []
    assert "cdk-hnb659fds-deploy-role" not in json.dumps(template)
    assert "cdk-hnb659fds-file-publishing-role" not in json.dumps(template)


def test_every_cloudformation_grant_is_on_the_gates_stacks_and_every_change_goes_through_its_execution_role(template):
    role = {"Fn::GetAtt": [execution_role_id(template), "Arn"]}
    changes = []
    for statement in every_statement(template):
        for action in actions_of(statement):
            if action.startswith("cloudformation:"):
                assert resources_of(statement) == [
                    "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-accept-*/*"
                ]
                if not action.startswith("cloudformation:Describe"):
                    changes.append(action)
                    assert statement["Condition"]["StringEquals"]["cloudformation:RoleArn"] == role, statement
    # The build creates and deletes, the teardown build deletes; nothing updates a stack or makes a change set.
    assert sorted(changes) == ["cloudformation:CreateStack", "cloudformation:DeleteStack", "cloudformation:DeleteStack"]


def test_the_build_role_creates_gate_stacks_of_the_gates_resource_types_through_its_execution_role(template):
    role = {"Fn::GetAtt": [execution_role_id(template), "Arn"]}
    statements = by_sid(role_statements(template, project_role(template, build_project_id(template))))
    assert statements["GateCreateStack"] == {
        "Sid": "GateCreateStack",
        "Effect": "Allow",
        "Action": "cloudformation:CreateStack",
        "Resource": statements["GateCreateStack"]["Resource"],
        "Condition": {
            "StringEquals": {"cloudformation:RoleArn": role},
            "ForAllValues:StringLike": {"cloudformation:ResourceTypes": list(GATE_RESOURCE_TYPES)},
        },
    }
    assert statements["GatePassExecutionRole"] == {
        "Sid": "GatePassExecutionRole",
        "Effect": "Allow",
        "Action": "iam:PassRole",
        "Resource": role,
        "Condition": {"StringEquals": {"iam:PassedToService": "cloudformation.amazonaws.com"}},
    }
    assert statements["GateStageStack"]["Action"] == ["s3:PutObject", "s3:GetObject"]
    assert statements["GateStageStack"]["Resource"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [bucket_id(template), "Arn"]}, "/accept-*/*"]]
    }
    assert statements["GateRunOnNodes"]["Condition"] == {
        "StringLike": {"ssm:resourceTag/gpufleet:environment": "accept-*"}
    }
    # The only IAM action: passing the execution role to CloudFormation (and Packer's build instance role to EC2).
    iam_grants = {
        (action, json.dumps(statement["Resource"]))
        for statement in role_statements(template, project_role(template, build_project_id(template)))
        for action in actions_of(statement)
        if action.startswith("iam:") and statement.get("Sid", "").startswith("Gate")
    }
    assert iam_grants == {("iam:PassRole", json.dumps(role))}


def test_the_teardown_role_deletes_gate_stacks_through_the_execution_role_and_nothing_of_its_own_beyond(template):
    _, teardown = backstop(template)
    teardown_id = next(key for key, value in template["Resources"].items() if value is teardown)
    statements = role_statements(template, project_role(template, teardown_id))
    ours = by_sid(statements)
    role = {"Fn::GetAtt": [execution_role_id(template), "Arn"]}
    assert list(ours) == ["GateDeleteStack", "GateReadStack", "GatePassExecutionRole"]
    assert ours["GateDeleteStack"]["Action"] == "cloudformation:DeleteStack"
    assert ours["GateDeleteStack"]["Condition"] == {"StringEquals": {"cloudformation:RoleArn": role}}
    assert ours["GateReadStack"]["Action"] == "cloudformation:DescribeStacks"
    assert ours["GatePassExecutionRole"]["Resource"] == role
    # The rest is aws-cdk-lib's grants to any project: its logs, report groups, source asset and key.
    services = {
        action.split(":")[0]
        for statement in statements
        if "Sid" not in statement
        for action in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
    }
    assert services == {"logs", "codebuild", "s3", "kms"}
    # The teardown build names the role it deletes with.
    assert teardown["Properties"]["Environment"]["EnvironmentVariables"] == [
        {"Name": "GPUFLEET_GATE_EXECUTION_ROLE_ARN", "Type": "PLAINTEXT", "Value": role}
    ]


def test_the_build_gets_the_gates_role_bucket_and_boundary(template):
    variables = template["Resources"][build_project_id(template)]["Properties"]["Environment"]["EnvironmentVariables"]
    assert [v for v in variables if v["Name"].startswith("GPUFLEET_GATE_")] == [
        {
            "Name": "GPUFLEET_GATE_EXECUTION_ROLE_ARN",
            "Type": "PLAINTEXT",
            "Value": {"Fn::GetAtt": [execution_role_id(template), "Arn"]},
        },
        {"Name": "GPUFLEET_GATE_ASSETS_BUCKET", "Type": "PLAINTEXT", "Value": {"Ref": bucket_id(template)}},
        {"Name": "GPUFLEET_GATE_BOUNDARY_ARN", "Type": "PLAINTEXT", "Value": {"Ref": boundary_id(template)}},
    ]


def test_only_cloudformation_may_use_the_execution_role(synthesized):
    synthesized.template(AMI_PIPELINE_STACK_NAME).has_resource_properties(
        "AWS::IAM::Role",
        Match.object_like(
            {
                "AssumeRolePolicyDocument": {
                    "Statement": [
                        {
                            "Action": "sts:AssumeRole",
                            "Effect": "Allow",
                            "Principal": {"Service": "cloudformation.amazonaws.com"},
                        }
                    ],
                    "Version": "2012-10-17",
                },
                "Policies": [Match.object_like({"PolicyName": "GateStack"})],
            }
        ),
    )


# What the execution role may do to IAM: only roles and instance profiles named gpufleet-accept-*, every role created
# with the gate's boundary, no action that would change or remove a boundary or touch a policy object.
GATE_IAM_RESOURCES = {
    "arn:aws:iam::123456789012:role/gpufleet-accept-*",
    "arn:aws:iam::123456789012:instance-profile/gpufleet-accept-*",
}


def test_the_execution_role_changes_iam_only_on_gate_roles_and_instance_profiles(template):
    statements = execution_statements(template)
    iam_statements = [s for s in statements.values() if any(a.startswith("iam:") for a in actions_of(s))]
    assert {r for s in iam_statements for r in resources_of(s)} == GATE_IAM_RESOURCES
    iam_actions = {a for s in iam_statements for a in actions_of(s)}
    assert not {
        a for a in iam_actions if "PermissionsBoundary" in a or "Policy" in a.split(":")[1].replace("RolePolicy", "")
    }
    assert not iam_actions & {
        "iam:UpdateAssumeRolePolicy",
        "iam:CreatePolicy",
        "iam:CreatePolicyVersion",
        "iam:CreateUser",
    }
    boundary = {"Ref": boundary_id(template)}
    for sid in ("CreateBoundedRoles", "AttachGateManagedPolicies"):
        assert statements[sid]["Condition"]["StringEquals"] == {"iam:PermissionsBoundary": boundary}
    assert statements["CreateBoundedRoles"]["Action"] == ["iam:CreateRole", "iam:PutRolePolicy"]
    assert [
        joined(arn) for arn in statements["AttachGateManagedPolicies"]["Condition"]["ArnEquals"]["iam:PolicyARN"]
    ] == [
        "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
    ]
    assert statements["PassGateRoles"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "lambda.amazonaws.com", "states.amazonaws.com"]}
    }


EC2_KINDS = ("SecurityGroup", "PlacementGroup", "LaunchTemplate")


def test_the_execution_role_acts_only_on_what_is_named_or_tagged_for_the_gate(template):
    """Every resource of the execution role's grants: a gpufleet-accept-* name, the gate's staged objects, an EC2
    resource whose change needs the environment tag accept-* (or that a launch only uses), or "*" for reads."""
    tagged_or_used = {
        *(f"{verb}{kind}" for verb in ("Create", "ChangeTagged") for kind in EC2_KINDS),
        "TagAtCreation",
        "LaunchGateNodes",
        "SecurityGroupInTheGateVpc",
    }
    for sid, statement in execution_statements(template).items():
        if sid == "ReadStagedCode":
            assert statement["Resource"] == {
                "Fn::Join": ["", [{"Fn::GetAtt": [bucket_id(template), "Arn"]}, "/accept-*/*"]]
            }
            continue
        resources = resources_of(statement)
        if resources == ["*"]:
            assert all(a.split(":")[1].startswith("Describe") for a in actions_of(statement)), sid
        elif sid in tagged_or_used:
            assert all(r.startswith("arn:aws:ec2:us-east-1:") for r in resources), sid
        else:
            assert all(r.endswith(("gpufleet-accept-*", "/gpufleet/accept-*")) for r in resources), (sid, resources)
    statements = execution_statements(template)
    for kind in EC2_KINDS:
        assert statements[f"ChangeTagged{kind}"]["Condition"] == {
            "StringLike": {"aws:ResourceTag/gpufleet:environment": "accept-*"}
        }
        assert statements[f"Create{kind}"]["Condition"] == {
            "StringLike": {"aws:RequestTag/gpufleet:environment": "accept-*"}
        }
    # Every EC2 change but tagging at creation and launching needs the tag.
    ec2_changes = {
        sid
        for sid, statement in statements.items()
        if any(a.startswith("ec2:") and not a.startswith("ec2:Describe") for a in actions_of(statement))
    }
    assert {sid for sid in ec2_changes if "Condition" not in statements[sid]} == {
        "SecurityGroupInTheGateVpc",
        "LaunchGateNodes",
    }
    # Tags only at creation: no tag can be put on an existing resource to bring it into reach.
    assert set(statements["TagAtCreation"]["Condition"]["StringEquals"]) == {"ec2:CreateAction"}
    assert resources_of(statements["SecurityGroupInTheGateVpc"]) == [
        "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-0123456789abcdef0"
    ]
    assert "arn:aws:ec2:us-east-1:123456789012:subnet/subnet-0123456789abcdef0" in resources_of(
        statements["LaunchGateNodes"]
    )


@pytest.fixture(scope="module")
def gate_assembly(tmp_path_factory):
    """The gate's environment as the build synthesizes it (`cdk synth -c env=accept-5f0c1d2e`)."""
    return synthesize_gate_environment(tmp_path_factory.mktemp("gate-environment"), IMAGE)


STAGED_BUCKET = "gpufleet-ami-pipeline-acceptancegateassets-0a1b2c3d4e5f"
STAGED_BOUNDARY = "arn:aws:iam::123456789012:policy/gpufleet-ami-pipeline-AcceptanceGateBoundary-6F5E4D3C2B1A"


@pytest.fixture(scope="module")
def staged(gate_assembly, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("staged")
    stage_gate_stack(gate_assembly.directory, GATE_NAME, bucket=STAGED_BUCKET, boundary_arn=STAGED_BOUNDARY, out=out)
    return json.loads((out / STAGED_TEMPLATE).read_text())


def test_the_gates_resource_types_are_those_the_staging_allows_and_the_stack_holds(gate_assembly):
    assert {t for t in GATE_RESOURCE_TYPES if not t.startswith("Custom::")} == set(gate_resource_types())
    held = {r["Type"] for r in gate_assembly.template_json(f"gpufleet-{GATE_NAME}-cluster")["Resources"].values()}
    assert {t for t in held if not t.startswith("Custom::Gpufleet")} == set(gate_resource_types())


# The handler permissions of CloudFormation's registry schemas (as cfn-lint 1.58.0 bundles them) that the execution
# role does not grant, and why: everything else each handler lists for creating, reading or deleting a type of the
# gate's stack is granted (as an action; the resources are the gate's).
LEFT_OUT = {
    "iam:GetUserPolicy": "the gate's policies attach to roles only",
    "iam:GetGroupPolicy": "the gate's policies attach to roles only",
    "iam:PutUserPolicy": "the gate's policies attach to roles only",
    "iam:PutGroupPolicy": "the gate's policies attach to roles only",
    "iam:DeleteUserPolicy": "the gate's policies attach to roles only",
    "iam:DeleteGroupPolicy": "the gate's policies attach to roles only",
    "iam:CreateServiceLinkedRole": "Auto Scaling's service-linked role exists once any group was made (docs)",
    "secretsmanager:GetRandomPassword": "the secret has no generated string",
    "secretsmanager:ReplicateSecretToRegions": "no replica",
    "secretsmanager:RemoveRegionsFromReplication": "no replica",
    "secretsmanager:GetSecretValue": "the secret's own policy lets only the nodes read it",
    "logs:PutDataProtectionPolicy": "no data protection policy",
    "logs:DeleteDataProtectionPolicy": "no data protection policy",
    "logs:CreateLogDelivery": "no log delivery",
    "s3:REST.PUT.OBJECT": "no log delivery",
    "firehose:TagDeliveryStream": "no log delivery",
    "logs:PutResourcePolicy": "no log group resource policy",
    "logs:DescribeResourcePolicies": "no log group resource policy",
    "logs:PutIndexPolicy": "no index policy",
    "logs:DescribeIndexPolicies": "no index policy",
    "logs:PutBearerTokenAuthentication": "no bearer token",
    "elasticfilesystem:DescribeMountTargets": "no file system on a function",
    "s3files:ListMountTargets": "no file system on a function",
    "kms:CreateGrant": "no key of the gate's own: AWS managed keys",
    "kms:Decrypt": "no key of the gate's own: AWS managed keys",
    "kms:DescribeKey": "no key of the gate's own: AWS managed keys",
    "kms:Encrypt": "no key of the gate's own: AWS managed keys",
    "kms:GenerateDataKey": "no key of the gate's own: AWS managed keys",
    "lambda:GetCodeSigningConfig": "no code signing",
    "lambda:GetLayerVersion": "no layer",
    "lambda:PutFunctionScalingConfig": "no capacity provider",
    "lambda:GetFunctionScalingConfig": "no capacity provider",
    "lambda:PassCapacityProvider": "no capacity provider",
    "lambda:AssociateRuntimeAlias": "no runtime alias",
    "cloudwatch:TagResource": "the staging drops the dashboard's tags (no dashboard resource in the reference)",
    "cloudwatch:ListTagsForResource": "the staging drops the dashboard's tags (no dashboard resource in the reference)",
    "autoscaling:EnableMetricsCollection": "no group metrics",
    "autoscaling:PutNotificationConfiguration": "no notifications",
    "autoscaling:SuspendProcesses": "no suspended processes",
    "cloudwatch:PutMetricAlarm": "no alarm",
    "ec2:Get*": "no attribute-based instance types; ec2:Get* would reach console output and passwords",
    "elasticloadbalancing:Describe*": "no load balancer",
    "managed-fleets:Get*": "no managed fleet",
    "managed-fleets:CreateAutoScalingGroup": "no managed fleet",
    "managed-fleets:UpdateAutoScalingGroup": "no managed fleet",
    "managed-fleets:DeleteAutoScalingGroup": "no managed fleet",
    "ssm:Get*": "the launch template names the image by id, not by parameter",
    "vpc-lattice:DeregisterTargets": "no VPC Lattice",
    "vpc-lattice:GetTargetGroup": "no VPC Lattice",
    "vpc-lattice:ListTargets": "no VPC Lattice",
    "vpc-lattice:RegisterTargets": "no VPC Lattice",
}


def handler_permissions(resource_type: str) -> set[str]:
    data = Path(cfnlint.__file__).parent / "data" / "schemas"
    schema = json.loads(
        (
            data
            / "resources"
            / f"{json.loads((data / 'providers' / 'us-east-1.json').read_text())[resource_type]}.json"
        ).read_text()
    )
    return {
        p
        for handler in ("create", "read", "delete")
        for p in schema["handlers"].get(handler, {}).get("permissions", [])
    }


def test_the_execution_role_grants_what_cloudformations_handlers_need_for_the_gates_types(template):
    granted = {a for s in execution_statements(template).values() for a in actions_of(s)}
    needed = {p for t in gate_resource_types() for p in handler_permissions(t)}
    missing = {p for p in needed if not any(fnmatch.fnmatchcase(p, g) for g in granted)}
    assert missing == set(LEFT_OUT)
    # And nothing beyond what the handlers list, but for the custom resources' invocation.
    extra = {g for g in granted if not any(fnmatch.fnmatchcase(p, g) or p == g for p in needed)}
    assert extra == {"lambda:InvokeFunction"}


def test_staging_moves_the_assets_names_bounds_and_tags_everything_for_the_gate(staged):
    assert gate_scope_problems(staged, GATE_NAME, STAGED_BOUNDARY) == []
    text = json.dumps(staged)
    assert "cdk-hnb659fds" not in text and "BootstrapVersion" not in text
    resources = staged["Resources"].values()
    roles = [r["Properties"] for r in resources if r["Type"] == "AWS::IAM::Role"]
    assert len(roles) == 8 and all(role["PermissionsBoundary"] == STAGED_BOUNDARY for role in roles)
    for kind, (name_property, longest) in GENERATED_NAMES.items():
        for resource in (r for r in resources if r["Type"] == kind):
            name = resource["Properties"][name_property]
            assert name.startswith(("gpufleet-accept-5f0c1d2e-", "/gpufleet/accept-5f0c1d2e/")) and len(name) <= longest
    (template,) = [r["Properties"] for r in resources if r["Type"] == "AWS::EC2::LaunchTemplate"]
    assert template["TagSpecifications"] == [
        {"ResourceType": "launch-template", "Tags": [{"Key": "gpufleet:environment", "Value": GATE_NAME}]}
    ]
    user_data = gzip.decompress(base64.b64decode(template["LaunchTemplateData"]["UserData"])).decode()
    (location,) = re.findall(r"^export GPUFLEET_OPERATOR_SCRIPTS=(.*)$", user_data, re.MULTILINE)
    assert re.fullmatch(rf"s3://{STAGED_BUCKET}/{GATE_NAME}/[0-9a-f]{{64}}\.gz", location)


def test_staging_refuses_what_the_execution_role_may_not_create(gate_assembly, staged):
    unstaged = gate_assembly.template_json(f"gpufleet-{GATE_NAME}-cluster")
    problems = gate_scope_problems(unstaged, GATE_NAME, STAGED_BOUNDARY)
    assert "still refers to the CDK bootstrap bucket cdk-hnb659fds-assets-123456789012-us-east-1" in problems
    assert any("NodeLaunchTemplate" in p and "not tagged" in p for p in problems)
    changed = json.loads(json.dumps(staged))
    changed["Resources"]["Bucket"] = {"Type": "AWS::S3::Bucket", "Properties": {}}
    role = next(r for r in changed["Resources"].values() if r["Type"] == "AWS::IAM::Role")
    role["Properties"]["PermissionsBoundary"] = "arn:aws:iam::aws:policy/AdministratorAccess"
    assert gate_scope_problems(changed, GATE_NAME, STAGED_BOUNDARY) == [
        f"{next(k for k, r in changed['Resources'].items() if r is role)} (AWS::IAM::Role): its permissions boundary "
        f"is not {STAGED_BOUNDARY}",
        "Bucket (AWS::S3::Bucket): not a type the gate may create",
    ]


def resolve(value, names: dict[str, tuple[str, str]], extra: dict | None = None) -> str:
    """An ARN of a template, concrete: the aws partition, the gate stack's names (NAMES: logical id -> (type, name))
    and EXTRA references (logical id -> value)."""
    if isinstance(value, str):
        return value
    ((function, argument),) = value.items()
    if function == "Fn::Join":
        return argument[0].join(resolve(part, names, extra) for part in argument[1])
    if function == "Ref" and argument == "AWS::Partition":
        return "aws"
    reference = argument[0] if function == "Fn::GetAtt" else argument
    if extra and reference in extra:
        return extra[reference]
    kind, name = names[reference]
    forms = {
        "AWS::Logs::LogGroup": f"arn:aws:logs:us-east-1:123456789012:log-group:{name}:*",
        "AWS::Lambda::Function": f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
        "AWS::SecretsManager::Secret": f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}-AbCdEf",
        "AWS::StepFunctions::StateMachine": f"arn:aws:states:us-east-1:123456789012:stateMachine:{name}",
    }
    return forms[kind]


def allowed_by(boundary: list[dict], action: str, resource: str, references: dict[str, str]) -> bool:
    """Whether a statement of the boundary allows ACTION on RESOURCE (conditions aside); REFERENCES resolves the
    boundary's references to the pipeline stack's resources."""
    return any(
        any(fnmatch.fnmatchcase(action, pattern) for pattern in actions_of(statement))
        and any(
            fnmatch.fnmatchcase(resource, resolve(pattern, {}, references))
            for pattern in (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
        )
        for statement in boundary
    )


def test_the_boundary_admits_every_grant_of_the_gates_stack_on_the_gates_own_resources(template, staged):
    """A role of the gate's stack may do what the stack grants it, and nothing beyond the boundary: each statement of
    the staged stack's role policies, on the resources it names, is within the boundary."""
    boundary = template["Resources"][boundary_id(template)]["Properties"]["PolicyDocument"]["Statement"]
    references = {bucket_id(template): f"arn:aws:s3:::{STAGED_BUCKET}"}
    names = {}
    for logical_id, resource in staged["Resources"].items():
        for kind, (name_property, _) in {**GENERATED_NAMES, "AWS::SecretsManager::Secret": ("Name", 0)}.items():
            if resource["Type"] == kind:
                names[logical_id] = (kind, resource["Properties"][name_property])
    granted = [
        (action, resolve(r, names))
        for resource in staged["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
        for action in actions_of(statement)
        for r in (statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]])
    ]
    assert len(granted) > 20
    outside = [(a, r) for a, r in granted if not allowed_by(boundary, a, r, references)]
    assert outside == []
    # The AWS managed policies' actions (moto 5.2.5's copies of the documents), but the parameter reads.
    documents = json.loads(aws_managed_policies_data)
    managed = {
        action
        for name in ("AmazonSSMManagedInstanceCore", "AWSLambdaBasicExecutionRole")
        for statement in documents[name]["Document"]["Statement"]
        for action in actions_of(statement)
    }
    boundary_actions = {a for s in boundary for a in actions_of(s)}
    assert managed - boundary_actions == {
        "ssm:GetParameter",
        "ssm:GetParameters",
        "ssm:GetDeployablePatchSnapshotForInstance",
    }
    # A gate role can reach no stack, no IAM and no other role.
    assert not {a for a in boundary_actions if a.split(":")[0] in ("iam", "cloudformation", "sts", "kms")}


def test_the_gate_environment_has_one_stack_the_one_the_teardown_deletes(tmp_path):
    pipeline = gate_pipeline(tmp_path)
    environment = Environment.model_validate(
        acceptance_environment(pipeline, "accept-5f0c1d2e", "ami-0123456789abcdef0")
    )
    app = cdk.App(outdir=str(tmp_path / "cdk.out"), context=CDK_CONTEXT)
    stacks = add_environment_stacks(app, environment, dt.datetime(2026, 11, 26, tzinfo=dt.UTC))
    assert [stack.stack_name for stack in stacks] == ["gpufleet-accept-5f0c1d2e-cluster"]
