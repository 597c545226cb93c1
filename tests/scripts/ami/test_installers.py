"""Installer scripts with stubbed system commands: what they run the first time, that a second run does
nothing and says so, and that they refuse what the contract forbids."""

from __future__ import annotations

import hashlib

import pytest


@pytest.fixture
def driver_runfile(sandbox) -> str:
    """A fake NVIDIA runfile: records its arguments and 'installs' the module modinfo then reports."""
    runfile = (
        '#!/bin/sh\necho "runfile $*" >>"$STUB_LOG"\n'
        f'echo "{sandbox.env["GPUFLEET_DRIVER_VERSION"]}" >"$STUB_STATE/modinfo"\n'
    ).encode()
    (sandbox.state / "download").write_bytes(runfile)
    sandbox.write_proc_version()
    return hashlib.sha256(runfile).hexdigest()


def test_driver_installs_from_the_verified_runfile_then_does_nothing(sandbox, driver_runfile):
    sandbox.env["GPUFLEET_DRIVER_SHA256"] = driver_runfile
    first = sandbox.run("02-nvidia-driver.sh")
    assert first.returncode == 0, first.stderr
    calls = sandbox.calls()
    assert (
        calls[1] == f"curl --retry 5 --retry-connrefused --retry-delay 5 --fail --location --silent --show-error "
        f"--output {sandbox.root}/var/tmp/gpufleet-build/nvidia-driver/NVIDIA-Linux-450.80.02.run "
        "https://downloads.example/driver-450.80.02.bin"
    )
    assert calls[2] == "runfile --silent --dkms --disable-nouveau --no-cc-version-check"
    assert "[gpufleet] NVIDIA driver 450.80.02 installed" in first.stdout

    sandbox.clear_calls()
    second = sandbox.run("02-nvidia-driver.sh")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["[gpufleet] NVIDIA driver already at 450.80.02: nothing to do"]
    assert sandbox.calls() == ["modinfo -F version nvidia"]


def test_driver_replaces_another_installed_version(sandbox, driver_runfile):
    sandbox.set_state("modinfo", "450.51.06\n")
    result = sandbox.run("02-nvidia-driver.sh")
    assert result.returncode == 0, result.stderr
    assert "[gpufleet] replacing NVIDIA driver 450.51.06 with 450.80.02" in result.stdout
    assert any(call.startswith("runfile ") for call in sandbox.calls())


def test_driver_with_bad_checksum_never_runs_the_installer(sandbox, driver_runfile):
    sandbox.env["GPUFLEET_DRIVER_SHA256"] = "f" * 64
    result = sandbox.run("02-nvidia-driver.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        "[gpufleet] ERROR: sha256 mismatch for https://downloads.example/driver-450.80.02.bin: expected fff"
    )
    assert not any(call.startswith("runfile") for call in sandbox.calls())


def test_fabric_manager_installs_pinned_holds_enables_then_does_nothing(sandbox):
    sandbox.env["GPUFLEET_FABRIC_MANAGER_URL"] = ""
    sandbox.set_state("madison/nvidia-fabricmanager-450", "450.80.02-1\n450.51.06-1\n")
    (sandbox.root / "etc/apt/sources.list.d").mkdir(parents=True)
    (sandbox.root / "etc/apt/sources.list.d/gpufleet-cuda.list").write_text("configured\n")

    first = sandbox.run("04-fabric-manager.sh")
    assert first.returncode == 0, first.stderr
    calls = sandbox.calls()
    assert (
        "apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends --allow-downgrades "
        "nvidia-fabricmanager-450=450.80.02-1" in calls
    )
    assert "apt-mark hold nvidia-fabricmanager-450" in calls
    assert "systemctl enable nvidia-fabricmanager" in calls

    sandbox.clear_calls()
    second = sandbox.run("04-fabric-manager.sh")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        "[gpufleet] nvidia-fabricmanager-450 already at 450.80.02: nothing to do",
        "[gpufleet] nvidia-fabricmanager already enabled: nothing to do",
    ]
    assert [call.split()[0] for call in sandbox.calls()] == ["dpkg-query", "systemctl"]


def test_fabric_manager_r450_on_amazon_linux_2_is_the_branch_package(amazon_linux_2):
    """NVIDIA's rhel7 repository names R450 nvidia-fabricmanager-450; nvidia-fabric-manager starts at 460.91."""
    sandbox = amazon_linux_2
    sandbox.env["GPUFLEET_FABRIC_MANAGER_URL"] = ""
    sandbox.set_state("available", "nvidia-fabricmanager-450 450.80.02-1\nnvidia-fabric-manager 470.57.02-1\n")
    (sandbox.root / "etc/yum.repos.d").mkdir(parents=True)
    (sandbox.root / "etc/yum.repos.d/cuda-rhel7.repo").write_text("configured\n")
    result = sandbox.run("04-fabric-manager.sh")
    assert result.returncode == 0, result.stderr
    assert "yum install -y -q nvidia-fabricmanager-450-450.80.02" in sandbox.calls()
    assert "yum versionlock add nvidia-fabricmanager-450" in sandbox.calls()
    assert (sandbox.state / "packages/nvidia-fabricmanager-450").read_text() == "450.80.02-1\n"


