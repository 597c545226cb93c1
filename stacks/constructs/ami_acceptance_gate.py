"""What the AMI build's acceptance gate needs beyond the build project (scripts/pipeline/acceptance-gate.sh and
acceptance-teardown.sh; docs/guides/ami-pipeline.md, "Acceptance gate").

**How the gate deploys: without any CDK bootstrap role.** The build synthesizes the gate's environment with the
project's own app (`cdk synth`: the image is tested with the real user data), stages the one template
(gpufleet/commands/ami_acceptance.py stage_gate_stack: its assets moved to this construct's bucket, every name
gpufleet-accept-..., every role given this construct's permissions boundary, the launch template tagged) and creates
the stack itself (CloudFormation CreateStack), passing this construct's execution role; the teardown deletes it
(DeleteStack) with the same role. Every grant is in this stack, so the tests read each one off the synthesized
template.

Options weighed (issue 29, finding 5):
- The default bootstrap's roles (what the gate did before): the deploy role (DeploymentActionRole) may create,
  update, change-set and delete any stack of the account and region and turn termination protection off
  (DeployPermissions and CliPermissions on Resource "*"), and the execution role is AdministratorAccess unless
  --cloudformation-execution-policies names others (CloudFormationExecutionRole ManagedPolicyArns): the bootstrap
  template the pinned CLI bundles, node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml (aws-cdk 2.1148.1).
  The file-publishing role may write any object of the assets bucket, from which every environment's nodes fetch
  their operator scripts (gpufleet/user_data.py operator_scripts_location).
- A second bootstrap with a qualifier of the gate's and a narrow --cloudformation-execution-policies (the user
  running it once): its deploy role has the same stack grants on "*", and DeleteStack of a stack created through
  another role uses that stack's role ("If you don't specify a value, CloudFormation uses the role that was
  previously associated with the stack": DeleteStack RoleARN in botocore 1.44.5's CloudFormation model), so it
  could still delete gpufleet-prod-storage with prod's AdministratorAccess role. Its assets bucket would differ from
  the default one the nodes fetch the operator scripts from (stacks/constructs/operator_scripts.py fails synthesis),
  and none of its grants could be read offline.
- Chosen: no CDK role. The build role may CreateStack and DeleteStack only stacks named gpufleet-accept-* and only
  passing this execution role (condition cloudformation:RoleArn; CreateStack also only with the resource types of the
  gate's stack, cloudformation:ResourceTypes: keys of CreateStack and DeleteStack in the Service Authorization
  Reference that parliament 1.6.4 bundles). The execution role may create and delete only what the gate's stack
  holds, each limited to the names gpufleet-accept-* (IAM roles and instance profiles, functions, log groups, the
  state machine, the secret, the session document, the dashboard, the Auto Scaling group) or, for EC2 resources
  named by id, to the tag gpufleet:environment accept-* given at creation; it creates roles only with this
  construct's permissions boundary, which lets a gate role do only what the gate's stack grants its nodes and
  functions, on the gate's own resources. Nothing for the user to run once: the gate reads no bootstrap.

Also here:
- the build role's other grants: read the on-demand price, and what `gpufleet acceptance` reads and runs on the
  gate's nodes, each limited to the gate's stacks (gpufleet-accept-*) and nodes (tagged gpufleet:environment
  accept-*);
- the backstop: an EventBridge rule on the build project's "CodeBuild Build State Change" events of every status but
  IN_PROGRESS, which starts a teardown build (a second CodeBuild project on the same sources) with the ended build's
  ARN. The gate's own teardown runs in an EXIT trap and in the build phase's finally; a build stopped (StopBuild) or
  timed out may run neither (CodeBuild's buildspec reference promises finally only after a failed command), and a
  SIGKILLed build process runs nothing at all. The teardown build is idempotent, so it runs after every build.

Unconfirmed offline (the gate has not run on a real account): which calls CloudFormation's handlers make (the grants
follow the handlers' permission lists in the registry schemas that cfn-lint bundles, less what the gate's stack does
not use); that each handler passes the tags at creation (else the EC2 creations are refused, and the gate fails,
touching nothing); that CloudFormation invokes a custom resource's function with the execution role; that Auto
Scaling checks ec2:RunInstances with the caller's credentials when a group uses a launch template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct, IConstruct

from gpufleet.ami.pipeline import Acceptance
from gpufleet.constants import ENVIRONMENT_TAG_KEY

PIPELINE_SCRIPTS = "scripts/pipeline"
# Every environment the gate deploys is named accept-<8 hex digits of the build id> (scripts/lib/helpers.sh
# acceptance_environment_name), and its one stack gpufleet-accept-...-cluster.
ACCEPTANCE_ENVIRONMENTS = "accept-*"
ACCEPTANCE_STACKS = f"gpufleet-{ACCEPTANCE_ENVIRONMENTS}"
# What the gate's stack may hold (gpufleet/commands/ami_acceptance.py gate_resource_types, which the staging checks;
# a test holds the two lists together): CreateStack's cloudformation:ResourceTypes condition.
GATE_RESOURCE_TYPES = (
    "AWS::IAM::Role",
    "AWS::IAM::InstanceProfile",
    "AWS::Lambda::Function",
    "AWS::Logs::LogGroup",
    "AWS::StepFunctions::StateMachine",
    "AWS::SecretsManager::Secret",
    "AWS::SSM::Document",
    "AWS::CloudWatch::Dashboard",
    "AWS::AutoScaling::AutoScalingGroup",
    "AWS::EC2::SecurityGroup",
    "AWS::EC2::PlacementGroup",
    "AWS::EC2::LaunchTemplate",
    "AWS::EC2::SecurityGroupIngress",
    "AWS::EC2::SecurityGroupEgress",
    "AWS::IAM::Policy",
    "AWS::SecretsManager::ResourcePolicy",
    "AWS::Logs::MetricFilter",
    "Custom::Gpufleet*",
)
# The AWS managed policies the gate's stack attaches to its roles (the node role, the CDK provider framework's
# functions); no other may be attached.
GATE_MANAGED_POLICIES = ("AmazonSSMManagedInstanceCore", "service-role/AWSLambdaBasicExecutionRole")
# What a node's SSM agent calls: AmazonSSMManagedInstanceCore's actions (moto 5.2.5 bundles the policy's document,
# moto/iam/aws_managed_policies.py) less ssm:GetParameter, ssm:GetParameters and
# ssm:GetDeployablePatchSnapshotForInstance, which the gate's nodes do not use: a gate role reads no parameter.
NODE_AGENT_ACTIONS = (
    "ssm:DescribeAssociation",
    "ssm:GetDocument",
    "ssm:DescribeDocument",
    "ssm:GetManifest",
    "ssm:ListAssociations",
    "ssm:ListInstanceAssociations",
    "ssm:PutInventory",
    "ssm:PutComplianceItems",
    "ssm:PutConfigurePackageResult",
    "ssm:UpdateAssociationStatus",
    "ssm:UpdateInstanceAssociationStatus",
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
    "ec2messages:AcknowledgeMessage",
    "ec2messages:DeleteMessage",
    "ec2messages:FailMessage",
    "ec2messages:GetEndpoint",
    "ec2messages:GetMessages",
    "ec2messages:SendReply",
)
# The build's settings of the gate (scripts/pipeline/acceptance-gate.sh, acceptance-teardown.sh).
EXECUTION_ROLE_VARIABLE = "GPUFLEET_GATE_EXECUTION_ROLE_ARN"
ASSETS_BUCKET_VARIABLE = "GPUFLEET_GATE_ASSETS_BUCKET"
BOUNDARY_VARIABLE = "GPUFLEET_GATE_BOUNDARY_ARN"
TEARDOWN_BUILD_VARIABLE = "GPUFLEET_GATE_BUILD_ARN"
# The staged templates and assets are read once, when the stack is created: a day is plenty.
STAGED_OBJECTS_EXPIRE = cdk.Duration.days(1)
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
CLOUDFORMATION = "cloudformation.amazonaws.com"
# The EC2 resources of the gate's stack, named by id (CreateSecurityGroup, ...), and what deleting each takes.
TAG_CREATED = {
    "SecurityGroup": "security-group",
    "PlacementGroup": "placement-group",
    "LaunchTemplate": "launch-template",
}
TAGGED_CHANGES = {
    "SecurityGroup": (
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:DeleteSecurityGroup",
    ),
    "PlacementGroup": ("ec2:DeletePlacementGroup",),
    "LaunchTemplate": ("ec2:DeleteLaunchTemplate", "ec2:DeleteTags"),
}


def teardown_buildspec() -> dict:
    return {
        "version": "0.2",
        "env": {"shell": "bash"},
        "phases": {"build": {"commands": [f"bash {PIPELINE_SCRIPTS}/acceptance-teardown.sh"]}},
    }


def nag_resource(stack: cdk.Stack, arn: str) -> str:
    """A resource as cdk-nag names it in an AwsSolutions-IAM5 finding: references as <AWS::Partition>,
    <LogicalId.Arn>, <LogicalId>."""

    def render(value) -> str:
        if isinstance(value, str):
            return value
        ((function, argument),) = value.items()
        if function == "Fn::Join":
            return argument[0].join(render(part) for part in argument[1])
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::GetAtt":
            return f"<{'.'.join(argument)}>"
        raise ValueError(f"{value!r}: not rendered")

    return render(stack.resolve(arn))


@dataclass(frozen=True)
class GateArns:
    """The ARN patterns of what the gate's stack creates, in the pipeline stack's account and region (GateArns.of)."""

    stack: cdk.Stack
    stacks: str
    roles: str
    instance_profiles: str
    functions: str
    # The functions' log groups (gpufleet-accept-...) and the nodes' (/gpufleet/accept-.../nodes), with their
    # streams (a log group's ARN ends in ":*" or ":log-stream:NAME").
    log_groups: list[str]
    state_machines: str
    secrets: str
    documents: str
    dashboards: str
    groups: str
    key_pairs: str

    @classmethod
    def of(cls, stack: cdk.Stack) -> GateArns:
        prefix = ACCEPTANCE_STACKS
        partition, region, account = cdk.Aws.PARTITION, stack.region, stack.account
        return cls(
            stack=stack,
            stacks=f"arn:{partition}:cloudformation:{region}:{account}:stack/{prefix}/*",
            roles=f"arn:{partition}:iam::{account}:role/{prefix}",
            instance_profiles=f"arn:{partition}:iam::{account}:instance-profile/{prefix}",
            functions=f"arn:{partition}:lambda:{region}:{account}:function:{prefix}",
            log_groups=[
                f"arn:{partition}:logs:{region}:{account}:log-group:{prefix}",
                f"arn:{partition}:logs:{region}:{account}:log-group:/gpufleet/{ACCEPTANCE_ENVIRONMENTS}",
            ],
            state_machines=f"arn:{partition}:states:{region}:{account}:stateMachine:{prefix}",
            secrets=f"arn:{partition}:secretsmanager:{region}:{account}:secret:{prefix}",
            documents=f"arn:{partition}:ssm:{region}:{account}:document/{prefix}",
            dashboards=f"arn:{partition}:cloudwatch::{account}:dashboard/{prefix}",
            groups=f"arn:{partition}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{prefix}",
            key_pairs=f"arn:{partition}:ec2:{region}:{account}:key-pair/{prefix}",
        )

    def ec2(self, resource: str, name: str = "*") -> str:
        return f"arn:{cdk.Aws.PARTITION}:ec2:{self.stack.region}:{self.stack.account}:{resource}/{name}"

    def managed_policy(self, name: str) -> str:
        return f"arn:{cdk.Aws.PARTITION}:iam::aws:policy/{name}"


def tagged(key: str) -> dict:
    """The condition that KEY (aws:RequestTag/... or aws:ResourceTag/...) of the environment tag names a gate
    environment."""
    return {"StringLike": {f"{key}/{ENVIRONMENT_TAG_KEY}": ACCEPTANCE_ENVIRONMENTS}}


def execution_statements(
    arns: GateArns, *, acceptance: Acceptance, boundary_arn: str, staged_objects: str
) -> list[iam.PolicyStatement]:
    """What CloudFormation may do with the gate's execution role: create and delete the gate stack's resources. The
    actions follow the create, read and delete handlers' permissions of each type's registry schema (cfn-lint bundles
    the schemas; tests/stacks/test_ami_acceptance_gate.py compares), less what the gate's stack does not use: KMS keys
    of its own, replication, layers, code signing, VPC functions, log deliveries, data protection, ELB, alarms,
    notifications, and every ec2:Get*."""
    ec2 = arns.ec2
    tag_created = tuple(TAG_CREATED.values())
    return [
        iam.PolicyStatement(
            sid="ReadEc2",
            actions=["ec2:Describe*"],
            resources=["*"],
        ),
        # EC2 resources are named by id: created only with the environment tag, and changed or deleted only while
        # they carry it (one statement per resource type, each action acting on its type). The tags are given at
        # creation (ec2:CreateAction), never added to an existing resource.
        *(
            iam.PolicyStatement(
                sid=f"Create{kind}",
                actions=[f"ec2:Create{kind}"],
                resources=[ec2(resource)],
                conditions=tagged("aws:RequestTag"),
            )
            for kind, resource in TAG_CREATED.items()
        ),
        *(
            iam.PolicyStatement(
                sid=f"ChangeTagged{kind}",
                actions=list(actions),
                resources=[ec2(TAG_CREATED[kind])],
                conditions=tagged("aws:ResourceTag"),
            )
            for kind, actions in TAGGED_CHANGES.items()
        ),
        iam.PolicyStatement(
            sid="SecurityGroupInTheGateVpc",
            actions=["ec2:CreateSecurityGroup"],
            resources=[ec2("vpc", acceptance.vpc_id)],
        ),
        iam.PolicyStatement(
            sid="TagAtCreation",
            actions=["ec2:CreateTags"],
            resources=[
                *(ec2(resource) for resource in tag_created),
                ec2("instance"),
                ec2("volume"),
                ec2("network-interface"),
            ],
            conditions={
                "StringEquals": {
                    "ec2:CreateAction": [
                        "CreateSecurityGroup",
                        "CreatePlacementGroup",
                        "CreateLaunchTemplate",
                        "RunInstances",
                    ]
                }
            },
        ),
        # An Auto Scaling group with a launch template is created only by a caller who may launch its instances
        # (Auto Scaling user guide, "Launch template support"; unconfirmed offline): in the gate's subnet only.
        iam.PolicyStatement(
            sid="LaunchGateNodes",
            actions=["ec2:RunInstances"],
            resources=[
                ec2("instance"),
                ec2("volume"),
                ec2("network-interface"),
                ec2("security-group"),
                ec2("launch-template"),
                ec2("placement-group"),
                ec2("subnet", acceptance.subnet_id),
                f"arn:{cdk.Aws.PARTITION}:ec2:{arns.stack.region}::image/*",
            ],
        ),
        # IAM: roles and instance profiles named gpufleet-accept-* only; every role with the gate's boundary, which
        # no grant here may change or remove (no iam:PutRolePermissionsBoundary, DeleteRolePermissionsBoundary,
        # UpdateAssumeRolePolicy or any policy action).
        iam.PolicyStatement(
            sid="CreateBoundedRoles",
            actions=["iam:CreateRole", "iam:PutRolePolicy"],
            resources=[arns.roles],
            conditions={"StringEquals": {"iam:PermissionsBoundary": boundary_arn}},
        ),
        iam.PolicyStatement(
            sid="AttachGateManagedPolicies",
            actions=["iam:AttachRolePolicy"],
            resources=[arns.roles],
            conditions={
                "StringEquals": {"iam:PermissionsBoundary": boundary_arn},
                "ArnEquals": {"iam:PolicyARN": [arns.managed_policy(name) for name in GATE_MANAGED_POLICIES]},
            },
        ),
        iam.PolicyStatement(
            sid="GateRoles",
            actions=[
                "iam:GetRole",
                "iam:GetRolePolicy",
                "iam:ListRolePolicies",
                "iam:ListAttachedRolePolicies",
                "iam:TagRole",
                "iam:UntagRole",
                "iam:DeleteRolePolicy",
                "iam:DetachRolePolicy",
                "iam:DeleteRole",
            ],
            resources=[arns.roles],
        ),
        iam.PolicyStatement(
            sid="GateInstanceProfiles",
            actions=[
                "iam:CreateInstanceProfile",
                "iam:GetInstanceProfile",
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            resources=[arns.instance_profiles],
        ),
        iam.PolicyStatement(
            sid="PassGateRoles",
            actions=["iam:PassRole"],
            resources=[arns.roles],
            conditions={
                "StringEquals": {
                    "iam:PassedToService": ["ec2.amazonaws.com", "lambda.amazonaws.com", "states.amazonaws.com"]
                }
            },
        ),
        iam.PolicyStatement(
            sid="GateFunctions",
            actions=[
                "lambda:CreateFunction",
                "lambda:GetFunction",
                "lambda:GetFunctionCodeSigningConfig",
                "lambda:GetFunctionRecursionConfig",
                "lambda:GetRuntimeManagementConfig",
                "lambda:PutFunctionConcurrency",
                "lambda:PutFunctionRecursionConfig",
                "lambda:PutRuntimeManagementConfig",
                "lambda:TagResource",
                # A custom resource's function, invoked by CloudFormation.
                "lambda:InvokeFunction",
                "lambda:DeleteFunction",
            ],
            resources=[arns.functions],
        ),
        iam.PolicyStatement(
            sid="ReadStagedCode",
            actions=["s3:GetObject", "s3:GetObjectVersion"],
            resources=[staged_objects],
        ),
        iam.PolicyStatement(sid="ReadLogGroups", actions=["logs:DescribeLogGroups"], resources=["*"]),
        iam.PolicyStatement(
            sid="GateLogGroups",
            actions=[
                "logs:CreateLogGroup",
                "logs:PutRetentionPolicy",
                "logs:TagResource",
                "logs:ListTagsForResource",
                "logs:GetDataProtectionPolicy",
                "logs:PutMetricFilter",
                "logs:DescribeMetricFilters",
                "logs:DeleteMetricFilter",
                "logs:DeleteLogGroup",
            ],
            resources=arns.log_groups,
        ),
        iam.PolicyStatement(
            sid="GateStateMachine",
            actions=[
                "states:CreateStateMachine",
                "states:DescribeStateMachine",
                "states:TagResource",
                "states:ListTagsForResource",
                "states:DeleteStateMachine",
            ],
            resources=[arns.state_machines],
        ),
        iam.PolicyStatement(
            sid="GateSecret",
            actions=[
                "secretsmanager:CreateSecret",
                "secretsmanager:DescribeSecret",
                "secretsmanager:TagResource",
                "secretsmanager:PutResourcePolicy",
                "secretsmanager:GetResourcePolicy",
                "secretsmanager:DeleteResourcePolicy",
                "secretsmanager:DeleteSecret",
            ],
            resources=[arns.secrets],
        ),
        iam.PolicyStatement(
            sid="GateSessionDocument",
            actions=[
                "ssm:CreateDocument",
                "ssm:GetDocument",
                "ssm:DescribeDocument",
                "ssm:AddTagsToResource",
                "ssm:ListTagsForResource",
                "ssm:DeleteDocument",
            ],
            resources=[arns.documents],
        ),
        iam.PolicyStatement(
            sid="GateDashboard",
            actions=["cloudwatch:PutDashboard", "cloudwatch:GetDashboard", "cloudwatch:DeleteDashboards"],
            resources=[arns.dashboards],
        ),
        iam.PolicyStatement(sid="ReadGroups", actions=["autoscaling:Describe*"], resources=["*"]),
        iam.PolicyStatement(
            sid="GateGroup",
            actions=[
                "autoscaling:CreateAutoScalingGroup",
                "autoscaling:UpdateAutoScalingGroup",
                "autoscaling:CreateOrUpdateTags",
                "autoscaling:DeleteAutoScalingGroup",
            ],
            resources=[arns.groups],
        ),
    ]


def boundary_statements(arns: GateArns, *, staged_objects: str) -> list[iam.PolicyStatement]:
    """The most any role of the gate's stack may do, whatever its own policies say (a permissions boundary): what the
    gate's nodes and functions are granted in the gate's stack, on the gate's own resources. The nodes' SSM agent
    only with instance credentials (ec2:SourceInstanceARN, as the nodes' readiness grant)."""
    return [
        iam.PolicyStatement(
            sid="NodeAgent",
            actions=list(NODE_AGENT_ACTIONS),
            resources=["*"],
            conditions={"Null": {"ec2:SourceInstanceARN": "false"}},
        ),
        iam.PolicyStatement(
            sid="GateLogs",
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            resources=arns.log_groups,
        ),
        iam.PolicyStatement(
            sid="GateMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringLike": {"cloudwatch:namespace": f"gpufleet/{ACCEPTANCE_ENVIRONMENTS}"}},
        ),
        iam.PolicyStatement(
            sid="GateSecret",
            actions=["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"],
            resources=[arns.secrets],
        ),
        iam.PolicyStatement(
            sid="GateKeyPairs", actions=["ec2:CreateKeyPair", "ec2:DeleteKeyPair"], resources=[arns.key_pairs]
        ),
        iam.PolicyStatement(sid="GateOperatorScripts", actions=["s3:GetObject"], resources=[staged_objects]),
        iam.PolicyStatement(
            sid="GateNodeTags",
            actions=["ec2:CreateTags"],
            resources=[arns.ec2("instance")],
            conditions=tagged("aws:ResourceTag"),
        ),
        iam.PolicyStatement(
            sid="GateGroup",
            actions=["autoscaling:SetDesiredCapacity", "autoscaling:CompleteLifecycleAction"],
            resources=[arns.groups],
        ),
        iam.PolicyStatement(
            sid="ReadGroups",
            actions=["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities"],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="GateFunctions", actions=["lambda:InvokeFunction", "lambda:GetFunction"], resources=[arns.functions]
        ),
        iam.PolicyStatement(sid="GateWaiter", actions=["states:StartExecution"], resources=[arns.state_machines]),
    ]


