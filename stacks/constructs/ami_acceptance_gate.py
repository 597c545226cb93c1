"""What the AMI build's acceptance gate needs beyond the build project (scripts/pipeline/acceptance-gate.sh and
acceptance-teardown.sh; docs/guides/ami-pipeline.md, "Acceptance gate"):

- the build role's grants: assume the CDK bootstrap roles that `cdk deploy` uses (the project's own CDK app deploys
  the gate's environment), read the on-demand price, and what `gpufleet acceptance` reads and runs on the gate's
  nodes, each limited to the gate's stacks (gpufleet-accept-*) and nodes (tagged gpufleet:environment accept-*);
- the backstop: an EventBridge rule on the build project's "CodeBuild Build State Change" events of every status but
  IN_PROGRESS, which starts a teardown build (a second CodeBuild project on the same sources) with the ended build's
  ARN. The gate's own teardown runs in an EXIT trap and in the build phase's finally; a build stopped (StopBuild) or
  timed out may run neither (CodeBuild's buildspec reference promises finally only after a failed command), and a
  SIGKILLed build process runs nothing at all. The teardown build is idempotent, so it runs after every build.

The CDK bootstrap roles (default qualifier hnb659fds): deploy-role (CloudFormation changes, passes the execution role),
file-publishing-role (uploads the app's assets), lookup-role (context lookups: the gate's environment borrows a VPC);
"the roles are assumed by the CDK CLI" from a principal that may sts:AssumeRole them (source:
https://docs.aws.amazon.com/cdk/v2/guide/bootstrapping-env.html; the role names are the bootstrap template's,
cdk-QUALIFIER-ROLE-ACCOUNT-REGION; aws/aws-cdk discussion #36788: let the CLI assume them, do not pre-assume)."""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from gpufleet.constants import ENVIRONMENT_TAG_KEY

PIPELINE_SCRIPTS = "scripts/pipeline"
# Every environment the gate deploys is named accept-<8 hex digits of the build id> (scripts/lib/helpers.sh
# acceptance_environment_name), and its one stack gpufleet-accept-...-cluster.
ACCEPTANCE_ENVIRONMENTS = "accept-*"
ACCEPTANCE_STACKS = f"gpufleet-{ACCEPTANCE_ENVIRONMENTS}"
CDK_QUALIFIER = "hnb659fds"
CDK_ROLES_OF_A_DEPLOY = ("deploy-role", "file-publishing-role", "lookup-role")
TEARDOWN_BUILD_VARIABLE = "GPUFLEET_GATE_BUILD_ARN"
# The teardown waits at most an hour for the stack's deletion (botocore's StackDeleteComplete waiter: 120 polls
# 30 s apart); plus the build's start.
TEARDOWN_TIMEOUT = cdk.Duration.minutes(75)
# Event fields: https://docs.aws.amazon.com/codebuild/latest/userguide/sample-build-notifications.html ("Build
# notifications input format reference": detail-type "CodeBuild Build State Change", source aws.codebuild,
# detail.build-status, detail.project-name, detail.build-id, the build's ARN). Its example lists IN_PROGRESS,
# SUCCEEDED, FAILED and STOPPED; the Build API's statuses add FAULT and TIMED_OUT (botocore codebuild StatusType).
# Every status but IN_PROGRESS ends a build: matching them with anything-but keeps a status the example leaves out.
BUILD_STATE_CHANGE = "CodeBuild Build State Change"
RUNNING_STATUS = "IN_PROGRESS"


def teardown_buildspec() -> dict:
    return {
        "version": "0.2",
        "env": {"shell": "bash"},
        "phases": {"build": {"commands": [f"bash {PIPELINE_SCRIPTS}/acceptance-teardown.sh"]}},
    }


def cdk_role_arns(stack: cdk.Stack, roles: tuple[str, ...]) -> list[str]:
    return [
        stack.format_arn(
            service="iam",
            region="",
            resource="role",
            resource_name=f"cdk-{CDK_QUALIFIER}-{role}-{stack.account}-{stack.region}",
        )
        for role in roles
    ]


