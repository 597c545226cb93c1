"""Files a user or a tool hands gpufleet, read without trusting their size or their bytes.

A reader either takes a whole file up to a size limit it names (``read_limited``: configuration files, captures,
cloud assemblies, all small) or streams it line by line with a limit on the length of one line (``numbered_lines``:
logs, which can be long). Nothing here reads a file whole into memory, so a multi-gigabyte file (a log a job wrote
for hours, a device file, a sparse file) is refused with one line or streamed, never loaded. Every problem is a
``GpufleetError`` of one line naming the file; the caller chooses the exit code its command documents.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import BinaryIO

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
