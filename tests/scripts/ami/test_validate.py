"""17-validate.sh: passes and writes versions.json only when every component is at its pinned version; each
failure is one exact line, and the build fails."""

from __future__ import annotations

import json
import os
import shutil

import pytest

NCCL_TESTS_BINARIES = ("all_reduce_perf", "all_gather_perf", "broadcast_perf", "reduce_scatter_perf")
MANIFEST = "etc/gpufleet/versions.json"


def header(prefix: str, major: str, minor: str, patch: str, version: str) -> str:
    a, b, c = version.split(".")[:3]
    return f"#define {prefix}{major} {a}\n#define {prefix}{minor} {b}\n#define {prefix}{patch} {c}\n"


@pytest.fixture
def good_image(sandbox, pinned):
    """A fake image tree and stubs in which every component of the reference p4d profile is installed."""
    sandbox.set_state("nvidia-smi", "450.80.02\n" * 8)
    sandbox.set_package("nvidia-fabricmanager-450", "450.80.02-1")
    sandbox.set_state("enabled/nvidia-fabricmanager", "")
    sandbox.set_state("enabled/snap.amazon-ssm-agent.amazon-ssm-agent", "")
    # CUDA 11.0 has no version.json: nvcc tells the release.
    sandbox.set_state(
        "nvcc", "Cuda compilation tools, release 11.0, V11.0.221\nBuild cuda_11.0_bu.TC445_37.28845127_0\n"
    )
    sandbox.write("/usr/local/cuda/include/cudnn_version.h", header("CUDNN_", "MAJOR", "MINOR", "PATCHLEVEL", "8.0.5"))
    sandbox.write("/usr/include/nccl.h", header("NCCL_", "MAJOR", "MINOR", "PATCH", "2.7.8"))
    sandbox.write(
        "/opt/amazon/efa_installed_packages", "# EFA installer version: 1.14.1\n# Debug packages installed: no\n"
    )
    sandbox.write("/opt/aws-ofi-nccl/gpufleet-version", "1.1.4\n")
    sandbox.write("/opt/aws-ofi-nccl/lib/libnccl-net.so", "plugin")
    sandbox.write("/etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf", "/opt/aws-ofi-nccl/lib\n")
    sandbox.write("/opt/nccl-tests/gpufleet-version", "2.10.0\n")
    for binary in NCCL_TESTS_BINARIES:
        sandbox.write(f"/opt/nccl-tests/build/{binary}", "", executable=True)
    sandbox.set_package("lustre-client-utils", "2.10.8-5")
    header_text = header("DNNL_VERSION_", "MAJOR", "MINOR", "PATCH", "2.2.4")
    sandbox.write("/opt/onednn/include/oneapi/dnnl/dnnl_version.h", header_text)
    sandbox.set_package("nvidia-container-toolkit", "1.4.0-1")
    sandbox.write("/sys/class/infiniband/rdmap16s27/device/vendor", "0x1d0f\n")
    aws_cli(sandbox, "2.36.11")
    sandbox.write("/opt/aws/amazon-cloudwatch-agent/bin/CWAGENT_VERSION", "1.300071.0b1720\n")
    uv(sandbox, "0.12.21")
    refresh_loader_cache(sandbox)
    return sandbox


def uv(box, version: str) -> None:
    """uv's binary in /usr/local/bin, answering --version as uv does ("uv 0.12.21 (hash date)")."""
    box.write("/usr/local/bin/uv", f'#!/bin/sh\necho "uv {version} (0a1b2c3d4 2026-09-01)"\n', executable=True)


def pytorch_venv(box, torch_version: str = "2.14.0+cu130") -> None:
    """The profile's PyTorch virtualenv, its python answering torch.__version__."""
    box.env.update(
        GPUFLEET_PYTORCH_VERSION="2.14.0",
        GPUFLEET_PYTORCH_INDEX_URL="https://download.pytorch.org/whl/cu130",
        GPUFLEET_PYTORCH_PYTHON="",
    )
    box.write("/opt/gpufleet/pytorch/bin/python", f'#!/bin/sh\necho "{torch_version}"\n', executable=True)
    for path in (box.root / "opt/gpufleet/pytorch").rglob("*"):
        path.chmod(0o755)
    (box.root / "opt/gpufleet/pytorch").chmod(0o755)