class AmiAcceptanceGate(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        build_project: codebuild.Project,
        source: s3_assets.Asset,
        key: kms.IKey,
        log_group: logs.ILogGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        self._grant_gate(build_project)
        self.teardown_project = codebuild.Project(
            self,
            "Teardown",
            description="gpufleet AMI acceptance gate backstop: deletes the gate stack of an ended AMI build",
            source=codebuild.Source.s3(bucket=source.bucket, path=source.s3_object_key),
            build_spec=codebuild.BuildSpec.from_object(teardown_buildspec()),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0, compute_type=codebuild.ComputeType.SMALL
            ),
            encryption_key=key,
            timeout=TEARDOWN_TIMEOUT,
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=log_group)),
        )
        teardown_role = self.teardown_project.role
        assert teardown_role is not None
        teardown_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="AssumeCdkDeployRole",
                actions=["sts:AssumeRole"],
                resources=cdk_role_arns(cdk.Stack.of(self), ("deploy-role",)),
            )
        )
        self.rule = events.Rule(
            self,
            "Backstop",
            description="gpufleet: tear the acceptance gate's nodes down after every AMI build, however it ended",
            event_pattern=events.EventPattern(
                source=["aws.codebuild"],
                detail_type=[BUILD_STATE_CHANGE],
                detail={
                    "project-name": [build_project.project_name],
                    "build-status": [{"anything-but": [RUNNING_STATUS]}],
                },
            ),
        )
        self.rule.add_target(
            targets.CodeBuildProject(
                self.teardown_project,
                event=events.RuleTargetInput.from_object(
                    {
                        "environmentVariablesOverride": [
                            {
                                "name": TEARDOWN_BUILD_VARIABLE,
                                "value": events.EventField.from_path("$.detail.build-id"),
                                "type": "PLAINTEXT",
                            }
                        ]
                    }
                ),
            )
        )
        self._acknowledge(teardown_role)

    def _grant_gate(self, build_project: codebuild.Project) -> None:
        stack = cdk.Stack.of(self)
        role = build_project.role
        assert role is not None
        gate_stacks = stack.format_arn(
            service="cloudformation", resource="stack", resource_name=f"{ACCEPTANCE_STACKS}/*"
        )
        statements = [
            iam.PolicyStatement(
                sid="GateAssumeCdkRoles",
                actions=["sts:AssumeRole"],
                resources=cdk_role_arns(stack, CDK_ROLES_OF_A_DEPLOY),
            ),
            # GetProducts supports no resource-level permissions (Service Authorization Reference, AWS Price List).
            iam.PolicyStatement(sid="GateOnDemandPrice", actions=["pricing:GetProducts"], resources=["*"]),
            # gpufleet acceptance finds the nodes from the stack's outputs and the Auto Scaling group
            # (gpufleet/ops/fleet.py) and runs its checks through SSM Run Command (AWS-RunShellScript).
            iam.PolicyStatement(
                sid="GateReadStack", actions=["cloudformation:DescribeStacks"], resources=[gate_stacks]
            ),
            iam.PolicyStatement(
                sid="GateReadNodes",
                actions=[
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeScheduledActions",
                    "ssm:GetCommandInvocation",
                    "ssm:ListCommandInvocations",
                ],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="GateRunOnNodes",
                actions=["ssm:SendCommand"],
                resources=[stack.format_arn(service="ec2", resource="instance", resource_name="*")],
                conditions={"StringLike": {f"ssm:resourceTag/{ENVIRONMENT_TAG_KEY}": ACCEPTANCE_ENVIRONMENTS}},
            ),
            iam.PolicyStatement(
                sid="GateRunShellScript",
                actions=["ssm:SendCommand"],
                resources=[
                    stack.format_arn(service="ssm", account="", resource="document", resource_name="AWS-RunShellScript")
                ],
            ),
        ]
        for statement in statements:
            role.add_to_principal_policy(statement)
        reasons = {
            "Resource::*": "the gpufleet AMI acceptance gate reads the on-demand price (pricing:GetProducts), the "
            "gate's Auto Scaling group and its Run Command results, none of which supports resource-level "
            "permissions; all read-only",
            f"Resource::arn:<AWS::Partition>:cloudformation:{stack.region}:{stack.account}:stack/"
            f"{ACCEPTANCE_STACKS}/*": "the gpufleet acceptance gate's stack is named after each build "
            "(gpufleet-accept-<build id>-cluster); read only",
            f"Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:instance/*": "Run Command on "
            "the gpufleet acceptance gate's nodes only: their ids are unknown in advance, SendCommand requires the "
            "gpufleet:environment tag accept-*",
        }
        for finding, reason in reasons.items():
            cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))

    def _acknowledge(self, role: iam.IRole) -> None:
        stack = cdk.Stack.of(self)
        project = stack.get_logical_id(cast(cdk.CfnElement, self.teardown_project.node.default_child))
        region, account = stack.region, stack.account
        reasons = {
            "Action::s3:GetObject*": "the gpufleet acceptance teardown reads the pipeline's source asset; "
            "aws-cdk-lib's read grant, limited to the CDK assets bucket",
            "Action::s3:GetBucket*": "aws-cdk-lib's read grant on the CDK assets bucket that holds the gpufleet source "
            "asset the teardown build runs",
            "Action::s3:List*": "aws-cdk-lib's read grant on the CDK assets bucket holding the gpufleet source asset",
            "Action::kms:ReEncrypt*": "aws-cdk-lib's grant on the gpufleet AMI pipeline's own KMS key, which encrypts "
            "the teardown build's output",
            "Action::kms:GenerateDataKey*": "aws-cdk-lib's grant on the gpufleet AMI pipeline's own KMS key for the "
            "teardown build's output",
            f"Resource::arn:<AWS::Partition>:logs:{region}:{account}:log-group:/aws/codebuild/<{project}>:*": (
                "aws-cdk-lib grants the default log group of the gpufleet acceptance teardown project; it logs to the "
                "pipeline's own log group"
            ),
            f"Resource::arn:<AWS::Partition>:codebuild:{region}:{account}:report-group/<{project}>-*": (
                "aws-cdk-lib grants report groups named after the gpufleet acceptance teardown project only"
            ),
        }
        for finding, reason in reasons.items():
            cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))
