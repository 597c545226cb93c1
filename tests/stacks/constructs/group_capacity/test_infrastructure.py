"""The group capacity custom resource as an Auto Scaling group without a Capacity Block brings it: synthesized once as
`cdk synth` does (cdk-nag attached) for a group that takes new images in place (rollout manual), in us-east-2 so that
every ARN shows the stack's region; the replace-all group of the matrix is tests/stacks/constructs/
test_gpu_auto_scaling_group.py's."""

from __future__ import annotations

import json
import py_compile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs

from stacks.constructs.gpu_auto_scaling_group import GpuAutoScalingGroup
from stacks.constructs.group_capacity.infrastructure import RUNTIME_DIR
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import (
    ACCOUNT,
    asset_files,
    copied_from_gpufleet,
    environment,
    imported_in_lambda,
)
from tests.stacks.constructs.test_node_launch_template import add_launch_template

REGION = "us-east-2"
# Logical ids (the cluster stack's too: the construct path NodeGroup/Capacity/...). A new one would only create a new
# resource, which sets the desired capacity again, and delete the old one, which does nothing; they are written out so
# that a change shows.
CAPACITY_ID = "NodeGroupCapacityFB91B065"
GROUP_ID = "NodeGroupA8D4A5C5"
ROLE_ID = "NodeGroupCapacityHandlerRoleACBA297E"
POLICY_ID = "NodeGroupCapacityHandlerRoleDefaultPolicyAC2B2061"
HANDLER_LOGS_ID = "NodeGroupCapacityHandlerLogsC043B692"
PROVIDER_LOGS_ID = "NodeGroupCapacityProviderLogsD414886E"
ON_EVENT_ID = "NodeGroupCapacityOnEventHandlerDE224712"
IS_COMPLETE_ID = "NodeGroupCapacityIsCompleteHandlerCD2F608E"
WAITER_ID = "NodeGroupCapacityProviderwaiterstatemachine1E00A2C9"
GROUP_ARN = {
    "Fn::Join": [
        "",
        [
            "arn:",
            {"Ref": "AWS::Partition"},
            ":autoscaling:us-east-2:123456789012:autoScalingGroup:*:autoScalingGroupName/gpufleet-probe-nodes",
        ],
    ]
}


@pytest.fixture(scope="module")
def outdir(tmp_path_factory) -> Path:
    """The cloud assembly's folder. The handler's bytecode is written first, as importing it does (the handler
    tests do), so that the asset shows what it leaves out."""
    for source in ("handler.py", "gpufleet/aws_faults.py"):
        py_compile.compile(str(RUNTIME_DIR / source), doraise=True)
    outdir = tmp_path_factory.mktemp("group-capacity")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    probe = environment(region=REGION, availability_zone="us-east-2a", fleet={"backend": "auto-scaling"})
    GpuAutoScalingGroup(
        stack,
        "NodeGroup",
        environment_name=probe.name,
        name_prefix=probe.auto_scaling_group_prefix,
        instance_type=probe.instance_type,
        target=probe.capacity.target,
        on_demand=probe.capacity.on_demand,
        fleet=probe.fleet,
        reservation=None,
        capacity_block=None,
        launch_template=add_launch_template(stack, probe),
        subnet_id="subnet-0123456789abcdef0",
        log_retention=logs.RetentionDays.TWO_WEEKS,
    )
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return outdir


@pytest.fixture(scope="module")
def resources(outdir) -> dict:
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def check_the_resource_names_the_group_its_target_and_rollout(resources):
    """The Ref makes CloudFormation create or update the group (its MaxSize first) before the resource; under manual
    the handler never waits for nodes."""
    capacity = resources[CAPACITY_ID]
    assert capacity["Type"] == "Custom::GpufleetGroupCapacity"
    assert capacity["Properties"] == {
        "ServiceToken": {"Fn::GetAtt": ["NodeGroupCapacityProviderframeworkonEventA86B63B7", "Arn"]},
        "AutoScalingGroupName": {"Ref": GROUP_ID},
        "Target": 2,
        "Rollout": "manual",
    }
    assert "DesiredCapacity" not in resources[GROUP_ID]["Properties"]
    assert (resources[GROUP_ID]["Properties"]["MinSize"], resources[GROUP_ID]["Properties"]["MaxSize"]) == ("0", "2")


def check_the_handlers_know_the_environment_and_wait_45_minutes_at_most(resources):
    expected = {
        ON_EVENT_ID: ("handler.on_event", "Sets the gpufleet node group's desired capacity to its target"),
        IS_COMPLETE_ID: (
            "handler.is_complete",
            "Says whether a new gpufleet node group has its nodes InService (rollout replace-all)",
        ),
    }
    for logical_id, (handler, description) in expected.items():
        properties = resources[logical_id]["Properties"]
        assert {key: value for key, value in properties.items() if key != "Code"} == {
            "Description": description,
            "Environment": {
                "Variables": {
                    "ENVIRONMENT_NAME": "probe",
                    "WAIT_SECONDS": "2700",
                }
            },
            "Handler": handler,
            "LoggingConfig": {"LogGroup": {"Ref": HANDLER_LOGS_ID}},
            "Role": {"Fn::GetAtt": [ROLE_ID, "Arn"]},
            "Runtime": "python3.14",
            "Timeout": 60,
        }, logical_id
    assert resources[ON_EVENT_ID]["Properties"]["Code"] == resources[IS_COMPLETE_ID]["Properties"]["Code"]


