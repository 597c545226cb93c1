"""The node image: exactly one source, a published image where the environment deploys, and a Deep Learning AMI
only on the instance types it supports."""

from __future__ import annotations

from gpufleet.ami import published_profile
from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import FleetFlavourValidator, ValidationContext


class AmiSourceValidator(FleetFlavourValidator):
    field = "ami"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        ami = env.ami
        if ami is None:
            return self.problem(
                "required key is missing (the fleet flavour's nodes boot the image it names: set ssm_parameter, id or "
                "deep_learning_ami)"
            )
        if [ami.ssm_parameter, ami.id, ami.deep_learning_ami].count(None) != 2:
            return self.problem(
                "set exactly one of ssm_parameter, id and deep_learning_ami (e.g. ssm_parameter: "
                "/gpufleet/ami/p4d-ubuntu2204, or deep_learning_ami: pytorch-2.11-ubuntu-24.04 for a first job "
                "without the AMI pipeline)"
            )
        return []


class DeepLearningAmiValidator(FleetFlavourValidator):
    """A Deep Learning AMI boots only the instance families its release notes list (gpufleet.deep_learning_ami), and
    has the root device its OS gives it: the launch template maps the root volume by that name."""

    field = "ami.deep_learning_ami"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        ami = env.ami
        deep_learning = ami.deep_learning if ami is not None else None
        if ami is None or deep_learning is None:
            return []
        problems: list[Problem] = []
        if not deep_learning.supports(env.instance_type):
            problems += self.problem(
                f"{deep_learning.name} does not support {env.instance_type} (its release notes list the families "
                f"{', '.join(deep_learning.families)}: choose an instance type of one of them, or another image)"
            )
        if "root_device_name" in ami.model_fields_set and ami.root_device_name != deep_learning.root_device_name:
            problems.append(
                Problem(
                    "ami.root_device_name",
                    f"{deep_learning.name}'s root device is {deep_learning.root_device_name}, not "
                    f"{ami.root_device_name} (leave root_device_name out)",
                )
            )
        return problems


class PublishedImageValidator(FleetFlavourValidator):
    """An environment that reads /gpufleet/ami/PROFILE needs that parameter, and the image it names, in its own
    account and region: SSM parameters and AMIs are regional. The AMI pipeline builds its profiles in its region and
    copies each new image to the region of every environment in environments/ that reads the profile
    (gpufleet.ami.pipeline.publish_regions), so the region follows from the environment itself; what the environment
    can get wrong is a profile the pipeline does not build, or another account (an account also fixes the partition,
    and CopyImage does not cross partitions)."""

    field = "ami.ssm_parameter"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        pipeline = context.ami_pipeline
        profile = published_profile(env.image_parameter)
        if pipeline is None or profile is None:
            return []
        if profile not in pipeline.profiles:
            return self.problem(
                f"{env.image_parameter} is not published in {env.region}: the AMI pipeline builds "
                f"{', '.join(pipeline.profiles)} (add {profile} to profiles in ami/pipeline.yaml)"
            )
        # Without an account in ami/pipeline.yaml the pipeline is in whichever account deploys it: one deployed with
        # this environment's account publishes there, so there is nothing to check.
        if pipeline.account is not None and env.account != pipeline.account:
            return self.problem(
                f"{env.image_parameter} is published in account {pipeline.account} (ami/pipeline.yaml pins it), not in "
                f"{env.account} (deploy in {pipeline.account}, remove account from ami/pipeline.yaml to build the "
                f"images in the account that deploys the pipeline, or set ami.id to an image shared with {env.account})"
            )
        return []
