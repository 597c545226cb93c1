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
    sandbox.env.update(
        GPUFLEET_OS_VERSION="22.04",
        GPUFLEET_DRIVER_VERSION="580.95.05",
        GPUFLEET_FABRIC_MANAGER_VERSION="580.95.05",
        GPUFLEET_FABRIC_MANAGER_URL="",
        GPUFLEET_FABRIC_MANAGER_PACKAGE="nvidia-fabricmanager",
    )
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
        result = sandbox.run("16-cleanup.sh")
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


def ofi_nccl_configure(known: tuple[str, ...], builds_tests_always: bool) -> str:
    """An autoconf configure of aws-ofi-nccl: KNOWN --with/--enable/--disable options (autoconf only warns about
    the others, at the end, and succeeds); it records the prefix and whether tests/ will be built for `make`."""
    return LOG_ARGS.replace("#!/bin/sh", "#!/usr/bin/env bash") + (
        "prefix=/usr/local; tests=yes; unknown=()\n"
        'for a in "$@"; do\n'
        '  case "$a" in\n'
        '    --prefix=*) prefix="${a#*=}" ;;\n'
        f'    {"|".join(known)}) [[ "$a" == --disable-tests ]] && tests=no ;;\n'
        '    *) unknown+=("${a%%=*}") ;;\n'
        "  esac\n"
        "done\n"
        + ("tests=yes\n" if builds_tests_always else "")
        + 'printf "prefix=%s\\ntests=%s\\n" "$prefix" "$tests" >config.stub\n'
        '[[ ${#unknown[@]} -eq 0 ]] || echo "configure: WARNING: unrecognized options: ${unknown[*]}" >&2\n'
    )


# v1.1.1 configure.ac: --with-libfabric/cuda/nccl/mpi and --enable-trace, no --disable-tests (tests/ always built).
CONFIGURE_1_1_1 = ofi_nccl_configure(
    ("--with-libfabric=*", "--with-cuda=*", "--with-nccl=*", "--with-mpi=*", "--enable-trace"), True
)
# v1.16.3 configure.ac and m4/: --with-nccl is gone, --disable-tests and --with-hwloc are there.
CONFIGURE_1_16_3 = ofi_nccl_configure(
    ("--with-libfabric=*", "--with-cuda=*", "--with-mpi=*", "--with-hwloc=*", "--disable-tests", "--enable-trace"),
    False,
)
# automake's make: tests/ compiles with CC=mpicc (v1.1.1 tests/Makefile.am), found on PATH or not at all;
# `make install` puts the plugin under the configured prefix.
OFI_NCCL_MAKE = (
    "source ./config.stub\n"
    'if [[ "${1:-}" == install ]]; then mkdir -p "$prefix/lib"; echo plugin >"$prefix/lib/libnccl-net.so"; exit 0; fi\n'
    'if [[ "$tests" == yes ]] && ! command -v mpicc >/dev/null; then\n'
    '  echo "make[2]: mpicc: No such file or directory" >&2; exit 2; fi'
)


@pytest.fixture
def ofi_nccl_build(sandbox):
    sandbox.write("/opt/amazon/efa/include/rdma/fabric.h", "")
    sandbox.write("/opt/amazon/openmpi/bin/mpicc", "#!/bin/sh\n", executable=True)
    (sandbox.root / "etc/ld.so.conf.d").mkdir(parents=True)
    sandbox.stub("make", OFI_NCCL_MAKE)
    return sandbox


def test_aws_ofi_nccl_1_1_1_builds_its_mpi_tests_with_open_mpi_on_path(ofi_nccl_build):
    box, root = ofi_nccl_build, ofi_nccl_build.root
    box.env["GPUFLEET_AWS_OFI_NCCL_VERSION"] = "1.1.1"
    make_tarball(box, "aws-ofi-nccl-1.1.1", {"configure": CONFIGURE_1_1_1})
    first = box.run("09-aws-ofi-nccl.sh")
    assert first.returncode == 0, first.stderr
    assert "unrecognized options" not in first.stderr
    assert (
        f"configure --prefix={root}/opt/aws-ofi-nccl --with-libfabric={root}/opt/amazon/efa "
        f"--with-cuda={root}/usr/local/cuda --with-mpi={root}/opt/amazon/openmpi --with-nccl={root}/usr"
    ) in box.calls()
    assert (root / "opt/aws-ofi-nccl/gpufleet-version").read_text() == "1.1.1\n"
    assert (root / "etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf").read_text() == "/opt/aws-ofi-nccl/lib\n"
    assert "\tlibnccl-net.so (libc6,x86-64) => /opt/aws-ofi-nccl/lib/libnccl-net.so" in box.bash("ldconfig -p").stdout

    box.clear_calls()
    second = box.run("09-aws-ofi-nccl.sh")
    assert second.stdout.strip() == "[gpufleet] aws-ofi-nccl already at 1.1.1: nothing to do"
    assert box.calls() == []


