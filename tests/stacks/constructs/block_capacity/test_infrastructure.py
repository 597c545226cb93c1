"""The block capacity custom resource as a Capacity Block group brings it: synthesized once as `cdk synth` does
(cdk-nag attached), in us-east-2 so that every ARN shows the stack's region. cfn-lint reads it with the shipped
p5-block environment's templates (tests/stacks/test_compliance.py)."""

from __future__ import annotations

import datetime as dt
import json
import py_compile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs

from gpufleet.block_schedule import ACTION_LEAD
from stacks.constructs.block_capacity.infrastructure import HANDLER_TIMEOUT, RUNTIME_DIR
from stacks.constructs.gpu_auto_scaling_group import GpuAutoScalingGroup
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
# Logical ids (the cluster stack's too: the construct path NodeGroup/BlockCapacity/...). A new one would create a new
# resource, which schedules the block again, and delete the old one, which deletes the scheduled actions the new one
# has just put (their names are fixed): they are written out so that a change shows.
BLOCK_CAPACITY_ID = "NodeGroupBlockCapacity5D2E1478"
GROUP_ID = "NodeGroupA8D4A5C5"
ROLE_ID = "NodeGroupBlockCapacityHandlerRole0C3356C6"
POLICY_ID = "NodeGroupBlockCapacityHandlerRoleDefaultPolicy41A64BF7"
HANDLER_LOGS_ID = "NodeGroupBlockCapacityHandlerLogs143A0798"
PROVIDER_LOGS_ID = "NodeGroupBlockCapacityProviderLogs57DC6415"
ON_EVENT_ID = "NodeGroupBlockCapacityOnEventHandler522640DC"
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
BLOCK = {
    "reservation_id": "cr-0123456789abcdef0",
    "start": "2027-01-11T11:30:00Z",
    "end": "2027-01-18T11:30:00Z",
}


@pytest.fixture(scope="module")
def outdir(tmp_path_factory) -> Path:
    """The cloud assembly's folder. The handler's bytecode is written first, as importing it does (the handler
    tests do), so that the asset shows what it leaves out."""
    for source in ("handler.py", "gpufleet/block_schedule.py"):
        py_compile.compile(str(RUNTIME_DIR / source), doraise=True)
    outdir = tmp_path_factory.mktemp("block-capacity")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    probe = environment(
        region=REGION,
        availability_zone="us-east-2a",
        instance_type="p5.48xlarge",
        capacity={"target": 2, "on_demand": 2, "capacity_block": BLOCK},
        fleet={"backend": "auto-scaling"},
    )
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
        capacity_block=probe.capacity.capacity_block,
        launch_template=add_launch_template(stack, probe),
        subnet_id="subnet-0123456789abcdef0",
        log_retention=logs.RetentionDays.TWO_WEEKS,
    )
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return outdir


@pytest.fixture(scope="module")
def resources(outdir) -> dict:
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def check_the_resource_holds_the_blocks_dates_not_the_time_of_synthesis(resources):
    """The Ref makes CloudFormation create or update the group first; the group wants no node of its own (no
    DesiredCapacity: it starts at MinSize 0), and the template has no scheduled action whose time synthesis fixed."""
    block_capacity = resources[BLOCK_CAPACITY_ID]
    assert block_capacity["Type"] == "Custom::GpufleetBlockCapacity"
    assert block_capacity["Properties"] == {
        "ServiceToken": {"Fn::GetAtt": ["NodeGroupBlockCapacityProviderframeworkonEvent813DD2DC", "Arn"]},
        "AutoScalingGroupName": {"Ref": GROUP_ID},
        "Target": 2,
        "Start": "2027-01-11T11:30:00Z",
        "End": "2027-01-18T11:30:00Z",
    }
    group = resources[GROUP_ID]["Properties"]
    assert "DesiredCapacity" not in group
    assert (group["MinSize"], group["MaxSize"]) == ("0", "2")
    assert resources[GROUP_ID]["UpdatePolicy"] == {
        "AutoScalingScheduledAction": {"IgnoreUnmodifiedGroupSizeProperties": True}
    }
    assert not [r for r in resources.values() if r["Type"] == "AWS::AutoScaling::ScheduledAction"]
    assert not [r for r in resources.values() if r["Type"] == "Custom::GpufleetGroupCapacity"]


