"""The spot interruption rehearsal on its own: the FIS experiment template and its role (cdk-nag attached, as `cdk
synth` runs it)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from stacks.constructs.spot_interruption_rehearsal import SpotInterruptionRehearsal
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT

# The region of the ARNs below: not the probe environment's, so a region taken from anywhere but the stack shows.
REGION = "us-east-2"
INSTANCES_ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-2:123456789012:instance/*"]]}
# Logical ids, pinned so that renaming a construct id stays a deliberate change.
TEMPLATE_ID = "Rehearsal941F2514"
ROLE_ID = "RehearsalRole5C6D8178"


@pytest.fixture(scope="module")
def resources(tmp_path_factory) -> dict:
    outdir = tmp_path_factory.mktemp("spot-interruption-rehearsal")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    SpotInterruptionRehearsal(stack, "Rehearsal", environment_name="probe")
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def check_the_construct_writes_the_template_and_its_role(resources):
    types = {logical_id: resource["Type"] for logical_id, resource in resources.items()}
    assert types == {TEMPLATE_ID: "AWS::FIS::ExperimentTemplate", ROLE_ID: "AWS::IAM::Role"}


def check_the_template_interrupts_one_running_spot_node_of_the_environment_two_minutes_after_the_notice(resources):
    assert resources[TEMPLATE_ID]["Properties"] == {
        "Description": "gpufleet probe: interrupt one running spot node (notice two minutes ahead)",
        "RoleArn": {"Fn::GetAtt": [ROLE_ID, "Arn"]},
        "StopConditions": [{"Source": "none"}],
        "Targets": {
            "SpotNode": {
                "ResourceType": "aws:ec2:spot-instance",
                "ResourceTags": {"gpufleet:environment": "probe"},
                "Filters": [{"Path": "State.Name", "Values": ["running"]}],
                "SelectionMode": "COUNT(1)",
            }
        },
        "Actions": {
            "InterruptSpotNode": {
                "ActionId": "aws:ec2:send-spot-instance-interruptions",
                "Description": "a spot interruption notice, then the interruption",
                "Parameters": {"durationBeforeInterruption": "PT2M"},
                "Targets": {"SpotInstances": "SpotNode"},
            }
        },
        "Tags": {"Name": "gpufleet-probe-spot-interruption"},
    }


def check_the_role_is_fis_and_may_interrupt_this_environments_nodes_only(resources):
    role = resources[ROLE_ID]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "fis.amazonaws.com"}}
    ]
    assert role["Policies"] == [
        {
            "PolicyName": "InterruptSpotNodes",
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": "ec2:SendSpotInstanceInterruptions",
                        "Condition": {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "probe"}},
                        "Effect": "Allow",
                        "Resource": INSTANCES_ARN,
                    },
                    {"Action": "ec2:DescribeInstances", "Effect": "Allow", "Resource": "*"},
                ],
                "Version": "2012-10-17",
            },
        }
    ]
    assert [finding["id"] for finding in resources[ROLE_ID]["Metadata"]["cdk_nag"]["rules_to_suppress"]] == [
        "AwsSolutions-IAM5[Resource::*]",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-2:123456789012:instance/*]",
    ]


def test_the_cdk_nag_synthesis_passes_every_check(resources):
    """The checks on the one cdk-nag synthesis above, in one test (see tests/stacks/constructs/
    test_capacity_block_warning.py for why)."""
    check_the_construct_writes_the_template_and_its_role(resources)
    check_the_template_interrupts_one_running_spot_node_of_the_environment_two_minutes_after_the_notice(resources)
    check_the_role_is_fis_and_may_interrupt_this_environments_nodes_only(resources)
