"""The CodeBuild project that builds one AMI profile per build (env var GPUFLEET_AMI_PROFILE): Packer on a pinned,
verified release, the image copied to and its id published as /gpufleet/ami/PROFILE in every region of the profile,
and a role limited to what Packer's amazon-ebs builder does with the rendered templates (ami/packer) and to those
copies. The build instance gets the stack's own instance profile, so the build role creates no IAM role or policy:
it may only pass that one role to EC2."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from gpufleet.ami import AMI_PARAMETER_PREFIX, SSM_AGENT_ACTIONS
from gpufleet.ami.pipeline import Acceptance, Packer
from gpufleet.constants import PROFILE_TAG_KEY, SOURCE_AMI_TAG_KEY

# The build (ami/packer/source.pkr.hcl) puts SOURCE_AMI_TAG_KEY in `tags` and `snapshot_tags`, not in `run_tags`: an
# image or snapshot carries it once Packer has finished it (see pipeline_image_statements).
# Packer names its temporary key pair packer_<uuid>.
PACKER_TEMPORARY_KEY_PAIR = "packer_*"
# The build's environment variables: scripts/pipeline reads them (every one of ours carries the GPUFLEET_ prefix;
# CodeBuild's own, CODEBUILD_* and AWS_*, keep their names). Each build is started with the profile to build.
AMI_PROFILE_VARIABLE = "GPUFLEET_AMI_PROFILE"
BUILD_INSTANCE_PROFILE_VARIABLE = "GPUFLEET_BUILD_INSTANCE_PROFILE"
# CUDA, NCCL, nccl-tests and oneDNN are compiled or installed on the build instance: builds take one to two hours,
# and copies to other regions up to two more (scripts/pipeline/publish-image.sh).
BUILD_TIMEOUT = cdk.Duration.hours(5)
PIPELINE_SCRIPTS = "scripts/pipeline"
# One build, one profile: the manifest of its packer build, relative to the source tree.
PACKER_MANIFEST = "build/image-manifest.json"


def build_timeout(acceptance: Acceptance | None) -> cdk.Duration:
    """The gate's nodes live at most acceptance.node_minutes_bound (deploy, acceptance, teardown) within the build:
    the build's timeout grows by that much, so CodeBuild never ends a build in the middle of its own teardown."""
    if acceptance is None:
        return BUILD_TIMEOUT
    return cdk.Duration.minutes(BUILD_TIMEOUT.to_minutes() + acceptance.node_minutes_bound)


def publish_regions_variable(publish_regions: Mapping[str, tuple[str, ...]]) -> str:
    """GPUFLEET_PUBLISH_REGIONS as publish-image.sh reads it: PROFILE=REGION,REGION entries, space-separated."""
    return " ".join(f"{profile}={','.join(regions)}" for profile, regions in publish_regions.items())


def acceptance_variables(acceptance: Acceptance) -> dict[str, str]:
    return {
        "GPUFLEET_ACCEPTANCE_INSTANCE_TYPE": acceptance.instance_type,
        "GPUFLEET_ACCEPTANCE_NODES": str(acceptance.nodes),
        "GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS": str(acceptance.timeout_minutes * 60),
    }