def check_the_handler_knows_the_environment(resources):
    properties = resources[ON_EVENT_ID]["Properties"]
    assert {key: value for key, value in properties.items() if key != "Code"} == {
        "Description": "Schedules the gpufleet Capacity Block group's nodes from the time of the deploy",
        "Environment": {"Variables": {"ENVIRONMENT_NAME": "probe"}},
        "Handler": "handler.on_event",
        "LoggingConfig": {"LogGroup": {"Ref": HANDLER_LOGS_ID}},
        "Role": {"Fn::GetAtt": [ROLE_ID, "Arn"]},
        "Runtime": "python3.14",
        "Timeout": 60,
    }


def check_the_handler_role_may_schedule_only_the_environments_group_and_read(resources):
    assert (
        resources[ROLE_ID]["Properties"]["Description"] == "gpufleet probe: schedule the Capacity Block group's nodes"
    )
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
            "Action": [
                "autoscaling:DeleteScheduledAction",
                "autoscaling:PutScheduledUpdateGroupAction",
                "autoscaling:SetDesiredCapacity",
            ],
            "Condition": {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": GROUP_ARN,
        },
        {
            "Action": ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScheduledActions"],
            "Effect": "Allow",
            "Resource": "*",
        },
    ]


def check_the_wildcards_of_the_handler_role_are_acknowledged_with_their_reasons(resources):
    expected = [
        {
            "id": "AwsSolutions-IAM5[Resource::*]",
            "reason": "autoscaling:DescribeAutoScalingGroups, autoscaling:DescribeScheduledActions support no "
            "resource-level permissions and are read-only; the handler reads the node group's desired capacity and "
            "finds its own scheduled actions",
        },
        {
            "id": "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:us-east-2:123456789012:"
            "autoScalingGroup:*:autoScalingGroupName/gpufleet-probe-nodes]",
            "reason": "the group id in an Auto Scaling group ARN is known only once the group exists; the name and "
            "the condition aws:ResourceTag/gpufleet:environment=probe limit the handler to the environment's own "
            "group",
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


def check_the_providers_own_findings_are_acknowledged_for_the_schedule(resources):
    reasons = [
        rule["reason"]
        for logical_id, resource in resources.items()
        if logical_id.startswith("NodeGroupBlockCapacityProvider")
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert reasons and all("of the Capacity Block node group's schedule" in reason for reason in reasons)


def check_the_handlers_asset_holds_the_handler_and_the_schedule_without_bytecode(outdir):
    (asset,) = [
        path
        for path in outdir.glob("asset.*")
        if (path / "handler.py").exists() and "PutScheduledUpdateGroupAction" in (path / "handler.py").read_text()
    ]
    assert (RUNTIME_DIR / "__pycache__").is_dir() and (RUNTIME_DIR / "gpufleet" / "__pycache__").is_dir()
    assert asset_files(asset) == [
        "__init__.py",
        "gpufleet",
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/block_schedule.py",
        "gpufleet/constants.py",
        "handler.py",
    ]
    assert (asset / "handler.py").read_text() == (RUNTIME_DIR / "handler.py").read_text()
    assert copied_from_gpufleet(asset) == {"aws_faults.py": True, "block_schedule.py": True, "constants.py": True}
    assert imported_in_lambda(asset, ["handler"]) == [
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/block_schedule.py",
        "gpufleet/constants.py",
        "handler.py",
    ]


def test_the_cdk_nag_synthesis_passes_every_check(resources, outdir):
    """The checks on the one cdk-nag synthesis above, in one test: mutmut (make mutate) gives a mutant only the
    tests during which the construct ran (see tests/stacks/constructs/fleet_teardown/test_infrastructure.py)."""
    check_the_resource_holds_the_blocks_dates_not_the_time_of_synthesis(resources)
    check_the_handler_knows_the_environment(resources)
    check_the_handler_role_may_schedule_only_the_environments_group_and_read(resources)
    check_the_wildcards_of_the_handler_role_are_acknowledged_with_their_reasons(resources)
    check_the_log_groups_keep_the_retention_asked_for_and_go_with_the_stack(resources)
    check_the_providers_own_findings_are_acknowledged_for_the_schedule(resources)
    check_the_handlers_asset_holds_the_handler_and_the_schedule_without_bytecode(outdir)


def test_every_action_the_handler_computes_is_still_ahead_when_its_last_call_can_come():
    """The handler schedules nothing sooner than ACTION_LEAD after it starts, and Lambda ends it after its timeout."""
    assert ACTION_LEAD > dt.timedelta(seconds=HANDLER_TIMEOUT.to_seconds())
