"""YAML configuration files (environments, AMI profiles, the AMI pipeline) read into frozen pydantic models.

Every problem is reported on its own line as `FILE: FIELD: what is wrong`, never as a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpufleet.errors import GpufleetError

Model = TypeVar("Model", bound=BaseModel)


def read_model(path: Path, model: type[Model], *, reference: str) -> Model:
    """Parse `path` into `model`; `reference` names the document that explains the file's keys."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise GpufleetError(f"{path}: cannot read file ({error.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise GpufleetError(
            f"{path}: line {line}: not UTF-8 text (byte {data[error.start]:#04x}: {error.reason}); save it as UTF-8"
        ) from None
    try:
        document = yaml.safe_load(text)
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
    return f"{field}: {message}, got {error['input']!r}{hint}"


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