def buildspec(
    *,
    packer: Packer,
    session_manager_plugin_version: str,
    build_subnet_id: str | None,
    publish_regions: Mapping[str, tuple[str, ...]],
    acceptance: Acceptance | None,
) -> dict:
    """The build, in phase order. Every command is a script of scripts/pipeline (each tested on its own, and the
    phases together by running this buildspec); the pinned tool versions and checksums are its variables. Without
    on-failure, a failing command ends its phase and a failed install phase skips the build phase, so a failed
    install, gate or packer build publishes nothing (sources: https://docs.aws.amazon.com/codebuild/latest/userguide/
    build-spec-ref.html, .../view-build-details-phases.html).
    With an acceptance gate, acceptance-gate.sh runs between the packer build and the publication, and the build
    phase's finally runs the gate's teardown again: "commands in a finally block are run even if a command in the
    commands block fails" (build-spec-ref.html). What a stopped or timed-out build runs is not documented there: the
    stack's backstop rule covers those (stacks/constructs/ami_acceptance_gate.py)."""
    build_commands = [f"bash {PIPELINE_SCRIPTS}/build-image.sh", f"bash {PIPELINE_SCRIPTS}/publish-image.sh"]
    build_phase: dict = {"commands": build_commands}
    if acceptance is not None:
        build_commands.insert(1, f"bash {PIPELINE_SCRIPTS}/acceptance-gate.sh")
        build_phase["finally"] = [f"bash {PIPELINE_SCRIPTS}/acceptance-teardown.sh"]
    return {
        "version": "0.2",
        "env": {
            "shell": "bash",
            "variables": {
                "GPUFLEET_PACKER_VERSION": packer.version,
                "GPUFLEET_PACKER_SHA256": packer.sha256 or "",
                "GPUFLEET_HASHICORP_KEY_FINGERPRINT": packer.signing_key_fingerprint,
                "GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION": session_manager_plugin_version,
                "GPUFLEET_BUILD_SUBNET_ID": build_subnet_id or "",
                "GPUFLEET_PACKER_MANIFEST": PACKER_MANIFEST,
                "GPUFLEET_PUBLISH_REGIONS": publish_regions_variable(publish_regions),
                **(acceptance_variables(acceptance) if acceptance is not None else {}),
            },
        },
        "phases": {
            # bash runs the scripts: the S3 source asset need not keep their executable bits.
            "install": {
                "runtime-versions": {"python": "3.11"},
                "commands": [
                    f"bash {PIPELINE_SCRIPTS}/install-tools.sh",
                    f"bash {PIPELINE_SCRIPTS}/install-gpufleet.sh",
                ],
            },
            "build": build_phase,
        },
    }


# How the build role may touch images and snapshots, per region. What Packer's amazon-ebs builder (plugin 1.3.3,
# github.com/hashicorp/packer-plugin-amazon builder/ebs/builder.go) does with the rendered templates (encrypt_boot,
# kms_key_id, tags, snapshot_tags, run_tags; no ami_regions, ami_users, ami_groups, snapshot_users/groups,
# force_deregister):
#  1. CreateImage of the stopped build instance with TagSpecifications = run_tags on image and snapshot (an
#     intermediate image with a random name, because encrypt_boot is set: builder/ebs/step_create_ami.go);
#  2. CopyImage of it into the same region, encrypted with kms_key_id, CopyImageTags=true and no TagSpecifications
#     (builder/common/step_ami_region_copy.go); afterwards DeregisterImage of the intermediate image and
#     DeleteSnapshot of its snapshots (helper_funcs.go DestroyAMIs; step_create_ami.go Cleanup does the same after a
#     failure);
#  3. ModifyImageAttribute of the copy for ami_description and imds_support (step_modify_ami_attributes.go; no
#     launch permission or snapshot attribute, since no users or groups are configured);
#  4. CreateTags of the copy and its snapshots with `tags`, then of the snapshots with `snapshot_tags`
#     (step_create_tags.go).
# Every image and snapshot the build creates is tagged gpufleet:profile from birth (run_tags on CreateImage, copied by
# CopyImageTags), and Packer only ever deletes or modifies such an image before step 4, which adds
# gpufleet:source-ami. So deregistering, deleting and modifying need gpufleet:profile and *no* gpufleet:source-ami
# (an unfinished gpufleet build), and tagging an existing image or snapshot must add gpufleet:source-ami: a finished
# image (one that clusters launch from), another build's finished image or another team's image can never be
# deregistered, deleted or modified by this role, and no image can be retagged into a deletable one.
# A statement for another region (cross-region copies) follows the same pattern: pipeline_image_statements(stack, R).


def images_in(stack: cdk.Stack, region: str) -> str:
    """Every image of REGION. Image and snapshot ARNs carry no account (Service Authorization Reference for EC2:
    arn:${Partition}:ec2:${Region}::image/${ImageId}, ...::snapshot/${SnapshotId}; parliament's iam_definition.json)."""
    return stack.format_arn(service="ec2", region=region, account="", resource="image", resource_name="*")


def snapshots_in(stack: cdk.Stack, region: str) -> str:
    return stack.format_arn(service="ec2", region=region, account="", resource="snapshot", resource_name="*")


