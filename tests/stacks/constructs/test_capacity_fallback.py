"""The capacity fallback on its own, for both backends: the schedule, the function and what its role may touch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Match, Template

from gpufleet.environment import Fallback
from stacks.constructs.capacity_fallback import CapacityFallback
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, REGION
from tests.stacks.test_iam_resources import StackContext, policy_statements, unmatched_pairs, unmatched_resources

GROUP_NAME = "gpufleet-probe-nodes"


def add_fallback(stack: cdk.Stack, backend: str) -> CapacityFallback:
    if backend == "spot-fleet":
        fleet = ec2.CfnSpotFleet(
            stack,
            "Fleet",
            spot_fleet_request_config_data=ec2.CfnSpotFleet.SpotFleetRequestConfigDataProperty(
                iam_fleet_role="arn:aws:iam::123456789012:role/fleet", target_capacity=8
            ),
        )
        node_group_id = fleet.ref
    elif backend == "auto-scaling-ref":
        # As the cluster stack will wire it: the group's name is a reference to a group in the same stack (a bare
        # stand-in here, whose own findings are not the fallback's).
        group = autoscaling.CfnAutoScalingGroup(stack, "Group", max_size="1", min_size="1")
        for finding in ("AwsSolutions::AwsSolutions-AS3", "CloudFormation-Validate::F3014"):
            cdk.Validations.of(group).acknowledge(
                cdk.Acknowledgment(id=finding, reason="a stand-in group for the capacity fallback test")
            )
        backend, node_group_id = "auto-scaling", group.ref
    else:
        node_group_id = GROUP_NAME
    return CapacityFallback(
        stack,
        "CapacityFallback",
        backend=backend,
        node_group_id=node_group_id,
        environment_name="probe",
        on_demand_floor=2,
        fallback=Fallback(after_minutes=15, restore_after_minutes=30, max_extra_on_demand=2),
        log_retention=logs.RetentionDays.ONE_MONTH,
    )


def statements_of(template: Template) -> list[dict]:
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


PARAMETER_ARN = {
    "Fn::Join": [
        "",
        ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-1:123456789012:parameter/gpufleet/probe/fallback"],
    ]
}


def test_the_schedule_runs_the_function_every_five_minutes(stack):
    add_fallback(stack, "spot-fleet")
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": "rate(5 minutes)",
            "State": "ENABLED",
            "Targets": [Match.object_like({"RetryPolicy": {"MaximumRetryAttempts": 0}})],
        },
    )
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Runtime": "python3.14",
            "Handler": "handler.on_schedule",
            "Timeout": 60,
            "Environment": {
                "Variables": {
                    "BACKEND": "spot-fleet",
                    "NODE_GROUP_ID": {"Ref": "Fleet"},
                    "PARAMETER_NAME": "/gpufleet/probe/fallback",
                    "FLOOR": "2",
                    "AFTER_MINUTES": "15",
                    "RESTORE_AFTER_MINUTES": "30",
                    "MAX_EXTRA_ON_DEMAND": "2",
                }
            },
        },
    )
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})
    # The state parameter is the function's own: a deploy cannot write an old value back.
    assert template.find_resources("AWS::SSM::Parameter") == {}


def test_on_a_spot_fleet_the_role_may_change_that_fleet_request_and_the_state_parameter(stack):
    add_fallback(stack, "spot-fleet")
    statements = statements_of(Template.from_stack(stack))
    fleet_arn = {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:spot-fleet-request/", {"Ref": "Fleet"}],
        ]
    }
    assert {"Action": ["ssm:GetParameter", "ssm:PutParameter"], "Effect": "Allow", "Resource": PARAMETER_ARN} in (
        statements
    )
    assert {
        "Action": [
            "ec2:ModifySpotFleetRequest",
            "ec2:DescribeSpotFleetInstances",
            "ec2:DescribeSpotFleetRequestHistory",
        ],
        "Effect": "Allow",
        "Resource": fleet_arn,
    } in statements
    assert {
        "Action": ["ec2:DescribeSpotFleetRequests", "ec2:DescribeInstances"],
        "Effect": "Allow",
        "Resource": "*",
    } in statements
    assert not any("autoscaling" in json.dumps(statement) for statement in statements)


def test_on_an_auto_scaling_group_the_role_may_update_that_group_only(stack):
    add_fallback(stack, "auto-scaling")
    statements = statements_of(Template.from_stack(stack))
    assert {
        "Action": "autoscaling:UpdateAutoScalingGroup",
        "Effect": "Allow",
        "Resource": {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    ":autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/gpufleet-probe-nodes",
                ],
            ]
        },
    } in statements
    assert {
        "Action": [
            "autoscaling:DescribeAutoScalingGroups",
            "autoscaling:DescribeScalingActivities",
            "ec2:DescribeInstances",
        ],
        "Effect": "Allow",
        "Resource": "*",
    } in statements
    assert not any("ec2:ModifySpotFleetRequest" in json.dumps(statement) for statement in statements)


@pytest.mark.parametrize("backend", ["spot-fleet", "auto-scaling", "auto-scaling-ref"])
def test_every_policy_resource_matches_the_service_authorization_reference(stack, backend):
    add_fallback(stack, backend)
    template = Template.from_stack(stack).to_json()
    context = StackContext(
        "Probe",
        REGION,
        ACCOUNT,
        {logical_id: resource["Type"] for logical_id, resource in template["Resources"].items()},
    )
    problems = [
        problem
        for statement in policy_statements(template, context)
        for problem in unmatched_resources(statement, context) + unmatched_pairs(statement, context)
    ]
    assert problems == []


@pytest.mark.parametrize("backend", ["spot-fleet", "auto-scaling", "auto-scaling-ref"])
def test_cdk_nag_passes_with_reasoned_acknowledgements(tmp_path, backend):
    app = cdk.App(outdir=str(tmp_path), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    add_fallback(stack, backend)
    app.synth()  # raises on an unacknowledged finding
    template = json.loads((tmp_path / "Probe.template.json").read_text())
    rules = [
        rule
        for logical_id, resource in template["Resources"].items()
        if logical_id.startswith("CapacityFallback")
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert rules and all("[" in rule["id"] and "capacity fallback" in rule["reason"] for rule in rules)


def test_the_asset_carries_the_decision_as_a_file(tmp_path):
    app = cdk.App(outdir=str(tmp_path), context=CDK_CONTEXT)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    add_fallback(stack, "spot-fleet")
    app.synth()
    (asset,) = [
        path
        for path in tmp_path.glob("asset.*")
        if (path / "handler.py").exists() and "capacity fallback" in (path / "handler.py").read_text()
    ]
    decision = asset / "gpufleet" / "fallback.py"
    assert not decision.is_symlink()
    assert decision.read_text() == Path("gpufleet/fallback.py").read_text()
    assert sorted(p.name for p in asset.iterdir()) == ["__init__.py", "gpufleet", "handler.py", "state_cleanup.py"]
    # As Lambda loads it: the asset first on the path, from another directory; its gpufleet is the asset's.
    probe = "import handler, gpufleet.fallback as decision; print(decision.__file__, handler.on_schedule.__name__)"
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(asset)!r}); {probe}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(decision), "on_schedule"]


def test_the_state_parameter_goes_with_the_stack_after_everything_that_writes_it(stack):
    """The custom resource that deletes /gpufleet/ENV/fallback: CloudFormation deletes the schedule, its permission to
    invoke, the function, its role and policy first (they depend on it), so no run writes the parameter afterwards."""
    add_fallback(stack, "spot-fleet")
    template = Template.from_stack(stack)
    resources = template.to_json()["Resources"]
    ((cleanup_id, cleanup),) = template.find_resources("Custom::GpufleetFallbackState").items()
    (function_id,) = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "state_cleanup.on_event"}}
    )
    # CDK's Provider answers CloudFormation: its framework function calls state_cleanup.on_event.
    framework_id = "CapacityFallbackStateCleanupProviderframeworkonEvent96AA7E9A"
    assert cleanup["Properties"] == {
        "ServiceToken": {"Fn::GetAtt": [framework_id, "Arn"]},
        "ServiceTimeout": "300",
        "ParameterName": "/gpufleet/probe/fallback",
    }
    assert resources[framework_id]["Properties"]["Environment"]["Variables"] == {
        "USER_ON_EVENT_FUNCTION_ARN": {"Fn::GetAtt": [function_id, "Arn"]}
    }
    assert cleanup["DeletionPolicy"] == "Delete" and "DependsOn" not in cleanup
    writers = {
        logical_id
        for logical_id, resource in resources.items()
        if logical_id.startswith(("CapacityFallbackRole", "CapacityFallbackFunction", "CapacityFallbackSchedule"))
    }
    assert {resources[logical_id]["Type"] for logical_id in writers} == {
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
        "AWS::Lambda::Function",
        "AWS::Lambda::Permission",
        "AWS::Events::Rule",
    }
    for logical_id in writers:
        assert cleanup_id in resources[logical_id]["DependsOn"], logical_id
    # Only the cleanup's own role may delete the parameter; the scheduled function's role may only read and write it.
    deletes = [
        (logical_id, statement)
        for logical_id, policy in template.find_resources("AWS::IAM::Policy").items()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "ssm:DeleteParameter" in json.dumps(statement["Action"])
    ]
    assert [
        (logical_id.startswith("CapacityFallbackStateCleanupRole"), statement) for logical_id, statement in deletes
    ] == [(True, {"Action": "ssm:DeleteParameter", "Effect": "Allow", "Resource": PARAMETER_ARN})]


def test_an_unknown_backend_is_refused(stack):
    with pytest.raises(ValueError, match="backend 'ec2-fleet': spot-fleet or auto-scaling"):
        add_fallback(stack, "ec2-fleet")
