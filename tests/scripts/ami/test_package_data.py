"""Installer scripts driven by ami/packages.yaml (GPUFLEET_<KEY>_PACKAGE*, _REPOSITORIES, _EXTRAS_TOPIC), against
stubs that answer like the real repositories: apt-cache madison lists a package only once its repository is
configured, yum refuses a version string no repository has, amazon-linux-extras exposes one topic's packages."""

from __future__ import annotations

import pytest

APT_LOCK = "apt-get -o DPkg::Lock::Timeout=600"
APT_INSTALL = f"{APT_LOCK} install -y -q --no-install-recommends --allow-downgrades"
ML_REPO = "https://developer.download.nvidia.com/compute/machine-learning/repos/ubuntu1804/x86_64"


def apt_directories(box) -> None:
    """The directories an Ubuntu image has for apt sources and their keyrings."""
    for directory in ("etc/apt/sources.list.d", "usr/share/keyrings"):
        (box.root / directory).mkdir(parents=True, exist_ok=True)


def madison_after_repository(box, list_name: str, listings: dict[str, str]) -> None:
    """apt-cache madison lists LISTINGS (package -> versions, one a line) only once LIST_NAME is configured."""
    apt_directories(box)
    for package, versions in listings.items():
        box.set_state(f"repo/{package}", versions)
    box.stub(
        "apt-cache",
        f'[[ -f "$GPUFLEET_ROOT/etc/apt/sources.list.d/{list_name}" && -f "$S/repo/$2" ]] || exit 0\n'
        'while read -r v; do echo " $2 | $v | https://repo/ Packages"; done <"$S/repo/$2"',
    )


def test_cudnn_8_on_ubuntu_1804_adds_the_machine_learning_repository_and_pins_the_deb_version(sandbox):
    sandbox.env["GPUFLEET_CUDNN_URL"] = ""
    sandbox.set_state("download", "KEY\n")
    sandbox.write("/etc/apt/sources.list.d/gpufleet-cuda.list", "configured\n")
    versions = "8.0.5.39-1+cuda11.1\n8.0.5.39-1+cuda11.0\n8.0.4.30-1+cuda11.0\n"
    madison_after_repository(sandbox, "gpufleet-cudnn-1.list", {"libcudnn8": versions, "libcudnn8-dev": versions})

    result = sandbox.run("06-cudnn.sh")
    assert result.returncode == 0, result.stderr
    assert (sandbox.root / "etc/apt/sources.list.d/gpufleet-cudnn-1.list").read_text() == (
        f"deb [signed-by=/usr/share/keyrings/gpufleet-cudnn-1.gpg] {ML_REPO} /\n"
    )
    calls = sandbox.calls()
    assert (
        "curl --retry 5 --retry-connrefused --retry-delay 5 --fail --location --silent --show-error "
        f"{ML_REPO}/7fa2af80.pub"
    ) in calls
    assert f"{APT_INSTALL} libcudnn8=8.0.5.39-1+cuda11.0 libcudnn8-dev=8.0.5.39-1+cuda11.0" in calls


def test_cudnn_8_on_amazon_linux_2_uses_the_rpm_release_with_a_dot(amazon_linux_2):
    box = amazon_linux_2
    box.env["GPUFLEET_CUDNN_URL"] = ""
    box.write("/etc/yum.repos.d/cuda-rhel7.repo", "configured\n")
    # NVIDIA's rhel7 repository: release "1.cuda11.0"; yum finds nothing for "8.0.5.39-1+cuda11.0".
    box.set_state("available", "libcudnn8 8.0.5.39-1.cuda11.0\nlibcudnn8-devel 8.0.5.39-1.cuda11.0\n")
    result = box.run("06-cudnn.sh")
    assert result.returncode == 0, result.stderr
    assert "yum install -y -q libcudnn8-8.0.5.39-1.cuda11.0 libcudnn8-devel-8.0.5.39-1.cuda11.0" in box.calls()
    assert (box.state / "packages/libcudnn8-devel").read_text() == "8.0.5.39-1.cuda11.0\n"


def test_cudnn_packages_need_their_names_from_the_data(sandbox):
    sandbox.env.update(GPUFLEET_CUDNN_URL="", GPUFLEET_CUDNN_PACKAGE="")
    result = sandbox.run("06-cudnn.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "[gpufleet] ERROR: missing required environment variable GPUFLEET_CUDNN_PACKAGE "
        "(the Packer template sets it from the AMI profile)"
    ]


@pytest.fixture
def extras(amazon_linux_2):
    """amazon-linux-extras: `enable TOPIC` makes that topic's packages (state topics/TOPIC) available to yum.
    The releases are illustrative; the versions are the client series each topic carries (FSx User Guide)."""
    box = amazon_linux_2
    box.set_state("topics/lustre2.10", "lustre-client 2.10.8-1.amzn2\n")
    box.set_state("topics/lustre", "lustre-client 2.12.8-14.amzn2\n")
    box.set_state("available", "")
    box.stub("amazon-linux-extras", '[[ "$1" == enable ]] && cp "$S/topics/$2" "$S/available"; exit 0')
    return box


