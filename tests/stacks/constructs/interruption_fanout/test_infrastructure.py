"""The interruption fan-out on its own: the EventBridge rule on the spot interruption warning and the rebalance
recommendation, the function it runs, and what the function's role may do (cdk-nag attached, as `cdk synth` runs
it)."""

from __future__ import annotations

import json
import py_compile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs

from stacks.constructs.interruption_fanout.infrastructure import RUNTIME_DIR, InterruptionFanOut
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, asset_files, copied_from_gpufleet, imported_in_lambda

# The region of the ARNs below: not the probe environment's, so a region taken from anywhere but the stack shows.
REGION = "us-east-2"
DOCUMENT_ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-2::document/AWS-RunShellScript"]]}
INSTANCES_ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-2:123456789012:instance/*"]]}
# Logical ids, pinned so that renaming a construct id stays a deliberate change.
RULE_ID = "FanOutRuleBAFBDB69"
FUNCTION_ID = "FanOutFunctionA0BAF8B2"
ROLE_ID = "FanOutRole3B47381B"
POLICY_ID = "FanOutRoleDefaultPolicy025C6CA9"
LOGS_ID = "FanOutLogsE78F3434"


@pytest.fixture(scope="module")
def outdir(tmp_path_factory) -> Path:
    """The cloud assembly's folder; the handler's bytecode is written first, as importing it does (the handler tests
    do), so that the asset shows what it leaves out."""
    for source in (
        "handler.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/constants.py",
        "gpufleet/ssm_batches.py",
    ):
        py_compile.compile(str(RUNTIME_DIR / source), doraise=True)
    outdir = tmp_path_factory.mktemp("interruption-fanout")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    InterruptionFanOut(stack, "FanOut", environment_name="probe", log_retention=logs.RetentionDays.TWO_WEEKS)
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return outdir


@pytest.fixture(scope="module")
def resources(outdir) -> dict:
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def check_the_construct_writes_a_rule_a_function_its_role_and_logs_under_stable_logical_ids(resources):
    types = {logical_id: resource["Type"] for logical_id, resource in resources.items()}
    assert {logical_id: kind for logical_id, kind in types.items() if not kind.startswith("AWS::Lambda::")} == {
        RULE_ID: "AWS::Events::Rule",
        ROLE_ID: "AWS::IAM::Role",
        POLICY_ID: "AWS::IAM::Policy",
        LOGS_ID: "AWS::Logs::LogGroup",
    }
    assert types[FUNCTION_ID] == "AWS::Lambda::Function"


def check_the_rule_matches_the_spot_interruption_warning_and_the_rebalance_recommendations(resources):
    rule = resources[RULE_ID]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": [
            "EC2 Spot Instance Interruption Warning",
            "EC2 Instance Rebalance Recommendation",
            "EC2 Spot Instance Rebalance Recommended",
        ],
    }
    assert rule["Description"] == "gpufleet probe: spot interruption warnings and rebalance recommendations"
    assert rule["State"] == "ENABLED"
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [FUNCTION_ID, "Arn"]}
    # A warning two minutes ahead is useless later: no retry.
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 0}


def check_the_function_knows_its_environment_and_the_node_settings_and_is_not_retried(resources):
    properties = resources[FUNCTION_ID]["Properties"]
    assert {key: value for key, value in properties.items() if key != "Code"} == {
        "Description": "gpufleet probe: a node is warned, every node runs its checkpoint hook",
        "Environment": {"Variables": {"ENVIRONMENT_NAME": "probe", "SETTINGS_FILE": "/etc/gpufleet/node.env"}},
        "Handler": "handler.on_notice",
        "LoggingConfig": {"LogGroup": {"Ref": LOGS_ID}},
        "Role": {"Fn::GetAtt": [ROLE_ID, "Arn"]},
        "Runtime": "python3.14",
        "Timeout": 60,
    }
    (invoke_config,) = [
        resource["Properties"]
        for resource in resources.values()
        if resource["Type"] == "AWS::Lambda::EventInvokeConfig"
    ]
    assert invoke_config["MaximumRetryAttempts"] == 0
    assert resources[LOGS_ID]["Properties"] == {"RetentionInDays": 14}


def check_the_role_may_send_the_shell_document_to_this_environments_nodes_only(resources):
    statements = resources[POLICY_ID]["Properties"]["PolicyDocument"]["Statement"]
    logs_write = statements[0]
    assert logs_write["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]
    assert statements[1:] == [
        {"Action": "ssm:SendCommand", "Effect": "Allow", "Resource": DOCUMENT_ARN},
        {
            "Action": "ssm:SendCommand",
            "Condition": {"StringEquals": {"ssm:resourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": INSTANCES_ARN,
        },
        {"Action": "ec2:DescribeInstances", "Effect": "Allow", "Resource": "*"},
    ]


def check_the_wildcards_are_acknowledged_with_their_reasons(resources):
    assert [finding["id"] for finding in resources[ROLE_ID]["Metadata"]["cdk_nag"]["rules_to_suppress"]] == [
        "AwsSolutions-IAM5[Resource::*]",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-2:123456789012:instance/*]",
    ]


def check_the_asset_holds_the_handler_and_the_gpufleet_files_it_imports(outdir):
    (asset,) = [path for path in outdir.glob("asset.*") if (path / "handler.py").exists()]
    assert asset_files(asset) == [
        "__init__.py",
        "gpufleet",
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/constants.py",
        "gpufleet/ssm_batches.py",
        "handler.py",
    ]
    assert copied_from_gpufleet(asset) == {
        "aws_faults.py": True,
        "checkpoint_hook.py": True,
        "constants.py": True,
        "ssm_batches.py": True,
    }
    assert imported_in_lambda(asset, ["handler"]) == [
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/constants.py",
        "gpufleet/ssm_batches.py",
        "handler.py",
    ]


def test_the_cdk_nag_synthesis_passes_every_check(outdir, resources):
    """The checks on the one cdk-nag synthesis above, in one test (mutmut gives a mutant only the tests during which
    the construct ran; see tests/stacks/constructs/test_capacity_block_warning.py)."""
    check_the_construct_writes_a_rule_a_function_its_role_and_logs_under_stable_logical_ids(resources)
    check_the_rule_matches_the_spot_interruption_warning_and_the_rebalance_recommendations(resources)
    check_the_function_knows_its_environment_and_the_node_settings_and_is_not_retried(resources)
    check_the_role_may_send_the_shell_document_to_this_environments_nodes_only(resources)
    check_the_wildcards_are_acknowledged_with_their_reasons(resources)
    check_the_asset_holds_the_handler_and_the_gpufleet_files_it_imports(outdir)
