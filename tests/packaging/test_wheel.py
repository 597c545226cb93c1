"""gpufleet installed from its wheel (as the AMI pipeline's `pip install --no-deps .` does) finds its data: the
wheel ships ami/ and scripts/ inside the package, and the console script checks and renders every shipped profile
from a directory that is not the repository."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.ami.contract import SCRIPTS_IN_RUN_ORDER

REPOSITORY = Path(__file__).resolve().parents[2]
PROFILES = sorted(path.stem for path in (REPOSITORY / "ami" / "profiles").glob("*.yaml"))
# What `gpufleet ami render` writes, in the order it lists them: ami/packer's five files, then the variables file.
RENDERED_FILES = [
    "variables.pkr.hcl",
    "locals.pkr.hcl",
    "source.pkr.hcl",
    "build.pkr.hcl",
    "plugins.pkr.hcl",
    "gpufleet.auto.pkrvars.json",
]


def _repository_files(top: str) -> set[str]:
    """The files under ami/ or scripts/ the wheel ships: all but hidden ones (tool settings such as .shellcheckrc)."""
    return {
        f"gpufleet/data/{path.relative_to(REPOSITORY)}"
        for path in (REPOSITORY / top).rglob("*")
        if path.is_file() and not path.name.startswith(".") and "__pycache__" not in path.parts
    }


def test_the_shipped_profiles_are_found():
    assert PROFILES == [
        "al2023-cuda13",
        "p4d-al2-cuda11",
        "p4d-ubuntu1804-cuda11",
        "ubuntu2204-cuda12",
        "ubuntu2404-cuda13",
    ]


def test_the_wheel_holds_every_file_of_ami_and_scripts(installed_wheel):
    names = set(zipfile.ZipFile(installed_wheel.wheel).namelist())
    assert {
        "gpufleet/data/ami/profiles/p4d-ubuntu1804-cuda11.yaml",
        "gpufleet/data/ami/compatibility.yaml",
        "gpufleet/data/ami/pipeline.yaml",
        "gpufleet/data/scripts/ami/lib/common.sh",
        "gpufleet/data/scripts/node/run-setup.sh",
        "gpufleet/data/scripts/pipeline/publish-image.sh",
    } <= names
    shipped = {name for name in names if name.startswith("gpufleet/data/")}
    assert shipped == _repository_files("ami") | _repository_files("scripts")


def test_the_wheel_declares_its_license_as_an_spdx_expression(installed_wheel):
    # pyproject's license = "Apache-2.0" (PEP 639), read by setuptools 77.0.0 and newer: the core metadata field is
    # License-Expression (https://setuptools.pypa.io/en/latest/history.html#v77-0-0).
    wheel = zipfile.ZipFile(installed_wheel.wheel)
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    assert "License-Expression: Apache-2.0" in wheel.read(metadata).decode().splitlines()


def test_gpufleet_is_imported_from_the_wheel_and_reads_its_own_data(installed_wheel):
    package = installed_wheel.site_packages / "gpufleet"
    assert installed_wheel.attribute("gpufleet", "__file__") == str(package / "__init__.py")
    assert installed_wheel.attribute("gpufleet.ami", "PROFILES_DIR") == str(package / "data" / "ami" / "profiles")
    assert installed_wheel.attribute("gpufleet.ami", "SCRIPTS_DIR") == str(package / "data" / "scripts" / "ami")
    assert installed_wheel.attribute("gpufleet.user_data", "SCRIPTS_DIR") == str(package / "data" / "scripts" / "node")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_console_script_checks_and_renders_every_shipped_profile(installed_wheel, tmp_path, profile):
    check = installed_wheel.run("ami", "check", profile, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    render = installed_wheel.run("ami", "render", profile, "--out", "rendered", cwd=tmp_path)
    assert render.returncode == 0, render.stderr
    out_dir = tmp_path / "rendered"
    assert sorted(path.name for path in out_dir.iterdir()) == sorted(RENDERED_FILES)
    assert render.stdout.splitlines() == [f"rendered/{name}" for name in RENDERED_FILES]
    # The rendering points Packer at the scripts installed with the wheel, which are all there.
    scripts_dir = installed_wheel.site_packages / "gpufleet" / "data" / "scripts" / "ami"
    assert json.loads((out_dir / "gpufleet.auto.pkrvars.json").read_text())["scripts_dir"] == str(scripts_dir)
    assert tuple(sorted(path.name for path in scripts_dir.glob("*.sh"))) == SCRIPTS_IN_RUN_ORDER
    assert (scripts_dir / "lib" / "common.sh").is_file()


@pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not on PATH (make setup installs it)")
def test_packer_validates_against_the_scripts_installed_with_the_wheel(installed_wheel, tmp_path):
    result = installed_wheel.run("ami", "validate", "p4d-ubuntu1804-cuda11", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "p4d-ubuntu1804-cuda11: valid"


def test_the_console_script_reads_environments_from_the_current_directory(installed_wheel, tmp_path):
    (tmp_path / "environments").mkdir()
    shutil.copy(REPOSITORY / "environments" / "dev.yaml", tmp_path / "environments")
    result = installed_wheel.run("validate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{tmp_path}/environments/dev.yaml: ok (dev: 2 x p4d.24xlarge in us-east-1a)\n"


def test_the_console_script_writes_the_eks_flavours_mpijob(installed_wheel, tmp_path):
    """gpufleet.k8s ships in the wheel: `gpufleet k8s nccl-test` as an installed user runs it."""
    (tmp_path / "environments").mkdir()
    shutil.copy(REPOSITORY / "environments" / "p5-eks.yaml", tmp_path / "environments")
    result = installed_wheel.run("k8s", "nccl-test", "p5-eks", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    job = yaml.safe_load(result.stdout)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert job["spec"]["slotsPerWorker"] == 8


def test_the_console_script_explains_the_run_command(installed_wheel, tmp_path):
    result = installed_wheel.run("run", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--torchrun" in result.stdout
