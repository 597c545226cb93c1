"""gpufleet.table: columns padded to the widest cell, no trailing spaces."""

import pytest

from gpufleet.table import format_table


def test_columns_align_on_the_widest_cell() -> None:
    table = format_table(["ID", "STATE"], [("i-1", "running"), ("i-12345", "-")])
    assert table.splitlines() == ["ID       STATE", "i-1      running", "i-12345  -"]


def test_a_header_wider_than_its_cells_sets_the_width() -> None:
    table = format_table(["INSTANCE", "AZ"], [("i-1", "us-east-1a")])
    assert table.splitlines() == ["INSTANCE  AZ", "i-1       us-east-1a"]


def test_without_rows_the_table_is_its_header() -> None:
    assert format_table(["ID", "STATE"], []) == "ID  STATE"


def test_a_row_with_a_missing_cell_is_refused_rather_than_printed_under_the_wrong_header() -> None:
    with pytest.raises(ValueError, match="zip"):
        format_table(["ID", "STATE", "AZ"], [("i-1", "running", "us-east-1a"), ("i-2", "running")])
