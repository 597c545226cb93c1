"""The EKS control plane's log group, made so that a deploy after `cdk destroy` works.

EKS writes the control plane's logs to /aws/eks/NAME/cluster, "creating it if it is missing" (EKS user guide,
control-plane-logs: "The log group name format is /aws/eks/my-cluster/cluster"). A cluster being deleted can still
write a last line after the stack's log group is gone, and EKS's service-linked role then makes the group again
(terraform-aws-eks#2486; #2763 found AWSServiceRoleForAmazonEKS making it in CloudTrail, so denying the cluster role
logs:CreateLogGroup does not help: #2446). A stack that creates the group as an AWS::Logs::LogGroup then fails its
next deploy with "already exists" (issue 30).

So the group is not a CloudFormation resource but two SDK calls (aws-cdk-lib custom_resources.AwsCustomResource):
CreateLogGroup, where "already exists" is success (the group a destroyed cluster left is adopted), then
PutRetentionPolicy with the file's retention, on every create and update; on delete, DeleteLogGroup, where "not
found" is success. The cluster depends on both, so EKS writes into a group that has its retention from the start.
What a cluster writes after that delete makes the group once more; the next deploy adopts it, and docs/guides/eks.md
says how to find one left behind when there is no next deploy.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.constructs.lambda_functions import log_group
from stacks.constructs.provider_findings import BASIC_EXECUTION

# The error codes CloudWatch Logs answers for a group that exists already and for one that does not (botocore's logs
# model: CreateLogGroup's ResourceAlreadyExistsException, DeleteLogGroup's ResourceNotFoundException).
ALREADY_EXISTS = "ResourceAlreadyExistsException"
NOT_FOUND = "ResourceNotFoundException"
# cdk-nag's spelling of the log group's ARN in its finding.
ARN_FINDING = "arn:<AWS::Partition>:logs:{region}:{account}:log-group:{name}:*"
# The construct id of the one function every AwsCustomResource of a stack shares (aws-cdk-lib 2.275
# custom-resources/lib/aws-custom-resource/aws-custom-resource.js, PROVIDER_FUNCTION_UUID).
SINGLETON_FUNCTION_ID = "AWS679f53fac002430cb0da5b7982bd2287"
# How long the calls' function keeps its own logs, as the other functions of the eks stack do.
FUNCTION_LOG_RETENTION = logs.RetentionDays.ONE_MONTH


class ControlPlaneLogGroup(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, log_group_name: str, retention_days: int) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        arn = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{log_group_name}:*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        policy = cr.AwsCustomResourcePolicy.from_sdk_calls(resources=[arn])
        name = {"logGroupName": log_group_name}
        function_logs = log_group(self, "FunctionLogs", FUNCTION_LOG_RETENTION)
        # The physical id is the group's name: on a new name (a renamed cluster) the update makes the new group and
        # CloudFormation then deletes the old one (a new physical id is a replacement).
        physical_id = cr.PhysicalResourceId.of(log_group_name)
        create = cr.AwsSdkCall(
            service="CloudWatchLogs",
            action="createLogGroup",
            parameters=name,
            physical_resource_id=physical_id,
            ignore_error_codes_matching=ALREADY_EXISTS,
        )
        created = cr.AwsCustomResource(
            self,
            "Create",
            on_create=create,
            on_update=create,
            on_delete=cr.AwsSdkCall(
                service="CloudWatchLogs",
                action="deleteLogGroup",
                parameters=name,
                ignore_error_codes_matching=NOT_FOUND,
            ),
            policy=policy,
            log_group=function_logs,
            install_latest_aws_sdk=False,
        )
        retention = cr.AwsSdkCall(
            service="CloudWatchLogs",
            action="putRetentionPolicy",
            parameters={**name, "retentionInDays": retention_days},
            physical_resource_id=physical_id,
        )
        kept = cr.AwsCustomResource(
            self,
            "Retention",
            on_create=retention,
            on_update=retention,
            policy=policy,
            log_group=function_logs,
            install_latest_aws_sdk=False,
        )
        kept.node.add_dependency(created)
        finding = ARN_FINDING.format(region=stack.region, account=stack.account, name=log_group_name)
        for resource in (created, kept):
            cdk.Validations.of(resource.node.find_child("CustomResourcePolicy")).acknowledge(
                cdk.Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{finding}]",
                    reason="the EKS cluster's control-plane log group alone: CloudWatch Logs writes a log group's ARN "
                    "with a trailing :* (its streams), and aws-cdk-lib's AwsCustomResource grants the call on it alone",
                )
            )
        singleton = stack.node.find_child(SINGLETON_FUNCTION_ID)
        cdk.Validations.of(singleton.node.find_child("ServiceRole")).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM4[{BASIC_EXECUTION}]",
                reason="aws-cdk-lib's AwsCustomResource function (the EKS cluster's control-plane log group) writes "
                "its logs with the managed Lambda basic execution policy; aws-cdk-lib makes this role, offers no other",
            )
        )
