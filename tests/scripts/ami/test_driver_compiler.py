"""02-nvidia-driver.sh builds the kernel module with the compiler that built the running kernel (read from
/proc/version), installing that gcc when the image lacks it."""

from __future__ import annotations

import pytest

APT_LOCK = "apt-get -o DPkg::Lock::Timeout=600"

UBUNTU_2204_68_KERNEL = (
    "Linux version 6.8.0-1015-aws (buildd@lcy02-amd64-095) (x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) "
    "12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #16~22.04.1-Ubuntu SMP Mon Aug 19 19:38:17 UTC 2024\n"
)


@pytest.fixture
def compiler_logging_runfile(sandbox):
    runfile = (
        '#!/bin/sh\necho "runfile CC=${CC:-default} $*" >>"$STUB_LOG"\n'
        'echo "$GPUFLEET_DRIVER_VERSION" >"$STUB_STATE/modinfo"\n'
    )
    sandbox.set_state("download", runfile)
    return sandbox


def test_driver_module_is_built_with_the_gcc_that_built_the_kernel(compiler_logging_runfile):
    box = compiler_logging_runfile
    box.env.update(GPUFLEET_OS_VERSION="22.04", GPUFLEET_DRIVER_VERSION="580.95.05")
    box.write_proc_version(UBUNTU_2204_68_KERNEL)
    result = box.run("02-nvidia-driver.sh")
    assert result.returncode == 0, result.stderr
    calls = box.calls()
    assert f"{APT_LOCK} install -y -q --no-install-recommends gcc-12" in calls
    assert "runfile CC=/usr/bin/gcc-12 --silent --dkms --disable-nouveau --no-cc-version-check" in calls
    assert "[gpufleet] building the kernel module with gcc-12, the kernel's compiler" in result.stdout


def test_driver_keeps_the_default_compiler_when_the_kernel_used_it(compiler_logging_runfile):
    box = compiler_logging_runfile
    box.write_proc_version()
    result = box.run("02-nvidia-driver.sh")
    assert result.returncode == 0, result.stderr
    assert "runfile CC=default --silent --dkms --disable-nouveau --no-cc-version-check" in box.calls()
    assert not any(call.startswith("apt-get") for call in box.calls())


def test_driver_does_not_reinstall_an_installed_kernel_compiler(compiler_logging_runfile):
    box = compiler_logging_runfile
    box.write_proc_version(UBUNTU_2204_68_KERNEL)
    box.set_package("gcc-12", "12.3.0-1ubuntu1~22.04")
    result = box.run("02-nvidia-driver.sh")
    assert result.returncode == 0, result.stderr
    assert not any(call.startswith("apt-get") for call in box.calls())
    assert "runfile CC=/usr/bin/gcc-12 --silent --dkms --disable-nouveau --no-cc-version-check" in box.calls()
