"""The naming rule (gpufleet/validators/naming.py): an environment is named after its file."""

from __future__ import annotations

import pytest

from tests.gpufleet.environment_files import problems_of, with_change

RULES = [
    ("name", "other", "name: 'other' differs from the file name (name it 'lab' or rename the file to other.yaml)"),
]


@pytest.mark.parametrize(("field", "value", "expected"), RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in RULES])
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]