def aws_cli(box, version: str) -> None:
    """The v2 installer's /usr/local/bin/aws, answering --version as AWS CLI v2 does (user guide, "Confirm the
    installation": aws-cli/2.x.x Python/3.x.x Linux/...)."""
    box.write(
        "/usr/local/bin/aws",
        f'#!/bin/sh\necho "aws-cli/{version} Python/3.13.4 Linux/5.4.0-1045-aws exe/x86_64.ubuntu.18"\n',
        executable=True,
    )


def refresh_loader_cache(box) -> None:
    assert box.bash("ldconfig").returncode == 0
    box.clear_calls()


def failures(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("[gpufleet] FAIL ")]


def test_pass_writes_the_versions_manifest_in_the_contract_shape(good_image, pinned):
    result = good_image.run("17-validate.sh")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    manifest = json.loads((good_image.root / MANIFEST).read_text())
    assert manifest == {
        "profile": "p4d-ubuntu1804-cuda11",
        "os": {"family": "ubuntu", "version": "18.04"},
        "components": pinned,
        "python": {"uv": "0.12.21", "pytorch": None},
        "paths": {"aws_ofi_nccl_lib": "/opt/aws-ofi-nccl/lib", "python_venv": None},
    }
    assert list(manifest["components"]) == list(pinned)
    assert "fi_info -p efa" in good_image.calls()
    assert not list((good_image.root / "etc/gpufleet").glob("*.tmp"))


def test_cuda_with_version_json_must_match_the_full_version(good_image):
    good_image.env["GPUFLEET_CUDA_VERSION"] = "12.2.2"
    good_image.write(
        "/usr/local/cuda/version.json", '{\n "cuda" : {\n  "name" : "CUDA SDK",\n  "version" : "12.2.2"\n }\n}'
    )
    assert good_image.run("17-validate.sh").returncode == 0
    good_image.write("/usr/local/cuda/version.json", '{"cuda": {"name": "CUDA SDK", "version": "12.2.1"}}')
    assert failures(good_image.run("17-validate.sh")) == [
        "[gpufleet] FAIL cuda: found 12.2.1 in /usr/local/cuda, expected 12.2.2"
    ]


def break_nvcc(box):
    box.set_state("nvcc", "Cuda compilation tools, release 11.1, V11.1.105\n")


