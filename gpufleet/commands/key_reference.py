"""The key tables of the generated references (docs/reference/environment.md, docs/reference/ami-profile.md): one
row per field of a pydantic model, read from the model itself, so the documentation cannot drift from what the
parser accepts (a test per reference compares the committed page with its rendering)."""

from __future__ import annotations

import types
import typing

from pydantic import BaseModel

TABLE_HEAD = "| key | type | default | meaning |\n|---|---|---|---|\n"


def key_rows(
    model: type[BaseModel], prefix: str = "", collapsed: tuple[type[BaseModel], ...] = ()
) -> typing.Iterator[str]:
    """One table row per field, each nested model's keys right after its own row. A model in ``collapsed`` gets its
    row but not its keys' (a model used under many keys is documented once, in a table of its own)."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        nested = _nested_model(field.annotation)
        required = field.is_required()
        if required:
            default = "required"
        elif nested is not None or field.default_factory is not None:
            default = "see below" if nested is not None else "{}"
        else:
            default = "none" if field.default is None else f"`{_yaml(field.default)}`"
        row = f"| `{key}` | {_type_name(field.annotation, required)} | {default} | {_cell(field.description or '')} |\n"
        yield row
        if nested is not None and nested not in collapsed:
            yield from key_rows(nested, prefix=f"{key}.", collapsed=collapsed)


def _nested_model(annotation: typing.Any) -> type[BaseModel] | None:
    candidates = typing.get_args(annotation) or (annotation,)
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _type_name(annotation: typing.Any, required: bool = False) -> str:
    """A required field that may be null must be written out: "string or null"; one that may be left out is
    "(optional)"."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        names = [_type_name(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        return " or ".join(names) + (" or null" if required else " (optional)")
    origin = typing.get_origin(annotation)
    if origin is dict:
        return "mapping of string to string"
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is typing.Literal:
        return "string"
    base = typing.get_args(annotation)[0] if origin is typing.Annotated else annotation
    return {str: "string", int: "integer", bool: "boolean"}.get(base, getattr(base, "__name__", str(base)))


def _yaml(value: object) -> str:
    """A default as the YAML file writes it: true, false, a flow list [A, B]."""
    if isinstance(value, tuple | list):
        return f"[{', '.join(_yaml(item) for item in value)}]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _cell(text: str) -> str:
    """Markdown table cells end at a bare pipe."""
    return text.replace("|", r"\|")
