"""The fleet teardown on its own: a custom resource on the fleet that depends on what the nodes use."""

from __future__ import annotations

import json
import py_compile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from stacks.constructs.fleet_teardown.infrastructure import RUNTIME_DIR, FleetTeardown
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, asset_files, copied_from_gpufleet, imported_in_lambda


def synthesize(stack, checkpoint_hook=False):
    fleet = ec2.CfnSpotFleet(
        stack,
        "Fleet",
        spot_fleet_request_config_data=ec2.CfnSpotFleet.SpotFleetRequestConfigDataProperty(
            iam_fleet_role="arn:aws:iam::123456789012:role/fleet", target_capacity=1
        ),
    )
    placement_group = ec2.CfnPlacementGroup(stack, "Placement", strategy="cluster")
    FleetTeardown(
        stack,
        "Teardown",
        fleet=fleet,
        environment_tag=("gpufleet:environment", "probe"),
        checkpoint_hook=checkpoint_hook,
        guarded=[placement_group],
        log_retention=logs.RetentionDays.ONE_MONTH,
    )
    return Template.from_stack(stack)


def test_the_teardown_names_the_fleet_and_is_deleted_before_what_the_nodes_use(stack):
    template = synthesize(stack)
    (teardown,) = template.find_resources("Custom::GpufleetFleetTeardown").values()
    assert teardown["Properties"]["FleetRequestId"] == {"Ref": "Fleet"}
    # CloudFormation deletes a resource before those it depends on: the nodes are gone before the placement group.
    assert teardown["DependsOn"] == ["Placement"]