FAIL_CASES = {
    "python3 without venv": (
        lambda box: box.set_state(
            "venv.fail",
            "The virtual environment was not created successfully because ensurepip is not\navailable.  On "
            "Debian/Ubuntu systems, you need to install the python3-venv\npackage\n",
        ),
        [
            "python: 'python3 -m venv' failed: The virtual environment was not created successfully because ensurepip "
            "is not"
        ],
    ),
    "the virtualenv's pip fails": (
        lambda box: box.set_state("pip.fail", "ModuleNotFoundError: No module named 'pip'\n"),
        ["python: the pip of a 'python3 -m venv' virtualenv failed: ModuleNotFoundError: No module named 'pip'"],
    ),
    "uv missing": (
        lambda box: (box.root / "usr/local/bin/uv").unlink(),
        ["uv: not installed (nothing found in /usr/local/bin/uv --version), expected 0.12.21"],
    ),
    "uv at another version": (
        lambda box: uv(box, "0.12.5"),
        ["uv: found 0.12.5 in /usr/local/bin/uv --version, expected 0.12.21"],
    ),
    "wrong driver": (
        lambda box: box.set_state("nvidia-smi", "450.80.02\n" * 7 + "450.51.06\n"),
        ["driver: nvidia-smi reports 450.51.06,450.80.02, expected 450.80.02"],
    ),
    "nvidia-smi fails": (
        lambda box: (box.state / "nvidia-smi").unlink(),
        ["driver: nvidia-smi failed: NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."],
    ),
    "fabric manager not enabled": (
        lambda box: (box.state / "enabled/nvidia-fabricmanager").unlink(),
        ["fabric_manager: nvidia-fabricmanager is not enabled (systemctl is-enabled: disabled)"],
    ),
    "fabric manager at another version": (
        lambda box: box.set_package("nvidia-fabricmanager-450", "450.51.06-1"),
        ["fabric_manager: found 450.51.06-1 in package nvidia-fabricmanager-450, expected 450.80.02"],
    ),
    "ssm agent not enabled": (
        lambda box: (box.state / "enabled/snap.amazon-ssm-agent.amazon-ssm-agent").unlink(),
        [
            "ssm_agent: none of amazon-ssm-agent snap.amazon-ssm-agent.amazon-ssm-agent is enabled: "
            "nodes would not answer Run Command"
        ],
    ),
    "cuda at another release": (break_nvcc, ["cuda: found 11.1 in /usr/local/cuda, expected 11.0.3"]),
    "cudnn at another version": (
        lambda box: box.write(
            "/usr/local/cuda/include/cudnn_version.h", header("CUDNN_", "MAJOR", "MINOR", "PATCHLEVEL", "8.0.4")
        ),
        ["cudnn: found 8.0.4 in cudnn headers, expected 8.0.5"],
    ),
    "nccl missing": (
        lambda box: (box.root / "usr/include/nccl.h").unlink(),
        ["nccl: not installed (nothing found in /usr/include/nccl.h), expected 2.7.8"],
    ),
    "efa installer at another version": (
        lambda box: box.write("/opt/amazon/efa_installed_packages", "# EFA installer version: 1.13.0\n"),
        ["efa_installer: found 1.13.0 in /opt/amazon/efa_installed_packages, expected 1.14.1"],
    ),
    "aws-ofi-nccl at another version": (
        lambda box: box.write("/opt/aws-ofi-nccl/gpufleet-version", "1.1.3\n"),
        ["aws_ofi_nccl: found 1.1.3 in /opt/aws-ofi-nccl/gpufleet-version, expected 1.1.4"],
    ),
    "nccl-tests binary missing": (
        lambda box: (box.root / "opt/nccl-tests/build/all_reduce_perf").unlink(),
        ["nccl_tests: missing /opt/nccl-tests/build/all_reduce_perf"],
    ),
    "fsx lustre client missing": (
        lambda box: (box.state / "packages/lustre-client-utils").unlink(),
        ["fsx_lustre: not installed (nothing found in package lustre-client-utils), expected 2.10.8"],
    ),
    "onednn at another version": (
        lambda box: box.write(
            "/opt/onednn/include/oneapi/dnnl/dnnl_version.h",
            header("DNNL_VERSION_", "MAJOR", "MINOR", "PATCH", "2.3.0"),
        ),
        ["onednn: found 2.3.0 in /opt/onednn/include, expected 2.2.4"],
    ),
    "container toolkit at another version": (
        lambda box: box.set_package("nvidia-container-toolkit", "1.14.3-1"),
        ["container_toolkit: found 1.14.3-1 in package nvidia-container-toolkit, expected 1.4.0"],
    ),
    "aws cli at another version": (
        lambda box: aws_cli(box, "2.36.10"),
        ["aws_cli: found 2.36.10 in /usr/local/bin/aws --version, expected 2.36.11"],
    ),
    "cloudwatch agent missing": (
        lambda box: (box.root / "opt/aws/amazon-cloudwatch-agent/bin/CWAGENT_VERSION").unlink(),
        [
            "cloudwatch_agent: found nothing in /opt/aws/amazon-cloudwatch-agent/bin/CWAGENT_VERSION, "
            "expected 1.300071.0b1720"
        ],
    ),
    "fi_info fails with an EFA device": (
        lambda box: box.set_state("fi_info.rc", "61"),
        ["efa: an EFA device is present but 'fi_info -p efa' failed"],
    ),
}


@pytest.mark.parametrize("case", list(FAIL_CASES))
def test_each_failure_is_one_exact_line_and_no_manifest(good_image, case):
    break_image, expected = FAIL_CASES[case]
    break_image(good_image)
    result = good_image.run("17-validate.sh")
    assert result.returncode == 1
    assert failures(result) == [f"[gpufleet] FAIL {line}" for line in expected]
    assert result.stderr.splitlines()[-1] == (
        "[gpufleet] ERROR: 1 check(s) failed: /etc/gpufleet/versions.json not written"
    )
    assert not (good_image.root / MANIFEST).exists()


def efa_installer_plugin(box, release: str = "1.16.3") -> None:
    """EFA installer >= 1.39's own aws-ofi-nccl (libnccl-net-ofi.so names its release; libnccl-net.so links to it)."""
    library = box.write(
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so",
        f"\x7fELF\x00NET/OFI Initializing aws-ofi-nccl {release}\x00",
    )
    (library.parent / "libnccl-net.so").symlink_to("libnccl-net-ofi.so")


def second_plugin_copy(box):
    efa_installer_plugin(box)
    box.write("/etc/ld.so.conf.d/efa-ofi-nccl.conf", "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu\n")
    refresh_loader_cache(box)


