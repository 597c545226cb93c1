"""Shipped environments with keys they do not set (fleet.backend, fleet.fallback, capacity.capacity_block), parsed
by the environment model like a file would be (the cross-field rules of gpufleet.validators are not run: a test
may want a combination `gpufleet validate` refuses)."""

from __future__ import annotations

from typing import Any

from gpufleet.environment import Environment


def with_fleet(env: Environment, **keys: Any) -> Environment:
    """ENV whose fleet section also has KEYS (backend="auto-scaling", fallback=fallback(...))."""
    return Environment.model_validate({**env.model_dump(), "fleet": {**env.fleet.model_dump(), **keys}})


def with_capacity(env: Environment, **keys: Any) -> Environment:
    """ENV whose capacity section also has KEYS (capacity_block=capacity_block(...))."""
    return Environment.model_validate({**env.model_dump(), "capacity": {**env.capacity.model_dump(), **keys}})


def with_tags(env: Environment, tags: dict[str, str]) -> Environment:
    return Environment.model_validate({**env.model_dump(), "tags": tags})


def fallback(max_extra_on_demand: int, after_minutes: int = 15, restore_after_minutes: int = 60) -> dict[str, int]:
    return {
        "after_minutes": after_minutes,
        "restore_after_minutes": restore_after_minutes,
        "max_extra_on_demand": max_extra_on_demand,
    }


def capacity_block(reservation_id: str) -> dict[str, str]:
    """A week's block far enough ahead that no clock the tests run under has reached it."""
    return {"reservation_id": reservation_id, "start": "2099-01-05T11:30:00Z", "end": "2099-01-12T11:30:00Z"}
