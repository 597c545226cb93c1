"""The Capacity Block warning on its own: the EventBridge rule on the block's expiration warning, the Run Command it
sends to the environment's nodes, and what its role may do (cdk-nag attached, as `cdk synth` runs it)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from stacks.constructs.capacity_block_warning import CapacityBlockWarning, node_command
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT

BLOCK_ID = "cr-0123456789abcdef0"
# The region of the ARNs below: not the probe environment's, so a region taken from anywhere but the stack shows.
REGION = "us-east-2"
DOCUMENT_ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-2::document/AWS-RunShellScript"]]}
INSTANCES_ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-2:123456789012:instance/*"]]}
# Logical ids: a new one for the rule replaces it on the next deploy (the old rule is deleted, the new one created);
# pinned so that renaming a construct id stays a deliberate change.
RULE_ID = "WarningC64150F6"
ROLE_ID = "WarningRunCommandRole909DAB18"


@pytest.fixture(scope="module")
def resources(tmp_path_factory) -> dict:
    outdir = tmp_path_factory.mktemp("capacity-block-warning")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    CapacityBlockWarning(stack, "Warning", environment_name="probe", block_id=BLOCK_ID)
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def check_the_construct_writes_one_rule_and_its_role_under_stable_logical_ids(resources):
    assert {logical_id: resource["Type"] for logical_id, resource in resources.items()} == {
        ROLE_ID: "AWS::IAM::Role",
        RULE_ID: "AWS::Events::Rule",
    }


def check_the_rule_matches_both_names_of_the_expiration_warning_for_this_block_only(resources):
    rule = resources[RULE_ID]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": ["Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"],
        "detail": {"capacity-reservation-id": ["cr-0123456789abcdef0"]},
    }
    assert rule["Description"] == (
        "gpufleet probe: Capacity Block cr-0123456789abcdef0 expiration warning runs the checkpoint hook on the nodes"
    )
    assert "State" not in rule  # enabled: EventBridge's default


def check_the_rule_runs_the_checkpoint_hook_with_the_blocks_id_and_end_on_the_environments_nodes(resources):
    (target,) = resources[RULE_ID]["Properties"]["Targets"]
    assert target == {
        "Id": "Nodes",
        "Arn": DOCUMENT_ARN,
        "RoleArn": {"Fn::GetAtt": [ROLE_ID, "Arn"]},
        "RunCommandParameters": {"RunCommandTargets": [{"Key": "tag:gpufleet:environment", "Values": ["probe"]}]},
        "InputTransformer": {
            "InputPathsMap": {"reservation": "$.detail.capacity-reservation-id", "end": "$.detail.end-date"},
            "InputTemplate": '{"commands": [". /etc/gpufleet/node.env && '
            "/opt/gpufleet/node/capacity-block-end.sh '<reservation>' '<end>'\"]}",
        },
    }


def test_the_node_command_reads_the_node_settings_then_runs_the_script_with_the_placeholders():
    assert node_command() == (
        ". /etc/gpufleet/node.env && /opt/gpufleet/node/capacity-block-end.sh '<reservation>' '<end>'"
    )


def check_the_role_is_eventbridges_and_may_send_the_shell_document_to_this_environments_nodes_only(resources):
    role = resources[ROLE_ID]["Properties"]
    assert role["AssumeRolePolicyDocument"] == {
        "Statement": [
            {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}}
        ],
        "Version": "2012-10-17",
    }
    assert role["Description"] == "gpufleet probe: runs the checkpoint hook on the nodes as their block ends"
    assert role["Policies"] == [
        {
            "PolicyName": "SendCommandToNodes",
            "PolicyDocument": {
                "Statement": [
                    {"Action": "ssm:SendCommand", "Effect": "Allow", "Resource": DOCUMENT_ARN},
                    {
                        "Action": "ssm:SendCommand",
                        "Condition": {"StringEquals": {"ssm:resourceTag/gpufleet:environment": "probe"}},
                        "Effect": "Allow",
                        "Resource": INSTANCES_ARN,
                    },
                ],
                "Version": "2012-10-17",
            },
        }
    ]


def check_the_instance_wildcard_is_acknowledged_with_its_reason(resources):
    assert resources[ROLE_ID]["Metadata"]["cdk_nag"]["rules_to_suppress"] == [
        {
            "id": "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-2:123456789012:instance/*]",
            "reason": "Run Command targets the nodes by their gpufleet environment tag, so their instance ids are not "
            "known here; the condition on that tag limits the role to this environment's nodes",
        }
    ]


def test_the_cdk_nag_synthesis_passes_every_check(resources):
    """The checks on the one cdk-nag synthesis above, in one test: mutmut (make mutate) gives a mutant only the
    tests during which the construct ran, and a module-scoped synthesis runs during the first test that asks for it,
    so checks split over several tests would go unrun on the mutants."""
    check_the_construct_writes_one_rule_and_its_role_under_stable_logical_ids(resources)
    check_the_rule_matches_both_names_of_the_expiration_warning_for_this_block_only(resources)
    check_the_rule_runs_the_checkpoint_hook_with_the_blocks_id_and_end_on_the_environments_nodes(resources)
    check_the_role_is_eventbridges_and_may_send_the_shell_document_to_this_environments_nodes_only(resources)
    check_the_instance_wildcard_is_acknowledged_with_its_reason(resources)
