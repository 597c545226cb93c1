"""Where gpufleet looks for environment files: GPUFLEET_ENVIRONMENTS_DIR, else ./environments (the user's data,
never the package's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
