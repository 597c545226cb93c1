"""The environment matrix covers every option and every catalog type: what must be covered is read from the
environment model and the catalog, so a new option, a new allowed value or a new instance type fails here until an
entry of tests/stacks/matrix.py uses it."""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from typing import Annotated, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gpufleet.catalog import load_catalog
from gpufleet.constants import MIG_PURPOSES
from gpufleet.environment import Environment
from tests.stacks.matrix import MATRIX

# Values the model does not enumerate: a validator checks node.mig_purpose
# (gpufleet.validators.node.MigPurposeValidator),
# and a pattern ami.root_device_name (gpufleet.environment._root_device_problem: /dev/sda1, /dev/xvda, /dev/nvme0n1).
ENUMERATED_ELSEWHERE = {
    "instance_type": tuple(load_catalog()),
    "node.mig_purpose": MIG_PURPOSES,
    "ami.root_device_name": ("/dev/sda1", "/dev/xvda", "/dev/nvme0n1"),
}
EXPLICIT = "written in the file"


def unwrapped(field: FieldInfo) -> tuple[object, bool, list]:
    """The field's type without None and Annotated, whether None is allowed, and its validators."""
    annotation, metadata, optional = field.annotation, list(field.metadata), False
    if get_origin(annotation) in (Union, types.UnionType):
        arguments = [argument for argument in get_args(annotation) if argument is not type(None)]
        optional = len(arguments) < len(get_args(annotation))
        (annotation,) = arguments
    if get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        metadata += extra
    return annotation, optional, metadata


def choices(metadata: list) -> tuple[str, ...] | None:
    """The allowed values of a field checked with gpufleet.rules.one_of, read from its problem function."""
    for validator in metadata:
        problem = inspect.getclosurevars(getattr(validator, "func", lambda: None)).nonlocals.get("problem_of")
        if problem is not None and problem.__qualname__ == "one_of.<locals>.problem":
            return inspect.getclosurevars(problem).nonlocals["choices"]
    return None


def required(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, object]]:
    """(option, value) pairs the matrix must use: both sides of every bool, every allowed value of an enumerated
    option, None and a value of an optional one, an empty and a filled mapping, present and absent sections, and
    every option written in some file."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation, optional, metadata = unwrapped(field)
        if optional:
            yield path, None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if optional:
                yield path, "present"
            yield from required(annotation, f"{path}.")
            continue
        yield path, EXPLICIT
        values = ENUMERATED_ELSEWHERE.get(path) or choices(metadata)
        if values is not None:
            yield from ((path, value) for value in values)
        elif annotation is bool:
            yield from ((path, True), (path, False))
        elif get_origin(annotation) is dict:
            yield from ((path, "empty"), (path, "filled"))
        elif optional:
            yield path, "set"


def used(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, object]]:
    """The (option, value) pairs one parsed environment uses, named as required() names them."""
    for name, field in type(model).model_fields.items():
        path, value = f"{prefix}{name}", getattr(model, name)
        annotation, _, metadata = unwrapped(field)
        if isinstance(value, BaseModel):
            yield path, "present"
            yield from used(value, f"{path}.")
            continue
        if name in model.model_fields_set:
            yield path, EXPLICIT
        if value is None or path in ENUMERATED_ELSEWHERE or choices(metadata) is not None or annotation is bool:
            yield path, value
        elif isinstance(value, dict):
            yield path, "filled" if value else "empty"
        else:
            yield path, "set"


def test_the_matrix_uses_every_option_value_and_every_catalog_type(matrix):
    covered = {pair for environment in matrix.values() for pair in used(environment)}
    missing = [f"{path}: {value}" for path, value in required(Environment) if (path, value) not in covered]
    assert missing == []


def test_the_coverage_is_read_from_the_model_and_the_catalog():
    """required() finds the options and their values by itself (a few literal ones, so that a broken reader fails)."""
    assert {
        ("fleet.allocation_strategy", "diversified"),
        ("fleet.rollout", None),
        ("fleet.rollout", "replace-all"),
        ("fleet.capacity_rebalance", "present"),
        ("fleet.capacity_rebalance.termination_delay_seconds", "set"),
        ("fleet.fallback.restore_after_minutes", EXPLICIT),
        ("capacity.reservation.preference", "first"),
        ("capacity.capacity_block", None),
        ("network.nat_gateway", False),
        ("instance_type", "g5.8xlarge"),
        ("tags", "empty"),
        ("node.mig_purpose", "single-node-inference"),
        ("ami.root_device_name", "/dev/nvme0n1"),
        ("flavour", "eks"),
        ("eks.control_plane_subnet_ids", "set"),
        ("eks.add_ons.mpi_operator", False),
    } <= set(required(Environment))


# What each entry alone brings to the matrix (so none is redundant, and dropping one fails the coverage test).
ONLY_IN = {
    "spot-p4d": ("fleet.allocation_strategy", "diversified"),
    "request-p4de": ("fleet.type", "request"),
    "block-p5": ("capacity.capacity_block", "present"),
    "asg-g5": ("capacity.reservation.preference", "first"),
    "small-g5": ("instance_type", "g5.8xlarge"),
    "eks-p5": ("eks.control_plane_availability_zones", "set"),
    "eks-g5": ("eks.control_plane_subnet_ids", "set"),
}


def test_each_entry_covers_something_no_other_entry_does(matrix):
    assert ONLY_IN.keys() == MATRIX.keys()
    for name, pair in ONLY_IN.items():
        others = {pair for other, environment in matrix.items() if other != name for pair in used(environment)}
        assert pair in set(used(matrix[name])) - others, name