def test_aws_ofi_nccl_1_1_1_needs_open_mpi_for_its_tests(ofi_nccl_build):
    ofi_nccl_build.env["GPUFLEET_AWS_OFI_NCCL_VERSION"] = "1.1.1"
    (ofi_nccl_build.root / "opt/amazon/openmpi/bin/mpicc").unlink()
    make_tarball(ofi_nccl_build, "aws-ofi-nccl-1.1.1", {"configure": CONFIGURE_1_1_1})
    result = ofi_nccl_build.run("09-aws-ofi-nccl.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"[gpufleet] ERROR: no {ofi_nccl_build.root}/opt/amazon/openmpi/bin/mpicc: aws-ofi-nccl 1.1.1 builds its MPI "
        "tests; run 07-efa-installer.sh first"
    )


def test_aws_ofi_nccl_1_16_3_from_source_skips_its_tests_and_drops_with_nccl(ofi_nccl_build):
    box, root = ofi_nccl_build, ofi_nccl_build.root
    box.env["GPUFLEET_AWS_OFI_NCCL_VERSION"] = "1.16.3"
    (root / "opt/amazon/openmpi/bin/mpicc").unlink()  # not needed: no tests are built
    make_tarball(box, "aws-ofi-nccl-1.16.3", {"configure": CONFIGURE_1_16_3})
    result = box.run("09-aws-ofi-nccl.sh")
    assert result.returncode == 0, result.stderr
    assert "unrecognized options" not in result.stderr
    assert (
        f"configure --prefix={root}/opt/aws-ofi-nccl --with-libfabric={root}/opt/amazon/efa "
        f"--with-cuda={root}/usr/local/cuda --with-mpi={root}/opt/amazon/openmpi --disable-tests"
    ) in box.calls()


@pytest.fixture
def efa_installer_plugin(sandbox):
    """The layout EFA installer 1.43.2 leaves: libnccl-net-ofi.so naming its release, and the libnccl-net.so link."""
    sandbox.env["GPUFLEET_AWS_OFI_NCCL_VERSION"] = "1.16.3"
    sandbox.env["GPUFLEET_AWS_OFI_NCCL_URL"] = ""
    library = sandbox.write(
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so",
        "\x7fELF\x00\x01NET/OFI Initializing aws-ofi-nccl 1.16.3\x00Using Libfabric version %u.%u\x00",
    )
    (library.parent / "libnccl-net.so").symlink_to("libnccl-net-ofi.so")
    (sandbox.root / "etc/ld.so.conf.d").mkdir(parents=True)
    return sandbox


def test_aws_ofi_nccl_from_the_efa_installer_is_registered_not_built(efa_installer_plugin):
    box = efa_installer_plugin
    first = box.run("09-aws-ofi-nccl.sh")
    assert first.returncode == 0, first.stderr
    directory = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
    assert (box.root / "etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf").read_text() == directory + "\n"
    assert box.calls() == ["ldconfig "]
    assert not (box.root / "opt/aws-ofi-nccl").exists()
    assert f"\tlibnccl-net.so (libc6,x86-64) => {directory}/libnccl-net.so" in box.bash("ldconfig -p").stdout

    box.clear_calls()
    second = box.run("09-aws-ofi-nccl.sh")
    assert second.stdout.strip() == (
        f"[gpufleet] aws-ofi-nccl 1.16.3 from the EFA installer already registered ({directory}): nothing to do"
    )
    assert box.calls() == []


def test_aws_ofi_nccl_from_the_efa_installer_must_be_the_pinned_release(efa_installer_plugin):
    efa_installer_plugin.env["GPUFLEET_AWS_OFI_NCCL_VERSION"] = "1.16.2"
    result = efa_installer_plugin.run("09-aws-ofi-nccl.sh")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "[gpufleet] ERROR: the EFA installer's /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so is "
        "aws-ofi-nccl 1.16.3, the profile pins 1.16.2"
    )


def test_aws_ofi_nccl_without_url_needs_the_efa_installer_plugin(sandbox):
    sandbox.env["GPUFLEET_AWS_OFI_NCCL_URL"] = ""
    result = sandbox.run("09-aws-ofi-nccl.sh")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "[gpufleet] ERROR: expected one libnccl-net.so under /opt/amazon/ofi-nccl, found 0 (none): the profile takes "
        "aws-ofi-nccl from the EFA installer (no url), so pin an installer that ships it (>= 1.39) or give "
        "components.aws_ofi_nccl.url"
    )
    assert sandbox.calls() == []


def test_aws_ofi_nccl_refuses_to_build_without_libfabric(sandbox):
    result = sandbox.run("09-aws-ofi-nccl.sh")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"[gpufleet] ERROR: libfabric not found under {sandbox.root}/opt/amazon/efa: run 07-efa-installer.sh first"
    )


