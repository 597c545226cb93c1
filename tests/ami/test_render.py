"""The build directory: ami/packer copied as it is, the profile's values in gpufleet.auto.pkrvars.json, and what its
HCL2 files say, all of them including what only Packer >= 1.7 knows (parsed with python-hcl2;
tests/ami/test_packer_validate.py runs the real packer)."""

from __future__ import annotations

import json
from pathlib import Path

import hcl2
import pytest
from hcl2.utils import SerializationOptions

from gpufleet.ami import PACKER_DIR, SCRIPT_NAMES, SCRIPTS_DIR
from gpufleet.ami.profile import load_profile, profile_files
from gpufleet.ami.render import VARIABLES_FILE, build_files, packer_variables, render_profile
from gpufleet.cli import main
from tests.ami.contract import COMPONENTS, SCRIPTS_IN_RUN_ORDER, SSM_AGENT_ACTIONS

# Plain values: no comments or block markers, strings without their quotes.
HCL_OPTIONS = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
REFERENCE = "p4d-ubuntu1804-cuda11"
SHIPPED = [path.stem for path in profile_files()]
PACKER_FILES = ["build.pkr.hcl", "locals.pkr.hcl", "plugins.pkr.hcl", "source.pkr.hcl", "variables.pkr.hcl"]


def _parsed(name: str) -> dict:
    """A file of the reference profile's build directory, parsed."""
    return hcl2.loads(build_files(load_profile(REFERENCE))[name], serialization_options=HCL_OPTIONS)


def _variables() -> dict[str, dict]:
    variables: dict[str, dict] = {}
    for block in _parsed("variables.pkr.hcl")["variable"]:
        variables.update(block)
    return variables


def _ebs_source() -> dict:
    (source,) = _parsed("source.pkr.hcl")["source"]
    return source["amazon-ebs"]["gpufleet"]


def _build() -> dict:
    (build,) = _parsed("build.pkr.hcl")["build"]
    return build


def test_shipped_profiles_are_the_five_of_the_readme():
    assert SHIPPED == [
        "al2023-cuda13",
        "p4d-al2-cuda11",
        "p4d-ubuntu1804-cuda11",
        "ubuntu2204-cuda12",
        "ubuntu2404-cuda13",
    ]


def test_render_writes_ami_packer_as_it_is_plus_the_variables_file(tmp_path):
    out_dir = tmp_path / REFERENCE
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir)]) == 0
    assert sorted(path.name for path in out_dir.iterdir()) == sorted([*PACKER_FILES, "gpufleet.auto.pkrvars.json"])
    assert sorted(path.name for path in PACKER_DIR.iterdir()) == PACKER_FILES
    for name in PACKER_FILES:
        assert (out_dir / name).read_bytes() == (PACKER_DIR / name).read_bytes(), name


