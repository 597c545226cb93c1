"""Loading configuration files: where environment files are looked for (GPUFLEET_ENVIRONMENTS_DIR, else ./environments:
the user's data, never the package's), environments by name, several files at once, and the AMI pipeline they are
checked against."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.errors import GpufleetError
from gpufleet.loading import (
    check_environments,
    environments_beside,
    environments_dir,
    load_environments,
    load_named_environment,
    load_pipeline,
    parse_environment,
)
from tests.gpufleet.environment_files import VALID, write
from tests.gpufleet.validators.test_network import NO_NAT

SHIPPED_DEV = Path(__file__).resolve().parents[2] / "environments" / "dev.yaml"
NAME_PROBLEM = "is not a valid name (lower-case letters, digits and '-', starting with a letter, at most 24 characters)"


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


def test_the_ami_pipeline_reaches_the_image_rule(tmp_path, monkeypatch):
    """dev reads /gpufleet/ami/p4d-ubuntu1804-cuda11, which ami/pipeline.yaml, its account pinned to 123456789012,
    publishes in that account only (the shipped file pins none: the deploying account builds the images)."""
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))
    path = tmp_path / "dev.yaml"
    path.write_text(SHIPPED_DEV.read_text().replace('account: "123456789012"', 'account: "210987654321"'))
    shipped = SHIPPED_DEV.parents[1] / "ami" / "pipeline.yaml"
    pinned = tmp_path / "pipeline.yaml"
    pinned.write_text(shipped.read_text().replace("account: null", 'account: "123456789012"', 1))
    pipeline = load_pipeline(pinned, SHIPPED_DEV.parents[1] / "ami" / "profiles")
    problem = (
        f"{path}: ami.ssm_parameter: /gpufleet/ami/p4d-ubuntu1804-cuda11 is published in account 123456789012 "
        "(ami/pipeline.yaml pins it), not in 210987654321 (deploy in 123456789012, remove account from "
        "ami/pipeline.yaml to build the images in the account that deploys the pipeline, or set ami.id to an image "
        "shared with 210987654321)"
    )

    assert load_named_environment("dev").account == "210987654321"
    for load in (
        lambda: load_named_environment("dev", pipeline),
        lambda: load_environments([path], pipeline),
    ):
        with pytest.raises(GpufleetError) as raised:
            load()
        assert raised.value.problems == (f"{path}: {NO_NAT}", problem)


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
        check_environments([bad_name, good, bad_target])

    # dev's warning comes with the others' errors, every line at once (a file that does not parse gets no further).
    assert raised.value.problems == (
        f"{bad_name}: name: 'Bad' {NAME_PROBLEM}",
        f"{good}: {NO_NAT}",
        f"{bad_target}: capacity.target: 0 nodes is too few (at least 1)",
    )
    assert [env.name for env in load_environments([good, good])] == ["dev", "dev"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed\n", "line 2: not valid YAML (expected ',' or ']', but got '<stream end>')"),
        ("- just\n- a list\n", "(file): expected a mapping of keys to values (see environments/README.md)"),
        ("", "(file): expected a mapping of keys to values (see environments/README.md)"),
    ],
)
def test_unreadable_files(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(GpufleetError) as raised:
        parse_environment(path)
    assert raised.value.problems == (f"{path}: {expected}",)


def test_the_environments_beside_are_the_other_files_of_each_directory_that_parse(tmp_path):
    """What a file is compared with besides the files checked with it (gpufleet.validators.cross_environment)."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    given = [write(one, {**VALID, "name": "a"}, "a"), write(two, {**VALID, "name": "c"}, "c")]
    beside = [write(one, {**VALID, "name": "b"}, "b"), write(two, {**VALID, "name": "d"}, "d")]
    write(one, "name: [", "broken")
    (two / "folder.yaml").mkdir()
    (two / "notes.txt").write_text("not yaml")
    assert [(path, env.name) for path, env in environments_beside([*given, one / ".." / "one" / "a.yaml"])] == [
        (beside[0], "b"),
        (beside[1], "d"),
    ]
    assert environments_beside([]) == []