def test_fsx_lustre_2_10_on_amazon_linux_2_enables_the_lustre2_10_topic(extras):
    result = extras.run("11-fsx-lustre.sh")
    assert result.returncode == 0, result.stderr
    calls = extras.calls()
    assert calls.index("amazon-linux-extras enable lustre2.10") < calls.index("yum install -y -q lustre-client-2.10.8")
    assert not any("kmod-lustre-client" in call for call in calls)
    assert (extras.state / "packages/lustre-client").read_text() == "2.10.8-1.amzn2\n"

    extras.clear_calls()
    again = extras.run("11-fsx-lustre.sh")
    assert again.stdout.strip() == "[gpufleet] FSx Lustre client already at 2.10.8: nothing to do"


def test_fsx_lustre_2_12_on_amazon_linux_2_comes_from_the_lustre_topic(extras):
    extras.env.update(GPUFLEET_FSX_LUSTRE_VERSION="2.12.8", GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC="lustre")
    result = extras.run("11-fsx-lustre.sh")
    assert result.returncode == 0, result.stderr
    assert "amazon-linux-extras enable lustre" in extras.calls()
    assert (extras.state / "packages/lustre-client").read_text() == "2.12.8-14.amzn2\n"


def test_fsx_lustre_on_ubuntu_pins_the_kernels_module_package_from_the_fsx_repository(sandbox):
    sandbox.set_state("download", "KEY\n")
    madison_after_repository(
        sandbox,
        "gpufleet-fsx-lustre-1.list",
        {
            "lustre-client-modules-5.4.0-1045-aws": "2.12.8-1\n2.10.8-1\n",
            "lustre-client-utils": "2.12.8-1\n2.10.8-1\n",
        },
    )
    result = sandbox.run("11-fsx-lustre.sh")
    assert result.returncode == 0, result.stderr
    assert (sandbox.root / "etc/apt/sources.list.d/gpufleet-fsx-lustre-1.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/gpufleet-fsx-lustre-1.gpg] "
        "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu bionic main\n"
    )
    assert (
        f"{APT_INSTALL} lustre-client-modules-5.4.0-1045-aws=2.10.8-1 lustre-client-utils=2.10.8-1" in sandbox.calls()
    )


@pytest.fixture
def toolkit_1_3_repositories(sandbox):
    """The per-distribution repositories of toolkit 1.3.0 on Ubuntu 18.04 (both must be configured), and an
    nvidia-container-runtime package that installs the binary daemon.json names."""
    sandbox.env["GPUFLEET_CONTAINER_TOOLKIT_VERSION"] = "1.3.0"
    sandbox.set_state("download", "KEY\n")
    apt_directories(sandbox)
    for package, versions in {
        "libnvidia-container1": "1.3.0-1\n1.2.0-1\n",
        "libnvidia-container-tools": "1.3.0-1\n1.2.0-1\n",
        "nvidia-container-toolkit": "1.3.0-1\n1.2.1-1\n",
        "nvidia-container-runtime": "3.4.0-1\n3.3.0-1\n",
    }.items():
        sandbox.set_state(f"repo/{package}", versions)
    sandbox.stub(
        "apt-cache",
        'list="$GPUFLEET_ROOT/etc/apt/sources.list.d/gpufleet-container-toolkit"\n'
        '[[ -f "$list-1.list" && -f "$list-2.list" && -f "$S/repo/$2" ]] || exit 0\n'
        'while read -r v; do echo " $2 | $v | https://repo/ Packages"; done <"$S/repo/$2"',
    )
    sandbox.set_state("provides/nvidia-container-runtime", "nvidia-container-runtime")
    return sandbox


def test_container_toolkit_1_3_installs_the_separate_runtime_package_daemon_json_names(toolkit_1_3_repositories):
    box = toolkit_1_3_repositories
    result = box.run("13-container-runtime.sh")
    assert result.returncode == 0, result.stderr
    sources = box.root / "etc/apt/sources.list.d"
    assert (sources / "gpufleet-container-toolkit-1.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/gpufleet-container-toolkit-1.gpg] "
        "https://nvidia.github.io/libnvidia-container/stable/ubuntu18.04/$(ARCH) /\n"
    )
    assert (sources / "gpufleet-container-toolkit-2.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/gpufleet-container-toolkit-2.gpg] "
        "https://nvidia.github.io/nvidia-container-runtime/stable/ubuntu18.04/$(ARCH) /\n"
    )
    assert (
        f"{APT_INSTALL} libnvidia-container1=1.3.0-1 libnvidia-container-tools=1.3.0-1 "
        "nvidia-container-toolkit=1.3.0-1 nvidia-container-runtime=3.4.0-1"
    ) in box.calls()
    assert (box.root / "etc/docker/daemon.json").read_text() == (
        '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}\n'
    )

    box.clear_calls()
    again = box.run("13-container-runtime.sh")
    assert again.stdout.strip() == (
        "[gpufleet] NVIDIA Container Toolkit already at 1.3.0 and configured in Docker: nothing to do"
    )


def test_container_toolkit_before_nvidia_ctk_never_registers_a_missing_runtime(toolkit_1_3_repositories):
    box = toolkit_1_3_repositories
    box.env.update(GPUFLEET_CONTAINER_RUNTIME_PACKAGE="", GPUFLEET_CONTAINER_RUNTIME_PACKAGE_VERSION="")
    result = box.run("13-container-runtime.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "[gpufleet] ERROR: nvidia-container-runtime is not installed: daemon.json would name a missing runtime"
    )
    assert not (box.root / "etc/docker/daemon.json").exists()