def test_fabric_manager_r580_on_ubuntu_is_nvidias_unsuffixed_package(sandbox):
    sandbox.env.update(GPUFLEET_OS_VERSION="22.04", GPUFLEET_DRIVER_VERSION="580.95.05",
                       GPUFLEET_FABRIC_MANAGER_VERSION="580.95.05", GPUFLEET_FABRIC_MANAGER_URL="",
                       GPUFLEET_FABRIC_MANAGER_PACKAGE="nvidia-fabricmanager")
    # NVIDIA's ubuntu2204 CUDA repository: the R580 package has no branch suffix.
    sandbox.set_state("madison/nvidia-fabricmanager", "580.95.05-1\n580.82.07-1\n")
    sandbox.write("/etc/apt/sources.list.d/gpufleet-cuda.list", "configured\n")
    result = sandbox.run("04-fabric-manager.sh")
    assert result.returncode == 0, result.stderr
    assert "apt-mark hold nvidia-fabricmanager" in sandbox.calls()
    assert (sandbox.state / "packages/nvidia-fabricmanager").read_text() == "580.95.05-1\n"


def test_fabric_manager_is_skipped_without_nvswitch(sandbox):
    result = sandbox.run("04-fabric-manager.sh", {**sandbox.env, "GPUFLEET_NVSWITCH": "0"})
    assert result.returncode == 0
    assert result.stdout.strip() == "[gpufleet] target has no NVSwitch (GPUFLEET_NVSWITCH=0): Fabric Manager not needed"
    assert sandbox.calls() == []


def test_fabric_manager_must_equal_the_driver_version(sandbox):
    result = sandbox.run("04-fabric-manager.sh", {**sandbox.env, "GPUFLEET_FABRIC_MANAGER_VERSION": "450.51.06"})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "[gpufleet] ERROR: GPUFLEET_FABRIC_MANAGER_VERSION (450.51.06) must equal GPUFLEET_DRIVER_VERSION (450.80.02)"
    )
    assert sandbox.calls() == []


@pytest.mark.parametrize(
    "loaded,reboot_required,reboots",
    [("450.80.02", False, False), ("450.80.02", True, True), ("450.51.06", False, True), (None, False, True)],
)
def test_reboot_barrier_reboots_only_when_needed(sandbox, loaded, reboot_required, reboots):
    if loaded:
        sandbox.write("/sys/module/nvidia/version", loaded + "\n")
    if reboot_required:
        sandbox.write("/var/run/reboot-required", "")
    result = sandbox.run("03-reboot.sh")
    assert result.returncode == 0, result.stderr
    assert ("systemctl reboot" in sandbox.calls()) is reboots


def test_cleanup_removes_build_leftovers_and_identity(sandbox):
    sandbox.env["GPUFLEET_OS_FAMILY"] = "ubuntu"
    for path, text in {
        "/var/tmp/gpufleet-build/cuda/cuda.run": "x",
        "/var/log/syslog": "boot messages",
        "/var/log/syslog.1": "old",
        "/etc/ssh/ssh_host_rsa_key": "secret",
        "/etc/machine-id": "0123456789abcdef",
        "/var/lib/dbus/machine-id": "0123456789abcdef",
        "/var/lib/cloud/instance/boot-finished": "x",
        "/var/lib/apt/lists/archive_Packages": "x",
        "/root/.bash_history": "ls",
        "/home/ubuntu/.bash_history": "ls",
    }.items():
        sandbox.write(path, text)
    for _ in range(2):
        result = sandbox.run("14-cleanup.sh")
        assert result.returncode == 0, result.stderr
    remaining_files = {
        "/" + str(path.relative_to(sandbox.root)): path.read_text()
        for path in sandbox.root.rglob("*")
        if path.is_file()
    }
    # machine-id stays as an empty file so systemd generates a fresh one on first boot.
    assert remaining_files == {"/etc/machine-id": "", "/var/log/syslog": ""}
    for directory in ("var/lib/apt/lists", "var/lib/cloud"):
        assert (sandbox.root / directory).is_dir()
    assert "apt-get clean" in sandbox.calls()


