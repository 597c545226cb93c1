"""acknowledge_provider on its own: a Provider with and without an is_complete handler, in bare stacks. cdk-nag (the
synthesis check of every environment) finds nothing left on what aws-cdk-lib's Provider creates, and each finding is
acknowledged where it arises, with the reason written into the template's metadata for the audit trail."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr

from stacks.constructs.provider_findings import acknowledge_provider
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, REGION

ACKNOWLEDGED = "aws:cdk:acknowledged-rules"


def add_provider(stack: cdk.Stack, *, is_complete: bool) -> None:
    def handler(name: str) -> lambda_.Function:
        return lambda_.Function(
            stack,
            name,
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(event, context): pass"),
        )

    handlers = [handler("OnEvent")] + ([handler("IsComplete")] if is_complete else [])
    provider = cr.Provider(
        stack,
        "Provider",
        on_event_handler=handlers[0],
        is_complete_handler=handlers[1] if is_complete else None,
    )
    acknowledge_provider(provider, handlers, "the probe")


@pytest.fixture(scope="module")
def assembly(tmp_path_factory):
    """One app, synthesized once with cdk-nag attached: stack Complete has an is_complete handler, stack OnEvent not.
    The report names every finding left; the handlers' own findings are their owner's to acknowledge."""
    outdir = tmp_path_factory.mktemp("provider-findings")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stacks = {}
    for name, is_complete in (("Complete", True), ("OnEvent", False)):
        stacks[name] = cdk.Stack(app, name, env=cdk.Environment(account=ACCOUNT, region=REGION))
        add_provider(stacks[name], is_complete=is_complete)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((outdir / "validation-report.json").read_text())
    return stacks, report


def test_cdk_nag_finds_nothing_left_on_what_the_provider_creates(assembly):
    _, report = assembly
    (plugin,) = report["pluginReports"]
    violations = {
        (violation["ruleName"], construct["constructPath"])
        for violation in plugin["violations"]
        for construct in violation["violatingConstructs"]
    }
    # Only the stand-in handlers' own role and runtime findings: nothing under */Provider/.
    basic_execution = (
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]"
    )
    assert violations == {
        (basic_execution, "Complete/OnEvent/ServiceRole/Resource"),
        (basic_execution, "Complete/IsComplete/ServiceRole/Resource"),
        (basic_execution, "OnEvent/OnEvent/ServiceRole/Resource"),
        ("AwsSolutions-L1", "Complete/OnEvent/Resource"),
        ("AwsSolutions-L1", "Complete/IsComplete/Resource"),
        ("AwsSolutions-L1", "OnEvent/OnEvent/Resource"),
    }


def acknowledgements(stack: cdk.Stack) -> list[tuple[str, str, str]]:
    """(construct path, acknowledged finding, reason), in the order acknowledged."""
    return [
        (construct.node.path, finding.removeprefix("Annotation::"), reason)
        for construct in stack.node.find_all()
        for entry in construct.node.metadata
        if entry.type == ACKNOWLEDGED
        for finding, reason in entry.data.items()
    ]


BASIC_EXECUTION = (
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
    "the Provider framework function of the probe writes its logs with the managed Lambda basic execution policy; "
    "aws-cdk-lib creates this role and offers no other",
)


def invokes_handler(logical_id: str) -> tuple[str, str]:
    return (
        f"AwsSolutions-IAM5[Resource::<{logical_id}.Arn>:*]",
        "lambda:InvokeFunction on the handler of the probe and its versions (ARN:*), as aws-cdk-lib's grantInvoke "
        "writes it; one function, no other",
    )


def waiter_invokes(logical_id: str) -> tuple[str, str]:
    return (
        f"AwsSolutions-IAM5[Resource::<{logical_id}.Arn>:*]",
        "the waiter state machine of the probe invokes this one framework function and its versions (ARN:*), as "
        "aws-cdk-lib's grantInvoke writes it",
    )


def test_with_is_complete_each_framework_role_and_the_waiter_carry_their_acknowledgements(assembly):
    stacks, _ = assembly
    framework_role = [BASIC_EXECUTION, invokes_handler("OnEvent74718524"), invokes_handler("IsComplete544AE5AD")]
    expected = (
        [("Complete/Provider/framework-onEvent/ServiceRole", *finding) for finding in framework_role]
        + [("Complete/Provider/framework-isComplete/ServiceRole", *finding) for finding in framework_role]
        + [("Complete/Provider/framework-onTimeout/ServiceRole", *finding) for finding in framework_role]
        + [
            ("Complete/Provider/waiter-state-machine/Role", *waiter_invokes("ProviderframeworkisComplete26D7B0CB")),
            ("Complete/Provider/waiter-state-machine/Role", *waiter_invokes("ProviderframeworkonTimeout0B47CA38")),
            (
                "Complete/Provider/waiter-state-machine/Resource",
                "AwsSolutions-SF1",
                "the waiter of the probe only polls is_complete; its handler logs every poll to the handler log group, "
                "and the framework functions log to theirs",
            ),
            (
                "Complete/Provider/waiter-state-machine/Resource",
                "AwsSolutions-SF2",
                "the waiter of the probe is one retried task; aws-cdk-lib's Provider offers no X-Ray setting for it, "
                "and the handler logs say what each poll found",
            ),
        ]
    )
    assert acknowledgements(stacks["Complete"]) == expected


def test_without_is_complete_only_the_on_event_framework_role_has_findings(assembly):
    stacks, _ = assembly
    assert acknowledgements(stacks["OnEvent"]) == [
        ("OnEvent/Provider/framework-onEvent/ServiceRole", *BASIC_EXECUTION),
        ("OnEvent/Provider/framework-onEvent/ServiceRole", *invokes_handler("OnEvent74718524")),
    ]
