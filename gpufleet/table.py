"""Aligned plain-text tables for human output (every command that prints a table also has --json)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    # strict: a row with a cell too many or too few is refused here, never printed under the wrong header.
    widths = [max(len(text) for text in column) for column in zip(headers, *cells, strict=True)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(value.ljust(widths[column]) for column, value in enumerate(values)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])
