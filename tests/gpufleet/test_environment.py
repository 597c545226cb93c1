"""Where gpufleet looks for environment files: GPUFLEET_ENVIRONMENTS_DIR, else ./environments (the user's data,
never the package's)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import TypeAdapter

from gpufleet import environment
from gpufleet.ami.pipeline import load_pipeline
from gpufleet.cli import main
from gpufleet.environment import environments_dir, load_named_environment
from gpufleet.errors import GpufleetError

SHIPPED_DEV = Path(__file__).resolve().parents[2] / "environments" / "dev.yaml"


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("GPUFLEET_ENVIRONMENTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_environments_are_read_from_the_current_directory(elsewhere, capsys):
    (elsewhere / "environments").mkdir()
    shutil.copy(SHIPPED_DEV, elsewhere / "environments" / "dev.yaml")
    assert environments_dir() == elsewhere / "environments"
    assert main(["validate"]) == 0
    assert capsys.readouterr().out == f"{elsewhere}/environments/dev.yaml: ok (dev: 2 x p4d.24xlarge in us-east-1a)\n"


def test_the_variable_names_another_directory(elsewhere, monkeypatch):
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", "/srv/fleet")
    assert environments_dir() == Path("/srv/fleet")


def test_no_environments_here_says_where_they_are_looked_for(elsewhere, capsys):
    assert main(["validate"]) == 1
    assert capsys.readouterr().err == (
        f"{elsewhere}/environments: no environment files (*.yaml) found (run gpufleet "
        "where environments/ is, or set GPUFLEET_ENVIRONMENTS_DIR)\n"
    )
    with pytest.raises(GpufleetError) as raised:
        load_named_environment("dev")
    assert raised.value.problems == (
        f"{elsewhere}/environments/dev.yaml: unknown environment 'dev' (known: none; run gpufleet where "
        "environments/ is, or set GPUFLEET_ENVIRONMENTS_DIR)",
    )


# The rules about one field alone (gpufleet/environment.py): each bound on both sides, each message word for word.
TAG_PROBLEM = "not a usable tag (keys 1-128 characters, not starting with aws:, values at most 256 characters)"
NAME_PROBLEM = "is not a valid name (lower-case letters, digits and '-', starting with a letter, at most 24 characters)"
SIZES = "the VPC holds a node subnet, endpoint addresses and, with NAT, a public subnet"
ROOT_VOLUME = "GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)"
ROOT_DEVICE = "is not a root device name (/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)"
FIELD_RULES = [
    (environment._name_problem, "a", None),
    (environment._name_problem, "a23456789012345678901234", None),
    (environment._name_problem, "a234567890123456789012345", f"'a234567890123456789012345' {NAME_PROBLEM}"),
    (environment._name_problem, "9lab", f"'9lab' {NAME_PROBLEM}"),
    (environment._name_problem, "Lab", f"'Lab' {NAME_PROBLEM}"),
    (environment._cidr_problem, "10.40.0.0/16", None),
    (environment._cidr_problem, "10.40.0.0/24", None),
    (environment._cidr_problem, "10.40.0.0/15", f"/15 is outside the sizes allowed (/16 to /24: {SIZES})"),
    (environment._cidr_problem, "10.40.0.0/25", f"/25 is outside the sizes allowed (/16 to /24: {SIZES})"),
    (
        environment._cidr_problem,
        "10.40.0.1/16",
        "'10.40.0.1/16' is not an IPv4 network in CIDR notation (10.40.0.1/16 has host bits set; e.g. 10.40.0.0/16)",
    ),
    (environment._target_problem, 1, None),
    (environment._target_problem, 0, "0 nodes is too few (at least 1)"),
    (environment._termination_delay_problem, 119, "119 is out of range (120 to 7200)"),
    (environment._termination_delay_problem, 120, None),
    (environment._termination_delay_problem, 7200, None),
    (environment._termination_delay_problem, 7201, "7201 is out of range (120 to 7200)"),
    (environment._ssm_parameter_problem, "/gpufleet/ami/p4d-ubuntu2204", None),
    (
        environment._ssm_parameter_problem,
        "gpufleet/ami",
        "'gpufleet/ami' is not an SSM parameter name (a path such as /gpufleet/ami/p4d-ubuntu2204)",
    ),
    (environment._root_device_problem, "/dev/sda1", None),
    (environment._root_device_problem, "/dev/xvda", None),
    (environment._root_device_problem, "/dev/nvme0n1", None),
    (environment._root_device_problem, "/dev/sdb", f"'/dev/sdb' {ROOT_DEVICE}"),
    (environment._root_device_problem, "/dev/SDA1", f"'/dev/SDA1' {ROOT_DEVICE}"),
    (environment._root_volume_problem, 49, f"49 {ROOT_VOLUME}"),
    (environment._root_volume_problem, 50, None),
    (environment._root_volume_problem, 16384, None),
    (environment._root_volume_problem, 16385, f"16385 {ROOT_VOLUME}"),
    (environment._scratch_mount_problem, "/scratch", None),
    (environment._scratch_mount_problem, "scratch", "'scratch' is not an absolute path (e.g. /scratch)"),
    (environment._fallback_minutes_problem, 5, None),
    (
        environment._fallback_minutes_problem,
        4,
        "4 is shorter than the fallback's check interval (at least 5: the fleet is checked every 5 minutes)",
    ),
    (environment._tag_key_problem, "k", None),
    (environment._tag_key_problem, "team", None),
    (environment._tag_key_problem, "k" * 128, None),
    (environment._tag_key_problem, "k" * 129, TAG_PROBLEM),
    (environment._tag_key_problem, "", TAG_PROBLEM),
    (environment._tag_key_problem, "aws:team", TAG_PROBLEM),
    (environment._tag_key_problem, "AWS:team", TAG_PROBLEM),
    (environment._tag_value_problem, "", None),
    (environment._tag_value_problem, "v" * 256, None),
    (environment._tag_value_problem, "v" * 257, TAG_PROBLEM),
]


@pytest.mark.parametrize(("rule", "value", "problem"), FIELD_RULES)
def test_field_rule(rule, value, problem):
    assert rule(value) == problem


@pytest.mark.parametrize(
    ("prefix", "value", "problem"),
    [
        ("ami", "ami-0123abcd", None),
        ("ami", "ami-0123456789abcdef0", None),
        ("ami", "ami-0123ABCD", "'ami-0123ABCD' is not an AMI id (ami- followed by 8 or 17 hex digits)"),
        ("ami", "ami-0123abc", "'ami-0123abc' is not an AMI id (ami- followed by 8 or 17 hex digits)"),
        ("vpc", "vpc-0123abcd", None),
        ("vpc", "subnet-0123abcd", "'subnet-0123abcd' is not a vpc id (vpc- followed by 8 or 17 hex digits)"),
    ],
)
def test_an_ec2_resource_id_is_its_prefix_and_8_or_17_hex_digits(prefix, value, problem):
    """The rule is built in the test, not while collecting: mutmut sets its mutant only when the test runs."""
    assert environment._resource_id_problem(prefix)(value) == problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [("cr-0123456789abcdef0", None), ("cr-x", "'cr-x' is not a Capacity Reservation id (e.g. cr-0123456789abcdef0)")],
)
def test_a_pattern_rule_names_what_was_expected_and_an_example(value, problem):
    rule = environment._matching(
        "a Capacity Reservation id", environment.CAPACITY_RESERVATION_ID, "cr-0123456789abcdef0"
    )
    adapter = TypeAdapter(Annotated[str, rule])
    if problem is None:
        assert adapter.validate_python(value) == value
    else:
        with pytest.raises(ValueError, match=re.escape(problem)):
            adapter.validate_python(value)


def test_the_ami_pipeline_reaches_the_image_rule(tmp_path, monkeypatch):
    """dev reads /gpufleet/ami/p4d-ubuntu1804-cuda11, which ami/pipeline.yaml publishes in account 123456789012."""
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))
    path = tmp_path / "dev.yaml"
    path.write_text(SHIPPED_DEV.read_text().replace('account: "123456789012"', 'account: "210987654321"'))
    pipeline = load_pipeline(SHIPPED_DEV.parents[1] / "ami" / "pipeline.yaml")
    problem = (
        f"{path}: ami.ssm_parameter: /gpufleet/ami/p4d-ubuntu1804-cuda11 is published in account 123456789012, "
        "not in 210987654321 (deploy in 123456789012, or set ami.id to an image shared with 210987654321)"
    )

    assert load_named_environment("dev").account == "210987654321"
    for load in (
        lambda: load_named_environment("dev", pipeline),
        lambda: environment.load_environments([path], pipeline),
    ):
        with pytest.raises(GpufleetError) as raised:
            load()
        assert raised.value.problems == (problem,)


@pytest.mark.parametrize(
    ("reservation_id", "problem"),
    [
        ("cr-0123456789abcdef0", None),
        ("cr-0123456789abcdef", "'cr-0123456789abcdef' is not a Capacity Reservation id (e.g. cr-0123456789abcdef0)"),
    ],
)
def test_a_capacity_reservation_id_is_cr_and_17_hex_digits(reservation_id, problem):
    if problem is None:
        assert environment.CapacityBlock(reservation_id=reservation_id).reservation_id == reservation_id
    else:
        with pytest.raises(ValueError, match=re.escape(problem)):
            environment.CapacityBlock(reservation_id=reservation_id)


def test_an_unknown_environment_names_the_known_ones(tmp_path, monkeypatch):
    (tmp_path / "dev.yaml").write_text(SHIPPED_DEV.read_text())
    (tmp_path / "prod.yaml").write_text(SHIPPED_DEV.read_text().replace("name: dev", "name: prod"))
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))

    with pytest.raises(GpufleetError) as raised:
        load_named_environment("staging")

    assert raised.value.problems == (f"{tmp_path}/staging.yaml: unknown environment 'staging' (known: dev, prod)",)
    assert load_named_environment("prod").name == "prod"


def test_several_files_report_every_problem_of_every_file(tmp_path):
    good = tmp_path / "dev.yaml"
    good.write_text(SHIPPED_DEV.read_text())
    bad_name = tmp_path / "bad.yaml"
    bad_name.write_text(SHIPPED_DEV.read_text().replace("name: dev", "name: Bad"))
    bad_target = tmp_path / "none.yaml"
    bad_target.write_text(SHIPPED_DEV.read_text().replace("target: 2", "target: 0"))

    with pytest.raises(GpufleetError) as raised:
        environment.check_environments([bad_name, good, bad_target])

    assert raised.value.problems == (
        f"{bad_name}: name: 'Bad' {NAME_PROBLEM}",
        f"{bad_target}: capacity.target: 0 nodes is too few (at least 1)",
    )
    assert [env.name for env in environment.load_environments([good, good])] == ["dev", "dev"]
