"""Reading a configuration file: every problem is one line naming the file, where in it, and what is wrong, whatever
the file holds (bytes that are not UTF-8, characters YAML refuses, a problem with the file as a whole)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import BaseModel, ConfigDict, StrictStr, model_validator

from gpufleet.cli import main
from gpufleet.config_file import read_model
from gpufleet.errors import GpufleetError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr
    section: Section | None = None

    @model_validator(mode="after")
    def _not_reserved(self) -> Settings:
        if self.name == "reserved":
            raise ValueError("The name 'reserved' is taken")
        return self


def problems_reading(tmp_path, data: bytes) -> tuple[str, ...]:
    path = tmp_path / "settings.yaml"
    path.write_bytes(data)
    with pytest.raises(GpufleetError) as raised:
        read_model(path, Settings, reference="SETTINGS.md")
    return tuple(problem.removeprefix(f"{path}: ") for problem in raised.value.problems)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # PyYAML's reader prints these on two lines ("in <unicode string>, position N"); the line number replaces that.
        (
            b"name: one\nsection:\n  size: 1\x07\n",
            "line 3: not valid YAML (unacceptable character #x0007: special characters are not allowed)",
        ),
        (b"name: caf\xe9\n", "line 1: not UTF-8 text (byte 0xe9: invalid continuation byte); save it as UTF-8"),
        (b"\nname: caf\xe9\n", "line 2: not UTF-8 text (byte 0xe9: invalid continuation byte); save it as UTF-8"),
        (
            b"\nname: one\x1b\n",
            "line 2: not valid YAML (unacceptable character #x001b: special characters are not allowed)",
        ),
        (
            b"# \xc3\xa9t\xc3\xa9\nname: \xff\n",
            "line 2: not UTF-8 text (byte 0xff: invalid start byte); save it as UTF-8",
        ),
        (b"name: one\nsection: {size: 1\n", "line 3: not valid YAML (expected ',' or '}', but got '<stream end>')"),
    ],
)
def test_text_that_is_not_yaml_is_one_line_with_its_line_number(tmp_path, data, expected):
    assert problems_reading(tmp_path, data) == (expected,)


def test_a_byte_order_mark_and_non_ascii_text_read_as_utf8(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_bytes(b"\xef\xbb\xbfname: \xc3\xa9t\xc3\xa9\n")
    assert read_model(path, Settings, reference="SETTINGS.md") == Settings(name="\u00e9t\u00e9")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # A rule about the whole file (a model validator of the top model) has no field to name.
        (b"name: reserved\n", "(file): the name 'reserved' is taken"),
        (b"name: one\nsection:\n  size: 1\n  colour: red\n", "section.colour: unknown key (allowed here: size)"),
        (b"name: one\ncolour: red\n", "colour: unknown key (allowed here: name, section)"),
        (b"section:\n  size: 1\n", "name: required key is missing"),
        (b"name: 12\n", "name: input should be a valid string, got 12 (put it in quotes)"),
        (
            b"name: one\nsection:\n  size: big\n",
            "section.size: input should be a valid integer, unable to parse string as an integer, got 'big'",
        ),
    ],
)
def test_each_field_problem_names_the_field(tmp_path, data, expected):
    assert problems_reading(tmp_path, data) == (expected,)


def test_an_environment_that_is_not_utf8_is_one_line_on_stderr_not_a_traceback(tmp_path, capsys):
    path = tmp_path / "dev.yaml"
    path.write_bytes(b"name: dev\nregion: us-east-1\xa0\n")
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: line 2: not UTF-8 text (byte 0xa0: invalid start byte); save it as UTF-8"
    ]


# What a configuration file may hold is narrower than YAML (issue 23): time and memory follow the file's size.
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Each level is one recursion of PyYAML's composer: a RecursionError traceback before.
        (b"name: " + b"[" * 100_000 + b"\n", "line 1: not valid YAML (nested more than 64 levels deep)"),
        (
            b"anchor: &one value\nname: *one\n",
            "line 2: not valid YAML (aliases (*name) are not supported here: write the value out)",
        ),
    ],
    ids=["nesting", "alias"],
)
def test_yaml_beyond_configuration_is_one_line(tmp_path, data, expected):
    assert problems_reading(tmp_path, data) == (expected,)


def test_nested_aliases_are_refused_in_time(tmp_path):
    # Nine lines standing for 10^9 strings: quoting the value in a message took hours before, in C code that no
    # signal interrupts, so the command runs in a process of its own.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "lab.yaml"
    path.write_text("\n".join([*lines, "name: *a8", ""]))
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet", "validate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr.splitlines()) == (
        1,
        [f"{path}: line 2: not valid YAML (aliases (*name) are not supported here: write the value out)"],
    )


def test_a_file_far_larger_than_a_configuration_is_refused_unread(tmp_path):
    path = tmp_path / "settings.yaml"
    with path.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: nothing written
    with pytest.raises(GpufleetError) as raised:
        read_model(path, Settings, reference="SETTINGS.md")
    assert raised.value.problems == (
        f"{path}: larger than 1 MiB, far more than a configuration file (a few KB): refused unread",
    )


def test_a_long_value_is_quoted_short(tmp_path):
    assert problems_reading(tmp_path, b"name: [" + b"x, " * 1000 + b"x]\n") == (
        "name: input should be a valid string, got ['x', 'x', 'x', 'x', 'x', 'x', ...] (put it in quotes)",
    )
