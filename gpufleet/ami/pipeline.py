"""The AMI pipeline's configuration (ami/pipeline.yaml), parsed into a frozen object and checked rule by rule.

Parsing checks shape and types (pydantic, unknown keys rejected); each rule beyond that is one validator class,
and a user sees every problem at once, one line each: ``FILE: FIELD: problem (what is allowed)``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from gpufleet.ami import AMI_DIR, PROFILES_DIR
from gpufleet.ami.profile import profile_files
from gpufleet.config_file import read_model
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.rules import Problem, Validator, account_id_problem, log_retention_problem, region_problem

PIPELINE_FILE_VARIABLE = "GPUFLEET_AMI_PIPELINE_FILE"
# Where a build publishes the id of the image of PROFILE; cluster environments read it (ami.ssm_parameter).
AMI_PARAMETER_PREFIX = "/gpufleet/ami/"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Packer(_Section):
    """The Packer release the build downloads from releases.hashicorp.com, and how the download is checked."""

    version: StrictStr = Field(description="Exact Packer release, e.g. 1.11.2 (>= 1.7: the templates use packer {}).")
    sha256: StrictStr | None = Field(
        description="SHA-256 of packer_VERSION_linux_amd64.zip as listed in packer_VERSION_SHA256SUMS; null to rely "
        "on the signed SHA256SUMS alone."
    )
    signing_key_fingerprint: StrictStr = Field(
        description="Fingerprint of HashiCorp's release key; the build checks the signature of SHA256SUMS with it."
    )


class SessionManagerPlugin(_Section):
    """The templates reach the build instance through SSM Session Manager, which needs this plugin next to Packer."""

    version: StrictStr = Field(description="Exact release of the AWS session-manager-plugin, 1.2.764.0 or newer.")


class Pipeline(_Section):
    account: StrictStr = Field(description="AWS account id of the pipeline and its images, 12 digits, quoted.")
    region: StrictStr = Field(description="Region the images are built and published in, e.g. us-east-1.")
    profiles: tuple[StrictStr, ...] = Field(description="AMI profiles (ami/profiles/NAME.yaml) the schedule builds.")
    schedule: StrictStr | None = Field(
        description="EventBridge cron expression for scheduled builds, e.g. cron(0 6 ? * SUN *); null: manual only."
    )
    log_retention_days: StrictInt = Field(description="Days CloudWatch Logs keeps build logs.")
    subnet_id: StrictStr | None = Field(
        description="Subnet Packer launches the build instance into (outbound HTTPS needed); null: the default VPC."
    )
    packer: Packer
    session_manager_plugin: SessionManagerPlugin


def published_profile(parameter: str | None) -> str | None:
    """The profile whose image the SSM parameter holds, when it is one the pipeline writes (/gpufleet/ami/PROFILE)."""
    if parameter is None or not parameter.startswith(AMI_PARAMETER_PREFIX):
        return None
    return parameter.removeprefix(AMI_PARAMETER_PREFIX)


def publish_regions(pipeline: Pipeline, environments: list[Environment]) -> dict[str, tuple[str, ...]]:
    """Where each profile of the pipeline is published: its build region first, then (sorted) the region of every
    environment that reads /gpufleet/ami/PROFILE in the pipeline's account. AMIs and SSM parameters are regional,
    so a build copies its image to those regions and writes the parameter in each. An environment of another account
    or reading an unlisted profile gets nothing here; gpufleet.validators.PublishedImageValidator reports it."""
    regions = {profile: [pipeline.region] for profile in pipeline.profiles}
    for environment in environments:
        profile = published_profile(environment.ami.ssm_parameter)
        if profile not in regions or environment.account != pipeline.account:
            continue
        if environment.region not in regions[profile]:
            regions[profile].append(environment.region)
    return {profile: (home, *sorted(others)) for profile, (home, *others) in regions.items()}


class PipelineValidator(Validator["Pipeline", "PipelineContext"]):
    """A rule of the pipeline configuration."""


@dataclass(frozen=True)
class PipelineContext:
    profiles_dir: Path


class AccountValidator(PipelineValidator):
    field = "account"

    def check(self, pipeline, context):
        return self.problem_if(account_id_problem(pipeline.account))


class RegionValidator(PipelineValidator):
    field = "region"

    def check(self, pipeline, context):
        return self.problem_if(region_problem(pipeline.region))


class ProfilesValidator(PipelineValidator):
    field = "profiles"

    def check(self, pipeline, context):
        known = [path.stem for path in profile_files(context.profiles_dir)]
        if not pipeline.profiles:
            return self.problem(f"no profile to build (list at least one of: {', '.join(known)})")
        problems = []
        for index, name in enumerate(pipeline.profiles):
            if name not in known:
                problems.append(
                    Problem(
                        f"profiles.{index}",
                        f"'{name}' is not an AMI profile (allowed: {', '.join(known)}; see ami/profiles)",
                    )
                )
            elif name in pipeline.profiles[:index]:
                problems.append(Problem(f"profiles.{index}", f"'{name}' is listed twice (list each profile once)"))
        return problems


class ScheduleValidator(PipelineValidator):
    field = "schedule"
    # EventBridge cron: minutes hours day-of-month month day-of-week year; one of the two days fields is '?'.
    pattern = re.compile(r"cron\((\S+) (\S+) (\S+) (\S+) (\S+) (\S+)\)")

    def check(self, pipeline, context):
        if pipeline.schedule is None:
            return []
        match = self.pattern.fullmatch(pipeline.schedule)
        if match is None:
            return self.problem(
                f"'{pipeline.schedule}' is not an EventBridge cron expression (six fields: "
                "cron(minutes hours day-of-month month day-of-week year), e.g. cron(0 6 ? * SUN *); "
                "or null for manual builds only)"
            )
        day_of_month, day_of_week = match.group(3), match.group(5)
        if (day_of_month == "?") == (day_of_week == "?"):
            return self.problem(
                f"'{pipeline.schedule}' needs '?' in exactly one of day-of-month and day-of-week "
                "(e.g. cron(0 6 ? * SUN *) or cron(0 6 1 * ? *))"
            )
        return []


class LogRetentionValidator(PipelineValidator):
    field = "log_retention_days"

    def check(self, pipeline, context):
        return self.problem_if(log_retention_problem(pipeline.log_retention_days))


class SubnetValidator(PipelineValidator):
    field = "subnet_id"

    def check(self, pipeline, context):
        subnet = pipeline.subnet_id
        if subnet is not None and not re.fullmatch(r"subnet-[0-9a-f]{8}([0-9a-f]{9})?", subnet):
            return self.problem(
                f"'{subnet}' is not a subnet id (subnet- followed by 8 or 17 hex digits; or null for the default VPC)"
            )
        return []


class PackerVersionValidator(PipelineValidator):
    field = "packer.version"

    def check(self, pipeline, context):
        version = pipeline.packer.version
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", version)
        if match is None:
            return self.problem(f"'{version}' is not an exact Packer release (MAJOR.MINOR.PATCH, e.g. 1.11.2)")
        if (int(match.group(1)), int(match.group(2))) < (1, 7):
            return self.problem(
                f"{version} is too old: the rendered templates need Packer 1.7 or newer (packer init, required_plugins)"
            )
        return []


class PackerChecksumValidator(PipelineValidator):
    field = "packer.sha256"

    def check(self, pipeline, context):
        digest = pipeline.packer.sha256
        if digest is not None and not re.fullmatch(r"[0-9a-f]{64}", digest):
            return self.problem(
                f"'{digest}' is not a SHA-256 digest (64 lower-case hex digits, from "
                f"packer_{pipeline.packer.version}_SHA256SUMS; or null)"
            )
        return []


class SigningKeyValidator(PipelineValidator):
    field = "packer.signing_key_fingerprint"

    def check(self, pipeline, context):
        fingerprint = pipeline.packer.signing_key_fingerprint
        if not re.fullmatch(r"[0-9A-F]{40}", fingerprint):
            return self.problem(
                f"'{fingerprint}' is not an OpenPGP fingerprint (40 upper-case hex digits, no spaces; "
                "HashiCorp's is listed on https://www.hashicorp.com/security)"
            )
        return []


class SessionManagerPluginValidator(PipelineValidator):
    field = "session_manager_plugin.version"

    def check(self, pipeline, context):
        version = pipeline.session_manager_plugin.version
        if not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", version):
            return self.problem(
                f"'{version}' is not an exact session-manager-plugin release (four numbers, e.g. 1.2.764.0)"
            )
        return []


class SessionManagerPluginSupportedValidator(PipelineValidator):
    """Session Manager stops serving plugins older than the minimum AWS documents."""

    field = "session_manager_plugin.version"
    # source: https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html
    # ("Update your Session Manager plugin to version 1.2.764.0 or later")
    minimum = (1, 2, 764, 0)

    def check(self, pipeline, context):
        version = pipeline.session_manager_plugin.version
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", version) and tuple(map(int, version.split("."))) < self.minimum:
            minimum = ".".join(map(str, self.minimum))
            return self.problem(
                f"{version} is older than {minimum}, the oldest release Session Manager supports "
                f"(use {minimum} or newer; releases: https://docs.aws.amazon.com/systems-manager/"
                "latest/userguide/plugin-version-history.html)"
            )
        return []


VALIDATORS: tuple[PipelineValidator, ...] = (
    AccountValidator(),
    RegionValidator(),
    ProfilesValidator(),
    ScheduleValidator(),
    LogRetentionValidator(),
    SubnetValidator(),
    PackerVersionValidator(),
    PackerChecksumValidator(),
    SigningKeyValidator(),
    SessionManagerPluginValidator(),
    SessionManagerPluginSupportedValidator(),
)


def parse_pipeline(path: Path) -> Pipeline:
    return read_model(path, Pipeline, reference="ami/pipeline.yaml's comments")


def pipeline_file() -> Path:
    return Path(os.environ.get(PIPELINE_FILE_VARIABLE, AMI_DIR / "pipeline.yaml"))


def load_pipeline(path: Path | None = None, profiles_dir: Path = PROFILES_DIR) -> Pipeline:
    """Parse and validate the pipeline configuration; raise GpufleetError with every problem, one per line."""
    path = path or pipeline_file()
    pipeline = parse_pipeline(path)
    context = PipelineContext(profiles_dir=profiles_dir)
    problems = [problem for validator in VALIDATORS for problem in validator.check(pipeline, context)]
    if problems:
        raise GpufleetError(*(f"{path}: {problem.field}: {problem.message}" for problem in problems))
    return pipeline
