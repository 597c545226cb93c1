"""What the fuzz suite feeds the commands that read files, and the property every answer must have.

Inputs are real files (the fixtures, the shipped configuration, a synthesized assembly) damaged the ways files are
damaged in practice: cut short, a byte flipped or replaced, lines dropped or doubled, bytes inserted (binary,
control characters, other scripts' digits, colour codes), a number made hundreds of digits long or broken by
another character, another line's text cut into a line (interleaved output of many ranks), CRLF line ends; and
plain random bytes, and the empty file. Most of those break a JSON file's syntax, so JSON files (``damaged_json``)
are besides damaged as documents: a key or item dropped, a value replaced by one of another kind or by another value
of the document, then written out again; that reaches what a reader does with a document that parses.

The property (``run_command``): whatever the bytes, the command returns an exit code from the set it documents,
raises nothing (in-process, an exception is the traceback a user would see), every line on stderr names the file
it is about, and it answers within a time proportional to the input's size.

Reproducible: every test runs the examples that SEED selects, with no example database, so each run (a developer's,
CI's) tries the same inputs. GPUFLEET_FUZZ_SEED picks other seeds and GPUFLEET_FUZZ_EXAMPLES multiplies the number
of examples, for a longer search on demand (CONTRIBUTING.md, "Fuzz tests").
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st

from gpufleet.cli import main
from tests.time_limit import time_limit

SEED = int(os.environ.get("GPUFLEET_FUZZ_SEED", "23"))
_SCALE = int(os.environ.get("GPUFLEET_FUZZ_EXAMPLES", "1"))
# A command may take this long on any input, plus TIME_PER_MIB for each MiB of it: the bound is generous for a
# loaded two-core machine and far below what a quadratic reader takes on the adversarial inputs.
TIME_BASE_SECONDS = 10.0
TIME_PER_MIB_SECONDS = 10.0

# Inserted as they are: what damaged files hold that a parser may take for something else.
SPECIAL = (
    b"\x00",
    b"\x1a",
    b"\xff",
    b"\xc3",  # the first byte of a two-byte UTF-8 character, alone
    b"\x1b[31m",
    b"\r",
    b"\t",
    "\u2028".encode(),  # a line break to str.splitlines(), not to a file
    "²".encode(),  # a digit to str.isdigit(), not to int()
    "٣".encode(),  # a digit to int() and to \\d
    b"-1e400",
    b"NaN",
    b"inf",
    b"N/A",
    b"[1,3]<stdout>:",
    b"{",
    b"[",
    b'"',
    b"*x",
    b"&x ",
    b"- ",
    b": ",
)


def fuzz_settings(examples: int) -> Callable:
    """The settings and seed of a fuzz test that tries ``examples`` inputs (times GPUFLEET_FUZZ_EXAMPLES)."""

    def decorate(test: Callable) -> Callable:
        configured = settings(
            max_examples=examples * _SCALE,
            database=None,
            deadline=None,  # the time bound is run_command's, proportional to the input
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )(test)
        return seed(SEED)(configured)

    return decorate


@st.composite
def _mutation(draw: st.DrawFn, data: bytes) -> bytes:
    position = draw(st.integers(0, len(data)))
    kind = draw(
        st.sampled_from(
            ["cut", "flip", "byte", "insert", "special", "drop", "double", "number", "broken number", "cell",
             "interleave", "crlf"]
        )
    )  # fmt: skip
    if kind == "cut":
        return data[:position]
    if kind in ("flip", "byte") and data:
        index = min(position, len(data) - 1)
        value = data[index] ^ (1 << draw(st.integers(0, 7))) if kind == "flip" else draw(st.integers(0, 255))
        return data[:index] + bytes([value]) + data[index + 1 :]
    if kind == "insert":
        return data[:position] + draw(st.binary(min_size=1, max_size=16)) + data[position:]
    if kind == "special":
        return data[:position] + draw(st.sampled_from(SPECIAL)) + data[position:]
    lines = data.split(b"\n")
    if kind in ("drop", "double"):
        index = draw(st.integers(0, len(lines) - 1))
        if kind == "drop":
            del lines[index]
        else:
            lines.insert(index, lines[index])
        return b"\n".join(lines)
    numbers = list(re.finditer(rb"[0-9]+", data))
    if kind in ("number", "broken number") and numbers:
        number = draw(st.sampled_from(numbers))
        if kind == "number":
            new = b"9" * draw(st.integers(20, 500))
        else:
            cut = draw(st.integers(0, len(number.group())))
            new = number.group()[:cut] + draw(st.sampled_from([b"!", b"\x1a", b".", b"e", b"-", b" "])) + b"1943e+06"
        return data[: number.start()] + new + data[number.end() :]
    if kind == "cell":
        # One whitespace-separated word of a line (a cell of a table row, a YAML value, a JSON token) replaced.
        index = draw(st.integers(0, len(lines) - 1))
        words = re.split(rb"(\s+)", lines[index])
        word = draw(st.integers(0, len(words) - 1))
        words[word] = draw(
            st.one_of(
                st.integers(20, 500).map(lambda digits: b"9" * digits),
                st.sampled_from([b"4!1943e+06", b"\x1a0", b"1e400", b"-0", b"0x10", b"1_000"]),
                st.sampled_from(SPECIAL),
            )
        )
        lines[index] = b"".join(words)
        return b"\n".join(lines)
    if kind == "interleave" and len(lines) > 1:
        other = draw(st.sampled_from(lines))
        fragment = other[draw(st.integers(0, len(other))) :]
        return data[:position] + fragment + data[position:]
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n")
    return data


@st.composite
def _mutated(draw: st.DrawFn, original: bytes) -> bytes:
    data = original
    for _ in range(draw(st.integers(1, 4))):
        data = draw(_mutation(data))
    return data


def damaged(originals: Iterable[bytes]) -> st.SearchStrategy[bytes]:
    """Copies of ``originals`` damaged one to four times, now and then random bytes or nothing at all."""
    sources = st.sampled_from(list(originals))
    return st.one_of(
        sources.flatmap(_mutated),
        st.binary(max_size=2048),
        st.just(b""),
    )


# What a value of a JSON document is replaced with: every kind, the edge numbers, a digit int() does not take.
JSON_SUBSTITUTES: tuple[Any, ...] = (None, True, 0, -1, 2.5, 10**30, "", "x", "²", [], {}, ["x"], {"x": 1})


def _places(document: Any) -> list[tuple[Any, Any]]:
    """(container, key or index) of every value below the root."""
    places, todo = [], [document]
    while todo:
        container = todo.pop()
        keys = container.keys() if isinstance(container, dict) else range(len(container))
        for key in keys:
            places.append((container, key))
            if isinstance(container[key], (dict, list)):
                todo.append(container[key])
    return places


@st.composite
def _damaged_document(draw: st.DrawFn, original: bytes) -> bytes:
    document = json.loads(original)
    for _ in range(draw(st.integers(1, 3))):
        places = _places(document)
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        kind = draw(st.sampled_from(["drop", "replace", "copy"]))
        if kind == "drop":
            del container[key]
        elif kind == "replace":
            container[key] = copy.deepcopy(draw(st.sampled_from(JSON_SUBSTITUTES)))
        else:
            other, other_key = draw(st.sampled_from(places))
            container[key] = copy.deepcopy(other[other_key])
    return json.dumps(document, indent=1).encode()


def damaged_json(originals: Iterable[bytes]) -> st.SearchStrategy[bytes]:
    """What ``damaged`` makes of ``originals`` (JSON files), and as often copies damaged as documents."""
    originals = list(originals)
    return st.one_of(damaged(originals), st.sampled_from(originals).flatmap(_damaged_document))


def run_command(
    argv: list[str], *, exit_codes: set[int], names: tuple[str, ...], input_bytes: int, stdin: bytes | None = None
) -> tuple[int, str, str]:
    """Run ``gpufleet ARGV`` as the console script does and check the property (see the module docstring):
    the exit code is in ``exit_codes``, every stderr line starts with one of ``names``, and it ends within the time
    bound for ``input_bytes``. Returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    seconds = TIME_BASE_SECONDS + TIME_PER_MIB_SECONDS * input_bytes / (1024 * 1024)
    saved_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="strict")
    try:
        with time_limit(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        sys.stdin = saved_stdin
    stderr = err.getvalue()
    assert code in exit_codes, f"exit {code}, not one of {sorted(exit_codes)}; stderr: {stderr[-2000:]}"
    assert "Traceback" not in stderr
    for line in stderr.splitlines():
        assert line.startswith(names), f"a line on stderr names no input: {line!r}"
    return code, out.getvalue(), stderr