def test_the_handler_may_terminate_only_instances_tagged_with_its_environment(stack):
    template = synthesize(stack)
    statements = [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "ec2:TerminateInstances"
    ]
    assert statements == [
        {
            "Action": "ec2:TerminateInstances",
            "Condition": {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:instance/*"]]
            },
        }
    ]


def test_without_a_checkpoint_hook_the_teardown_sends_no_command_and_ends_in_two_minutes(stack):
    template = synthesize(stack).to_json()["Resources"]
    actions = [
        statement["Action"]
        for resource in template.values()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert not [action for action in actions if "ssm:" in str(action)]
    (on_event,) = [
        resource["Properties"]
        for resource in template.values()
        if resource["Properties"].get("Handler") == "handler.on_event"
    ]
    assert (on_event["Timeout"], "Environment" in on_event) == (120, False)


def test_the_provider_polls_every_30_seconds_for_at_most_50_minutes(stack):
    template = synthesize(stack)
    (waiter,) = template.find_resources("AWS::StepFunctions::StateMachine").values()
    parts = waiter["Properties"]["DefinitionString"]["Fn::Join"][1]
    definition = json.loads("".join(part for part in parts if isinstance(part, str)))
    # aws-cdk-lib's Provider retries is_complete total_timeout / query_interval times: 50 min / 30 s.
    assert definition["States"]["framework-isComplete-task"]["Retry"] == [
        {"ErrorEquals": ["States.ALL"], "IntervalSeconds": 30, "MaxAttempts": 100, "BackoffRate": 1}
    ]


# The teardown synthesized as `cdk synth` does it (cdk-nag attached), once for the tests below: in us-east-2, not the
# probe's region, so that every ARN shows the stack's region; guarding two resources.
REGION = "us-east-2"
# Logical ids. The custom resource's matters most: under a new one CloudFormation creates a new teardown and deletes
# the old one, and the old one's Delete cancels the fleet and terminates every node of the running cluster.
TEARDOWN_ID = "Teardown0042FE15"
ROLE_ID = "TeardownHandlerRole7371C6DF"
POLICY_ID = "TeardownHandlerRoleDefaultPolicy2A235E0F"
HANDLER_LOGS_ID = "TeardownHandlerLogsED4D4E50"
PROVIDER_LOGS_ID = "TeardownProviderLogsDFDED54A"
ON_EVENT_ID = "TeardownOnEventHandlerD7C11132"
IS_COMPLETE_ID = "TeardownIsCompleteHandlerC6C2CF71"


def arn(suffix, *references):
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, suffix, *references]]}


@pytest.fixture(scope="module")
def outdir(tmp_path_factory) -> Path:
    """The cloud assembly's folder. The handler's bytecode is written first, as importing it does (the handler
    tests do), so that the asset shows what it leaves out."""
    for source in ("handler.py", "gpufleet/aws_faults.py", "gpufleet/checkpoint_hook.py", "gpufleet/ssm_batches.py"):
        py_compile.compile(str(RUNTIME_DIR / source), doraise=True)
    outdir = tmp_path_factory.mktemp("fleet-teardown")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    fleet = ec2.CfnSpotFleet(
        stack,
        "Fleet",
        spot_fleet_request_config_data=ec2.CfnSpotFleet.SpotFleetRequestConfigDataProperty(
            iam_fleet_role="arn:aws:iam::123456789012:role/fleet", target_capacity=1
        ),
    )
    # A stand-in fleet without launch templates, whose own finding is not the teardown's.
    cdk.Validations.of(fleet).acknowledge(
        cdk.Acknowledgment(id="CloudFormation-Validate::F3014", reason="a stand-in fleet for the teardown test")
    )
    guarded = [
        ec2.CfnPlacementGroup(stack, "Placement", strategy="cluster"),
        ec2.CfnSecurityGroup(stack, "Nodes", group_description="the nodes' security group"),
    ]
    FleetTeardown(
        stack,
        "Teardown",
        fleet=fleet,
        environment_tag=("gpufleet:environment", "probe"),
        checkpoint_hook=True,
        guarded=guarded,
        log_retention=logs.RetentionDays.TWO_WEEKS,
    )
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return outdir


@pytest.fixture(scope="module")
def resources(outdir) -> dict:
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def check_the_custom_resource_keeps_its_logical_id_and_is_deleted_before_everything_it_guards(resources):
    teardown = resources[TEARDOWN_ID]
    assert teardown["Type"] == "Custom::GpufleetFleetTeardown"
    assert teardown["Properties"] == {
        "ServiceToken": {"Fn::GetAtt": ["TeardownProviderframeworkonEvent09A19966", "Arn"]},
        "FleetRequestId": {"Ref": "Fleet"},
    }
    assert sorted(teardown["DependsOn"]) == ["Nodes", "Placement"]


def check_the_handlers_run_python_3_14_with_the_role_and_log_group_on_event_with_the_hooks_wait(resources):
    """on_event runs the checkpoint hook first: two minutes and the three of gpufleet.checkpoint_hook's wait."""
    expected = {
        ON_EVENT_ID: ("handler.on_event", "Cancels the gpufleet Spot Fleet and terminates its nodes", 300),
        IS_COMPLETE_ID: (
            "handler.is_complete",
            "Says whether every node of the gpufleet Spot Fleet is terminated",
            120,
        ),
    }
    # A constant notice: a fleet id here would change with a replaced fleet (gpufleet plan would list it) before
    # the old fleet's teardown runs.
    hook = {
        "CHECKPOINT_COMMAND": ". /etc/gpufleet/node.env && GPUFLEET_NOTICE_PATH=fleet-teardown "
        'GPUFLEET_NOTICE=fleet-ends bash -c "$GPUFLEET_CHECKPOINT_HOOK"'
    }
    for logical_id, (handler, description, timeout) in expected.items():
        properties = resources[logical_id]["Properties"]
        assert {key: value for key, value in properties.items() if key != "Code"} == {
            "Description": description,
            "Handler": handler,
            "LoggingConfig": {"LogGroup": {"Ref": HANDLER_LOGS_ID}},
            "Role": {"Fn::GetAtt": [ROLE_ID, "Arn"]},
            "Runtime": "python3.14",
            "Timeout": timeout,
            **({"Environment": {"Variables": hook}} if handler == "handler.on_event" else {}),
        }, logical_id
    # Both handlers are one asset: stacks/constructs/fleet_teardown/runtime/ (handler.py and gpufleet/aws_faults.py).
    assert resources[ON_EVENT_ID]["Properties"]["Code"] == resources[IS_COMPLETE_ID]["Properties"]["Code"]


def check_the_handlers_asset_holds_the_handler_without_its_bytecode(outdir):
    (asset,) = [path for path in outdir.glob("asset.*") if (path / "handler.py").exists()]
    assert (RUNTIME_DIR / "__pycache__").is_dir() and (RUNTIME_DIR / "gpufleet" / "__pycache__").is_dir()
    assert asset_files(asset) == [
        "__init__.py",
        "gpufleet",
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/ssm_batches.py",
        "handler.py",
    ]
    assert (asset / "handler.py").read_text() == (RUNTIME_DIR / "handler.py").read_text()
    assert copied_from_gpufleet(asset) == {"aws_faults.py": True, "checkpoint_hook.py": True, "ssm_batches.py": True}
    assert imported_in_lambda(asset, ["handler"]) == [
        "gpufleet/__init__.py",
        "gpufleet/aws_faults.py",
        "gpufleet/checkpoint_hook.py",
        "gpufleet/ssm_batches.py",
        "handler.py",
    ]


def check_the_log_groups_keep_the_retention_asked_for_and_go_with_the_stack(resources):
    for logical_id in (HANDLER_LOGS_ID, PROVIDER_LOGS_ID):
        assert resources[logical_id] == {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"RetentionInDays": 14},
            "UpdateReplacePolicy": "Delete",
            "DeletionPolicy": "Delete",
        }, logical_id
    # The Provider's framework functions log to the provider's group.
    framework = [
        resource["Properties"]
        for logical_id, resource in resources.items()
        if logical_id.startswith("TeardownProviderframework") and resource["Type"] == "AWS::Lambda::Function"
    ]
    assert len(framework) == 3  # onEvent, isComplete, onTimeout
    assert all(properties["LoggingConfig"]["LogGroup"] == {"Ref": PROVIDER_LOGS_ID} for properties in framework)


def check_the_handler_role_is_lambdas_and_may_write_its_logs_and_end_this_fleet_and_its_nodes_only(resources):
    role = resources[ROLE_ID]["Properties"]
    assert role == {
        "AssumeRolePolicyDocument": {
            "Statement": [
                {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
            ],
            "Version": "2012-10-17",
        },
        "Description": "gpufleet fleet teardown: cancel the fleet and terminate its nodes",
    }
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
            "Action": ["ec2:CancelSpotFleetRequests", "ec2:DescribeSpotFleetInstances"],
            "Effect": "Allow",
            "Resource": arn(":ec2:us-east-2:123456789012:spot-fleet-request/", {"Ref": "Fleet"}),
        },
        {
            "Action": "ec2:TerminateInstances",
            "Condition": {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": arn(":ec2:us-east-2:123456789012:instance/*"),
        },
        {
            "Action": "ssm:SendCommand",
            "Effect": "Allow",
            "Resource": arn(":ssm:us-east-2::document/AWS-RunShellScript"),
        },
        {
            "Action": "ssm:SendCommand",
            "Condition": {"StringEquals": {"ssm:resourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": arn(":ec2:us-east-2:123456789012:instance/*"),
        },
        {"Action": ["ec2:DescribeInstances", "ssm:GetCommandInvocation"], "Effect": "Allow", "Resource": "*"},
    ]


def check_the_wildcards_of_the_handler_role_are_acknowledged_with_their_reasons(resources):
    expected = [
        {
            "id": "AwsSolutions-IAM5[Resource::*]",
            "reason": "ec2:DescribeInstances, ssm:GetCommandInvocation support no resource-level permissions and are "
            "read-only; the teardown finds the fleet's nodes with them (and when their checkpoint hook is over)",
        },
        {
            "id": "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:us-east-2:123456789012:instance/*]",
            "reason": "TerminateInstances (and SendCommand of the checkpoint hook) is limited by the tag condition "
            "gpufleet:environment=probe to this environment's nodes, whose ids are not known before the fleet "
            "launches them",
        },
    ]
    for logical_id in (ROLE_ID, POLICY_ID):
        assert resources[logical_id]["Metadata"]["cdk_nag"]["rules_to_suppress"] == expected, logical_id


def check_the_providers_own_findings_are_acknowledged_for_the_fleet_teardown(resources):
    reasons = [
        rule["reason"]
        for logical_id, resource in resources.items()
        if logical_id.startswith("TeardownProvider")
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert reasons and all("of the fleet teardown" in reason for reason in reasons)


def test_the_cdk_nag_synthesis_passes_every_check(resources, outdir):
    """The checks on the one cdk-nag synthesis above, in one test: mutmut (make mutate) gives a mutant only the
    tests during which the construct ran, and a module-scoped synthesis runs during the first test that asks for it,
    so checks split over several tests would go unrun on the mutants."""
    check_the_handlers_asset_holds_the_handler_without_its_bytecode(outdir)
    check_the_custom_resource_keeps_its_logical_id_and_is_deleted_before_everything_it_guards(resources)
    check_the_handlers_run_python_3_14_with_the_role_and_log_group_on_event_with_the_hooks_wait(resources)
    check_the_log_groups_keep_the_retention_asked_for_and_go_with_the_stack(resources)
    check_the_handler_role_is_lambdas_and_may_write_its_logs_and_end_this_fleet_and_its_nodes_only(resources)
    check_the_wildcards_of_the_handler_role_are_acknowledged_with_their_reasons(resources)
    check_the_providers_own_findings_are_acknowledged_for_the_fleet_teardown(resources)