@pytest.mark.parametrize(
    ("os_family", "os_version", "install_call", "hwloc"),
    [("ubuntu", "18.04", "apt-get install", "libhwloc-dev"), ("amzn", "2", "yum install", "hwloc-devel")],
)
def test_build_tools_include_hwloc_for_aws_ofi_nccl(sandbox, os_family, os_version, install_call, hwloc):
    """aws-ofi-nccl >= 1.7.0 configure fails without hwloc; its README names these two development packages."""
    sandbox.env.update(GPUFLEET_OS_FAMILY=os_family, GPUFLEET_OS_VERSION=os_version)
    sandbox.stub("amazon-linux-extras", "exit 0")
    sandbox.write("/usr/local/bin/uv", '#!/bin/sh\necho "uv 0.12.21 (0a1b2c3d4 2026-09-01)"\n', executable=True)
    result = sandbox.run("01-build-tools.sh")
    assert result.returncode == 0, result.stderr
    program, verb = install_call.split()
    install = next(call.split() for call in sandbox.calls() if call.split()[0] == program and verb in call.split())
    assert hwloc in install


def nccl_source_build(box):
    box.env["GPUFLEET_NCCL_URL"] = "https://github.com/NVIDIA/nccl/archive/refs/tags/v2.7.8-1.tar.gz"
    make_tarball(box, "nccl-2.7.8-1", {"Makefile": ""})
    (box.root / "etc/ld.so.conf.d").mkdir(parents=True)
    box.stub("make", "exit 0")
    box.stub("nproc", "echo 4")


def test_nccl_source_build_compiles_for_the_target_architectures_only(sandbox):
    nccl_source_build(sandbox)
    sandbox.env["GPUFLEET_CUDA_ARCHITECTURES"] = "80 90"
    result = sandbox.run("08-nccl.sh")
    assert result.returncode == 0, result.stderr
    source = sandbox.root / "var/tmp/gpufleet-build/nccl/src/nccl-2.7.8-1"
    # makefiles/common.mk: NVCC_GENCODE ?= every architecture of the CUDA release, unless given.
    assert (
        f"make -C {source} -j 4 src.build CUDA_HOME={sandbox.root}/usr/local/cuda "
        "NVCC_GENCODE=-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90"
    ) in sandbox.calls()


def test_nccl_source_build_refuses_a_dotted_architecture(sandbox):
    nccl_source_build(sandbox)
    sandbox.env["GPUFLEET_CUDA_ARCHITECTURES"] = "8.0"
    result = sandbox.run("08-nccl.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "[gpufleet] ERROR: GPUFLEET_CUDA_ARCHITECTURES: '8.0' is not a compute capability such as 80"
    )
    assert not any(call.startswith("make") for call in sandbox.calls())


# Ubuntu 18.04's CMake 3.10.2: `-S` (3.13), `--parallel` (3.12) and `--install` (3.15) do not exist yet. It
# configures the source directory given as its argument into the current directory.
CMAKE_3_10 = (
    'for a in "$@"; do case "$a" in -S|--install|--parallel) echo "CMake Error: Unknown argument $a" >&2; exit 1;; '
    "esac; done\n"
    'for a in "$@"; do [[ "$a" == -DCMAKE_INSTALL_PREFIX=* ]] && echo "${a#*=}" >cmake.prefix; done\n'
    '[[ -d "$1" && -f cmake.prefix ]] || { echo "CMake Error: no source directory" >&2; exit 1; }'
)
# make in the configured directory: `make install` installs the version header.
CMAKE_MAKE = (
    '[[ -f cmake.prefix ]] || { echo "make: *** No targets specified and no makefile found.  Stop." >&2; exit 2; }\n'
    'if [[ "${1:-}" == install ]]; then p="$(<cmake.prefix)"; mkdir -p "$p/include/oneapi/dnnl"\n'
    '  printf "#define DNNL_VERSION_MAJOR 1\\n#define DNNL_VERSION_MINOR 6\\n#define DNNL_VERSION_PATCH 4\\n" '
    '>"$p/include/oneapi/dnnl/dnnl_version.h"; fi'
)


def test_onednn_builds_with_ubuntu_1804s_cmake_then_does_nothing(sandbox):
    sandbox.env["GPUFLEET_ONEDNN_VERSION"] = "1.6.4"
    make_tarball(sandbox, "oneDNN-1.6.4", {"CMakeLists.txt": ""})
    (sandbox.root / "etc/ld.so.conf.d").mkdir(parents=True)
    sandbox.stub("cmake", CMAKE_3_10)
    sandbox.stub("make", CMAKE_MAKE)
    sandbox.stub("nproc", "echo 4")
    first = sandbox.run("12-onednn.sh")
    assert first.returncode == 0, first.stderr
    source, prefix = sandbox.root / "var/tmp/gpufleet-build/onednn/src/oneDNN-1.6.4", sandbox.root / "opt/onednn"
    assert [call for call in sandbox.calls() if call.split()[0] in ("cmake", "make")] == [
        f"cmake {source} -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX={prefix} -DDNNL_BUILD_TESTS=OFF "
        "-DDNNL_BUILD_EXAMPLES=OFF",
        "make -j 4",
        "make install",
    ]
    loader_conf = sandbox.root / "etc/ld.so.conf.d/gpufleet-onednn.conf"
    assert loader_conf.read_text() == "/opt/onednn/lib\n/opt/onednn/lib64\n"

    sandbox.clear_calls()
    second = sandbox.run("12-onednn.sh")
    assert second.stdout.strip() == "[gpufleet] oneDNN already at 1.6.4: nothing to do"