def unfinished_pipeline_resource() -> dict:
    """Tagged by a gpufleet build (run_tags) and not yet finished by Packer (no gpufleet:source-ami)."""
    return {"Null": {f"aws:ResourceTag/{PROFILE_TAG_KEY}": "false", f"aws:ResourceTag/{SOURCE_AMI_TAG_KEY}": "true"}}


def pipeline_image_statements(stack: cdk.Stack, region: str) -> list[iam.PolicyStatement]:
    """What Packer does to images and snapshots in REGION (steps 1-4 above), each limited to gpufleet builds."""
    suffix = "" if region == stack.region else region.title().replace("-", "")
    images, snapshots = images_in(stack, region), snapshots_in(stack, region)
    return [
        # The instance side of CreateImage is PackerControlBuildInstance (a tagged build instance only).
        iam.PolicyStatement(
            sid=f"PackerCreateTaggedImage{suffix}",
            actions=["ec2:CreateImage"],
            resources=[images, snapshots],
            conditions={"Null": {f"aws:RequestTag/{PROFILE_TAG_KEY}": "false"}},
        ),
        # A copy only creates: Packer sends no TagSpecifications with it (its tags come from CopyImageTags), so there is
        # no request tag to require.
        iam.PolicyStatement(
            sid=f"PackerEncryptedCopy{suffix}",
            actions=["ec2:CopyImage"],
            resources=[images, snapshots],
        ),
        # Tags written as part of CreateImage / CopyImage land on the new image and snapshots only.
        iam.PolicyStatement(
            sid=f"PackerTagOnCreate{suffix}",
            actions=["ec2:CreateTags"],
            resources=[images, snapshots],
            conditions={"StringEquals": {"ec2:CreateAction": ["CreateImage", "CopyImage"]}},
        ),
        # Step 4 on the copy (already tagged through CopyImageTags) ...
        iam.PolicyStatement(
            sid=f"PackerTagFinishedImage{suffix}",
            actions=["ec2:CreateTags"],
            resources=[images],
            conditions={
                "Null": {f"aws:ResourceTag/{PROFILE_TAG_KEY}": "false", f"aws:RequestTag/{SOURCE_AMI_TAG_KEY}": "false"}
            },
        ),
        # ... and on its snapshots, which CopyImage leaves untagged: whatever this tags becomes finished, which this
        # role can no longer delete.
        iam.PolicyStatement(
            sid=f"PackerTagFinishedSnapshots{suffix}",
            actions=["ec2:CreateTags"],
            resources=[snapshots],
            conditions={
                "Null": {f"aws:RequestTag/{PROFILE_TAG_KEY}": "false", f"aws:RequestTag/{SOURCE_AMI_TAG_KEY}": "false"}
            },
        ),
        iam.PolicyStatement(
            sid=f"PackerDiscardIntermediateImage{suffix}",
            actions=["ec2:DeregisterImage"],
            resources=[images],
            conditions=unfinished_pipeline_resource(),
        ),
        iam.PolicyStatement(
            sid=f"PackerDiscardIntermediateSnapshots{suffix}",
            actions=["ec2:DeleteSnapshot"],
            resources=[snapshots],
            conditions=unfinished_pipeline_resource(),
        ),
        iam.PolicyStatement(
            sid=f"PackerSetCopiedImageAttributes{suffix}",
            actions=["ec2:ModifyImageAttribute"],
            resources=[images],
            conditions=unfinished_pipeline_resource(),
        ),
    ]


def no_public_sharing_statements(stack: cdk.Stack) -> list[iam.PolicyStatement]:
    """Explicit denies, in every region: no image launch permission change, no snapshot shared with everyone.
    Snapshots: ec2:Add/group is "the group being added to a snapshot" (Service Authorization Reference for EC2).
    Images have no such key; their launch permission is the attribute "launchPermission" of ModifyImageAttribute,
    matched through ec2:Attribute (unconfirmed: that EC2 sets ec2:Attribute when the request names LaunchPermission
    without Attribute). Beyond this deny, the role may modify unfinished gpufleet images only, whose volumes are
    encrypted (encrypt_boot), and EC2 refuses to make an AMI with encrypted volumes public
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/sharingamis-intro.html). The account-wide guard is EC2's
    block public access for AMIs (EnableImageBlockPublicAccess), an account setting outside this stack."""
    every_region = "*"
    return [
        # The pipeline shares images with no one (no ami_users, ami_groups, ami_org_arns): every launch permission
        # change is denied, making an image public included.
        iam.PolicyStatement(
            sid="DenyImageSharing",
            effect=iam.Effect.DENY,
            actions=["ec2:ModifyImageAttribute"],
            resources=[images_in(stack, every_region)],
            conditions={"StringEqualsIgnoreCase": {"ec2:Attribute": "launchPermission"}},
        ),
        iam.PolicyStatement(
            sid="DenyPublicSnapshots",
            effect=iam.Effect.DENY,
            actions=["ec2:ModifySnapshotAttribute"],
            resources=[snapshots_in(stack, every_region)],
            conditions={"StringEquals": {"ec2:Add/group": "all"}},
        ),
    ]


