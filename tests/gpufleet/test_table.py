"""gpufleet.table: columns padded to the widest cell, no trailing spaces."""

from gpufleet.table import format_table


def test_columns_align_on_the_widest_cell() -> None:
    table = format_table(["ID", "STATE"], [("i-1", "running"), ("i-12345", "-")])
    assert table.splitlines() == ["ID       STATE", "i-1      running", "i-12345  -"]
