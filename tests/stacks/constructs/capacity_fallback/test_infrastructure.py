"""The capacity fallback on its own, for both backends: the schedule, the function and what its role may touch."""

from __future__ import annotations

import json
import py_compile
import warnings

import aws_cdk as cdk
import pytest
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Match, Template

from gpufleet.environment import Fallback
from gpufleet.fallback import GROUP_LAUNCH_PERMISSIONS
from stacks.constructs.capacity_fallback.infrastructure import RUNTIME_DIR, CapacityFallback, nag_rendering
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.fallback_model.model import Availability
from tests.fallback_model.simulation import Simulation
from tests.stacks.constructs.conftest import ACCOUNT, REGION, asset_files, copied_from_gpufleet, imported_in_lambda
from tests.stacks.test_iam_resources import StackContext, policy_statements, unmatched_pairs, unmatched_resources

GROUP_NAME = "gpufleet-probe-nodes"


NODE_ROLE_ARN = "arn:aws:iam::123456789012:role/gpufleet-probe-nodes"
LAUNCH_TEMPLATE_ID = "lt-0123456789abcdef0"


def add_fallback(stack: cdk.Stack, backend: str, checkpoint_hook: bool = True) -> CapacityFallback:
    launch: dict[str, str] = {}
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
        for finding in (
            "AwsSolutions::AwsSolutions-AS3",
            "AwsSolutions::AwsSolutions-EC26",
            "CloudFormation-Validate::F3014",
        ):
            cdk.Validations.of(group).acknowledge(
                cdk.Acknowledgment(id=finding, reason="a stand-in group for the capacity fallback test")
            )
        template = ec2.CfnLaunchTemplate(stack, "LaunchTemplate", launch_template_data={})
        node_role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
        backend, node_group_id = "auto-scaling", group.ref
        launch = {"launch_template_id": template.ref, "node_role_arn": node_role.role_arn}
    else:
        node_group_id = GROUP_NAME
        launch = {"launch_template_id": LAUNCH_TEMPLATE_ID, "node_role_arn": NODE_ROLE_ARN}
    return CapacityFallback(
        stack,
        "CapacityFallback",
        backend=backend,
        node_group_id=node_group_id,
        environment_name="probe",
        target=8,
        on_demand_floor=2,
        fallback=Fallback(after_minutes=15, restore_after_minutes=30, max_extra_on_demand=2),
        checkpoint_hook=checkpoint_hook,
        log_retention=logs.RetentionDays.ONE_MONTH,
        **launch,
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


def test_the_schedule_runs_the_function_every_five_minutes_with_four_minutes_and_no_retry(stack):
    """Four minutes: two for the calls, two for the hand-back's wait on the checkpoint hook
    (gpufleet.fallback.HAND_BACK_HOOK_WAIT), inside the five between two runs."""
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
            "Timeout": 240,
            "Environment": {
                "Variables": {
                    "BACKEND": "spot-fleet",
                    "NODE_GROUP_ID": {"Ref": "Fleet"},
                    "PARAMETER_NAME": "/gpufleet/probe/fallback",
                    "TARGET": "8",
                    "FLOOR": "2",
                    "AFTER_MINUTES": "15",
                    "RESTORE_AFTER_MINUTES": "30",
                    "MAX_EXTRA_ON_DEMAND": "2",
                    "CHECKPOINT_COMMAND": ". /etc/gpufleet/node.env && GPUFLEET_NOTICE_PATH=capacity-fallback "
                    'GPUFLEET_NOTICE=hand-back bash -c "$GPUFLEET_CHECKPOINT_HOOK"',
                }
            },
        },
    )
    # A failed run is not retried: the next scheduled run is the retry.
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {"FunctionName": {"Ref": Match.string_like_regexp("^CapacityFallbackFunction")}, "MaximumRetryAttempts": 0},
    )
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})
    # The state parameter is the function's own: a deploy cannot write an old value back.
    assert template.find_resources("AWS::SSM::Parameter") == {}


