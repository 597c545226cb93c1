"""YAML configuration files (environments, AMI profiles, the AMI pipeline) read into frozen pydantic models.

Every problem is reported on its own line as `FILE: FIELD: what is wrong`, never as a traceback.

What a configuration file may hold is narrower than YAML, so that the time and memory reading one takes follow its
size: at most MAX_CONFIG_BYTES, nested at most MAX_NESTING deep, and no aliases (``*name``): an alias repeats the
node it names without repeating its text, so a few lines of nested aliases stand for billions of values.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpufleet.errors import GpufleetError
from gpufleet.input_files import MIB, decode_utf8, read_limited

Model = TypeVar("Model", bound=BaseModel)

# The shipped files are under 5 KB (ami/profiles/ubuntu2204-cuda12.yaml, the longest, about 4 KB).
MAX_CONFIG_BYTES = 1 * MIB
# The models nest five levels at most (environment: fleet.fallback.<...>); YAML's composer recurses once per
# level, so a deeper file would end in a RecursionError.
MAX_NESTING = 64


def _quoting() -> reprlib.Repr:
    """repr() for values quoted in a message, cut short: a value can be a whole mapping."""
    quoting = reprlib.Repr()
    quoting.maxstring = quoting.maxother = 60
    quoting.maxlevel = 2
    return quoting


_QUOTED = _quoting()


class _ConfigLoader(yaml.SafeLoader):
    """yaml.SafeLoader without aliases and with a nesting limit (see the module docstring)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not supported here: write the value out", self.peek_event().start_mark
            )
        if self._depth >= MAX_NESTING:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_NESTING} levels deep", self.peek_event().start_mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_model(path: Path, model: type[Model], *, reference: str) -> Model:
    """Parse `path` into `model`; `reference` names the document that explains the file's keys."""
    data = read_limited(str(path), limit=MAX_CONFIG_BYTES, expected="a configuration file (a few KB)", exit_code=1)
    text = decode_utf8(str(path), data, fix="save it as UTF-8", exit_code=1)
    try:
        document = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 -- a SafeLoader
    except yaml.reader.ReaderError as error:
        # Raised before parsing, for a character YAML does not allow (a control character); it carries the character's
        # index in the text and prints it on a second line.
        line = text.count("\n", 0, error.position) + 1
        raise GpufleetError(f"{path}: line {line}: not valid YAML ({str(error).splitlines()[0]})") from None
    except yaml.MarkedYAMLError as error:
        where = f"line {error.problem_mark.line + 1}" if error.problem_mark else "(file)"
        raise GpufleetError(f"{path}: {where}: not valid YAML ({error.problem})") from None
    if not isinstance(document, dict):
        raise GpufleetError(f"{path}: (file): expected a mapping of keys to values (see {reference})")
    try:
        return model.model_validate(document)
    except ValidationError as error:
        raise GpufleetError(*(f"{path}: {describe_error(model, problem)}" for problem in error.errors())) from None


def describe_error(model: type[BaseModel], error: ErrorDetails) -> str:
    # pydantic places an error in a mapping's key under the key and "[key]"; the key names the field well enough.
    location = tuple(part for part in error["loc"] if part != "[key]")
    field = ".".join(str(part) for part in location) or "(file)"
    if error["type"] == "extra_forbidden":
        return f"{field}: unknown key (allowed here: {', '.join(allowed_keys(model, location[:-1]))})"
    if error["type"] == "missing":
        return f"{field}: required key is missing"
    message = error["msg"].removeprefix("Value error, ")
    message = message[0].lower() + message[1:]
    if error["type"] == "value_error":
        return f"{field}: {message}"
    hint = " (put it in quotes)" if error["type"] == "string_type" else ""
    return f"{field}: {message}, got {_QUOTED.repr(error['input'])}{hint}"


def allowed_keys(model: type[BaseModel], location: tuple[Any, ...]) -> list[str]:
    """The keys the model accepts at a location (the nested model's fields)."""
    for part in location:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        candidates = [arg for arg in getattr(annotation, "__args__", (annotation,)) if isinstance(arg, type)]
        models = [arg for arg in candidates if issubclass(arg, BaseModel)]
        if not models:
            return []
        model = models[0]
    return list(model.model_fields)