def plugin_only_from_the_efa_installer(box, release: str):
    box.env["GPUFLEET_AWS_OFI_NCCL_VERSION"] = "1.16.3"
    shutil.rmtree(box.root / "opt/aws-ofi-nccl")
    efa_installer_plugin(box, release)
    box.write("/etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf", "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu\n")
    refresh_loader_cache(box)


PLUGIN_CASES = {
    "two plugins": (
        second_plugin_copy,
        "aws_ofi_nccl: 2 copies of libnccl-net.so under /opt and /usr (/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/"
        "libnccl-net.so /opt/aws-ofi-nccl/lib/libnccl-net.so), expected exactly one",
    ),
    "no plugin": (
        lambda box: (box.root / "opt/aws-ofi-nccl/lib/libnccl-net.so").unlink(),
        "aws_ofi_nccl: 0 copies of libnccl-net.so under /opt and /usr (none), expected exactly one",
    ),
    "plugin directory not in the loader cache": (
        lambda box: ((box.root / "etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf").unlink(), refresh_loader_cache(box)),
        "aws_ofi_nccl: the loader cache (ldconfig -p) resolves libnccl-net.so to nothing, not "
        "/opt/aws-ofi-nccl/lib/libnccl-net.so",
    ),
    "efa installer's plugin at another release": (
        lambda box: plugin_only_from_the_efa_installer(box, "1.16.2"),
        "aws_ofi_nccl: found 1.16.2 in /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so, expected 1.16.3",
    ),
}


@pytest.mark.parametrize("case", list(PLUGIN_CASES))
def test_the_image_holds_one_net_plugin_the_loader_resolves(good_image, case):
    break_image, expected = PLUGIN_CASES[case]
    break_image(good_image)
    result = good_image.run("17-validate.sh")
    assert result.returncode == 1
    assert failures(result) == [f"[gpufleet] FAIL {expected}"]
    assert not (good_image.root / MANIFEST).exists()