FLEET_ARN = {
    "Fn::Join": [
        "",
        ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:spot-fleet-request/", {"Ref": "Fleet"}],
    ]
}
INSTANCES_ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:instance/*"]]}
RUN_SHELL_SCRIPT_ARN = {
    "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-1::document/AWS-RunShellScript"]]
}
ENVIRONMENT_NODES = {"StringEquals": {"ec2:ResourceTag/gpufleet:environment": "probe"}}


def test_on_a_spot_fleet_the_role_may_change_that_fleet_request_end_and_checkpoint_its_nodes(stack):
    add_fallback(stack, "spot-fleet")
    statements = statements_of(Template.from_stack(stack))
    for statement in (
        {"Action": ["ssm:GetParameter", "ssm:PutParameter"], "Effect": "Allow", "Resource": PARAMETER_ARN},
        {
            "Action": [
                "ec2:ModifySpotFleetRequest",
                "ec2:DescribeSpotFleetInstances",
                "ec2:DescribeSpotFleetRequestHistory",
            ],
            "Effect": "Allow",
            "Resource": FLEET_ARN,
        },
        {
            "Action": "ec2:TerminateInstances",
            "Condition": ENVIRONMENT_NODES,
            "Effect": "Allow",
            "Resource": INSTANCES_ARN,
        },
        {"Action": "ssm:SendCommand", "Effect": "Allow", "Resource": RUN_SHELL_SCRIPT_ARN},
        {
            "Action": "ssm:SendCommand",
            "Condition": {"StringEquals": {"ssm:resourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": INSTANCES_ARN,
        },
        {
            "Action": ["ec2:DescribeSpotFleetRequests", "ec2:DescribeInstances", "ssm:GetCommandInvocation"],
            "Effect": "Allow",
            "Resource": "*",
        },
    ):
        assert statement in statements, statement
    assert not any("autoscaling" in json.dumps(statement) for statement in statements)


def test_without_a_checkpoint_hook_a_spot_fleet_fallback_sends_no_command(stack):
    add_fallback(stack, "spot-fleet", checkpoint_hook=False)
    template = Template.from_stack(stack)
    statements = statements_of(template)
    assert not any("ssm:SendCommand" in json.dumps(statement) for statement in statements)
    assert {
        "Action": ["ec2:DescribeSpotFleetRequests", "ec2:DescribeInstances"],
        "Effect": "Allow",
        "Resource": "*",
    } in statements
    (function,) = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "handler.on_schedule"}}
    ).values()
    assert "CHECKPOINT_COMMAND" not in function["Properties"]["Environment"]["Variables"]


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
            "autoscaling:DescribeInstanceRefreshes",
            "ec2:DescribeInstances",
        ],
        "Effect": "Allow",
        "Resource": "*",
    } in statements
    # What Auto Scaling may check of the caller of UpdateAutoScalingGroup on a group with a launch template
    # (gpufleet.fallback.GROUP_LAUNCH_PERMISSIONS), through that template and role only.
    template_arn = {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, f":ec2:us-east-1:123456789012:launch-template/{LAUNCH_TEMPLATE_ID}"],
        ]
    }
    for statement in (
        {
            "Action": "ec2:RunInstances",
            "Condition": {"ArnEquals": {"ec2:LaunchTemplate": template_arn}},
            "Effect": "Allow",
            "Resource": "*",
        },
        {
            "Action": "ec2:CreateTags",
            "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
            "Effect": "Allow",
            "Resource": "*",
        },
        {
            "Action": "iam:PassRole",
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            "Effect": "Allow",
            "Resource": NODE_ROLE_ARN,
        },
    ):
        assert statement in statements, statement
    # Nothing of the Spot Fleet's.
    assert not any(
        action in json.dumps(statement)
        for statement in statements
        for action in ("ec2:ModifySpotFleetRequest", "ec2:TerminateInstances", "ssm:SendCommand")
    )


def test_every_resource_type_run_instances_requires_takes_the_launch_template_condition():
    """The scope of the role's ec2:RunInstances (infrastructure.py): the condition key ec2:LaunchTemplate, in the
    Service Authorization Reference as parliament bundles it, on each resource type the action requires."""
    with warnings.catch_warnings():
        # parliament 1.6.4 reads its bundled data through pkg_resources, which warns that it is deprecated.
        warnings.simplefilter("ignore", UserWarning)
        from parliament.statement import get_privilege_info

    run_instances = get_privilege_info("ec2", "RunInstances")
    required = [kind for kind in run_instances["resource_types"] if kind["resource_type"].endswith("*")]
    assert {kind["resource_type"] for kind in required} == {
        "image*",
        "instance*",
        "network-interface*",
        "security-group*",
        "subnet*",
    }
    assert all("ec2:LaunchTemplate" in kind["condition_keys"] for kind in required)


def test_an_auto_scaling_groups_fallback_needs_the_launch_template_and_node_role(stack):
    with pytest.raises(ValueError, match="an Auto Scaling group's fallback needs its launch template id and node role"):
        CapacityFallback(
            stack,
            "CapacityFallback",
            backend="auto-scaling",
            node_group_id=GROUP_NAME,
            environment_name="probe",
            target=8,
            on_demand_floor=2,
            fallback=Fallback(after_minutes=15, restore_after_minutes=30, max_extra_on_demand=2),
            checkpoint_hook=True,
            log_retention=logs.RetentionDays.ONE_MONTH,
            launch_template_id=LAUNCH_TEMPLATE_ID,
        )


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


def test_the_asset_carries_the_decision_and_the_vocabulary_as_files(tmp_path):
    # The bytecode Python writes next to the sources when they are imported (the handler tests do): left out.
    for source in (
        "handler.py",
        "state_cleanup.py",
        "gpufleet/fallback.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/ssm_batches.py",
    ):
        py_compile.compile(str(RUNTIME_DIR / source), doraise=True)
    app = cdk.App(outdir=str(tmp_path), context=CDK_CONTEXT)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    add_fallback(stack, "spot-fleet")
    app.synth()
    (asset,) = [
        path
        for path in tmp_path.glob("asset.*")
        if (path / "handler.py").exists() and "capacity fallback" in (path / "handler.py").read_text()
    ]
    assert (RUNTIME_DIR / "__pycache__").is_dir() and (RUNTIME_DIR / "gpufleet" / "__pycache__").is_dir()
    assert asset_files(asset) == [
        "__init__.py",
        "gpufleet",
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/constants.py",
        "gpufleet/fallback.py",
        "gpufleet/ssm_batches.py",
        "handler.py",
        "state_cleanup.py",
    ]
    assert copied_from_gpufleet(asset) == {
        "aws_faults.py": True,
        "checkpoint_hook.py": True,
        "constants.py": True,
        "fallback.py": True,
        "ssm_batches.py": True,
    }
    assert imported_in_lambda(asset, ["handler", "state_cleanup"]) == [
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/constants.py",
        "gpufleet/fallback.py",
        "gpufleet/ssm_batches.py",
        "handler.py",
        "state_cleanup.py",
    ]


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
        "AWS::Lambda::EventInvokeConfig",
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


# The fallback synthesized as `cdk synth` does it (cdk-nag attached), once per backend for the tests below: in
# us-east-2, not the probe's region, so that every ARN shows the stack's region.
OTHER_REGION = "us-east-2"
# Logical ids. The state cleanup's matters most: under a new one CloudFormation creates a new cleanup resource and
# deletes the old one, whose Delete removes the state parameter of a running fallback.
STATE_CLEANUP_ID = "CapacityFallbackStateCleanup93A1F96A"
ROLE_ID = "CapacityFallbackRoleE41BC4B8"
POLICY_ID = "CapacityFallbackRoleDefaultPolicy2F293D3B"
FUNCTION_ID = "CapacityFallbackFunction8C2E7FEC"
EVENT_INVOKE_CONFIG_ID = "CapacityFallbackFunctionEventInvokeConfig8768B739"
SCHEDULE_ID = "CapacityFallbackSchedule70B97345"
SCHEDULE_PERMISSION_ID = "CapacityFallbackScheduleAllowEventRuleProbeCapacityFallbackFunctionD62A9E5AA9E2BE54"
LOGS_ID = "CapacityFallbackLogsF9519A24"
CLEANUP_LOGS_ID = "CapacityFallbackStateCleanupLogs8B1DBF7E"
CLEANUP_ROLE_ID = "CapacityFallbackStateCleanupRole0A05DD87"
CLEANUP_POLICY_ID = "CapacityFallbackStateCleanupRoleDefaultPolicy65302CED"
CLEANUP_FUNCTION_ID = "CapacityFallbackStateCleanupFunctionA3524789"
CLEANUP_PROVIDER_LOGS_ID = "CapacityFallbackStateCleanupProviderLogs81E87E5F"
LAMBDA_TRUST = {
    "Statement": [{"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}],
    "Version": "2012-10-17",
}
OTHER_REGION_PARAMETER_ARN = {
    "Fn::Join": [
        "",
        ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-2:123456789012:parameter/gpufleet/probe/fallback"],
    ]
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, dict]:
    """The resources of the synthesized template by backend (spot-fleet, auto-scaling-ref)."""
    resources = {}
    for backend in ("spot-fleet", "auto-scaling-ref"):
        outdir = tmp_path_factory.mktemp(f"capacity-fallback-{backend}")
        app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
        add_compliance_checks(app)
        stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=OTHER_REGION))
        add_fallback(stack, backend)
        app.synth()  # raises on an unacknowledged cdk-nag finding
        resources[backend] = json.loads((outdir / "Probe.template.json").read_text())["Resources"]
    return resources


def check_the_fallbacks_resources_keep_their_logical_ids(synthesized):
    own = {
        logical_id: resource["Type"]
        for logical_id, resource in synthesized["spot-fleet"].items()
        if logical_id.startswith("CapacityFallback") and "Provider" not in logical_id
    }
    assert own == {
        LOGS_ID: "AWS::Logs::LogGroup",
        ROLE_ID: "AWS::IAM::Role",
        POLICY_ID: "AWS::IAM::Policy",
        FUNCTION_ID: "AWS::Lambda::Function",
        EVENT_INVOKE_CONFIG_ID: "AWS::Lambda::EventInvokeConfig",
        SCHEDULE_ID: "AWS::Events::Rule",
        SCHEDULE_PERMISSION_ID: "AWS::Lambda::Permission",
        CLEANUP_LOGS_ID: "AWS::Logs::LogGroup",
        CLEANUP_ROLE_ID: "AWS::IAM::Role",
        CLEANUP_POLICY_ID: "AWS::IAM::Policy",
        CLEANUP_FUNCTION_ID: "AWS::Lambda::Function",
        STATE_CLEANUP_ID: "Custom::GpufleetFallbackState",
    }


def check_the_function_and_its_schedule_are_described_and_wired_as_written(synthesized):
    resources = synthesized["spot-fleet"]
    function = resources[FUNCTION_ID]["Properties"]
    assert function["Description"] == "gpufleet probe: spot first, on-demand when spot is missing, spot again"
    assert function["LoggingConfig"] == {"LogGroup": {"Ref": LOGS_ID}}
    assert function["Role"] == {"Fn::GetAtt": [ROLE_ID, "Arn"]}
    assert resources[SCHEDULE_ID]["Properties"] == {
        "Description": "gpufleet probe: check the fleet's spot capacity",
        "ScheduleExpression": "rate(5 minutes)",
        "State": "ENABLED",
        "Targets": [
            {
                "Arn": {"Fn::GetAtt": [FUNCTION_ID, "Arn"]},
                "Id": "Target0",
                "RetryPolicy": {"MaximumRetryAttempts": 0},
            }
        ],
    }
    assert resources[ROLE_ID]["Properties"] == {
        "AssumeRolePolicyDocument": LAMBDA_TRUST,
        "Description": "gpufleet probe capacity fallback: the fleet's on-demand part and its state",
    }


def check_every_log_group_keeps_the_retention_asked_for_and_goes_with_the_stack(synthesized):
    resources = synthesized["spot-fleet"]
    for logical_id in (LOGS_ID, CLEANUP_LOGS_ID, CLEANUP_PROVIDER_LOGS_ID):
        assert resources[logical_id] == {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"RetentionInDays": 30},
            "UpdateReplacePolicy": "Delete",
            "DeletionPolicy": "Delete",
        }, logical_id
    (framework,) = [
        resource["Properties"]
        for logical_id, resource in resources.items()
        if logical_id.startswith("CapacityFallbackStateCleanupProviderframework")
        and resource["Type"] == "AWS::Lambda::Function"
    ]
    assert framework["LoggingConfig"]["LogGroup"] == {"Ref": CLEANUP_PROVIDER_LOGS_ID}


def check_the_state_cleanup_function_runs_python_3_14_for_a_minute_with_a_role_that_may_only_delete_the_state(
    synthesized,
):
    resources = synthesized["spot-fleet"]
    function = resources[CLEANUP_FUNCTION_ID]["Properties"]
    assert {key: value for key, value in function.items() if key != "Code"} == {
        "Description": "gpufleet: deletes /gpufleet/probe/fallback when the capacity fallback goes",
        "Handler": "state_cleanup.on_event",
        "LoggingConfig": {"LogGroup": {"Ref": CLEANUP_LOGS_ID}},
        "Role": {"Fn::GetAtt": [CLEANUP_ROLE_ID, "Arn"]},
        "Runtime": "python3.14",
        "Timeout": 60,
    }
    # One asset for both functions: runtime/ (handler.py, state_cleanup.py, gpufleet/fallback.py, constants.py and
    # aws_faults.py).
    assert function["Code"] == resources[FUNCTION_ID]["Properties"]["Code"]
    assert resources[CLEANUP_ROLE_ID]["Properties"] == {
        "AssumeRolePolicyDocument": LAMBDA_TRUST,
        "Description": "gpufleet capacity fallback: delete /gpufleet/probe/fallback with the stack",
    }
    policy = resources[CLEANUP_POLICY_ID]["Properties"]
    assert policy["Roles"] == [{"Ref": CLEANUP_ROLE_ID}]
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [CLEANUP_LOGS_ID, "Arn"]},
        },
        {"Action": "ssm:DeleteParameter", "Effect": "Allow", "Resource": OTHER_REGION_PARAMETER_ARN},
    ]


def check_on_a_spot_fleet_the_role_holds_exactly_the_logs_state_fleet_and_read_statements(synthesized):
    policy = synthesized["spot-fleet"][POLICY_ID]["Properties"]
    assert policy["Roles"] == [{"Ref": ROLE_ID}]
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [LOGS_ID, "Arn"]},
        },
        {"Action": ["ssm:GetParameter", "ssm:PutParameter"], "Effect": "Allow", "Resource": OTHER_REGION_PARAMETER_ARN},
        {
            "Action": [
                "ec2:ModifySpotFleetRequest",
                "ec2:DescribeSpotFleetInstances",
                "ec2:DescribeSpotFleetRequestHistory",
            ],
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":ec2:us-east-2:123456789012:spot-fleet-request/",
                        {"Ref": "Fleet"},
                    ],
                ]
            },
        },
        {
            "Action": "ec2:TerminateInstances",
            "Condition": ENVIRONMENT_NODES,
            "Effect": "Allow",
            "Resource": OTHER_REGION_INSTANCES_ARN,
        },
        {
            "Action": "ssm:SendCommand",
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:us-east-2::document/AWS-RunShellScript"]]
            },
        },
        {
            "Action": "ssm:SendCommand",
            "Condition": {"StringEquals": {"ssm:resourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": OTHER_REGION_INSTANCES_ARN,
        },
        {
            "Action": ["ec2:DescribeSpotFleetRequests", "ec2:DescribeInstances", "ssm:GetCommandInvocation"],
            "Effect": "Allow",
            "Resource": "*",
        },
    ]


OTHER_REGION_INSTANCES_ARN = {
    "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-2:123456789012:instance/*"]]
}


def check_on_a_spot_fleet_the_node_and_unscoped_read_wildcards_are_acknowledged_by_name(synthesized):
    expected = [
        {
            "id": "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-2:123456789012:instance/*]",
            "reason": "the capacity fallback ends (and runs the checkpoint hook on) the fleet's on-demand nodes it "
            "hands back to spot, whose ids it learns at run time; the condition on gpufleet:environment limits it to "
            "this environment's nodes",
        },
        {
            "id": "AwsSolutions-IAM5[Resource::*]",
            "reason": "ec2:DescribeSpotFleetRequests, ec2:DescribeInstances, ssm:GetCommandInvocation support no "
            "resource-level permissions (Service Authorization Reference); the capacity fallback only reads the "
            "fleet's nodes, history and checkpoint commands with them",
        },
    ]
    for logical_id in (ROLE_ID, POLICY_ID):
        assert synthesized["spot-fleet"][logical_id]["Metadata"]["cdk_nag"]["rules_to_suppress"] == expected


def check_on_an_auto_scaling_group_the_group_wildcard_and_the_unscoped_reads_are_acknowledged(synthesized):
    expected = [
        {
            "id": "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:us-east-2:123456789012:"
            "autoScalingGroup:*:autoScalingGroupName/<Group>]",
            "reason": "the capacity fallback may update this one Auto Scaling group of the environment's nodes, "
            "named in full; the wildcard is the group id AWS assigns at creation",
        },
        {
            "id": "AwsSolutions-IAM5[Resource::*]",
            "reason": "autoscaling:DescribeAutoScalingGroups, autoscaling:DescribeScalingActivities, "
            "autoscaling:DescribeInstanceRefreshes, ec2:DescribeInstances support no resource-level permissions "
            "(Service Authorization Reference); the capacity fallback only reads the fleet's nodes, history and "
            "checkpoint commands with them; ec2:RunInstances and ec2:CreateTags, which Auto Scaling may check when "
            "the fallback updates the group, are held through the group's launch template only (conditions "
            "ec2:LaunchTemplate and ec2:CreateAction)",
        },
    ]
    for logical_id in (ROLE_ID, POLICY_ID):
        assert synthesized["auto-scaling-ref"][logical_id]["Metadata"]["cdk_nag"]["rules_to_suppress"] == expected
    policy = synthesized["auto-scaling-ref"][POLICY_ID]["Properties"]["PolicyDocument"]
    assert {
        "Action": "autoscaling:UpdateAutoScalingGroup",
        "Effect": "Allow",
        "Resource": {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    ":autoscaling:us-east-2:123456789012:autoScalingGroup:*:autoScalingGroupName/",
                    {"Ref": "Group"},
                ],
            ]
        },
    } in policy["Statement"]


def check_the_state_cleanup_providers_findings_are_acknowledged_for_it(synthesized):
    reasons = [
        rule["reason"]
        for logical_id, resource in synthesized["spot-fleet"].items()
        if logical_id.startswith("CapacityFallbackStateCleanupProvider")
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert reasons and all("of the capacity fallback's state cleanup" in reason for reason in reasons)


def test_cdk_nag_names_a_resolved_string_a_reference_a_pseudo_parameter_and_an_attribute_its_own_way():
    stack = cdk.Stack(cdk.App(context=CDK_CONTEXT), "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    group = autoscaling.CfnAutoScalingGroup(stack, "Group", max_size="1", min_size="1")
    assert nag_rendering(stack, "arn:aws:autoscaling:*") == "arn:aws:autoscaling:*"
    value = cdk.Fn.join(
        "/", [cdk.Aws.PARTITION, group.ref, cdk.Token.as_string(group.get_att("AutoScalingGroupARN")), "end"]
    )
    assert nag_rendering(stack, value) == "<AWS::Partition>/<Group>/<Group.AutoScalingGroupARN>/end"


def test_the_cdk_nag_synthesis_passes_every_check(synthesized):
    """The checks on the one cdk-nag synthesis above, in one test: mutmut (make mutate) gives a mutant only the
    tests during which the construct ran, and a module-scoped synthesis runs during the first test that asks for it,
    so checks split over several tests would go unrun on the mutants."""
    check_the_fallbacks_resources_keep_their_logical_ids(synthesized)
    check_the_function_and_its_schedule_are_described_and_wired_as_written(synthesized)
    check_every_log_group_keeps_the_retention_asked_for_and_goes_with_the_stack(synthesized)
    check_the_state_cleanup_function_runs_python_3_14_for_a_minute_with_a_role_that_may_only_delete_the_state(
        synthesized
    )
    check_on_a_spot_fleet_the_role_holds_exactly_the_logs_state_fleet_and_read_statements(synthesized)
    check_on_a_spot_fleet_the_node_and_unscoped_read_wildcards_are_acknowledged_by_name(synthesized)
    check_on_an_auto_scaling_group_the_group_wildcard_and_the_unscoped_reads_are_acknowledged(synthesized)
    check_the_state_cleanup_providers_findings_are_acknowledged_for_it(synthesized)


@pytest.mark.parametrize(
    ("backend", "synthesized_as"), [("spot-fleet", "spot-fleet"), ("auto-scaling", "auto-scaling-ref")]
)
def test_the_role_grants_exactly_the_calls_the_handler_makes_against_the_model(synthesized, backend, synthesized_as):
    """The handler run against the model (tests/fallback_model/) through a raise, a hand-back and, on a group, an
    instance refresh: every API call it makes is an action of its role, and every action of its role (the log group's,
    and on a group those Auto Scaling may check of the caller, gpufleet.fallback.GROUP_LAUNCH_PERMISSIONS, aside) is
    one it makes."""
    events = {60: [Simulation.refresh]} if backend == "auto-scaling" else {}
    sim = Simulation(backend, Availability(spot=((0, 6), (5, 4), (40, 6)), on_demand=((0, 20),)), events=events).run(
        120
    )
    called = {operation for caller, operation in sim.world.operations if caller == "fallback"}
    statements = synthesized[synthesized_as][POLICY_ID]["Properties"]["PolicyDocument"]["Statement"]
    granted = {
        action
        for statement in statements
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
        if not action.startswith("logs:")
    }
    checked_by_auto_scaling = set(GROUP_LAUNCH_PERMISSIONS) if backend == "auto-scaling" else set()
    assert called | checked_by_auto_scaling == granted
