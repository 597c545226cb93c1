"""cdk-nag's findings on what aws-cdk-lib's custom_resources.Provider creates for itself, acknowledged once for every
Provider of the project: a framework function (onEvent; with an is_complete handler also isComplete and onTimeout)
with a role each, and, with is_complete, the Step Functions waiter that polls it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import IConstruct

BASIC_EXECUTION = "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"


def acknowledge_provider(provider: cr.Provider, handlers: Iterable[lambda_.Function], purpose: str) -> None:
    """PURPOSE names what the Provider serves in the reasons (e.g. "the fleet teardown")."""
    stack = cdk.Stack.of(provider)
    handlers = list(handlers)

    def arn_of(function: IConstruct) -> str:
        # A function's default child is its CfnFunction (jsii types it as the IConstruct it may be elsewhere).
        resource = cast(cdk.CfnElement, function.node.default_child)
        return f"<{stack.resolve(stack.get_logical_id(resource))}.Arn>"

    framework = [
        child
        for name in ("framework-onEvent", "framework-isComplete", "framework-onTimeout")
        if (child := provider.node.try_find_child(name)) is not None
    ]
    for function in framework:
        role = function.node.find_child("ServiceRole")
        cdk.Validations.of(role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM4[{BASIC_EXECUTION}]",
                reason=f"the Provider framework function of {purpose} writes its logs with the managed Lambda basic "
                "execution policy; aws-cdk-lib creates this role and offers no other",
            )
        )
        for handler in handlers:
            cdk.Validations.of(role).acknowledge(
                cdk.Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{arn_of(handler)}:*]",
                    reason=f"lambda:InvokeFunction on the handler of {purpose} and its versions (ARN:*), as "
                    "aws-cdk-lib's grantInvoke writes it; one function, no other",
                )
            )
    waiter = provider.node.try_find_child("waiter-state-machine")
    if waiter is None:
        return
    for function in framework[1:]:
        cdk.Validations.of(waiter.node.find_child("Role")).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::{arn_of(function)}:*]",
                reason=f"the waiter state machine of {purpose} invokes this one framework function and its "
                "versions (ARN:*), as aws-cdk-lib's grantInvoke writes it",
            )
        )
    waiter_resource = cast(cdk.CfnElement, waiter.node.default_child)
    for rule, reason in (
        (
            "AwsSolutions-SF1",
            f"the waiter of {purpose} only polls is_complete; its handler logs every poll to the handler log group, "
            "and the framework functions log to theirs",
        ),
        (
            "AwsSolutions-SF2",
            f"the waiter of {purpose} is one retried task; aws-cdk-lib's Provider offers no X-Ray setting for it, "
            "and the handler logs say what each poll found",
        ),
    ):
        cdk.Validations.of(waiter_resource).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))