def test_variables_file_of_the_reference_profile(tmp_path):
    out_dir = tmp_path / REFERENCE
    render_profile(load_profile(REFERENCE), out_dir)
    assert json.loads((out_dir / VARIABLES_FILE).read_text()) == {
        "profile": "p4d-ubuntu1804-cuda11",
        "profile_description": "Reference P4d stack on Ubuntu 18.04 (driver 450.80.02, CUDA 11.0.3, cuDNN 8, "
        "NCCL 2.7.8)",
        "os_family": "ubuntu",
        "os_version": "18.04",
        "nvswitch": True,
        "cuda_architectures": "80",
        "build_instance_type": "g4dn.2xlarge",
        "source_ami_name": "ubuntu/images/hvm-ssd/ubuntu-bionic-18.04-amd64-server-*",
        "source_ami_owner": "099720109477",
        "ssh_username": "ubuntu",
        "root_device_name": "/dev/sda1",
        "root_volume_gib": 100,
        "root_volume_iops": 3000,
        "root_volume_throughput": 250,
        "component_versions": {
            "driver": "450.80.02",
            "fabric_manager": "450.80.02",
            "cuda": "11.0.3",
            "cudnn": "8.0.5.39",
            "nccl": "2.7.8",
            "efa_installer": "1.14.1",
            "aws_ofi_nccl": "1.1.1",
            "nccl_tests": "2.13.10",
            "fsx_lustre": "2.10.8",
            "onednn": "1.6.4",
            "container_toolkit": "1.3.0",
            "aws_cli": "2.36.11",
            "cloudwatch_agent": "1.300071.0b1720",
        },
        "component_urls": {
            "driver": "https://us.download.nvidia.com/tesla/450.80.02/NVIDIA-Linux-x86_64-450.80.02.run",
            "fabric_manager": "",
            "cuda": "https://developer.download.nvidia.com/compute/cuda/11.0.3/local_installers/"
            "cuda_11.0.3_450.51.06_linux.run",
            "cudnn": "",
            "nccl": "https://github.com/NVIDIA/nccl/archive/refs/tags/v2.7.8-1.tar.gz",
            "efa_installer": "https://efa-installer.amazonaws.com/aws-efa-installer-1.14.1.tar.gz",
            "aws_ofi_nccl": "https://github.com/aws/aws-ofi-nccl/archive/refs/tags/v1.1.1.tar.gz",
            "nccl_tests": "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.13.10.tar.gz",
            "fsx_lustre": "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu",
            "onednn": "https://github.com/oneapi-src/oneDNN/archive/refs/tags/v1.6.4.tar.gz",
            "container_toolkit": "https://nvidia.github.io/libnvidia-container",
            "aws_cli": "https://awscli.amazonaws.com/awscli-exe-linux-x86_64-2.36.11.zip",
            "cloudwatch_agent": "https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/amd64/1.300071.0b1720/"
            "amazon-cloudwatch-agent.deb",
        },
        "component_sha256": {
            "driver": "",
            "fabric_manager": "",
            "cuda": "",
            "cudnn": "",
            "nccl": "",
            "efa_installer": "",
            "aws_ofi_nccl": "",
            "nccl_tests": "",
            "fsx_lustre": "",
            "onednn": "",
            "container_toolkit": "",
            "aws_cli": "50fbb7a2f44a78eab4a210088040e8f0bc4b9937cac8043c2354269d58614df6",
            "cloudwatch_agent": "",
        },
        "component_gpg_key_urls": {
            "driver": "",
            "fabric_manager": "",
            "cuda": "",
            "cudnn": "",
            "nccl": "",
            "efa_installer": "https://efa-installer.amazonaws.com/aws-efa-installer.key",
            "aws_ofi_nccl": "",
            "nccl_tests": "",
            "fsx_lustre": "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc",
            "onednn": "",
            "container_toolkit": "https://nvidia.github.io/libnvidia-container/gpgkey",
            "aws_cli": "",
            "cloudwatch_agent": "https://amazoncloudwatch-agent.s3.amazonaws.com/assets/amazon-cloudwatch-agent.gpg",
        },
        "component_gpg_key_fingerprints": {
            "driver": "",
            "fabric_manager": "",
            "cuda": "",
            "cudnn": "",
            "nccl": "",
            "efa_installer": "",
            "aws_ofi_nccl": "",
            "nccl_tests": "",
            "fsx_lustre": "",
            "onednn": "",
            "container_toolkit": "",
            "aws_cli": "FB5DB77FD5C118B80511ADA8A6310ACC4672475C",
            "cloudwatch_agent": "937616F3450B7D806CBD9725D58167303B789C72",
        },
        "package_environment": {
            "GPUFLEET_FABRIC_MANAGER_PACKAGE": "nvidia-fabricmanager-450",
            "GPUFLEET_FABRIC_MANAGER_PACKAGE_VERSION": "",
            "GPUFLEET_FABRIC_MANAGER_REPOSITORIES": "",
            "GPUFLEET_FABRIC_MANAGER_EXTRAS_TOPIC": "",
            "GPUFLEET_CUDNN_PACKAGE": "libcudnn8",
            "GPUFLEET_CUDNN_PACKAGE_VERSION": "8.0.5.39-1+cuda11.0",
            "GPUFLEET_CUDNN_REPOSITORIES": "https://developer.download.nvidia.com/compute/machine-learning/repos/ubuntu1804/x86_64/7fa2af80.pub"
            "|https://developer.download.nvidia.com/compute/machine-learning/repos/ubuntu1804/x86_64 /",
            "GPUFLEET_CUDNN_EXTRAS_TOPIC": "",
            "GPUFLEET_CUDNN_DEV_PACKAGE": "libcudnn8-dev",
            "GPUFLEET_CUDNN_DEV_PACKAGE_VERSION": "8.0.5.39-1+cuda11.0",
            "GPUFLEET_CUDNN_DEV_REPOSITORIES": "",
            "GPUFLEET_CUDNN_DEV_EXTRAS_TOPIC": "",
            "GPUFLEET_FSX_LUSTRE_PACKAGE": "lustre-client-utils",
            "GPUFLEET_FSX_LUSTRE_PACKAGE_VERSION": "",
            "GPUFLEET_FSX_LUSTRE_REPOSITORIES": "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc"
            "|https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu bionic main",
            "GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC": "",
            "GPUFLEET_CONTAINER_TOOLKIT_PACKAGE": "nvidia-container-toolkit",
            "GPUFLEET_CONTAINER_TOOLKIT_PACKAGE_VERSION": "",
            "GPUFLEET_CONTAINER_TOOLKIT_REPOSITORIES": "https://nvidia.github.io/libnvidia-container/gpgkey"
            "|https://nvidia.github.io/libnvidia-container/stable/ubuntu18.04/$(ARCH) /"
            ";https://nvidia.github.io/nvidia-container-runtime/gpgkey"
            "|https://nvidia.github.io/nvidia-container-runtime/stable/ubuntu18.04/$(ARCH) /",
            "GPUFLEET_CONTAINER_TOOLKIT_EXTRAS_TOPIC": "",
            "GPUFLEET_CONTAINER_RUNTIME_PACKAGE": "nvidia-container-runtime",
            "GPUFLEET_CONTAINER_RUNTIME_PACKAGE_VERSION": "3.4.0",
            "GPUFLEET_CONTAINER_RUNTIME_REPOSITORIES": "",
            "GPUFLEET_CONTAINER_RUNTIME_EXTRAS_TOPIC": "",
        },
        "python_environment": {
            "GPUFLEET_UV_VERSION": "0.12.21",
            "GPUFLEET_UV_URL": "https://github.com/astral-sh/uv/releases/download/0.12.21/uv-x86_64-unknown-linux-gnu.tar.gz",
            "GPUFLEET_UV_SHA256": "23f02075b652bb1df64178cfae41b5caf160822e720e2663568f3f5d63bc52c0",
            "GPUFLEET_PYTORCH_VERSION": "",
            "GPUFLEET_PYTORCH_INDEX_URL": "",
            "GPUFLEET_PYTORCH_PYTHON": "",
        },
        "instance_profile": "",
        # In a checkout the shipped scripts are the repository's scripts/ami (gpufleet/data/scripts links to it).
        "scripts_dir": str(Path(__file__).resolve().parents[2] / "scripts" / "ami"),
    }