def check_the_provider_polls_every_30_seconds_for_50_minutes(resources):
    """aws-cdk-lib's Provider retries is_complete total_timeout / query_interval times: 50 min / 30 s. The handler's
    own 45 minutes (WAIT_SECONDS) end first, so CloudFormation hears its reason, inside the hour CloudFormation waits
    for a custom resource."""
    parts = resources[WAITER_ID]["Properties"]["DefinitionString"]["Fn::Join"][1]
    definition = json.loads("".join(part for part in parts if isinstance(part, str)))
    assert definition["States"]["framework-isComplete-task"]["Retry"] == [
        {"ErrorEquals": ["States.ALL"], "IntervalSeconds": 30, "MaxAttempts": 100, "BackoffRate": 1}
    ]


def check_the_handler_role_may_size_only_the_environments_group_and_read(resources):
    assert resources[ROLE_ID]["Properties"]["Description"] == "gpufleet probe: set the node group's desired capacity"
    policy = resources[POLICY_ID]["Properties"]
    assert policy["Roles"] == [{"Ref": ROLE_ID}]
    # Action names as the Service Authorization Reference spells them (parliament 1.6.4's iam_definition.json).
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [HANDLER_LOGS_ID, "Arn"]},
        },
        {
            "Action": "autoscaling:SetDesiredCapacity",
            "Condition": {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": GROUP_ARN,
        },
        {
            "Action": ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities"],
            "Effect": "Allow",
            "Resource": "*",
        },
    ]


def check_the_wildcards_of_the_handler_role_are_acknowledged_with_their_reasons(resources):
    expected = [
        {
            "id": "AwsSolutions-IAM5[Resource::*]",
            "reason": "autoscaling:DescribeAutoScalingGroups, autoscaling:DescribeScalingActivities support no "
            "resource-level permissions and are read-only; the handler counts the group's nodes InService and reads "
            "why launches failed",
        },
        {
            "id": "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:us-east-2:123456789012:"
            "autoScalingGroup:*:autoScalingGroupName/gpufleet-probe-nodes]",
            "reason": "the group id in an Auto Scaling group ARN is known only once the group exists; the name and "
            "the condition aws:ResourceTag/gpufleet:environment=probe limit SetDesiredCapacity to the environment's "
            "own group",
        },
    ]
    for logical_id in (ROLE_ID, POLICY_ID):
        assert resources[logical_id]["Metadata"]["cdk_nag"]["rules_to_suppress"] == expected, logical_id


def check_the_log_groups_keep_the_retention_asked_for_and_go_with_the_stack(resources):
    for logical_id in (HANDLER_LOGS_ID, PROVIDER_LOGS_ID):
        assert resources[logical_id] == {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"RetentionInDays": 14},
            "UpdateReplacePolicy": "Delete",
            "DeletionPolicy": "Delete",
        }, logical_id


def check_the_providers_own_findings_are_acknowledged_for_the_group_capacity(resources):
    reasons = [
        rule["reason"]
        for logical_id, resource in resources.items()
        if logical_id.startswith("NodeGroupCapacityProvider")
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert reasons and all("of the node group's capacity" in reason for reason in reasons)


def check_the_handlers_asset_holds_the_handler_without_its_bytecode(outdir):
    (asset,) = [
        path
        for path in outdir.glob("asset.*")
        if (path / "handler.py").exists() and "SetDesiredCapacity" in (path / "handler.py").read_text()
    ]
    assert (RUNTIME_DIR / "__pycache__").is_dir() and (RUNTIME_DIR / "gpufleet" / "__pycache__").is_dir()
    assert asset_files(asset) == [
        "__init__.py",
        "gpufleet",
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/constants.py",
        "handler.py",
    ]
    assert (asset / "handler.py").read_text() == (RUNTIME_DIR / "handler.py").read_text()
    assert copied_from_gpufleet(asset) == {"aws_faults.py": True, "constants.py": True}
    assert imported_in_lambda(asset, ["handler"]) == [
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/constants.py",
        "handler.py",
    ]


def test_the_cdk_nag_synthesis_passes_every_check(resources, outdir):
    """The checks on the one cdk-nag synthesis above, in one test: mutmut (make mutate) gives a mutant only the
    tests during which the construct ran (see tests/stacks/constructs/fleet_teardown/test_infrastructure.py)."""
    check_the_resource_names_the_group_its_target_and_rollout(resources)
    check_the_handlers_know_the_environment_and_wait_45_minutes_at_most(resources)
    check_the_provider_polls_every_30_seconds_for_50_minutes(resources)
    check_the_handler_role_may_size_only_the_environments_group_and_read(resources)
    check_the_wildcards_of_the_handler_role_are_acknowledged_with_their_reasons(resources)
    check_the_log_groups_keep_the_retention_asked_for_and_go_with_the_stack(resources)
    check_the_providers_own_findings_are_acknowledged_for_the_group_capacity(resources)
    check_the_handlers_asset_holds_the_handler_without_its_bytecode(outdir)
