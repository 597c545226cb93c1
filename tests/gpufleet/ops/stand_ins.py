"""Environments with the issue-11 keys that other branches add (fleet.backend, fleet.fallback, capacity.capacity_block).

Until those keys are merged into gpufleet.environment, the code reads them with getattr defaults; these stand-ins
put them on a parsed environment (model_copy does not validate). After the merge, the tests that use them should
write real environment files instead.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpufleet.environment import Environment


def with_fleet(env: Environment, **keys: Any) -> Environment:
    """ENV whose fleet section also has KEYS (backend="auto-scaling", fallback=fallback(...))."""
    return env.model_copy(update={"fleet": SimpleNamespace(**{**env.fleet.model_dump(), **keys})})


def with_capacity(env: Environment, **keys: Any) -> Environment:
    """ENV whose capacity section also has KEYS (capacity_block=capacity_block(...))."""
    capacity = env.capacity
    return env.model_copy(
        update={"capacity": SimpleNamespace(**{**capacity.model_dump(), "spot": capacity.spot, **keys})}
    )


def fallback(max_extra_on_demand: int | None, after_minutes: int = 15, restore_after_minutes: int = 60) -> Any:
    return SimpleNamespace(
        after_minutes=after_minutes,
        restore_after_minutes=restore_after_minutes,
        max_extra_on_demand=max_extra_on_demand,
    )


def capacity_block(reservation_id: str) -> Any:
    return SimpleNamespace(reservation_id=reservation_id)
