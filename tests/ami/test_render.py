"""Rendering: golden files of the reference profile, Packer expressions surviving Jinja, the contract's scripts.

Golden files live in tests/ami/golden/<profile>/. After an intended template or profile change, regenerate them
with `GPUFLEET_UPDATE_GOLDEN=1 .venv/bin/pytest tests/ami/test_render.py` and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import hcl2
import pytest
from hcl2.utils import SerializationOptions

from gpufleet.ami import COMPONENT_KEYS, SCRIPT_NAMES, SCRIPTS_DIR, SSM_AGENT_ACTIONS
from gpufleet.ami.profile import load_profile
from gpufleet.ami.render import (
    AMAZON_PLUGIN_VERSION,
    PLUGINS_FILE,
    RENDERED_FILES,
    hcl_literal,
    render_files,
    render_profile,
)
from gpufleet.cli import main

GOLDEN_DIR = Path(__file__).parent / "golden"
# Plain values: no comments or block markers, strings without their quotes.
HCL_OPTIONS = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
REFERENCE = "p4d-ubuntu1804-cuda11"
SHIPPED = ["p4d-al2-cuda11", "p4d-ubuntu1804-cuda11", "ubuntu2204-cuda12"]


def test_golden_files(tmp_path):
    out_dir = tmp_path / REFERENCE
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir)]) == 0
    golden = GOLDEN_DIR / REFERENCE
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        golden.mkdir(parents=True, exist_ok=True)
        for path in out_dir.iterdir():
            (golden / path.name).write_text(path.read_text())
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(p.name for p in golden.iterdir())
    for path in sorted(out_dir.iterdir()):
        assert path.read_text() == (golden / path.name).read_text(), f"{path.name} differs from the golden file"


@pytest.mark.parametrize("name", SHIPPED)
def test_rendering_is_deterministic(name):
    profile = load_profile(name)
    assert render_files(profile) == render_files(profile)


def _parsed(name: str, packer_1_6: bool = False) -> dict[str, dict]:
    files = render_files(load_profile(name), packer_1_6)
    return {file: hcl2.loads(text, serialization_options=HCL_OPTIONS) for file, text in files.items()}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_rendered_file_is_hcl2(name):
    assert sorted(_parsed(name)) == sorted(RENDERED_FILES)


def test_plugins_file_holds_only_the_pinned_amazon_plugin():
    plugins = _parsed(REFERENCE)[PLUGINS_FILE]
    assert list(plugins) == ["packer"]
    (packer,) = plugins["packer"]
    assert list(packer) == ["required_plugins"]
    (required,) = packer["required_plugins"]
    assert required == {"amazon": {"version": f"= {AMAZON_PLUGIN_VERSION}", "source": "github.com/hashicorp/amazon"}}


def test_packer_1_6_rendering_leaves_out_only_what_it_cannot_parse():
    full = render_files(load_profile(REFERENCE))
    legacy = render_files(load_profile(REFERENCE), packer_1_6=True)
    assert PLUGINS_FILE not in legacy and PLUGINS_FILE in full
    assert "metadata_options" in full["source.pkr.hcl"] and "metadata_options" not in legacy["source.pkr.hcl"]
    assert {name: text for name, text in full.items() if name not in (PLUGINS_FILE, "source.pkr.hcl")} == {
        name: text for name, text in legacy.items() if name != "source.pkr.hcl"}


def test_source_block_security_settings():
    (source,) = _parsed(REFERENCE)["source.pkr.hcl"]["source"]
    ebs = source["amazon-ebs"]["gpufleet"]
    assert ebs["metadata_options"] == [{"http_endpoint": "enabled", "http_tokens": "required",
                                        "http_put_response_hop_limit": 1}]
    assert ebs["encrypt_boot"] is True
    (volume,) = ebs["launch_block_device_mappings"]
    assert volume["encrypted"] is True and volume["volume_type"] == "gp3"
    assert volume["iops"] == "${var.root_volume_iops}" and volume["throughput"] == "${var.root_volume_throughput}"
    assert ebs["ssh_interface"] == "session_manager"
    for key in ("tags", "snapshot_tags", "run_tags"):
        assert "local.image_tags" in ebs[key]


def test_tags_carry_profile_and_every_component_version():
    (locals_block,) = _parsed(REFERENCE)["locals.pkr.hcl"]["locals"]
    tags = locals_block["image_tags"]
    assert tags["gpufleet:profile"] == "${var.profile}"
    assert tags["gpufleet:build-id"] == "${var.build_id}"
    for key in COMPONENT_KEYS:
        assert tags[f"gpufleet:version:{key}"] == f'${{var.component_versions["{key}"]}}'


def test_variables_are_typed_described_and_default_to_the_profile():
    variables = {}
    for block in _parsed(REFERENCE)["variables.pkr.hcl"]["variable"]:
        variables.update(block)
    for name, body in variables.items():
        assert {"type", "description", "default"} <= set(body), name
    profile = load_profile(REFERENCE)
    assert variables["component_versions"]["default"] == profile.versions()
    assert variables["component_urls"]["default"]["fabric_manager"] == ""
    assert variables["component_sha256"]["default"]["driver"] == ""
    assert variables["nvswitch"]["default"] is True
    assert variables["source_ami_owner"]["default"] == "099720109477"


def test_script_environment_is_the_contract():
    (locals_block,) = _parsed(REFERENCE)["locals.pkr.hcl"]["locals"]
    names = [entry.split("=", 1)[0] for entry in locals_block["script_environment"]]
    expected = ["GPUFLEET_PROFILE", "GPUFLEET_OS_FAMILY", "GPUFLEET_OS_VERSION", "GPUFLEET_NVSWITCH",
                "GPUFLEET_LIB_DIR"]
    for key in COMPONENT_KEYS:
        expected += [f"GPUFLEET_{key.upper()}_{suffix}" for suffix in ("VERSION", "URL", "SHA256", "GPG_KEY_URL")]
    # Then every package key of ami/packages.yaml, in the data file's order.
    for key in ("fabric_manager", "cudnn", "cudnn_dev", "fsx_lustre", "container_toolkit", "container_runtime"):
        expected += [f"GPUFLEET_{key.upper()}_{suffix}"
                     for suffix in ("PACKAGE", "PACKAGE_VERSION", "REPOSITORIES", "EXTRAS_TOPIC")]
    assert names == expected


def test_package_environment_reaches_the_scripts_through_a_variable():
    (locals_block,) = _parsed(REFERENCE)["locals.pkr.hcl"]["locals"]
    assert "GPUFLEET_FABRIC_MANAGER_PACKAGE=${var.package_environment[\"GPUFLEET_FABRIC_MANAGER_PACKAGE\"]}" in (
        locals_block["script_environment"])
    variables = {}
    for block in _parsed("p4d-al2-cuda11")["variables.pkr.hcl"]["variable"]:
        variables.update(block)
    default = variables["package_environment"]["default"]
    assert default["GPUFLEET_FABRIC_MANAGER_PACKAGE"] == "nvidia-fabricmanager-450"
    assert default["GPUFLEET_CUDNN_PACKAGE_VERSION"] == "8.0.5.39-1.cuda11.0"
    assert default["GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC"] == "lustre2.10"


def test_build_runs_the_contract_scripts_in_order_with_the_reboot_barrier():
    (build,) = _parsed(REFERENCE)["build.pkr.hcl"]["build"]
    steps = [step["shell"] for step in build["provisioner"] if "shell" in step and "script" in step["shell"]]
    assert [step["script"] for step in steps] == [f"${{var.scripts_dir}}/{name}" for name in SCRIPT_NAMES]
    for index, (name, step) in enumerate(zip(SCRIPT_NAMES, steps, strict=True)):
        assert step["execute_command"] == "{{ .Vars }} sudo -E bash '{{ .Path }}'"
        assert step["environment_vars"] == "${local.script_environment}"
        assert step.get("expect_disconnect", False) is name.endswith("-reboot.sh")
        after_reboot = index > 0 and SCRIPT_NAMES[index - 1].endswith("-reboot.sh")
        assert ("pause_before" in step) is after_reboot
    (manifest,) = [p["manifest"] for p in build["post-processor"]]
    assert manifest["custom_data"]["profile"] == "${var.profile}"
    assert set(manifest["custom_data"]) == {"profile", "build_id"} | {f"version:{key}" for key in COMPONENT_KEYS}


def test_packer_expressions_survive_jinja():
    files = render_files(load_profile(REFERENCE))
    assert "execute_command   = \"{{ .Vars }} sudo -E bash '{{ .Path }}'\"" in files["build.pkr.hcl"]
    assert '"gpufleet:source-ami" = "{{ .SourceAMI }}"' in files["source.pkr.hcl"]
    assert 'ami_name        = "gpufleet-${var.profile}-${local.build_stamp}"' in files["source.pkr.hcl"]
    assert '"GPUFLEET_NVSWITCH=${var.nvswitch ? "1" : "0"}"' in files["locals.pkr.hcl"]
    for text in files.values():
        assert "[[" not in text and "[%" not in text


@pytest.mark.parametrize(("value", "literal"), [
    ("plain", '"plain"'),
    ("has ${var.x} and %{ if }", '"has $${var.x} and %%{ if }"'),
    ('quote " and \\', '"quote \\" and \\\\"'),
    (True, "true"),
    (250, "250"),
])
def test_profile_values_cannot_inject_hcl_templates(value, literal):
    assert hcl_literal(value) == literal


def test_render_replaces_an_earlier_render_but_not_foreign_files(tmp_path, capsys):
    out_dir = tmp_path / "out"
    render_profile(load_profile(REFERENCE), out_dir)
    render_profile(load_profile("ubuntu2204-cuda12"), out_dir)
    assert '"ubuntu2204-cuda12"' in (out_dir / "variables.pkr.hcl").read_text()
    (out_dir / "notes.txt").write_text("mine")
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir)]) == 1
    assert capsys.readouterr().err.strip() == (f"{out_dir}: holds files a render did not write (notes.txt): "
                                               "choose an empty or new directory")
    assert '"ubuntu2204-cuda12"' in (out_dir / "variables.pkr.hcl").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.skipif(not SCRIPTS_DIR.is_dir(), reason="scripts/ami/ does not exist yet (written by another engineer)")
def test_contract_script_names_match_scripts_ami():
    assert tuple(sorted(path.name for path in SCRIPTS_DIR.glob("*.sh"))) == SCRIPT_NAMES


BUILD_INSTANCE_PROFILE = "gpufleet-ami-build"


def test_instance_profile_replaces_the_temporary_one_and_nothing_else():
    default = render_files(load_profile(REFERENCE))
    with_profile = render_files(load_profile(REFERENCE), instance_profile=BUILD_INSTANCE_PROFILE)
    (source,) = hcl2.loads(with_profile["source.pkr.hcl"], serialization_options=HCL_OPTIONS)["source"]
    ebs = source["amazon-ebs"]["gpufleet"]
    assert ebs["iam_instance_profile"] == BUILD_INSTANCE_PROFILE
    assert "temporary_iam_instance_profile_policy_document" not in ebs
    assert "temporary_iam_instance_profile" not in with_profile["source.pkr.hcl"]
    assert {name: text for name, text in with_profile.items() if name != "source.pkr.hcl"} == {
        name: text for name, text in default.items() if name != "source.pkr.hcl"}


def test_temporary_instance_profile_grants_exactly_the_ssm_agent_actions():
    (source,) = _parsed(REFERENCE)["source.pkr.hcl"]["source"]
    (document,) = source["amazon-ebs"]["gpufleet"]["temporary_iam_instance_profile_policy_document"]
    (statement,) = document["Statement"]
    assert statement == {"Effect": "Allow", "Action": list(SSM_AGENT_ACTIONS), "Resource": ["*"]}


def test_cli_renders_the_instance_profile(tmp_path):
    out_dir = tmp_path / "out"
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir), "--instance-profile", "a+b=c,d.e@f_g-1"]) == 0
    assert '  iam_instance_profile = "a+b=c,d.e@f_g-1"\n' in (out_dir / "source.pkr.hcl").read_text()


@pytest.mark.parametrize("name", ["", "x" * 129, "has space", 'quote"', "${var.x}", "r\u00f4le", "a/b", "a\nb"])
def test_bad_instance_profile_name_is_refused_and_nothing_written(tmp_path, capsys, name):
    out_dir = tmp_path / "out"
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir), "--instance-profile", name]) == 1
    err = capsys.readouterr().err
    assert err == f"--instance-profile {name!r}: not an IAM instance profile name (1 to 128 characters: letters, " \
                  "digits and + = , . @ _ -)\n"
    assert list(tmp_path.iterdir()) == []


def test_longest_instance_profile_name_is_accepted():
    files = render_files(load_profile(REFERENCE), instance_profile="x" * 128)
    assert f'iam_instance_profile = "{"x" * 128}"' in files["source.pkr.hcl"]
