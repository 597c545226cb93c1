"""The rules between environment files: what one environment may not share with another. Each file passes its own
rules first (gpufleet.validators.validate_environment); these compare it with the other environments checked with it
and with those beside it (gpufleet.loading says which). A problem is reported once, on the later file of a pair,
naming the other.

One rule: two environments of one account and region never name the same existing file system
(storage.existing.file_system_id). Every cluster has the same cluster user (uid 2000, gpufleet.constants
CLUSTER_USER_ID) with its home, its SSH key and its runs on the shared file system, so on a shared one either
cluster's workloads own the other's home and runs, and each boot writes its own key over the other's. gpufleet does
not share a file system between environments (docs/guides/storage.md, "One file system per environment", says why).
A storage.existing naming the file system another environment's storage.lustre creates is not caught here: its id
exists only once deployed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.constants import CLUSTER_USER_ID
from gpufleet.environment import Environment
from gpufleet.rules import Problem, Validator


@dataclass(frozen=True)
class Others:
    """The environments an environment is compared with, each with its file."""

    environments: tuple[tuple[Path, Environment], ...]


class SharedFileSystemValidator(Validator[Environment, Others]):
    field = "storage.existing.file_system_id"

    def check(self, env: Environment, context: Others) -> list[Problem]:
        existing = env.storage.existing if env.storage else None
        if existing is None:
            return []
        sharing = [
            path
            for path, other in context.environments
            if other.storage is not None
            and other.storage.existing is not None
            and other.storage.existing.file_system_id == existing.file_system_id
            and (other.account, other.region) == (env.account, env.region)
        ]
        if not sharing:
            return []
        return self.problem(
            f"{existing.file_system_id} is also the file system of {', '.join(map(str, sharing))} (account "
            f"{env.account}, {env.region}): every cluster's user is uid {CLUSTER_USER_ID} with its home there, so each "
            "cluster's workloads could act as the other's (give each environment a file system of its own)"
        )


VALIDATORS: tuple[Validator[Environment, Others], ...] = (SharedFileSystemValidator(),)


def validate_together(
    checked: Sequence[tuple[Path, Environment]], beside: Sequence[tuple[Path, Environment]] = ()
) -> list[str]:
    """The problem lines of CHECKED compared with one another (each with the files before it) and with BESIDE
    (environments not being checked, e.g. the other files of a named environment's directory). A file given twice is
    one file."""
    lines: list[str] = []
    seen: list[tuple[Path, Environment]] = []
    for path, env in checked:
        if any(_same_file(path, earlier) for earlier, _ in seen):
            continue
        others = Others(tuple(seen) + tuple(other for other in beside if not _same_file(path, other[0])))
        lines.extend(problem.line(path) for validator in VALIDATORS for problem in validator.check(env, others))
        seen.append((path, env))
    return lines


def _same_file(one: Path, other: Path) -> bool:
    return one.resolve() == other.resolve()