def test_the_pytorch_option_reaches_the_scripts():
    assert packer_variables(load_profile("al2023-cuda13"))["python_environment"] == {
        "GPUFLEET_UV_VERSION": "0.12.21",
        "GPUFLEET_UV_URL": "https://github.com/astral-sh/uv/releases/download/0.12.21/uv-x86_64-unknown-linux-gnu.tar.gz",
        "GPUFLEET_UV_SHA256": "23f02075b652bb1df64178cfae41b5caf160822e720e2663568f3f5d63bc52c0",
        "GPUFLEET_PYTORCH_VERSION": "2.14.0",
        "GPUFLEET_PYTORCH_INDEX_URL": "https://download.pytorch.org/whl/cu130",
        "GPUFLEET_PYTORCH_PYTHON": "3.12",
    }


def test_render_of_an_end_of_life_profile_warns_in_one_line(tmp_path, capsys):
    assert main(["ami", "render", "p4d-al2-cuda11", "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "warning: profile p4d-al2-cuda11 is end of life since 2026-06-30: Amazon Linux 2 support ended 2026-06-30 "
        "and driver branch R450 reached end of life in July 2023; use al2023-cuda13"
    ]
    assert main(["ami", "render", "ubuntu2404-cuda13", "--out", str(tmp_path / "current")]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("name", "architectures"), [("p4d-ubuntu1804-cuda11", "80"), ("ubuntu2204-cuda12", "80 90")])
def test_nccl_is_built_for_the_target_gpus_only(name, architectures):
    """p4d/p4de carry A100 (compute capability 8.0), p5 H100 (9.0): instance catalog."""
    assert packer_variables(load_profile(name))["cuda_architectures"] == architectures


def test_amazon_linux_2_package_names_reach_the_variables_file():
    """R450 Fabric Manager keeps its branch suffix on RHEL 7 / AL2; cuDNN RPM versions use ".cuda"
    (ami/packages.yaml)."""
    environment = packer_variables(load_profile("p4d-al2-cuda11"))["package_environment"]
    assert environment["GPUFLEET_FABRIC_MANAGER_PACKAGE"] == "nvidia-fabricmanager-450"
    assert environment["GPUFLEET_CUDNN_PACKAGE_VERSION"] == "8.0.5.39-1.cuda11.0"
    assert environment["GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC"] == "lustre2.10"


@pytest.mark.parametrize("name", SHIPPED)
def test_every_component_map_is_keyed_by_every_component(name):
    variables = packer_variables(load_profile(name))
    maps = {key: value for key, value in variables.items() if key.startswith("component_")}
    assert sorted(maps) == [
        "component_gpg_key_fingerprints",
        "component_gpg_key_urls",
        "component_sha256",
        "component_urls",
        "component_versions",
    ]
    for value in maps.values():
        assert tuple(value) == COMPONENTS


def test_variables_file_sets_exactly_the_declared_variables_without_default():
    declared = _variables()
    without_default = {name for name, body in declared.items() if "default" not in body}
    assert set(packer_variables(load_profile(REFERENCE))) == without_default | {"instance_profile"}
    assert declared["instance_profile"]["default"] == ""


def test_every_variable_is_typed_and_described_and_the_values_fit_the_types():
    declared = _variables()
    for name, body in declared.items():
        assert {"type", "description"} <= set(body), name
    hcl_types = {bool: "bool", int: "number", str: "string", dict: "${map(string)}"}
    for name, value in packer_variables(load_profile(REFERENCE)).items():
        assert declared[name]["type"] == hcl_types[type(value)], name


@pytest.mark.parametrize("name", SHIPPED)
def test_build_files_are_deterministic(name):
    profile = load_profile(name)
    assert build_files(profile) == build_files(profile)


@pytest.mark.parametrize("name", PACKER_FILES)
def test_every_packer_file_is_hcl2(name):
    assert _parsed(name)


def test_plugins_file_pins_the_amazon_plugin_that_knows_include_deprecated():
    # 1.3.3 has include_deprecated (packer-plugin-amazon PR #404, released in v1.2.8) and the IMDS options.
    (packer,) = _parsed("plugins.pkr.hcl")["packer"]
    (required,) = packer["required_plugins"]
    assert required == {"amazon": {"version": "= 1.3.3", "source": "github.com/hashicorp/amazon"}}


def test_source_ami_filter_includes_deprecated_images():
    (ami_filter,) = _ebs_source()["source_ami_filter"]
    assert ami_filter["include_deprecated"] is True
    assert ami_filter["most_recent"] is True
    assert ami_filter["owners"] == ["${var.source_ami_owner}"]
    assert ami_filter["filters"]["name"] == "${var.source_ami_name}"


def test_source_block_security_settings():
    ebs = _ebs_source()
    assert ebs["metadata_options"] == [
        {"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": 1}
    ]
    assert ebs["imds_support"] == "v2.0"
    assert ebs["encrypt_boot"] is True
    (volume,) = ebs["launch_block_device_mappings"]
    assert volume["encrypted"] is True and volume["volume_type"] == "gp3"
    assert volume["iops"] == "${var.root_volume_iops}" and volume["throughput"] == "${var.root_volume_throughput}"
    assert ebs["ssh_interface"] == "session_manager"
    assert ebs["ami_description"] == "${var.profile_description}"
    for key in ("tags", "snapshot_tags", "run_tags"):
        assert "local.image_tags" in ebs[key]


def test_instance_profile_is_a_variable_and_the_temporary_profile_grants_exactly_the_ssm_agent_actions():
    ebs = _ebs_source()
    assert ebs["iam_instance_profile"] == "${var.instance_profile}"
    (document,) = ebs["temporary_iam_instance_profile_policy_document"]
    (statement,) = document["Statement"]
    assert statement == {"Effect": "Allow", "Action": SSM_AGENT_ACTIONS, "Resource": ["*"]}


def _script_steps() -> list[dict]:
    return [step["shell"] for step in _build()["provisioner"] if "shell" in step and "script" in step["shell"]]


def test_build_runs_exactly_the_contract_scripts_in_order():
    assert [step["script"] for step in _script_steps()] == [
        f"${{var.scripts_dir}}/{name}" for name in SCRIPTS_IN_RUN_ORDER
    ]
    for step in _script_steps():
        assert step["execute_command"] == "{{ .Vars }} sudo -E bash '{{ .Path }}'"
        assert step["environment_vars"] == "${local.script_environment}"


def test_reboot_barrier_and_the_wait_and_retry_after_it():
    steps = dict(zip(SCRIPTS_IN_RUN_ORDER, _script_steps(), strict=True))
    assert steps["03-reboot.sh"]["expect_disconnect"] is True and steps["03-reboot.sh"]["skip_clean"] is True
    after = steps["04-fabric-manager.sh"]
    assert after["pause_before"] == "${var.reboot_pause}"
    assert after["start_retry_timeout"] == "${var.reboot_reconnect_timeout}"
    waiting = {name for name, step in steps.items() if {"pause_before", "start_retry_timeout"} & set(step)}
    assert waiting == {"04-fabric-manager.sh"}
    assert {name for name, step in steps.items() if "expect_disconnect" in step} == {"03-reboot.sh"}
    # A failed install script is not run again.
    assert not any("max_retries" in step for step in _script_steps())
    variables = _variables()
    assert variables["reboot_pause"]["default"] == "60s"
    assert variables["reboot_reconnect_timeout"]["default"] == "15m"


def test_manifest_records_profile_build_id_and_versions():
    (manifest,) = [p["manifest"] for p in _build()["post-processor"]]
    assert manifest["output"] == "${var.manifest_path}"
    assert '"profile" = var.profile' in manifest["custom_data"]
    assert '"version:${key}" => version' in manifest["custom_data"]


def test_render_replaces_an_earlier_render_but_not_foreign_files(tmp_path, capsys):
    out_dir = tmp_path / "out"
    render_profile(load_profile(REFERENCE), out_dir)
    render_profile(load_profile("ubuntu2204-cuda12"), out_dir)
    assert json.loads((out_dir / VARIABLES_FILE).read_text())["profile"] == "ubuntu2204-cuda12"
    (out_dir / "notes.txt").write_text("mine")
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"{out_dir}: holds files a render did not write (notes.txt): choose an empty or new directory"
    )
    assert json.loads((out_dir / VARIABLES_FILE).read_text())["profile"] == "ubuntu2204-cuda12"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.skipif(not SCRIPTS_DIR.is_dir(), reason="scripts/ami/ does not exist yet (written by another engineer)")
