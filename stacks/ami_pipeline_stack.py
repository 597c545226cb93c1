"""The AMI pipeline (stack gpufleet-ami-pipeline): the gpufleet sources as an S3 asset, the CodeBuild project
that builds one profile per run and publishes it in the regions of the environments that read it, and one scheduled
EventBridge rule per profile of ami/pipeline.yaml."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from gpufleet.ami.pipeline import Pipeline, publish_regions
from gpufleet.environment import Environment
from gpufleet.rules import LOG_RETENTION_DAYS
from stacks.constructs.ami_acceptance_gate import AmiAcceptanceGate
from stacks.constructs.ami_build_project import AMI_PROFILE_VARIABLE, AmiBuildProject

AMI_PIPELINE_STACK_NAME = "gpufleet-ami-pipeline"
# The CDK app runs from a checkout: the repository is the directory above stacks/.
REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
# The build needs gpufleet (package, profiles, templates, scripts) and its lock file; nothing local or generated:
# everything .gitignore names is left out (tests/stacks/test_ami_pipeline_stack.py holds the two lists together).
SOURCE_EXCLUDES = [
    ".venv",
    "node_modules",
    "cdk.out",
    "tests",
    ".git",
    "**/__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",  # make lint's, about 160 MB: hashed and copied into the asset on every synthesis
    ".import_linter_cache",
    "site",  # a local `mkdocs build`
    "build",
    "out",
    "cdk.context.json",
    "mutants",  # make mutate's copy of the tree
    "acceptance-*",  # the reports `gpufleet acceptance` and `gpufleet up` write where they run
]


class AmiPipelineStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, pipeline: Pipeline, environments: list[Environment], **kwargs
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # BLOCK_EXTERNAL copies what gpufleet/data's symlinks point to (ami/, scripts/) into the asset as plain
        # files, so `pip install .` on the build host ships them whatever its unzip does with symlinks. (The default,
        # EXTERNAL, keeps links inside the directory as links: source aws-cdk-lib 2.275.0 core/lib/fs/copy.js.)
        source = s3_assets.Asset(
            self,
            "Source",
            path=str(REPOSITORY_ROOT),
            exclude=SOURCE_EXCLUDES,
            follow_symlinks=cdk.SymlinkFollowMode.BLOCK_EXTERNAL,
        )
        gate = (
            AmiAcceptanceGate(self, "AcceptanceGate", acceptance=pipeline.acceptance) if pipeline.acceptance else None
        )
        build = AmiBuildProject(
            self,
            "AmiBuild",
            packer=pipeline.packer,
            session_manager_plugin_version=pipeline.session_manager_plugin.version,
            build_subnet_id=pipeline.subnet_id,
            log_retention=logs.RetentionDays[LOG_RETENTION_DAYS[pipeline.log_retention_days]],
            source=source,
            publish_regions=publish_regions(pipeline, environments, self.account),
            acceptance=pipeline.acceptance,
            gate_variables=gate.variables if gate is not None else {},
        )
        if gate is not None:
            gate.attach(build_project=build.project, source=source, key=build.key, log_group=build.log_group)
        if pipeline.schedule is not None:
            for profile in pipeline.profiles:
                rule = events.Rule(
                    self,
                    f"Schedule-{profile}",
                    schedule=events.Schedule.expression(pipeline.schedule),
                    description=f"gpufleet: scheduled AMI build of profile {profile}",
                )
                rule.add_target(
                    targets.CodeBuildProject(
                        build.project,
                        event=events.RuleTargetInput.from_object(
                            {
                                "environmentVariablesOverride": [
                                    {"name": AMI_PROFILE_VARIABLE, "value": profile, "type": "PLAINTEXT"}
                                ]
                            }
                        ),
                    )
                )
        cdk.CfnOutput(self, "ProjectName", value=build.project.project_name)
        cdk.CfnOutput(self, "LogGroupName", value=build.log_group.log_group_name)


def add_ami_pipeline_stack(
    app: cdk.App, pipeline: Pipeline, environments: list[Environment], account: str
) -> AmiPipelineStack:
    """The pipeline stack in ACCOUNT (gpufleet.ami.pipeline.pipeline_account: ami/pipeline.yaml's, else the deploying
    one); each profile is published in the build region and in the regions of the environments of that account that
    read it."""
    stack = AmiPipelineStack(
        app,
        AMI_PIPELINE_STACK_NAME,
        pipeline=pipeline,
        environments=environments,
        env=cdk.Environment(account=account, region=pipeline.region),
        description="gpufleet AMI pipeline: CodeBuild runs packer build per profile, publishes /gpufleet/ami/PROFILE "
        "in every region that reads it",
    )
    cdk.Tags.of(stack).add("gpufleet:component", "ami-pipeline")
    return stack
