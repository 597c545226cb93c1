"""Every synthesized template passes cfn-lint, and cdk-nag's AwsSolutions pack passes with reasoned
acknowledgements only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from stacks.environment_stacks import add_compliance_checks

CFN_LINT = Path(sys.executable).with_name("cfn-lint")


def test_cfn_lint_passes_every_template(assembly):
    templates = [str(assembly.template_file(name)) for name in assembly.stack_names]
    result = subprocess.run(
        [CFN_LINT, "--config-file", ".cfnlintrc.yaml", "--", *templates], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cfn_lint_would_catch_an_error(tmp_path):
    broken = tmp_path / "broken.template.json"
    broken.write_text(
        '{"Resources": {"Group": {"Type": "AWS::EC2::PlacementGroup", "Properties": {"Strategy": "tight"}}}}'
    )
    result = subprocess.run([CFN_LINT, "--", str(broken)], capture_output=True, text=True)
    assert result.returncode != 0 and "tight" in result.stdout


def test_cdk_nag_fails_synthesis_on_an_unacknowledged_finding(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account="123456789012", region="us-east-1"))
    iam.Role(
        stack,
        "Role",
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AdministratorAccess")],
    )
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    assert "AwsSolutions-IAM4" in (tmp_path / "validation-report.json").read_text()


def acknowledgements(assembly):
    for name in assembly.stack_names:
        for logical_id, resource in assembly.template_json(name)["Resources"].items():
            for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
                # aws-cdk-lib acknowledges its own CloudFormation-Validate findings; only ours are checked here.
                if rule["id"].startswith("AwsSolutions-"):
                    yield name, logical_id, rule


def test_every_acknowledgement_has_a_project_specific_reason(assembly):
    found = list(acknowledgements(assembly))
    assert {rule["id"].split("[")[0] for _, _, rule in found} == {
        "AwsSolutions-AS3",
        "AwsSolutions-IAM4",
        "AwsSolutions-IAM5",
        "AwsSolutions-L1",
        "AwsSolutions-S1",
        "AwsSolutions-SF1",
        "AwsSolutions-SF2",
        "AwsSolutions-SMG4",
    }
    for stack, logical_id, rule in found:
        assert len(rule["reason"]) >= 60, (stack, logical_id, rule)
        assert any(
            word in rule["reason"].lower() for word in ("gpufleet", "fleet", "node", "environment", "eks cluster")
        ), rule


# Rules whose findings carry no id (one finding per resource): acknowledged on that one resource only.
RULES_WITHOUT_FINDING_IDS = {
    "AwsSolutions-AS3": "AWS::AutoScaling::AutoScalingGroup",
    "AwsSolutions-L1": "AWS::Lambda::Function",
    "AwsSolutions-S1": "AWS::S3::Bucket",
    "AwsSolutions-SF1": "AWS::StepFunctions::StateMachine",
    "AwsSolutions-SF2": "AWS::StepFunctions::StateMachine",
    "AwsSolutions-SMG4": "AWS::SecretsManager::Secret",
}


def test_acknowledgements_are_granular_never_whole_rules(assembly):
    for stack, logical_id, rule in acknowledgements(assembly):
        if rule["id"] in RULES_WITHOUT_FINDING_IDS:
            resource_type = assembly.template_json(stack)["Resources"][logical_id]["Type"]
            assert resource_type == RULES_WITHOUT_FINDING_IDS[rule["id"]], (stack, logical_id, rule["id"])
        else:
            assert "[" in rule["id"], f"{rule['id']} acknowledges every finding of the rule"