class AmiAcceptanceGate(Construct):
    """Made before the build project (whose settings name its bucket, boundary and execution role), then attached to
    it (attach: the build role's grants, the teardown project and the backstop rule)."""

    def __init__(self, scope: Construct, construct_id: str, *, acceptance: Acceptance) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.arns = GateArns.of(stack)
        self.bucket = s3.Bucket(
            self,
            "Assets",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(expiration=STAGED_OBJECTS_EXPIRE)],
        )
        cdk.Validations.of(self.bucket.node.default_child).acknowledge(  # type: ignore[arg-type]
            cdk.Acknowledgment(
                id="AwsSolutions-S1",
                reason="the bucket holds the gpufleet acceptance gate's staged templates and function code for a day "
                "(its lifecycle rule), written only by the AMI build; server access logs would need a second bucket",
            )
        )
        self.staged_objects = self.bucket.arn_for_objects(f"{ACCEPTANCE_ENVIRONMENTS}/*")
        self.boundary = iam.ManagedPolicy(
            self,
            "Boundary",
            description="gpufleet AMI acceptance gate: the permissions boundary of every role of a gate stack",
            statements=boundary_statements(self.arns, staged_objects=self.staged_objects),
        )
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal(CLOUDFORMATION),
            description="gpufleet AMI acceptance gate: CloudFormation creates and deletes gpufleet-accept-* stacks "
            "with it",
            inline_policies={
                "GateStack": iam.PolicyDocument(
                    statements=execution_statements(
                        self.arns,
                        acceptance=acceptance,
                        boundary_arn=self.boundary.managed_policy_arn,
                        staged_objects=self.staged_objects,
                    )
                )
            },
        )
        self._acknowledge_wildcards(self.boundary, boundary_statements(self.arns, staged_objects=self.staged_objects))
        self._acknowledge_wildcards(
            self.execution_role,
            execution_statements(
                self.arns,
                acceptance=acceptance,
                boundary_arn=self.boundary.managed_policy_arn,
                staged_objects=self.staged_objects,
            ),
        )

    @property
    def variables(self) -> dict[str, str]:
        """The build project's settings of the gate."""
        return {
            EXECUTION_ROLE_VARIABLE: self.execution_role.role_arn,
            ASSETS_BUCKET_VARIABLE: self.bucket.bucket_name,
            BOUNDARY_VARIABLE: self.boundary.managed_policy_arn,
        }

    def attach(
        self,
        *,
        build_project: codebuild.Project,
        source: s3_assets.Asset,
        key: kms.IKey,
        log_group: logs.ILogGroup,
    ) -> None:
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
            environment_variables={
                EXECUTION_ROLE_VARIABLE: codebuild.BuildEnvironmentVariable(value=self.execution_role.role_arn)
            },
            encryption_key=key,
            timeout=TEARDOWN_TIMEOUT,
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=log_group)),
        )
        teardown_role = self.teardown_project.role
        assert teardown_role is not None
        for statement in self._delete_statements():
            teardown_role.add_to_principal_policy(statement)
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

    def _delete_statements(self) -> list[iam.PolicyStatement]:
        """Delete a gate stack, always through the execution role (whatever role a stack was created with, DeleteStack
        uses the one it names), and read its status; what the build and the teardown build share."""
        with_gate_role = {"StringEquals": {"cloudformation:RoleArn": self.execution_role.role_arn}}
        return [
            iam.PolicyStatement(
                sid="GateDeleteStack",
                actions=["cloudformation:DeleteStack"],
                resources=[self.arns.stacks],
                conditions=with_gate_role,
            ),
            iam.PolicyStatement(
                sid="GateReadStack",
                actions=["cloudformation:DescribeStacks"],
                resources=[self.arns.stacks],
            ),
            iam.PolicyStatement(
                sid="GatePassExecutionRole",
                actions=["iam:PassRole"],
                resources=[self.execution_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": CLOUDFORMATION}},
            ),
        ]

    def _grant_gate(self, build_project: codebuild.Project) -> None:
        stack = cdk.Stack.of(self)
        role = build_project.role
        assert role is not None
        statements = [
            iam.PolicyStatement(
                sid="GateCreateStack",
                actions=["cloudformation:CreateStack"],
                resources=[self.arns.stacks],
                conditions={
                    "StringEquals": {"cloudformation:RoleArn": self.execution_role.role_arn},
                    "ForAllValues:StringLike": {"cloudformation:ResourceTypes": list(GATE_RESOURCE_TYPES)},
                },
            ),
            *self._delete_statements(),
            iam.PolicyStatement(
                sid="GateStageStack",
                actions=["s3:PutObject", "s3:GetObject"],
                resources=[self.staged_objects],
            ),
            # GetProducts supports no resource-level permissions (Service Authorization Reference, AWS Price List).
            iam.PolicyStatement(sid="GateOnDemandPrice", actions=["pricing:GetProducts"], resources=["*"]),
            # gpufleet acceptance finds the nodes from the stack's outputs and the Auto Scaling group
            # (gpufleet/ops/fleet.py) and runs its checks through SSM Run Command (AWS-RunShellScript).
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
        self._acknowledge_wildcards(role, statements)

    def _acknowledge_wildcards(self, scope: IConstruct, statements: list[iam.PolicyStatement]) -> None:
        """cdk-nag's AwsSolutions-IAM5 acknowledgements for the wildcards of the gate's statements: each resource or
        action pattern the gate grants, with why."""
        reasons = {}
        for statement in statements:
            for resource in statement.resources:
                if "*" in resource:
                    reasons[f"Resource::{nag_resource(cdk.Stack.of(self), resource)}"] = _resource_reason(resource)
            for action in statement.actions:
                if "*" in action:
                    reasons[f"Action::{action}"] = (
                        f"the gpufleet acceptance gate's read-only {action.split(':')[0]} describe calls, which "
                        "CloudFormation's handlers make while they create a gate stack"
                    )
        for finding, reason in reasons.items():
            cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))

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
        self._acknowledge_wildcards(role, self._delete_statements())


def _resource_reason(resource: str) -> str:
    if resource == "*":
        return (
            "the gpufleet acceptance gate's calls that support no resource-level permissions (the on-demand price, "
            "Auto Scaling and Run Command reads, EC2 and log group describes, the nodes' SSM agent and metrics, "
            "the latter limited to instance credentials and the gate's namespace); none acts on another resource"
        )
    if ":stack/" in resource:
        return "the gpufleet acceptance gate's stacks are named after each build (gpufleet-accept-<build id>-cluster)"
    if "/*" in resource and ":ec2:" in resource:
        return (
            "EC2 resources of the gpufleet acceptance gate are named by id: created only with, and changed or "
            "deleted only while carrying, the tag gpufleet:environment accept-*; launched only in the gate's subnet"
        )
    return "what the gpufleet acceptance gate's stack creates is named after each build: gpufleet-accept-<build id>-..."
