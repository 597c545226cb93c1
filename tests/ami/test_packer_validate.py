"""The real packer (Debian's 1.6.6 here) on the build directories: `packer fmt -check`, `packer validate` and
`packer inspect`, directly and through `gpufleet ami validate`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
from hcl2.utils import SerializationOptions

from gpufleet.ami import SCRIPTS_DIR
from gpufleet.ami.packer import (
    NEWER_PACKER_ONLY,
    REQUIRED_PLUGINS_SINCE,
    find_packer,
    leave_out_newer_constructs,
    packer_version,
    run_packer_validate,
    without_construct,
)
from gpufleet.ami.profile import load_profile, parse_profile, profile_files
from gpufleet.ami.render import render_profile
from gpufleet.cli import main
from gpufleet.errors import GpufleetError
from tests.ami.contract import COMPONENTS, SCRIPTS_IN_RUN_ORDER

pytestmark = pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not on PATH (make setup installs it)")
SHIPPED = [path.stem for path in profile_files()]
REFERENCE = "p4d-ubuntu1804-cuda11"
HCL_OPTIONS = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)


@pytest.fixture
def scripts_dir(tmp_path: Path) -> Path:
    """scripts/ami when it exists; before it does, empty stand-ins named as the contract fixes (Packer only checks
    that each script file exists)."""
    if SCRIPTS_DIR.is_dir():
        return SCRIPTS_DIR
    stand_ins = tmp_path / "scripts"
    (stand_ins / "lib").mkdir(parents=True)
    for name in SCRIPTS_IN_RUN_ORDER:
        (stand_ins / name).touch()
    return stand_ins


@pytest.fixture(scope="module")
def packer() -> str:
    return find_packer()


@pytest.fixture(scope="module")
def packer_1_6(packer: str) -> bool:
    return packer_version(packer) < REQUIRED_PLUGINS_SINCE


def _build_dir(tmp_path: Path, packer_1_6: bool, profile_path: Path | None = None, name: str = REFERENCE) -> Path:
    """A build directory as this packer can read it: NEWER_PACKER_ONLY left out below 1.7."""
    profile = parse_profile(profile_path) if profile_path else load_profile(name)
    out_dir = tmp_path / "build" / profile.name
    render_profile(profile, out_dir)
    if packer_1_6:
        leave_out_newer_constructs(out_dir)
    return out_dir


def _inspected(packer: str, out_dir: Path) -> dict[str, str]:
    """`packer inspect` output: var.NAME / local.NAME -> value (Packer prints Go-quoted strings, HCL inside)."""
    result = subprocess.run([packer, "inspect", str(out_dir)], capture_output=True, text=True, check=True)
    return {
        match[1]: json.loads(match[2])
        for match in re.finditer(r'^((?:var|local)\.\w+): (".*")$', result.stdout, re.MULTILINE)
    }


def _hcl_value(text: str) -> object:
    return hcl2.loads(f"value = {text}\n", serialization_options=HCL_OPTIONS)["value"]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_build_directory_is_formatted_and_valid(tmp_path, packer, packer_1_6, scripts_dir, name):
    out_dir = tmp_path / name
    render_profile(load_profile(name), out_dir)
    fmt = subprocess.run([packer, "fmt", "-check", str(out_dir)], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    if packer_1_6:
        leave_out_newer_constructs(out_dir)
    result = run_packer_validate(packer, out_dir, scripts_dir)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", SHIPPED)
def test_gpufleet_ami_validate_passes(capsys, packer_1_6, scripts_dir, name):
    assert main(["ami", "validate", name, "--scripts-dir", str(scripts_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(
        ": validating variables.pkr.hcl, locals.pkr.hcl, source.pkr.hcl, build.pkr.hcl, "
        "plugins.pkr.hcl, gpufleet.auto.pkrvars.json"
    )
    if packer_1_6:
        assert lines[1] == (
            "note: packer 1.6.6 (amazon builder built in) does not know these, left out here: "
            "required_plugins (plugins.pkr.hcl), include_deprecated (source.pkr.hcl), "
            "metadata_options (source.pkr.hcl), imds_support (source.pkr.hcl); Packer >= 1.7 with "
            "the pinned amazon plugin validates every line"
        )
    assert lines[-1] == f"{name}: valid"


def test_the_constructs_left_out_for_packer_1_6_are_exactly_these():
    assert [(construct.file, construct.name) for construct in NEWER_PACKER_ONLY] == [
        ("plugins.pkr.hcl", "required_plugins"),
        ("source.pkr.hcl", "include_deprecated"),
        ("source.pkr.hcl", "metadata_options"),
        ("source.pkr.hcl", "imds_support"),
    ]
    for construct in NEWER_PACKER_ONLY:
        assert construct.source.startswith(("packer-plugin-amazon v1.3.3 ", "hashicorp/packer v1.7.0 ")), construct


@pytest.mark.parametrize("construct", NEWER_PACKER_ONLY, ids=lambda construct: construct.name)
def test_each_left_out_construct_is_one_packer_1_6_rejects(tmp_path, packer, packer_1_6, scripts_dir, construct):
    """With every other construct left out and this one kept, Packer 1.6.6 fails on exactly this one."""
    if not packer_1_6:
        pytest.skip("only Packer < 1.7 rejects these")
    out_dir = tmp_path / REFERENCE
    render_profile(load_profile(REFERENCE), out_dir)
    for other in NEWER_PACKER_ONLY:
        if other != construct:
            path = out_dir / other.file
            path.write_text(without_construct(path.read_text(), other.name))
    result = run_packer_validate(packer, out_dir, scripts_dir)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert re.findall(r'(?:argument named|Blocks of type) "(\w+)"', output) == [construct.name], output


def test_without_construct_removes_one_attribute_or_block():
    text = "a {\n  x = 1\n  b {\n    y = 2\n  }\n  c = 3\n}\n"
    assert without_construct(text, "b") == "a {\n  x = 1\n  c = 3\n}\n"
    assert without_construct(text, "c") == "a {\n  x = 1\n  b {\n    y = 2\n  }\n}\n"


@pytest.mark.parametrize("text", ["a = 1\n", "b = 1\nb = 2\n", "b {\n}\nb = 1\n"])
def test_without_construct_refuses_anything_but_exactly_one(text):
    with pytest.raises(GpufleetError, match="NEWER_PACKER_ONLY in gpufleet/ami/packer.py no longer fits ami/packer"):
        without_construct(text, "b")


def test_packer_1_6_auto_loads_the_variables_file_and_reads_the_locals(tmp_path, packer, packer_1_6):
    values = _inspected(packer, _build_dir(tmp_path, packer_1_6))
    assert values["var.profile"] == REFERENCE
    assert values["var.nvswitch"] == "true"
    assert values["var.instance_profile"] == ""
    environment = _hcl_value(values["local.script_environment"])
    assert environment[:6] == [
        "GPUFLEET_AMI_PROFILE=p4d-ubuntu1804-cuda11",
        "GPUFLEET_OS_FAMILY=ubuntu",
        "GPUFLEET_OS_VERSION=18.04",
        "GPUFLEET_NVSWITCH=1",
        "GPUFLEET_CUDA_ARCHITECTURES=80",
        "GPUFLEET_LIB_DIR=/var/tmp/gpufleet-lib",
    ]
    expected = {
        f"GPUFLEET_{key.upper()}_{setting}"
        for key in COMPONENTS
        for setting in ("VERSION", "URL", "SHA256", "GPG_KEY_URL", "GPG_KEY_FINGERPRINT")
    }
    expected |= {
        f"GPUFLEET_{key}_{setting}"
        for key in ("FABRIC_MANAGER", "CUDNN", "CUDNN_DEV", "FSX_LUSTRE", "CONTAINER_TOOLKIT", "CONTAINER_RUNTIME")
        for setting in ("PACKAGE", "PACKAGE_VERSION", "REPOSITORIES", "EXTRAS_TOPIC")
    }
    # The profile's python section (gpufleet/ami/render.py python_environment).
    expected |= {f"GPUFLEET_UV_{setting}" for setting in ("VERSION", "URL", "SHA256")}
    expected |= {f"GPUFLEET_PYTORCH_{setting}" for setting in ("VERSION", "INDEX_URL", "PYTHON")}
    names = [entry.split("=", 1)[0] for entry in environment[6:]]
    assert sorted(names) == sorted(expected) and len(names) == len(expected)
    assert "GPUFLEET_FABRIC_MANAGER_PACKAGE=nvidia-fabricmanager-450" in environment
    assert "GPUFLEET_DRIVER_VERSION=450.80.02" in environment
    assert "GPUFLEET_FABRIC_MANAGER_URL=" in environment
    assert "GPUFLEET_EFA_INSTALLER_GPG_KEY_URL=https://efa-installer.amazonaws.com/aws-efa-installer.key" in environment
    assert "GPUFLEET_AWS_CLI_GPG_KEY_FINGERPRINT=FB5DB77FD5C118B80511ADA8A6310ACC4672475C" in environment
    tags = _hcl_value(values["local.image_tags"])
    assert tags == {
        "Name": "gpufleet-p4d-ubuntu1804-cuda11",
        "gpufleet:profile": REFERENCE,
        "gpufleet:build-id": "local",
        **{f"gpufleet:version:{key}": version for key, version in load_profile(REFERENCE).versions().items()},
    }


def test_template_sequences_quotes_and_backslashes_in_a_profile_survive(
    tmp_path, packer, packer_1_6, scripts_dir, write_profile
):
    description = 'has ${var.profile}, %{ if true }x%{ endif }, $${a}, "quotes" and back\\slash \\n'
    path = write_profile("tricky", {"description": description})
    out_dir = _build_dir(tmp_path, packer_1_6, profile_path=path)
    result = run_packer_validate(packer, out_dir, scripts_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _inspected(packer, out_dir)["var.profile_description"] == description


def test_command_line_variables_override_the_variables_file(tmp_path, packer, packer_1_6):
    out_dir = _build_dir(tmp_path, packer_1_6)
    result = subprocess.run(
        [packer, "inspect", "-var", "build_instance_type=c5.xlarge", str(out_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert 'var.build_instance_type: "c5.xlarge"' in result.stdout.splitlines()


def test_packer_validate_fails_for_real(capsys, tmp_path):
    assert main(["ami", "validate", "ubuntu2204-cuda12", "--scripts-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "ubuntu2204-cuda12: INVALID"
    # packer wraps its messages at 80 columns: look for the pieces.
    assert "Bad script" in captured.err and "00-os-update.sh" in captured.err


def test_missing_packer_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["ami", "validate", "ubuntu2204-cuda12"]) == 1
    assert capsys.readouterr().err.startswith("packer not found on PATH: install Packer")


def test_packer_validate_passes_with_an_instance_profile(capsys, scripts_dir):
    assert (
        main(
            [
                "ami",
                "validate",
                REFERENCE,
                "--scripts-dir",
                str(scripts_dir),
                "--instance-profile",
                "gpufleet-ami-build",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines()[-1] == f"{REFERENCE}: valid"


@pytest.mark.parametrize("attribute", ["iam_instance_profile", "iam_instance_profil"])
def test_packer_checks_the_source_block_attributes(tmp_path, packer, packer_1_6, scripts_dir, attribute):
    """iam_instance_profile with the temporary policy document beside it is valid; the misspelt attribute is
    rejected, which shows this packer does check the source block's attributes."""
    out_dir = _build_dir(tmp_path, packer_1_6)
    source = out_dir / "source.pkr.hcl"
    text = source.read_text()
    assert text.count("  iam_instance_profile = var.instance_profile\n") == 1
    source.write_text(text.replace("iam_instance_profile =", f"{attribute} =", 1))
    result = run_packer_validate(packer, out_dir, scripts_dir)
    output = result.stdout + result.stderr
    if attribute == "iam_instance_profile":
        assert result.returncode == 0, output
    else:
        assert result.returncode != 0 and attribute in output
