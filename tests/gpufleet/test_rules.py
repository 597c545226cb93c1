"""The shared rule base: what environment and pipeline rules report; it imports no other gpufleet module, so the
models and the validators can both build on it (tests/test_import_layers.py checks the layers above it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import TypeAdapter, ValidationError

from gpufleet.rules import Problem, Validator, account_id_problem, log_retention_problem, one_of, region_problem


def loaded_gpufleet_modules(module: str) -> list[str]:
    """The gpufleet modules that importing `module` in a fresh interpreter loads."""
    code = f"import sys, {module}; print(' '.join(sorted(n for n in sys.modules if n.startswith('gpufleet.'))))"
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()


def test_the_rules_module_imports_no_other_gpufleet_module():
    assert loaded_gpufleet_modules("gpufleet.rules") == ["gpufleet.rules"]


def test_a_problem_line_names_file_and_field_and_marks_a_warning():
    assert Problem("fleet.valid_until", "is past").line(Path("environments/dev.yaml")) == (
        "environments/dev.yaml: fleet.valid_until: is past"
    )
    assert Problem("fleet.valid_until", "is past", "warning").line(Path("dev.yaml")) == (
        "dev.yaml: fleet.valid_until: warning: is past"
    )


def test_a_validator_reports_under_its_field_and_severity():
    class Positive(Validator[int, None]):
        field = "count"
        severity = "warning"

        def check(self, subject, context):
            return self.problem_if(None if subject > 0 else f"{subject} is not positive")

    assert Positive().check(1, None) == []
    assert Positive().check(0, None) == [Problem("count", "0 is not positive", "warning")]


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        (account_id_problem("12345"), "'12345' is not an AWS account id (exactly 12 digits, quoted)"),
        (account_id_problem("123456789012"), None),
        (region_problem("useast1"), "'useast1' is not a region name (for example us-east-1, eu-west-2)"),
        (region_problem("us-gov-west-1"), None),
        (region_problem("cn-northwest-1"), None),
        (
            region_problem("cn-north-2"),
            "'cn-north-2' is not a region of partition aws-cn (allowed, as the pinned botocore lists them: cn-north-1, "
            "cn-northwest-1; a region opened since needs newer boto3 and botocore pins)",
        ),
        (
            region_problem("us-gov-west-2"),
            "'us-gov-west-2' is not a region of partition aws-us-gov (allowed, as the pinned botocore lists them: "
            "us-gov-east-1, us-gov-west-1; a region opened since needs newer boto3 and botocore pins)",
        ),
        # A partition's pseudo-region is no region: botocore lists it beside them, outside the partition's pattern.
        (region_problem("aws-global"), "'aws-global' is not a region name (for example us-east-1, eu-west-2)"),
        # partitions.json lists regions that botocore's older endpoints.json does not have yet.
        (region_problem("me-west-1"), None),
        (log_retention_problem(30), None),
    ],
)
def test_the_shared_checks(problem, expected):
    assert problem == expected


def test_a_log_retention_outside_cloudwatchs_periods_lists_them():
    assert log_retention_problem(31) == (
        "31 is not a CloudWatch Logs retention (allowed: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, "
        "731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)"
    )


def test_a_choice_field_takes_a_listed_value_and_names_the_choices_for_any_other():
    # The models call one_of while their classes are defined, so this is the test that runs it under a mutant.
    fleet_type = TypeAdapter(Annotated[str, one_of("a fleet type", ("maintain", "request"))])
    assert fleet_type.validate_python("request") == "request"
    with pytest.raises(ValidationError) as refused:
        fleet_type.validate_python("maintan")
    assert [error["msg"] for error in refused.value.errors()] == [
        "Value error, 'maintan' is not a fleet type (allowed: maintain, request)"
    ]
