"""The Lambda building blocks on their own, in a bare stack: what a log group, a role, a function and a Provider built
through them write, with the construct ids of the construct that asked."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from stacks.constructs.lambda_functions import LambdaBase, lambda_base, log_group, provider, runtime_code
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, REGION, asset_files, bare_stack

INLINE = lambda_.Code.from_inline("def on_event(event, context): pass")


def probe_base(stack: cdk.Stack, log_retention: logs.RetentionDays) -> LambdaBase:
    return lambda_base(
        stack,
        log_group_id="Logs",
        role_id="Role",
        role_description="the probe",
        code=INLINE,
        log_retention=log_retention,
    )


def resources_of(stack: cdk.Stack, resource_type: str) -> dict:
    return Template.from_stack(stack).find_resources(resource_type)


def test_a_log_group_keeps_the_retention_asked_for_and_goes_with_the_stack():
    stack = bare_stack()
    log_group(stack, "Logs", logs.RetentionDays.TWO_WEEKS)
    assert resources_of(stack, "AWS::Logs::LogGroup") == {
        "Logs6819BB44": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"RetentionInDays": 14},
            "UpdateReplacePolicy": "Delete",
            "DeletionPolicy": "Delete",
        }
    }


def test_the_role_is_lambdas_and_may_write_its_log_group_and_nothing_else():
    stack = bare_stack()
    lambda_base(
        stack,
        log_group_id="HandlerLogs",
        role_id="HandlerRole",
        role_description="the probe's handlers",
        code=INLINE,
        log_retention=logs.RetentionDays.ONE_MONTH,
    )
    ((role_id, role),) = resources_of(stack, "AWS::IAM::Role").items()
    assert role_id == "HandlerRoleF4C27E12"
    assert role["Properties"] == {
        "AssumeRolePolicyDocument": {
            "Statement": [
                {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
            ],
            "Version": "2012-10-17",
        },
        "Description": "the probe's handlers",
    }
    ((_, policy),) = resources_of(stack, "AWS::IAM::Policy").items()
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": ["HandlerLogs6FD01908", "Arn"]},
        }
    ]
    assert policy["Properties"]["Roles"] == [{"Ref": role_id}]


def test_every_function_shares_the_role_log_group_code_and_runtime():
    stack = bare_stack()
    base = probe_base(stack, logs.RetentionDays.ONE_MONTH)
    base.function("First", handler="index.on_event", timeout=cdk.Duration.minutes(2), description="first")
    base.function(
        "Second",
        handler="index.on_event",
        timeout=cdk.Duration.seconds(30),
        description="second",
        environment={"NAME": "value"},
    )
    functions = resources_of(stack, "AWS::Lambda::Function")
    assert sorted(functions) == ["First8D4707F1", "Second394350F9"]
    shared = {
        "Code": {"ZipFile": "def on_event(event, context): pass"},
        "Handler": "index.on_event",
        "LoggingConfig": {"LogGroup": {"Ref": "Logs6819BB44"}},
        "Role": {"Fn::GetAtt": ["Role1ABCC5F0", "Arn"]},
        "Runtime": "python3.14",
    }
    assert functions["First8D4707F1"]["Properties"] == {**shared, "Description": "first", "Timeout": 120}
    assert functions["Second394350F9"]["Properties"] == {
        **shared,
        "Description": "second",
        "Timeout": 30,
        "Environment": {"Variables": {"NAME": "value"}},
    }


def test_a_provider_logs_to_a_log_group_of_its_own_and_acknowledges_its_framework():
    stack = bare_stack()
    base = probe_base(stack, logs.RetentionDays.ONE_WEEK)
    on_event = base.function("OnEvent", handler="index.on_event", timeout=cdk.Duration.minutes(1), description="e")
    made = provider(stack, "Provider", on_event=on_event, log_retention=logs.RetentionDays.ONE_WEEK, purpose="x")
    log_groups = resources_of(stack, "AWS::Logs::LogGroup")
    assert sorted(log_groups) == ["Logs6819BB44", "ProviderLogsF4611997"]
    assert log_groups["ProviderLogsF4611997"]["Properties"] == {"RetentionInDays": 7}
    framework = made.node.find_child("framework-onEvent")
    acknowledged = [
        rule
        for construct in framework.node.find_all()
        for entry in construct.node.metadata
        if entry.type == "aws:cdk:acknowledged-rules"
        for rule in entry.data
    ]
    assert acknowledged, "provider_findings acknowledges the framework function's findings"
    assert made.node.try_find_child("framework-isComplete") is None


def test_a_runtime_folder_becomes_its_files_with_links_copied_and_no_bytecode(tmp_path):
    runtime = tmp_path / "runtime"
    (runtime / "gpufleet" / "__pycache__").mkdir(parents=True)
    (runtime / "__pycache__").mkdir()
    (tmp_path / "shared.py").write_text("SHARED = 1\n")
    (runtime / "__init__.py").write_text('"""the runtime"""\n')
    (runtime / "handler.py").write_text("from gpufleet.shared import SHARED\n")
    (runtime / "gpufleet" / "__init__.py").write_text('"""its gpufleet"""\n')
    (runtime / "gpufleet" / "shared.py").symlink_to(tmp_path / "shared.py")
    for folder in (runtime, runtime / "gpufleet"):
        (folder / "__pycache__" / "handler.cpython-311.pyc").write_bytes(b"bytecode")
    (runtime / "stray.pyc").write_bytes(b"bytecode")
    app = cdk.App(outdir=str(tmp_path / "out"), context=CDK_CONTEXT)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    base = lambda_base(
        stack,
        log_group_id="Logs",
        role_id="Role",
        role_description="the probe",
        code=runtime_code(runtime),
        log_retention=logs.RetentionDays.ONE_WEEK,
    )
    base.function("Function", handler="handler.on_event", timeout=cdk.Duration.minutes(1), description="probe")
    app.synth()
    (asset,) = (tmp_path / "out").glob("asset.*")
    assert asset_files(asset) == ["__init__.py", "gpufleet", "gpufleet/__init__.py", "gpufleet/shared.py", "handler.py"]
    assert not (asset / "gpufleet" / "shared.py").is_symlink()
    assert (asset / "gpufleet" / "shared.py").read_text() == "SHARED = 1\n"
