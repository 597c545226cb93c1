"""The environment's name: the file's, and none the AMI pipeline's acceptance gate keeps for its own environments."""

from __future__ import annotations

import re

from gpufleet.ami.pipeline import Pipeline, acceptance_environment
from gpufleet.constants import ACCEPTANCE_NAME_PREFIX
from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import EnvironmentValidator, ValidationContext

# The name of an environment the gate deploys: the prefix and 8 hex digits of a CodeBuild build id, a UUID's first
# group (scripts/lib/pipeline.sh acceptance_environment_name; CodeBuild's build ids end in a lower-case UUID, as
# scripts/pipeline/acceptance-teardown.sh checks).
GATE_ENVIRONMENT_NAME = re.compile(rf"{re.escape(ACCEPTANCE_NAME_PREFIX)}[0-9a-f]{{8}}")
# A stand-in image id for the gate's environment of a file without ami.id (its ami differs either way).
_NO_IMAGE = "ami-00000000"
_CHOOSE = f"choose a name that is neither {ACCEPTANCE_NAME_PREFIX.rstrip('-')} nor {ACCEPTANCE_NAME_PREFIX}..."


def reserved_for_the_gate(name: str) -> bool:
    """accept and every accept-... name: the gate's grants name stacks gpufleet-accept-* (which gpufleet-accept-cluster,
    the stack of an environment named accept, matches) and nodes tagged accept-*."""
    return name == ACCEPTANCE_NAME_PREFIX.rstrip("-") or name.startswith(ACCEPTANCE_NAME_PREFIX)


def differences_from_the_gate(env: Environment, pipeline: Pipeline) -> list[str]:
    """The top-level keys in which ENV differs from the environment `gpufleet ami acceptance-environment` writes for
    the pipeline's gate under ENV's name and image (the pipeline has a gate)."""
    image = env.ami.id if env.ami is not None and env.ami.id is not None else _NO_IMAGE
    # The gate deploys in the pipeline's account: ami/pipeline.yaml's, else the build's own, which a file of the gate's
    # form carries.
    account = pipeline.account or env.account
    gate = Environment.model_validate(acceptance_environment(pipeline, env.name, image, account)).model_dump()
    ours = env.model_dump()
    return [key for key in ours if ours[key] != gate[key]]


class EnvironmentNameValidator(EnvironmentValidator):
    field = "name"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.name != context.path.stem:
            return self.problem(
                f"'{env.name}' differs from the file name (name it '{context.path.stem}' "
                f"or rename the file to {env.name}.yaml)"
            )
        return []


class ReservedNameValidator(EnvironmentValidator):
    """accept and accept-... are the AMI pipeline acceptance gate's: its build role may run commands on every node of
    an environment so named and read its stacks, and its teardown deletes gpufleet-accept-<8 hex digits>-cluster. An
    environment of the gate's form (accept- and 8 hex digits) passes only as the very file the gate writes (the
    pipeline's gate, on on-demand nodes in the gate's network, no storage), judged wherever the file is checked against
    the pipeline (`gpufleet validate`, synthesis, `gpufleet ami acceptance-environment`): so whatever deploys under such
    a name is a gate environment. The commands that do not read the pipeline (status, acceptance, ...) deploy nothing
    and take it as it is."""

    field = "name"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        name = env.name
        if not reserved_for_the_gate(name):
            return []
        if not GATE_ENVIRONMENT_NAME.fullmatch(name):
            return self.problem(
                f"'{name}' is reserved for the AMI pipeline's acceptance gate, whose grants reach every stack named "
                f"gpufleet-{ACCEPTANCE_NAME_PREFIX}* and every node tagged {ACCEPTANCE_NAME_PREFIX}* ({_CHOOSE})"
            )
        pipeline = context.ami_pipeline
        if pipeline is None:
            return []
        gate_form = (
            f"'{name}' is the name of an AMI acceptance gate environment ({ACCEPTANCE_NAME_PREFIX} and 8 hex digits)"
        )
        if pipeline.acceptance is None:
            return self.problem(f"{gate_form}, and the pipeline's gate is off (acceptance: null; {_CHOOSE})")
        differences = differences_from_the_gate(env, pipeline)
        if differences:
            return self.problem(
                f"{gate_form}, but not the file `gpufleet ami acceptance-environment` writes for the pipeline's gate "
                f"({', '.join(differences)} differ; {_CHOOSE})"
            )
        return []
