"""What every gpufleet Lambda function is made of, written once: its code (a construct's runtime/ folder as an
asset), a log group removed with the stack, a role that may write to it and nothing else until the construct grants
more, Python functions on one runtime, and the custom_resources.Provider that runs a custom resource's handlers with
cdk-nag's findings on its framework acknowledged.

The construct ids stay those of the construct that asks (the scope): the logical ids of running resources depend on
them, and a changed logical id replaces the resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.constructs.provider_findings import acknowledge_provider

# The newest Python runtime of the pinned aws-cdk-lib (2.275.0), on which the handlers are tested.
PYTHON_RUNTIME = lambda_.Runtime.PYTHON_3_14
# How long a Provider polls is_complete at most. CloudFormation waits at most one hour for a custom resource's answer
# (ServiceTimeout: "an integer from 1 to 3600. The default value is 3600 seconds (1 hour)",
# AWS::CloudFormation::CustomResource), and the Provider's own doc says "The maximum timeout is 1 hour" (aws-cdk-lib
# 2.275 ProviderProps.total_timeout): 50 minutes of polling leaves room for on_event before and the framework's FAILED
# answer after, so CloudFormation hears "Operation timed out" instead of timing out itself.
LONGEST_POLLING = cdk.Duration.minutes(50)


def runtime_code(directory: Path) -> lambda_.Code:
    """A construct's runtime/ folder as its functions' asset: every file but Python's bytecode, which importing the
    handlers (the tests do) writes next to them.

    The part of gpufleet a runtime imports lies in runtime/gpufleet/ as links to gpufleet's own files, so each
    concept keeps one source; the asset holds copies of them. ALWAYS, not the default: the API reference gives NEVER
    as the default, which would stage a dangling link; aws-cdk-lib 2.275.0 core/lib/fs/copy.js actually falls back to
    EXTERNAL (`options.follow ?? EXTERNAL`).

    The package markers stay in: runtime/__init__.py makes the handlers importable by the tests (Lambda loads
    handler.py as a top-level module and never imports the one at the asset's root), and runtime/gpufleet/__init__.py
    makes the asset's gpufleet a regular package, so that gpufleet's modules are found in the asset's folder only."""
    return lambda_.Code.from_asset(
        str(directory), exclude=["__pycache__", "*.pyc"], follow_symlinks=cdk.SymlinkFollowMode.ALWAYS
    )


def log_group(scope: Construct, construct_id: str, retention: logs.RetentionDays) -> logs.LogGroup:
    """A log group that `cdk destroy` removes with the stack: a function's logs are not data a user asked to keep."""
    return logs.LogGroup(scope, construct_id, retention=retention, removal_policy=cdk.RemovalPolicy.DESTROY)


@dataclass(frozen=True)
class LambdaBase:
    """A role and a log group that one or more functions share, and the code they run."""

    scope: Construct
    role: iam.Role
    log_group: logs.LogGroup
    code: lambda_.Code

    def function(
        self,
        construct_id: str,
        *,
        handler: str,
        timeout: cdk.Duration,
        description: str,
        environment: dict[str, str] | None = None,
    ) -> lambda_.Function:
        return lambda_.Function(
            self.scope,
            construct_id,
            runtime=PYTHON_RUNTIME,
            handler=handler,
            code=self.code,
            timeout=timeout,
            role=self.role,
            log_group=self.log_group,
            description=description,
            environment=environment,
        )


def lambda_base(
    scope: Construct,
    *,
    log_group_id: str,
    role_id: str,
    role_description: str,
    code: lambda_.Code,
    log_retention: logs.RetentionDays,
) -> LambdaBase:
    """The log group and the role (trusted by Lambda, allowed to write that log group); the caller adds the
    statements its functions need before it adds the functions."""
    logs_ = log_group(scope, log_group_id, log_retention)
    role = iam.Role(
        scope, role_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=role_description
    )
    logs_.grant_write(role)
    return LambdaBase(scope=scope, role=role, log_group=logs_, code=code)


def provider(
    scope: Construct,
    construct_id: str,
    *,
    on_event: lambda_.Function,
    is_complete: lambda_.Function | None = None,
    total_timeout: cdk.Duration | None = None,
    query_interval: cdk.Duration | None = None,
    log_retention: logs.RetentionDays,
    purpose: str,
) -> cr.Provider:
    """The Provider of a custom resource, its framework logging to a log group of its own; PURPOSE names what it
    serves in the cdk-nag acknowledgements (provider_findings)."""
    made = cr.Provider(
        scope,
        construct_id,
        on_event_handler=on_event,
        is_complete_handler=is_complete,
        total_timeout=total_timeout,
        query_interval=query_interval,
        log_group=log_group(scope, f"{construct_id}Logs", log_retention),
    )
    acknowledge_provider(made, [on_event] + ([is_complete] if is_complete else []), purpose)
    return made
