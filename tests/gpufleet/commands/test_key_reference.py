"""The key rows both generated references are made of (docs/reference/environment.md and ami-profile.md), on a small
model of their own: what each kind of field renders as, written out."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, StrictStr

from gpufleet.commands.key_reference import TABLE_HEAD, key_rows


class Part(BaseModel):
    version: StrictStr = Field(description="Exact version.")
    url: StrictStr | None = Field(description="Where it comes from; null: a package.")
    note: StrictStr | None = Field(None, description="Optional | free text.")


class Parts(BaseModel):
    left: Part = Field(description="The left part.")


class Machine(BaseModel):
    family: Literal["ubuntu", "amzn"] = Field(description="ubuntu or amzn.")
    size: int = Field(4, description="How many.")
    parts: Parts = Field(description="Every part.")


def test_table_head():
    assert TABLE_HEAD == "| key | type | default | meaning |\n|---|---|---|---|\n"


def test_nested_keys_follow_their_mapping_row():
    assert list(key_rows(Machine)) == [
        "| `family` | string | required | ubuntu or amzn. |\n",
        "| `size` | integer | `4` | How many. |\n",
        "| `parts` | mapping | required | Every part. |\n",
        "| `parts.left` | mapping | required | The left part. |\n",
        "| `parts.left.version` | string | required | Exact version. |\n",
        "| `parts.left.url` | string or null | required | Where it comes from; null: a package. |\n",
        "| `parts.left.note` | string (optional) | none | Optional \\| free text. |\n",
    ]


def test_a_collapsed_model_keeps_its_row_and_loses_its_keys():
    assert list(key_rows(Machine, collapsed=(Part,))) == [
        "| `family` | string | required | ubuntu or amzn. |\n",
        "| `size` | integer | `4` | How many. |\n",
        "| `parts` | mapping | required | Every part. |\n",
        "| `parts.left` | mapping | required | The left part. |\n",
    ]


def test_prefix_names_the_place_of_a_model_documented_apart():
    assert (
        list(key_rows(Part, prefix="parts.KEY."))[0] == "| `parts.KEY.version` | string | required | Exact version. |\n"
    )


class Queue(BaseModel):
    events: tuple[StrictStr, ...] = Field(("NEW", "CHANGED"), description="Which events.")
    flush: bool = Field(False, description="Flush first.")


def test_defaults_are_written_as_yaml_writes_them():
    assert list(key_rows(Queue)) == [
        "| `events` | list of string | `[NEW, CHANGED]` | Which events. |\n",
        "| `flush` | boolean | `false` | Flush first. |\n",
    ]
