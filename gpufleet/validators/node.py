"""The node: its instance type, EFA, MIG and the user data it boots with."""

from __future__ import annotations

import shlex

from gpufleet.ami import published_profile
from gpufleet.catalog import load_catalog
from gpufleet.constants import MIG_PURPOSES
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.rules import Problem, choice_problem
from gpufleet.user_data import DEFAULT_CHECKPOINT_HOOK, user_data_size_problem
from gpufleet.validators.base import EnvironmentValidator, FleetFlavourValidator, ValidationContext


class InstanceTypeValidator(EnvironmentValidator):
    field = "instance_type"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        catalog = load_catalog()
        if env.instance_type not in catalog:
            return self.problem(
                f"'{env.instance_type}' is not in the instance catalog "
                f"(allowed: {', '.join(catalog)}; add it to gpufleet/instance_types.yaml)"
            )
        return []


class EfaSupportValidator(EnvironmentValidator):
    field = "efa"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        instance = load_catalog().get(env.instance_type)
        if env.efa and instance is not None and not instance.efa_supported:
            return self.problem(
                f"EFA requested but {env.instance_type} has no EFA (set efa: false or choose an EFA instance type)"
            )
        return []


class MigProfileValidator(FleetFlavourValidator):
    field = "node.mig_profile"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        profile = env.node.mig_profile
        instance = load_catalog().get(env.instance_type)
        if profile is None or instance is None:
            return []
        if not instance.mig_profiles:
            return self.problem(f"{instance.gpu.model} GPUs of {instance.name} do not support MIG (remove mig_profile)")
        if profile not in instance.mig_profiles:
            return self.problem(
                f"'{profile}' is not a MIG profile of the {instance.gpu.model} "
                f"{instance.gpu.memory_gib} GB (allowed: {', '.join(instance.mig_profiles)})"
            )
        if env.efa and env.node.mig_purpose is None:
            return self.problem(
                "MIG on an EFA cluster: NCCL, what EFA clusters are for, is not supported with MIG (remove "
                "mig_profile, set efa: false, or state that each MIG instance works alone: "
                f"node.mig_purpose: {' or '.join(MIG_PURPOSES)})"
            )
        return []


class MigPurposeValidator(FleetFlavourValidator):
    field = "node.mig_purpose"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.node.mig_purpose is None:
            return []
        if env.node.mig_profile is None:
            return self.problem("only applies with node.mig_profile (remove it, or set mig_profile)")
        return self.problem_if(choice_problem(env.node.mig_purpose, "a MIG purpose", MIG_PURPOSES))


class UserDataSizeValidator(FleetFlavourValidator):
    """EC2's user-data limit, checked on the compressed user data this environment's nodes get, so that
    `gpufleet validate` refuses what a deploy would."""

    field = "node"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        instance = load_catalog().get(env.instance_type)
        if instance is None:
            return []
        try:
            return self.problem_if(user_data_size_problem(env, instance))
        except GpufleetError as error:
            return [Problem(self.field, line) for line in error.problems]


class CheckpointHookValidator(FleetFlavourValidator):
    """A hook the nodes cannot run fails only when it is needed, on the node being reclaimed (exit status 127, in that
    node's journal): its program must be one the user data installs (DEFAULT_CHECKPOINT_HOOK, whose arguments are
    checked as scripts/ops/save-checkpoint.sh reads them), or an absolute path on an image gpufleet does not build
    (ami.id, or a parameter outside /gpufleet/ami/), which may carry it; the AMI pipeline's images and the Deep Learning
    AMIs carry none."""

    field = "node.checkpoint_hook"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        hook = env.node.checkpoint_hook
        if hook is None:
            return []
        try:
            words = shlex.split(hook)
        except ValueError as error:
            return self.problem(f"cannot be read as a shell command ({error}): close its quotes")
        if not words:
            return self.problem(f"names no program (remove it, or set it to {DEFAULT_CHECKPOINT_HOOK})")
        program, arguments = words[0], words[1:]
        if program == DEFAULT_CHECKPOINT_HOOK:
            if arguments and not (len(arguments) == 2 and arguments[0] == "--wait" and arguments[1].isdigit()):
                return self.problem(
                    f"{DEFAULT_CHECKPOINT_HOOK} takes only --wait SECONDS, got '{shlex.join(arguments)}'"
                )
            return []
        if published_profile(env.image_parameter) is not None:
            return self.problem(
                f"{program} is not on the nodes: the AMI pipeline's images carry no checkpoint hook and the user data "
                f"installs only {DEFAULT_CHECKPOINT_HOOK} (use it, or set ami.id to an image of your own that has "
                f"{program})"
            )
        if env.ami is not None and env.ami.deep_learning is not None:
            return self.problem(
                f"{program} is not on the nodes: a Deep Learning AMI carries no checkpoint hook and the user data "
                f"installs only {DEFAULT_CHECKPOINT_HOOK} (use it, or set ami.id to an image of your own that has "
                f"{program})"
            )
        if not program.startswith("/"):
            return self.problem(
                f"'{program}' is not an absolute path: name the program by the path your image installs it at, or "
                f"use {DEFAULT_CHECKPOINT_HOOK}"
            )
        return []
