"""The environment's name: the file's."""

from __future__ import annotations

from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import EnvironmentValidator, ValidationContext


class EnvironmentNameValidator(EnvironmentValidator):
    field = "name"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.name != context.path.stem:
            return self.problem(
                f"'{env.name}' differs from the file name (name it '{context.path.stem}' "
                f"or rename the file to {env.name}.yaml)"
            )
        return []
