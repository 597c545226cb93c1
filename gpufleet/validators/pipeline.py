"""The rules of the AMI pipeline's file (ami/pipeline.yaml) that go beyond one field."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpufleet.ami.pipeline import Pipeline
from gpufleet.ami.profile import profile_files
from gpufleet.catalog import load_catalog
from gpufleet.rules import Problem, Validator


class PipelineValidator(Validator[Pipeline, "PipelineContext"]):
    """A rule of the pipeline configuration."""


@dataclass(frozen=True)
class PipelineContext:
    profiles_dir: Path


class ProfilesValidator(PipelineValidator):
    field = "profiles"

    def check(self, pipeline: Pipeline, context: PipelineContext) -> list[Problem]:
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


class PackerChecksumValidator(PipelineValidator):
    field = "packer.sha256"

    def check(self, pipeline: Pipeline, context: PipelineContext) -> list[Problem]:
        digest = pipeline.packer.sha256
        if digest is not None and not re.fullmatch(r"[0-9a-f]{64}", digest):
            return self.problem(
                f"'{digest}' is not a SHA-256 digest (64 lower-case hex digits, from "
                f"packer_{pipeline.packer.version}_SHA256SUMS; or null)"
            )
        return []


class AcceptanceInstanceTypeValidator(PipelineValidator):
    """The test nodes are a type environments may use (every type of the catalog has EFA, which the gate checks)."""

    field = "acceptance.instance_type"

    def check(self, pipeline: Pipeline, context: PipelineContext) -> list[Problem]:
        if pipeline.acceptance is None:
            return []
        catalog = load_catalog()
        name = pipeline.acceptance.instance_type
        if name not in catalog:
            allowed = ", ".join(sorted(catalog))
            return self.problem(
                f"'{name}' is not in the catalog (allowed: {allowed}; see gpufleet/instance_types.yaml)"
            )
        return []


class AcceptanceZoneValidator(PipelineValidator):
    """The test nodes launch in the pipeline's region, where the new image is."""

    field = "acceptance.availability_zone"

    def check(self, pipeline: Pipeline, context: PipelineContext) -> list[Problem]:
        if pipeline.acceptance is None:
            return []
        zone = pipeline.acceptance.availability_zone
        if not re.fullmatch(re.escape(pipeline.region) + r"[a-z]", zone):
            return self.problem(
                f"'{zone}' is not an availability zone of {pipeline.region}, where the image is built "
                f"(e.g. {pipeline.region}a)"
            )
        return []


VALIDATORS: tuple[PipelineValidator, ...] = (
    ProfilesValidator(),
    PackerChecksumValidator(),
    AcceptanceInstanceTypeValidator(),
    AcceptanceZoneValidator(),
)


def validate_pipeline(pipeline: Pipeline, profiles_dir: Path) -> list[Problem]:
    context = PipelineContext(profiles_dir=profiles_dir)
    return [problem for validator in VALIDATORS for problem in validator.check(pipeline, context)]