def make_tarball(box, top: str, files: dict[str, str]) -> str:
    """A release tarball whose single top-level directory TOP holds executable FILES; returns its sha256."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    (box.state / "download").write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


LOG_ARGS = '#!/bin/sh\necho "$(basename "$0") $*" >>"$STUB_LOG"\n'


def test_cuda_installs_toolkit_only_links_it_then_does_nothing(sandbox):
    fake_runfile = (
        LOG_ARGS.replace('$(basename "$0")', "runfile")
        + 'for a in "$@"; do case "$a" in --toolkitpath=*) p="${a#*=}";; esac; done\n'
        'mkdir -p "$p/bin"\n'
        'printf "#!/bin/sh\\necho \'Cuda compilation tools, release 11.0, V11.0.221\'\\n" >"$p/bin/nvcc"\n'
        'chmod +x "$p/bin/nvcc"\n'
    ).encode()
    (sandbox.state / "download").write_bytes(fake_runfile)
    sandbox.env["GPUFLEET_CUDA_SHA256"] = hashlib.sha256(fake_runfile).hexdigest()
    (sandbox.root / "etc/ld.so.conf.d").mkdir(parents=True)
    first = sandbox.run("05-cuda.sh")
    assert first.returncode == 0, first.stderr
    prefix = sandbox.root / "usr/local/cuda-11.0"
    runfile_call = next(call for call in sandbox.calls() if call.startswith("runfile "))
    assert runfile_call.startswith(f"runfile --toolkit --silent --override --toolkitpath={prefix} ")
    assert (sandbox.root / "usr/local/cuda").readlink() == prefix
    assert (sandbox.root / "etc/ld.so.conf.d/gpufleet-cuda.conf").read_text() == "/usr/local/cuda/lib64\n"

    sandbox.clear_calls()
    second = sandbox.run("05-cuda.sh")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == f"[gpufleet] CUDA 11.0.3 already installed at {prefix}: nothing to do"
    assert sandbox.calls() == []


@pytest.mark.parametrize("version,flags", [("1.14.1", "-y"), ("1.13.0", "-y --enable-gdr")])
def test_efa_installer_full_install_with_gpudirect_then_does_nothing(sandbox, version, flags):
    sandbox.env["GPUFLEET_EFA_INSTALLER_VERSION"] = version
    installer = LOG_ARGS + (
        'mkdir -p "$GPUFLEET_ROOT/opt/amazon"\n'
        f'echo "# EFA installer version: {version}" >"$GPUFLEET_ROOT/opt/amazon/efa_installed_packages"\n'
    )
    sandbox.env["GPUFLEET_EFA_INSTALLER_SHA256"] = make_tarball(
        sandbox, "aws-efa-installer", {"efa_installer.sh": installer}
    )
    first = sandbox.run("07-efa-installer.sh")
    assert first.returncode == 0, first.stderr
    assert f"efa_installer.sh {flags}" in sandbox.calls()
    assert "--skip-kmod" not in "".join(sandbox.calls())

    sandbox.clear_calls()
    second = sandbox.run("07-efa-installer.sh")
    assert second.stdout.strip() == f"[gpufleet] EFA installer already at {version}: nothing to do"
    assert sandbox.calls() == []


def test_aws_ofi_nccl_builds_against_installed_libfabric_and_writes_its_marker(sandbox):
    sandbox.write("/opt/amazon/efa/include/rdma/fabric.h", "")
    (sandbox.root / "etc/ld.so.conf.d").mkdir(parents=True)
    sandbox.stub("make", "exit 0")
    configure = LOG_ARGS + 'for a in "$@"; do case "$a" in --prefix=*) mkdir -p "${a#*=}";; esac; done\n'
    make_tarball(sandbox, "aws-ofi-nccl-1.1.4", {"configure": configure})
    first = sandbox.run("09-aws-ofi-nccl.sh")
    assert first.returncode == 0, first.stderr
    root = sandbox.root
    assert (
        f"configure --prefix={root}/opt/aws-ofi-nccl --with-libfabric={root}/opt/amazon/efa "
        f"--with-cuda={root}/usr/local/cuda --with-nccl={root}/usr --with-mpi={root}/opt/amazon/openmpi --disable-tests"
    ) in sandbox.calls()
    assert (root / "opt/aws-ofi-nccl/gpufleet-version").read_text() == "1.1.4\n"

    sandbox.clear_calls()
    second = sandbox.run("09-aws-ofi-nccl.sh")
    assert second.stdout.strip() == "[gpufleet] aws-ofi-nccl already at 1.1.4: nothing to do"
    assert sandbox.calls() == []


def test_aws_ofi_nccl_refuses_to_build_without_libfabric(sandbox):
    result = sandbox.run("09-aws-ofi-nccl.sh")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"[gpufleet] ERROR: libfabric not found under {sandbox.root}/opt/amazon/efa: run 07-efa-installer.sh first"
    )
