"""The AMI pipeline stack with the acceptance gate on (stacks/constructs/ami_acceptance_gate.py), synthesized once
with cdk-nag (synthesis raises on unacknowledged findings) and checked with cfn-lint: the backstop rule against the
documented build state change event, its teardown target, the roles' grants, the time bounds; and the gate's
environment, whose one stack is the one the teardown deletes."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest

from gpufleet.ami.pipeline import acceptance_environment
from gpufleet.environment import Environment
from stacks.ami_pipeline_stack import AMI_PIPELINE_STACK_NAME
from stacks.environment_stacks import add_environment_stacks
from tests.conftest import CDK_CONTEXT, REPOSITORY
from tests.gate_pipeline import gate_pipeline, synthesize_gate_pipeline
from tests.scripts.pipeline.build_events import (
    backstop,
    build_project_id,
    build_state_change,
    matches,
    transform,
)

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


def test_the_build_role_may_assume_the_cdk_bootstrap_roles_and_run_commands_on_gate_nodes_only(template):
    statements = by_sid(role_statements(template, project_role(template, build_project_id(template))))
    assert [joined(arn) for arn in statements["GateAssumeCdkRoles"]["Resource"]] == [
        "arn:aws:iam::123456789012:role/cdk-hnb659fds-deploy-role-123456789012-us-east-1",
        "arn:aws:iam::123456789012:role/cdk-hnb659fds-file-publishing-role-123456789012-us-east-1",
        "arn:aws:iam::123456789012:role/cdk-hnb659fds-lookup-role-123456789012-us-east-1",
    ]
    assert statements["GateRunOnNodes"]["Condition"] == {
        "StringLike": {"ssm:resourceTag/gpufleet:environment": "accept-*"}
    }
    assert joined(statements["GateReadStack"]["Resource"]) == (
        "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-accept-*/*"
    )
    every_action = {
        action
        for statement in role_statements(template, project_role(template, build_project_id(template)))
        for action in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
    }
    # CloudFormation changes go through the bootstrap's deploy role, never the build's own.
    assert not {
        action for action in every_action if action.startswith(("cloudformation:Create", "cloudformation:Delete"))
    }


def test_the_teardown_role_may_assume_the_deploy_role_and_nothing_of_its_own_beyond_its_build(template):
    _, teardown = backstop(template)
    teardown_id = next(key for key, value in template["Resources"].items() if value is teardown)
    statements = role_statements(template, project_role(template, teardown_id))
    ours = by_sid(statements)
    assert list(ours) == ["AssumeCdkDeployRole"]
    assert joined(ours["AssumeCdkDeployRole"]["Resource"]) == (
        "arn:aws:iam::123456789012:role/cdk-hnb659fds-deploy-role-123456789012-us-east-1"
    )
    # The rest is aws-cdk-lib's grants to any project: its logs, report groups, source asset and key.
    services = {
        action.split(":")[0]
        for statement in statements
        if "Sid" not in statement
        for action in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
    }
    assert services == {"logs", "codebuild", "s3", "kms"}


def test_the_gate_environment_has_one_stack_the_one_the_teardown_deletes(tmp_path):
    pipeline = gate_pipeline(tmp_path)
    environment = Environment.model_validate(
        acceptance_environment(pipeline, "accept-5f0c1d2e", "ami-0123456789abcdef0")
    )
    app = cdk.App(outdir=str(tmp_path / "cdk.out"), context=CDK_CONTEXT)
    stacks = add_environment_stacks(app, environment, dt.datetime(2026, 11, 26, tzinfo=dt.UTC))
    assert [stack.stack_name for stack in stacks] == ["gpufleet-accept-5f0c1d2e-cluster"]
