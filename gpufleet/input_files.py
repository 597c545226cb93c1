"""Files a user or a tool hands gpufleet, read without trusting their size or their bytes.

A reader either takes a whole file up to a size limit it names (``read_limited``: configuration files, captures,
cloud assemblies, all small; ``JsonFile`` reads a JSON file so and gives typed access to its values) or streams it
line by line with a limit on the length of one line (``numbered_lines``: logs, which can be long). Nothing here
reads a file whole into memory, so a multi-gigabyte file (a log a job wrote for hours, a device file, a sparse
file) is refused with one line or streamed, never loaded. Every problem is a ``GpufleetError`` of one line naming
the file; the caller chooses the exit code its command documents.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gpufleet.errors import GpufleetError

STDIN = "-"
KIB = 1024
MIB = 1024 * KIB


def display_name(source: str) -> str:
    """How messages name ``source``: the path as given, ``<stdin>`` for ``-``."""
    return "<stdin>" if source == STDIN else source


def read_limited(source: str, *, limit: int, expected: str, exit_code: int) -> bytes:
    """The bytes of ``source`` (a path, or ``-`` for standard input); a file over ``limit`` bytes is refused, the
    message saying it is larger than ``expected`` (e.g. "an nvidia-smi topo -m capture, a few KB")."""
    name = display_name(source)
    with _opened(source, exit_code) as handle:
        data = _read(handle, limit + 1, name, exit_code)
    if len(data) > limit:
        raise GpufleetError(
            f"{name}: larger than {_size(limit)}, far more than {expected}: refused unread", exit_code=exit_code
        )
    return data


def decode_utf8(name: str, data: bytes, *, fix: str, exit_code: int) -> str:
    """``data`` as UTF-8 text; where it is not, one line naming the line and byte, and ``fix``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise GpufleetError(
            f"{name}: line {line}: not UTF-8 text (byte {data[error.start]:#04x}: {error.reason}); {fix}",
            exit_code=exit_code,
        ) from None


_REQUIRED = object()


class JsonFile:
    """A JSON file read whole (``read_limited``, ``decode_utf8``) and typed access to its values. Every problem is one
    line naming the file, where in it (``line L column C`` of JSON that does not parse, else the path of keys to the
    value: ``Resources.NodeGroup.Properties.DesiredCapacity``), what was expected, and ``fix``."""

    def __init__(self, path: Path, *, limit: int, expected: str, fix: str, exit_code: int) -> None:
        """``expected`` says what the file is and how large such files are, for the refusal of one over ``limit``
        bytes (e.g. "a file of a cloud assembly (tens of KB)")."""
        self.path = path
        self.fix = fix
        self.exit_code = exit_code
        data = read_limited(str(path), limit=limit, expected=expected, exit_code=exit_code)
        text = decode_utf8(str(path), data, fix=fix, exit_code=exit_code)
        try:
            self.document: Any = json.loads(text)
        except json.JSONDecodeError as error:
            raise self._error(f"line {error.lineno} column {error.colno}: not valid JSON ({error.msg})") from None
        except ValueError as error:  # a number of more than 4300 digits (int() refuses it)
            raise self._error(f"not valid JSON ({str(error).split(':')[0]})") from None
        except RecursionError:
            raise self._error("not valid JSON (nested too deeply to read)") from None
        # A \uD800-\uDFFF escape that is not half of a pair parses to a string no encoding can write: printing it
        # would end in a UnicodeEncodeError. Such escapes are rare, so the document is walked only when one is there.
        if _SURROGATE_ESCAPE.search(text):
            self._refuse_lone_surrogates()

    def get(self, value: Any, path: tuple[str, ...], kind: type, *, default: Any = _REQUIRED) -> Any:
        """``value[key]`` for the last key of ``path`` (the keys from the document's root, for messages), checked
        to be of ``kind``; ``value`` must be an object. A missing key is a problem, unless a ``default`` is given:
        then it is the value."""
        *parents, key = path
        if not isinstance(value, dict):
            raise self.problem(tuple(parents), "an object", value)
        if key not in value:
            if default is not _REQUIRED:
                return default
            raise self.error(path, "missing")
        found = value[key]
        if not isinstance(found, kind) or (kind is int and isinstance(found, bool)):
            raise self.problem(path, _KINDS[kind], found)
        return found

    def problem(self, path: tuple[str, ...], expected: str, found: Any) -> GpufleetError:
        """The value at ``path`` is not what was expected."""
        return self.error(path, f"expected {expected}, got {quoted(found)}")

    def error(self, path: tuple[str, ...], message: str) -> GpufleetError:
        """``message`` about the value at ``path`` (the whole file for ``()``), with the fix."""
        return self._error(f"{_dotted(path) or '(file)'}: {message}")

    def _error(self, message: str) -> GpufleetError:
        return GpufleetError(f"{self.path}: {message}; {self.fix}", exit_code=self.exit_code)

    def _refuse_lone_surrogates(self) -> None:
        todo: list[tuple[tuple[str, ...], Any]] = [((), self.document)]
        while todo:
            path, value = todo.pop()
            if isinstance(value, list):
                todo.extend((item_path(path, index), item) for index, item in enumerate(value))
            elif isinstance(value, dict):
                for key, item in value.items():
                    if not _encodable(key):
                        raise self.error(path, f"the key {quoted(key)} {_LONE_SURROGATE}")
                    todo.append(((*path, key), item))
            elif isinstance(value, str) and not _encodable(value):
                raise self.error(path, f"{quoted(value)} {_LONE_SURROGATE}")


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a whole number", bool: "true or false"}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = "holds half of a UTF-16 surrogate pair alone, which is no character"
# A key printed as it is in a path of keys: printable ASCII, no space or double quote; any other is quoted as JSON.
_PLAIN_KEY = re.compile(r"[!#-~]+")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def item_path(path: tuple[str, ...], index: int) -> tuple[str, ...]:
    """The path of keys to item ``index`` of the list at ``path``: ``NetworkInterfaces[0]``."""
    return (*path[:-1], f"{path[-1]}[{index}]") if path else (f"[{index}]",)


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(key if _PLAIN_KEY.fullmatch(key) else json.dumps(key) for key in path)


