"""The node role's readiness tag permission on its own (cdk-nag attached, as `cdk synth` runs it): ec2:CreateTags of
the readiness key only, on the environment's instances only, from an instance only."""

from __future__ import annotations

import json
import warnings

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from stacks.constructs.node_readiness import let_nodes_mark_their_readiness
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, REGION

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # parliament 1.6.4 reads its data through pkg_resources
    from parliament import iam_definition


@pytest.fixture(scope="module")
def resources(tmp_path_factory) -> dict:
    outdir = tmp_path_factory.mktemp("node-readiness")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    let_nodes_mark_their_readiness(stack, role=role, environment_name="probe")
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def the_policy(resources: dict) -> dict:
    (policy,) = [resource for resource in resources.values() if resource["Type"] == "AWS::IAM::Policy"]
    return policy["Properties"]


def test_the_node_role_may_set_the_readiness_key_on_its_environments_instances_from_an_instance(resources):
    policy = the_policy(resources)

    assert policy["Roles"] == [{"Ref": "NodeRoleB5643E21"}]
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Action": "ec2:CreateTags",
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:instance/*"]]
            },
            "Condition": {
                "StringEquals": {"aws:ResourceTag/gpufleet:environment": "probe"},
                "ForAllValues:StringEquals": {"aws:TagKeys": ["gpufleet:readiness"]},
                "Null": {"ec2:SourceInstanceARN": "false"},
            },
        }
    ]


def test_every_condition_key_is_one_the_reference_lists_for_tagging_an_instance(resources):
    """The instance resource type's keys for ec2:CreateTags, and ec2:SourceInstanceARN among EC2's own keys (Service
    Authorization Reference, as parliament bundles it)."""
    (statement,) = the_policy(resources)["PolicyDocument"]["Statement"]
    (ec2,) = [service for service in iam_definition if service["prefix"] == "ec2"]
    (create_tags,) = [privilege for privilege in ec2["privileges"] if privilege["privilege"] == "CreateTags"]
    (instance,) = [entry for entry in create_tags["resource_types"] if entry["resource_type"] == "instance"]
    listed = {key.replace("${TagKey}", "gpufleet:environment") for key in instance["condition_keys"]}

    used = {key for operator in statement["Condition"].values() for key in operator}

    assert used - listed == {"ec2:SourceInstanceARN"}
    assert "ec2:SourceInstanceARN" in {condition["condition"] for condition in ec2["conditions"]}
