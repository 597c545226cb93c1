"""Every provisioning script follows the same conventions: the contract's names, the one shared library found
the same way, and a clear error naming any missing contract variable (strict mode, as behaviour:
test_strict_mode.py). shellcheck runs in `make lint` (tests/scripts/test_lint_coverage.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPTS_DIR = REPO / "scripts" / "ami"
# The file names in run order, as docs/reference/ami-scripts.md lists them (gpufleet/ami/__init__.py SCRIPT_NAMES).
CONTRACT_SCRIPTS = (
    "00-os-update.sh 01-build-tools.sh 02-nvidia-driver.sh 03-reboot.sh 04-fabric-manager.sh 05-cuda.sh "
    "06-cudnn.sh 07-efa-installer.sh 08-nccl.sh 09-aws-ofi-nccl.sh 10-nccl-tests.sh 11-fsx-lustre.sh "
    "12-onednn.sh 13-container-runtime.sh 14-aws-cli.sh 15-cloudwatch-agent.sh 16-cleanup.sh 17-validate.sh"
).split()


def test_scripts_are_exactly_the_contract_list_in_order():
    assert sorted(path.name for path in SCRIPTS_DIR.glob("*.sh")) == CONTRACT_SCRIPTS


# One variable each script cannot work without; removing it must fail before anything is touched.
REQUIRED = [
    ("00-os-update.sh", "GPUFLEET_OS_VERSION"),
    ("01-build-tools.sh", "GPUFLEET_OS_FAMILY"),
    ("02-nvidia-driver.sh", "GPUFLEET_DRIVER_URL"),
    ("03-reboot.sh", "GPUFLEET_DRIVER_VERSION"),
    ("04-fabric-manager.sh", "GPUFLEET_NVSWITCH"),
    ("05-cuda.sh", "GPUFLEET_CUDA_URL"),
    ("06-cudnn.sh", "GPUFLEET_CUDNN_VERSION"),
    ("07-efa-installer.sh", "GPUFLEET_EFA_INSTALLER_URL"),
    ("08-nccl.sh", "GPUFLEET_NCCL_VERSION"),
    ("09-aws-ofi-nccl.sh", "GPUFLEET_AWS_OFI_NCCL_VERSION"),  # no URL: the EFA installer's plugin
    ("10-nccl-tests.sh", "GPUFLEET_NCCL_TESTS_URL"),
    ("11-fsx-lustre.sh", "GPUFLEET_FSX_LUSTRE_VERSION"),
    ("12-onednn.sh", "GPUFLEET_ONEDNN_URL"),
    ("13-container-runtime.sh", "GPUFLEET_CONTAINER_TOOLKIT_VERSION"),
    ("14-aws-cli.sh", "GPUFLEET_AWS_CLI_GPG_KEY_FINGERPRINT"),
    ("15-cloudwatch-agent.sh", "GPUFLEET_CLOUDWATCH_AGENT_GPG_KEY_URL"),
    ("16-cleanup.sh", "GPUFLEET_OS_FAMILY"),
    ("17-validate.sh", "GPUFLEET_AMI_PROFILE"),
]


def test_required_table_covers_every_script():
    assert [script for script, _ in REQUIRED] == CONTRACT_SCRIPTS


@pytest.mark.parametrize("script,variable", REQUIRED)
@pytest.mark.parametrize("how", ["unset", "empty"])
def test_missing_required_variable_fails_with_one_line_naming_it(sandbox, script, variable, how):
    env = dict(sandbox.env)
    if how == "unset":
        del env[variable]
    else:
        env[variable] = ""
    result = sandbox.run(script, env)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"[gpufleet] ERROR: missing required environment variable {variable} "
        "(the Packer template sets it from the AMI profile)"
    ]
    assert sandbox.calls() == []


@pytest.mark.parametrize("script,variable", REQUIRED)
def test_script_run_alone_finds_the_library_through_gpufleet_lib_dir(sandbox, tmp_path, script, variable):
    """On the build instance Packer uploads each script alone to /tmp; the library comes from GPUFLEET_LIB_DIR.
    Its require_env answering for a missing variable shows the library was sourced, before anything ran."""
    lone = tmp_path / "uploaded" / "script_1234.sh"
    lone.parent.mkdir()
    shutil.copy(SCRIPTS_DIR / script, lone)
    env = {key: value for key, value in sandbox.env.items() if key != variable}

    without = subprocess.run(["bash", str(lone)], env=env, capture_output=True, text=True, timeout=30)
    with_lib = subprocess.run(
        ["bash", str(lone)], env={**env, "GPUFLEET_LIB_DIR": str(SCRIPTS_DIR / "lib")}, capture_output=True, text=True
    )

    assert without.returncode == 1
    assert f"{lone.parent}/lib/common.sh: No such file or directory" in without.stderr
    assert with_lib.returncode == 1
    assert with_lib.stderr.splitlines() == [
        f"[gpufleet] ERROR: missing required environment variable {variable} "
        "(the Packer template sets it from the AMI profile)"
    ]
    assert sandbox.calls() == []


@pytest.mark.parametrize("script", ["00-os-update.sh", "17-validate.sh"])
def test_unknown_os_family_is_rejected(sandbox, script):
    result = sandbox.run(script, {**sandbox.env, "GPUFLEET_OS_FAMILY": "debian"})
    assert result.returncode == 1
    assert result.stderr.strip() == "[gpufleet] ERROR: GPUFLEET_OS_FAMILY must be ubuntu or amzn, got 'debian'"