class AmiBuildProject(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        packer: Packer,
        session_manager_plugin_version: str,
        build_subnet_id: str | None,
        log_retention: logs.RetentionDays,
        source: s3_assets.Asset,
        publish_regions: Mapping[str, tuple[str, ...]],
        acceptance: Acceptance | None,
        gate_variables: Mapping[str, str] | None = None,
    ) -> None:
        """packer, session_manager_plugin_version, build_subnet_id, acceptance: the tools, subnet and gate of
        ami/pipeline.yaml; publish_regions: the regions each profile is published in
        (gpufleet.ami.pipeline.publish_regions); gate_variables: the acceptance gate's settings of the build (its
        bucket, boundary and execution role: stacks/constructs/ami_acceptance_gate.py), empty without a gate."""
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.DESTROY,
            pending_window=cdk.Duration.days(7),
            description="gpufleet AMI pipeline: encrypts CodeBuild build output",
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=log_retention,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.build_instance_role = iam.Role(
            self,
            "BuildInstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="gpufleet AMI build instance: what its SSM agent needs for Packer's Session Manager tunnel",
            inline_policies={
                "SsmAgent": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(sid="SsmAgent", actions=list(SSM_AGENT_ACTIONS), resources=["*"]),
                    ]
                )
            },
        )
        cdk.Validations.of(self.build_instance_role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="the gpufleet AMI build instance's SSM agent registers itself and opens Session Manager "
                "channels "
                "(ssm:UpdateInstanceInformation, ssmmessages:*Channel); these actions support no resource-level "
                "permissions, and the role grants nothing else",
            )
        )
        self.build_instance_profile = iam.InstanceProfile(self, "BuildInstanceProfile", role=self.build_instance_role)
        self.project = codebuild.Project(
            self,
            "Project",
            description=f"gpufleet AMI build: packer build of the profile named by the {AMI_PROFILE_VARIABLE} "
            "environment variable",
            source=codebuild.Source.s3(bucket=source.bucket, path=source.s3_object_key),
            build_spec=codebuild.BuildSpec.from_object(
                buildspec(
                    packer=packer,
                    session_manager_plugin_version=session_manager_plugin_version,
                    build_subnet_id=build_subnet_id,
                    publish_regions=publish_regions,
                    acceptance=acceptance,
                )
            ),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0, compute_type=codebuild.ComputeType.SMALL
            ),
            environment_variables={
                BUILD_INSTANCE_PROFILE_VARIABLE: codebuild.BuildEnvironmentVariable(
                    value=self.build_instance_profile.instance_profile_name
                ),
                **{
                    name: codebuild.BuildEnvironmentVariable(value=value)
                    for name, value in (gate_variables or {}).items()
                },
            },
            encryption_key=self.key,
            timeout=build_timeout(acceptance),
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=self.log_group)),
        )
        self._grant_packer()
        self._grant_publish(publish_regions)

    def _grant_packer(self) -> None:
        stack = cdk.Stack.of(self)
        role = self.project.role
        assert role is not None

        def ec2(resource: str) -> str:
            return stack.format_arn(service="ec2", resource=resource, resource_name="*")

        key_pairs = stack.format_arn(service="ec2", resource="key-pair", resource_name=PACKER_TEMPORARY_KEY_PAIR)
        profile_tagged = {"Null": {f"aws:ResourceTag/{PROFILE_TAG_KEY}": "false"}}
        statements = [
            iam.PolicyStatement(
                sid="PackerDescribe",
                actions=[
                    "ec2:DescribeImages",
                    "ec2:DescribeImageAttribute",
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceStatus",
                    "ec2:DescribeRegions",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeSnapshots",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeTags",
                    "ec2:DescribeVolumes",
                    "ec2:DescribeKeyPairs",
                ],
                resources=["*"],
            ),
            # The build instance must carry gpufleet:profile at launch (the templates' run_tags) ...
            iam.PolicyStatement(
                sid="PackerLaunchTaggedInstance",
                actions=["ec2:RunInstances"],
                resources=[ec2("instance")],
                conditions={"Null": {f"aws:RequestTag/{PROFILE_TAG_KEY}": "false"}},
            ),
            iam.PolicyStatement(
                sid="PackerLaunchResources",
                actions=["ec2:RunInstances"],
                resources=[
                    ec2("volume"),
                    ec2("network-interface"),
                    ec2("security-group"),
                    ec2("subnet"),
                    key_pairs,
                    images_in(stack, stack.region),
                ],
            ),
            # ... so everything done to instances afterwards is limited to tagged (gpufleet build) instances.
            iam.PolicyStatement(
                sid="PackerControlBuildInstance",
                actions=[
                    "ec2:StopInstances",
                    "ec2:TerminateInstances",
                    "ec2:ModifyInstanceAttribute",
                    "ec2:CreateImage",
                ],
                resources=[ec2("instance")],
                conditions=profile_tagged,
            ),
            iam.PolicyStatement(
                sid="PackerTagAtLaunch",
                actions=["ec2:CreateTags"],
                resources=[ec2("instance"), ec2("volume"), ec2("network-interface")],
                conditions={"StringEquals": {"ec2:CreateAction": "RunInstances"}},
            ),
            *pipeline_image_statements(stack, stack.region),
            iam.PolicyStatement(
                sid="PackerTemporaryKeyPair",
                actions=["ec2:CreateKeyPair", "ec2:DeleteKeyPair", "ec2:CreateTags"],
                resources=[key_pairs],
            ),
            # CreateSecurityGroup names the VPC; Packer tags the group through its TagSpecifications.
            iam.PolicyStatement(
                sid="PackerCreateTemporarySecurityGroup",
                actions=["ec2:CreateSecurityGroup"],
                resources=[ec2("security-group"), ec2("vpc")],
            ),
            iam.PolicyStatement(
                sid="PackerTemporarySecurityGroup",
                actions=["ec2:AuthorizeSecurityGroupIngress", "ec2:DeleteSecurityGroup", "ec2:CreateTags"],
                resources=[ec2("security-group")],
            ),
            # Packer checks that iam_instance_profile exists before it launches (a read of this one profile).
            iam.PolicyStatement(
                sid="PackerReadBuildInstanceProfile",
                actions=["iam:GetInstanceProfile"],
                resources=[self.build_instance_profile.instance_profile_arn],
            ),
            iam.PolicyStatement(
                sid="PackerPassBuildInstanceRole",
                actions=["iam:PassRole"],
                resources=[self.build_instance_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            ),
            iam.PolicyStatement(
                sid="PackerSessionToBuildInstance",
                actions=["ssm:StartSession"],
                resources=[ec2("instance")],
                conditions={"Null": {f"ssm:resourceTag/{PROFILE_TAG_KEY}": "false"}},
            ),
            iam.PolicyStatement(
                sid="PackerSessionDocument",
                actions=["ssm:StartSession"],
                resources=[
                    stack.format_arn(
                        service="ssm", account="", resource="document", resource_name="AWS-StartPortForwardingSession"
                    )
                ],
            ),
            iam.PolicyStatement(
                sid="PackerEndSession",
                actions=["ssm:TerminateSession", "ssm:ResumeSession"],
                resources=[stack.format_arn(service="ssm", resource="session", resource_name="*")],
            ),
            *no_public_sharing_statements(stack),
        ]
        for statement in statements:
            role.add_to_principal_policy(statement)
        self._acknowledge(role, stack)

    def _grant_publish(self, publish_regions: Mapping[str, tuple[str, ...]]) -> None:
        """What scripts/pipeline/publish-image.sh does: write /gpufleet/ami/PROFILE in every region of the profile,
        and beyond the build region copy the new image there first, encrypted and tagged, and wait for the copies.
        CopyImage is called in the destination region; since 2024-10-28 it authorizes on
        the source image as well as on the new image, and snapshots may be named as resources; tagging the copies
        needs ec2:CreateTags (source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/copy-ami-permissions.html).
        The source side (the build region's image and snapshots) is PackerEncryptedCopy's grant: the authorization
        reference lists no aws:ResourceTag key for CopyImage, so it cannot be narrowed to tagged sources, and a copy
        only creates. The new image and snapshots in each destination must carry the gpufleet:profile tag in the
        request (that CopyImage evaluates aws:RequestTag on them is unconfirmed offline); nothing here shares,
        changes or deletes an image.
        The copies are encrypted with each region's AWS managed key aws/ebs, which EC2 uses for the account's
        principals without a grant (a customer managed key would need kms:CreateGrant, Decrypt,
        GenerateDataKeyWithoutPlaintext and ReEncrypt* on it and --kms-key-id in publish-image.sh)."""
        stack = cdk.Stack.of(self)
        role = self.project.role
        assert role is not None
        home = stack.region
        regions = sorted({region for regions in publish_regions.values() for region in regions} | {home})
        destinations = [region for region in regions if region != home]
        parameter_name = f"{AMI_PARAMETER_PREFIX.strip('/')}/*"
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PublishAmiId",
                actions=["ssm:PutParameter", "ssm:AddTagsToResource"],
                resources=[
                    stack.format_arn(service="ssm", region=region, resource="parameter", resource_name=parameter_name)
                    for region in regions
                ],
            )
        )
        if not destinations:
            return

        # Image and snapshot ARNs carry no account: arn:${Partition}:ec2:${Region}::image/${ImageId}.
        def ec2_public(region: str, resource: str) -> str:
            return stack.format_arn(service="ec2", region=region, account="", resource=resource, resource_name="*")

        statements = [
            iam.PolicyStatement(
                sid="PublishCreateTaggedCopy",
                actions=["ec2:CopyImage"],
                resources=[ec2_public(region, kind) for region in destinations for kind in ("image", "snapshot")],
                conditions={"Null": {f"aws:RequestTag/{PROFILE_TAG_KEY}": "false"}},
            ),
            iam.PolicyStatement(
                sid="PublishTagCopyAtCreation",
                actions=["ec2:CreateTags"],
                resources=[ec2_public(region, kind) for region in destinations for kind in ("image", "snapshot")],
                conditions={"StringEquals": {"ec2:CreateAction": "CopyImage"}},
            ),
            # DescribeImages supports no resource-level permissions: limited to the regions the build publishes in.
            iam.PolicyStatement(
                sid="PublishWaitForCopies",
                actions=["ec2:DescribeImages"],
                resources=["*"],
                conditions={"StringEquals": {"aws:RequestedRegion": [home, *destinations]}},
            ),
        ]
        for statement in statements:
            role.add_to_principal_policy(statement)
        reasons: dict[str, str] = {}
        for region in destinations:
            reasons |= {
                f"Resource::arn:<AWS::Partition>:ec2:{region}::image/*": f"the copy of a gpufleet AMI in {region} "
                "gets a new id; CopyImage there requires the gpufleet:profile tag in the request, CreateTags only at "
                "creation",
                f"Resource::arn:<AWS::Partition>:ec2:{region}::snapshot/*": f"the snapshots of a gpufleet AMI copy in "
                f"{region} get new ids; created and tagged only by CopyImage with the gpufleet:profile tag",
                f"Resource::arn:<AWS::Partition>:ssm:{region}:{stack.account}:parameter/{parameter_name}": (
                    f"a gpufleet AMI build publishes /gpufleet/ami/PROFILE in {region}, where environments read it; "
                    "only that prefix is writable"
                ),
            }
        for finding, reason in reasons.items():
            cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))

    def _acknowledge(self, role: iam.IRole, stack: cdk.Stack) -> None:
        region, account = stack.region, stack.account
        ec2_prefix = f"arn:<AWS::Partition>:ec2:{region}:{account}"
        project = stack.get_logical_id(cast(cdk.CfnElement, self.project.node.default_child))
        reasons = {
            # Granted by aws-cdk-lib itself: reading the source asset, the project's key, its default log group and
            # report groups.
            "Action::s3:GetObject*": "CodeBuild reads the gpufleet source asset (one object of the CDK assets "
            "bucket); the wildcard comes from aws-cdk-lib's read grant, limited to that bucket",
            "Action::s3:GetBucket*": "CodeBuild reads the gpufleet source asset's bucket location and metadata "
            "through aws-cdk-lib's read grant on the CDK assets bucket only",
            "Action::s3:List*": "aws-cdk-lib's read grant on the CDK assets bucket that holds the gpufleet source "
            "asset; limited to that bucket",
            "Action::kms:ReEncrypt*": "aws-cdk-lib's grant on the gpufleet AMI pipeline's own KMS key (rotation on), "
            "which encrypts the build's output; no other key",
            "Action::kms:GenerateDataKey*": "aws-cdk-lib's grant on the gpufleet AMI pipeline's own KMS key, which "
            "CodeBuild uses to encrypt build output; no other key",
            f"Resource::arn:<AWS::Partition>:logs:{region}:{account}:log-group:/aws/codebuild/<{project}>:*": (
                "aws-cdk-lib grants the default log group of this gpufleet AMI build project; the build logs to the "
                "stack's own log group (with the configured retention), so this one stays unused"
            ),
            f"Resource::arn:<AWS::Partition>:codebuild:{region}:{account}:report-group/<{project}>-*": (
                "aws-cdk-lib grants test report groups named after this gpufleet AMI build project; no other project's"
            ),
            "Resource::*": "Packer's amazon-ebs builder (gpufleet AMI builds) needs EC2 Describe* calls (images, "
            "instances, subnets, security groups, snapshots), which support no resource-level permissions; all are "
            "read-only",
            f"Resource::{ec2_prefix}:instance/*": "the gpufleet AMI build instance's id is unknown before Packer "
            "launches it; RunInstances requires the gpufleet:profile tag and every later action (stop, terminate, "
            "create image, SSM session) requires that tag on the instance",
            f"Resource::{ec2_prefix}:volume/*": "the root volume of the gpufleet AMI build instance is created by "
            "RunInstances and snapshotted into the image; its id is unknown in advance",
            f"Resource::{ec2_prefix}:network-interface/*": "RunInstances creates the build instance's network "
            "interface; gpufleet cannot know its id in advance",
            f"Resource::{ec2_prefix}:security-group/*": "Packer creates a temporary security group per gpufleet AMI "
            "build (random id) and deletes it afterwards",
            f"Resource::{ec2_prefix}:subnet/*": "the gpufleet AMI build instance launches into ami/pipeline.yaml's "
            "subnet_id or, when null, the default VPC's subnet that Packer picks",
            f"Resource::{ec2_prefix}:vpc/*": "CreateSecurityGroup names the VPC of the gpufleet AMI build "
            "subnet, which is the default VPC when ami/pipeline.yaml leaves subnet_id null",
            f"Resource::arn:<AWS::Partition>:ec2:{region}::snapshot/*": "snapshots of gpufleet AMIs are created by "
            "the build (ids unknown in advance); creating needs the gpufleet:profile request tag, deleting needs an "
            "unfinished gpufleet build's tags, and tagging an existing snapshot marks it finished (undeletable)",
            f"Resource::{ec2_prefix}:key-pair/{PACKER_TEMPORARY_KEY_PAIR}": "Packer's temporary SSH key pair for the "
            "gpufleet AMI build is named packer_<random uuid>",
            f"Resource::arn:<AWS::Partition>:ec2:{region}::image/*": "RunInstances reads the profile's base image "
            "(Canonical or Amazon owned, newest match); the gpufleet build creates, copies and tags its new AMI (id "
            "unknown in advance) and may deregister or modify only an unfinished gpufleet build's image (tag "
            "conditions)",
            f"Resource::arn:<AWS::Partition>:ssm:{region}:{account}:parameter/"
            f"{AMI_PARAMETER_PREFIX.strip('/')}/*": "a gpufleet AMI build publishes /gpufleet/ami/PROFILE for the "
            "profile it is started with; only that prefix is writable",
            f"Resource::arn:<AWS::Partition>:ssm:{region}:{account}:session/*": "Packer ends the SSM port-forwarding "
            "session it opened to the gpufleet AMI build instance; session ids are generated by SSM",
        }
        for finding, reason in reasons.items():
            cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason))