def quoted(value: Any) -> str:
    """``value`` as JSON (ASCII: a control character or line break in it cannot split a message), cut to 40
    characters."""
    try:
        text = json.dumps(value)
    except RecursionError:  # a value nested about as deeply as json.loads takes
        text = "[...]" if isinstance(value, list) else "{...}"
    return text if len(text) <= 40 else f"{text[:40]}..."


def numbered_lines(source: str, *, max_line: int, exit_code: int) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of ``source``, read one line at a time.

    Line numbers count newlines, as ``grep -n`` and ``sed -n Np`` do; a carriage return or another line break
    inside a line splits it further (str.splitlines), the pieces keeping the line's number. Bytes that are not
    UTF-8 become U+FFFD. Of a line longer than ``max_line`` bytes only the first ``max_line`` are kept: the rest is
    read past, never held.
    """
    name = display_name(source)
    with _opened(source, exit_code) as handle:
        number = 0
        while chunk := _readline(handle, max_line, name, exit_code):
            number += 1
            tail = chunk
            while len(tail) == max_line and not tail.endswith(b"\n"):
                tail = _readline(handle, max_line, name, exit_code)
            for piece in _pieces(chunk.decode("utf-8", errors="replace")):
                yield number, piece


def text_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of ``text``, numbered and split as numbered_lines does a file's."""
    for number, chunk in enumerate(text.split("\n"), start=1):
        for piece in _pieces(chunk):
            yield number, piece


def _pieces(line: str) -> list[str]:
    return line.splitlines() or [""]


@contextlib.contextmanager
def _opened(source: str, exit_code: int) -> Iterator[BinaryIO]:
    if source == STDIN:
        # The bytes, not sys.stdin's text: its decoding follows the locale, and with a strict one a byte that is
        # not UTF-8 would end in a UnicodeDecodeError.
        yield sys.stdin.buffer
        return
    try:
        handle = open(source, "rb")
    except OSError as error:
        raise GpufleetError(f"{source}: cannot read file ({error.strerror})", exit_code=exit_code) from None
    with handle:
        yield handle


def _read(handle: BinaryIO, size: int, name: str, exit_code: int) -> bytes:
    try:
        return handle.read(size)
    except OSError as error:
        raise GpufleetError(f"{name}: cannot read file ({error.strerror})", exit_code=exit_code) from None


def _readline(handle: BinaryIO, size: int, name: str, exit_code: int) -> bytes:
    try:
        return handle.readline(size)
    except OSError as error:
        raise GpufleetError(f"{name}: cannot read file ({error.strerror})", exit_code=exit_code) from None


def _size(limit: int) -> str:
    if limit >= MIB:
        return f"{limit // MIB} MiB"
    return f"{limit // KIB} KiB" if limit >= KIB else f"{limit} bytes"