def test_contract_script_names_match_scripts_ami():
    assert tuple(sorted(path.name for path in SCRIPTS_DIR.glob("*.sh"))) == SCRIPTS_IN_RUN_ORDER
    assert SCRIPT_NAMES == SCRIPTS_IN_RUN_ORDER


def test_instance_profile_goes_into_the_variables_file_and_nothing_else_changes(tmp_path):
    default = build_files(load_profile(REFERENCE))
    with_profile = build_files(load_profile(REFERENCE), instance_profile="gpufleet-ami-build")
    assert json.loads(with_profile[VARIABLES_FILE]) == {
        **json.loads(default[VARIABLES_FILE]),
        "instance_profile": "gpufleet-ami-build",
    }
    assert {name: text for name, text in with_profile.items() if name != VARIABLES_FILE} == {
        name: text for name, text in default.items() if name != VARIABLES_FILE
    }


def test_cli_renders_the_instance_profile(tmp_path):
    out_dir = tmp_path / "out"
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir), "--instance-profile", "a+b=c,d.e@f_g-1"]) == 0
    assert json.loads((out_dir / VARIABLES_FILE).read_text())["instance_profile"] == "a+b=c,d.e@f_g-1"


@pytest.mark.parametrize("name", ["", "x" * 129, "has space", 'quote"', "${var.x}", "r\u00f4le", "a/b", "a\nb"])
def test_bad_instance_profile_name_is_refused_and_nothing_written(tmp_path, capsys, name):
    out_dir = tmp_path / "out"
    assert main(["ami", "render", REFERENCE, "--out", str(out_dir), "--instance-profile", name]) == 1
    err = capsys.readouterr().err
    assert (
        err == f"--instance-profile {name!r}: not an IAM instance profile name (1 to 128 characters: letters, "
        "digits and + = , . @ _ -)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_longest_instance_profile_name_is_accepted():
    files = build_files(load_profile(REFERENCE), instance_profile="x" * 128)
    assert json.loads(files[VARIABLES_FILE])["instance_profile"] == "x" * 128


def test_go_template_action_in_a_value_is_refused_and_nothing_written(tmp_path, capsys, write_profile):
    path = write_profile(
        "braces",
        {"description": "built {{ timestamp }}", "components.nccl.url": "https://example.com/{{ .Name }}.tar.gz"},
    )
    out_dir = tmp_path / "out"
    assert main(["ami", "render", str(path), "--out", str(out_dir)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "braces: profile_description: 'built {{ timestamp }}' holds '{{', which Packer reads as a template action: "
        "remove it",
        "braces: component_urls[nccl]: 'https://example.com/{{ .Name }}.tar.gz' holds '{{', which Packer reads as a "
        "template action: remove it",
    ]
    assert not out_dir.exists()
