"""What spans every environment rule (gpufleet/validators/__init__.py): the valid example, every problem reported at
once in report order, warnings apart from errors, and `gpufleet validate`'s exit codes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from gpufleet.cli import main
from gpufleet.loading import check_environment, load_environment
from gpufleet.rules import Problem
from tests.gpufleet.environment_files import VALID, changed, problems_of, with_change, write
from tests.gpufleet.validators.test_fleet import PASSED


def test_the_valid_example_has_no_problems(tmp_path):
    assert load_environment(write(tmp_path, VALID)).capacity.spot == 1


def test_every_rule_problem_is_reported_at_once(tmp_path):
    document = changed({"availability_zone": "us-west-2a", "capacity.on_demand": 3})
    assert problems_of(tmp_path, document) == [
        "availability_zone: 'us-west-2a' is not an availability zone of us-east-1 "
        "(the region name followed by one letter, e.g. us-east-1a)",
        "capacity.on_demand: 3 is outside the target capacity (0 to capacity.target, which is 2)",
    ]


def test_every_one_field_problem_is_reported_at_once_while_parsing(tmp_path):
    # Rules about one field alone are checked while parsing, so the rules that combine fields (here: on_demand
    # within target) wait until the file parses.
    document = changed(
        {
            "capacity.target": 0,
            "fleet.type": "once",
            "fleet.on_demand_allocation_strategy": "cheapest",
            "root_volume_gib": 20,
        }
    )
    assert problems_of(tmp_path, document) == [
        "capacity.target: 0 nodes is too few (at least 1)",
        "fleet.type: 'once' is not a fleet type (allowed: maintain, request)",
        "fleet.on_demand_allocation_strategy: 'cheapest' is not an on-demand allocation strategy "
        "(allowed: lowestPrice, prioritized)",
        "root_volume_gib: 20 GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)",
    ]


def test_a_warning_line_says_so_and_an_error_line_does_not():
    path = Path("environments/lab.yaml")
    assert PASSED.line(path) == (
        "environments/lab.yaml: fleet.valid_until: warning: 2027-01-01T00:00:00+00:00 has passed (set a future UTC "
        "time, or remove it, before launching nodes)"
    )
    assert Problem("capacity.target", "0 nodes is too few (at least 1)").line(path) == (
        "environments/lab.yaml: capacity.target: 0 nodes is too few (at least 1)"
    )


EXPIRED = with_change("fleet.valid_until", "2020-01-01T00:00:00Z")
EXPIRED_WARNING = (
    "fleet.valid_until: warning: 2020-01-01T00:00:00+00:00 has passed (set a future UTC time, or remove it, "
    "before launching nodes)"
)


def test_a_date_that_has_passed_does_not_stop_loading_the_environment(tmp_path):
    """Synthesis (and so `cdk destroy`) loads environments this way."""
    path = write(tmp_path, EXPIRED)
    assert load_environment(path).fleet.valid_until == dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    environment, warnings = check_environment(path)
    assert (environment.name, warnings) == ("lab", [f"{path}: {EXPIRED_WARNING}"])


def test_cli_validate_prints_a_warning_and_exits_0(tmp_path, capsys):
    expired = write(tmp_path, EXPIRED)
    assert main(["validate", str(expired)]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"{expired}: {EXPIRED_WARNING}"]
    assert captured.out.splitlines() == [f"{expired}: ok (lab: 2 x p4d.24xlarge in us-east-1a)"]


def test_cli_validate_with_errors_elsewhere_exits_1_and_lists_the_warning_too(tmp_path, capsys):
    bad = write(tmp_path, changed({"name": "bad", "capacity.on_demand": 3}), name="bad")
    expired = write(tmp_path, EXPIRED)
    assert main(["validate", str(bad), str(expired)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{bad}: capacity.on_demand: 3 is outside the target capacity (0 to capacity.target, which is 2)",
        f"{expired}: {EXPIRED_WARNING}",
    ]


def test_cli_validate_exits_1_with_one_line_per_problem_and_no_traceback(tmp_path, capsys):
    bad = write(tmp_path, changed({"capacity.target": 0, "root_volume_gib": 20}))
    good = write(tmp_path, with_change("name", "good"), name="good")
    assert main(["validate", str(bad), str(good)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"{bad}: capacity.target: 0 nodes is too few (at least 1)",
        f"{bad}: root_volume_gib: 20 GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)",
    ]
    assert "Traceback" not in captured.err + captured.out


def test_cli_validate_defaults_to_every_shipped_environment(capsys):
    assert main(["validate"]) == 0
    shipped = sorted(Path("environments").glob("*.yaml"))
    assert len(shipped) >= 3
    assert len(capsys.readouterr().out.splitlines()) == len(shipped)


def test_cli_validate_missing_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 1
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'nope.yaml'}: cannot read file (No such file or directory)"


def test_cli_validate_checks_environments_against_the_ami_pipeline(tmp_path, capsys):
    unbuilt = write(tmp_path, with_change("ami.ssm_parameter", "/gpufleet/ami/p5-cuda13"))
    assert main(["validate", str(unbuilt)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{unbuilt}: ami.ssm_parameter: /gpufleet/ami/p5-cuda13 is not published in us-east-1")