def test_the_efa_installers_plugin_is_recorded_for_the_node(good_image, pinned):
    plugin_only_from_the_efa_installer(good_image, "1.16.3")
    result = good_image.run("17-validate.sh")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((good_image.root / MANIFEST).read_text())
    assert manifest["components"]["aws_ofi_nccl"] == "1.16.3"
    assert manifest["paths"] == {"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "python_venv": None}


# Cases another case hides: a failed nvidia-smi hides the other driver case, a python3 without venv leaves no
# virtualenv whose pip could fail, and a missing uv has no version to differ.
HIDDEN_TOGETHER = ("nvidia-smi fails", "the virtualenv's pip fails", "uv missing")


def test_all_failures_are_reported_together(good_image):
    for case, (break_image, _) in FAIL_CASES.items():
        if case not in HIDDEN_TOGETHER:
            break_image(good_image)
    result = good_image.run("17-validate.sh")
    expected = len(FAIL_CASES) - len(HIDDEN_TOGETHER)
    assert result.returncode == 1
    assert len(failures(result)) == expected
    assert result.stderr.splitlines()[-1].startswith(f"[gpufleet] ERROR: {expected} check(s) failed")


def test_failed_validation_leaves_an_existing_manifest_untouched(good_image):
    good_image.write("/" + MANIFEST, "previous\n")
    good_image.set_state("nvidia-smi", "450.51.06\n")
    assert good_image.run("17-validate.sh").returncode == 1
    assert (good_image.root / MANIFEST).read_text() == "previous\n"


def test_fi_info_is_not_required_without_an_efa_device(good_image):
    (good_image.root / "sys/class/infiniband/rdmap16s27/device/vendor").write_text("0x15b3\n")  # a Mellanox card
    good_image.set_state("fi_info.rc", "61")
    result = good_image.run("17-validate.sh")
    assert result.returncode == 0, result.stderr
    assert "[gpufleet] no EFA device on this build instance: fi_info check skipped" in result.stdout
    assert not any(call.startswith("fi_info") for call in good_image.calls())


def test_without_nvswitch_fabric_manager_is_not_checked_and_recorded_as_null(good_image, pinned):
    good_image.env["GPUFLEET_NVSWITCH"] = "0"
    (good_image.state / "enabled/nvidia-fabricmanager").unlink()
    (good_image.state / "packages/nvidia-fabricmanager-450").unlink()
    result = good_image.run("17-validate.sh")
    assert result.returncode == 0, result.stderr
    components = json.loads((good_image.root / MANIFEST).read_text())["components"]
    assert components == {**pinned, "fabric_manager": None}


def test_amazon_linux_reads_rpm_versions_of_the_packages_the_data_names(good_image, amazon_linux_2):
    good_image.env["GPUFLEET_AMI_PROFILE"] = "p4d-al2-cuda11"
    (good_image.state / "packages/lustre-client-utils").unlink()
    good_image.set_package("lustre-client", "2.10.8-1.amzn2")
    (good_image.state / "enabled/snap.amazon-ssm-agent.amazon-ssm-agent").unlink()
    good_image.set_state("enabled/amazon-ssm-agent", "")
    result = good_image.run("17-validate.sh")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((good_image.root / MANIFEST).read_text())
    assert manifest["os"] == {"family": "amzn", "version": "2"}
    assert manifest["profile"] == "p4d-al2-cuda11"
    for package in ("nvidia-fabricmanager-450", "lustre-client", "nvidia-container-toolkit"):
        assert f"rpm -q --qf %{{VERSION}}-%{{RELEASE}}\\n {package}" in good_image.calls()


def test_fabric_manager_is_checked_under_the_name_the_data_gives(good_image):
    """R580 on Ubuntu: NVIDIA's package is nvidia-fabricmanager, without the branch suffix."""
    good_image.env.update(
        GPUFLEET_DRIVER_VERSION="580.95.05",
        GPUFLEET_FABRIC_MANAGER_VERSION="580.95.05",
        GPUFLEET_FABRIC_MANAGER_PACKAGE="nvidia-fabricmanager",
    )
    good_image.set_state("nvidia-smi", "580.95.05\n" * 8)
    good_image.set_package("nvidia-fabricmanager", "580.95.05-1")
    assert good_image.run("17-validate.sh").returncode == 0
    (good_image.state / "packages/nvidia-fabricmanager").unlink()
    assert failures(good_image.run("17-validate.sh")) == [
        "[gpufleet] FAIL fabric_manager: not installed (nothing found in package nvidia-fabricmanager), "
        "expected 580.95.05"
    ]


def test_the_pytorch_virtualenv_is_checked_and_recorded_for_the_node(good_image, pinned):
    pytorch_venv(good_image)
    result = good_image.run("17-validate.sh")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((good_image.root / MANIFEST).read_text())
    assert manifest["python"] == {"uv": "0.12.21", "pytorch": "2.14.0"}
    assert manifest["paths"] == {"aws_ofi_nccl_lib": "/opt/aws-ofi-nccl/lib", "python_venv": "/opt/gpufleet/pytorch"}


PYTORCH_FAIL_CASES = {
    "another torch": (
        lambda box: pytorch_venv(box, "2.13.0+cu130"),
        ["pytorch: found 2.13.0+cu130 in /opt/gpufleet/pytorch/bin/python, expected 2.14.0"],
    ),
    "no virtualenv": (
        lambda box: shutil.rmtree(box.root / "opt/gpufleet/pytorch"),
        ["pytorch: not installed (nothing found in /opt/gpufleet/pytorch/bin/python), expected 2.14.0"],
    ),
    "writable by others": (
        lambda box: (box.root / "opt/gpufleet/pytorch/bin").chmod(0o777),
        ["pytorch: /opt/gpufleet/pytorch/bin is writable by others than its owner"],
    ),
}


@pytest.mark.parametrize("case", list(PYTORCH_FAIL_CASES))
def test_a_wrong_pytorch_virtualenv_is_one_line_and_no_manifest(good_image, case):
    pytorch_venv(good_image)
    breaks, expected = PYTORCH_FAIL_CASES[case]
    breaks(good_image)
    result = good_image.run("17-validate.sh")
    assert result.returncode == 1
    assert [line.removeprefix("[gpufleet] FAIL ") for line in failures(result)] == expected
    assert not (good_image.root / MANIFEST).exists()


def test_the_pytorch_virtualenv_must_be_roots(good_image):
    pytorch_venv(good_image)
    os.chown(good_image.root / "opt/gpufleet/pytorch", 65534, 65534)
    result = good_image.run("17-validate.sh")
    assert [line.removeprefix("[gpufleet] FAIL ") for line in failures(result)] == [
        "pytorch: /opt/gpufleet/pytorch is not a directory root owns (owner uid 65534)"
    ]
