"""Strict mode, as behaviour: a provisioning step that fails stops the script with that step's exit status, and
nothing after it runs (the scripts, and lib/common.sh that they source, rely on `set -euo pipefail` for that).
Each case fails one call in the middle of a script in the sandbox and names a later call that must not be made."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable

import pytest

from tests.scripts.ami.conftest import SCRIPTS_DIR, Sandbox
from tests.scripts.failing_step import FAILED_STATUS, Call, Case, StepProbe, accounted_for, scripts_in

APT = "-o DPkg::Lock::Timeout=600"  # apt_get's options (lib/common.sh)
CURL = "--retry 5 --retry-connrefused --retry-delay 5 --fail --location --silent --show-error"  # CURL_RETRY_FLAGS

CASES = [
    Case(
        "00-os-update.sh",
        fails=Call(
            "systemctl",
            "disable --now apt-daily.timer apt-daily.service apt-daily-upgrade.timer apt-daily-upgrade.service",
        ),
        must_not_run=Call("apt-mark"),
        why="apt's timers still on: the kernel is not held and apt runs during the build",
    ),
    Case(
        "01-build-tools.sh",
        fails=Call("apt-get", f"{APT} update -q"),
        must_not_run=Call("apt-get", "* install *"),
        why="installing from stale package lists",
    ),
    Case(
        "02-nvidia-driver.sh",
        fails=Call("sed", r"-n -E s/.*[^[:alnum:]]gcc-([0-9]+)[^0-9].*/\1/p {root}/proc/version"),
        must_not_run=Call("curl"),
        why="building the kernel module without knowing the kernel's compiler",
    ),
    Case(
        "04-fabric-manager.sh",
        fails=Call(
            "curl", f"{CURL} https://developer.download.nvidia.com/compute/cuda/repos/ubuntu1804/x86_64/3bf863cc.pub"
        ),
        must_not_run=Call("apt-get", "* update *"),
        why="a CUDA repository added without its signing key (pipefail: the key is piped into gpg)",
    ),
    Case(
        "05-cuda.sh",
        fails=Call(
            "sh",
            "{root}/var/tmp/gpufleet-build/cuda/cuda_11.0.3.run --toolkit --silent --override "
            "--toolkitpath={root}/usr/local/cuda-11.0 --tmpdir={root}/var/tmp/gpufleet-build/cuda",
        ),
        must_not_run=Call("ln"),
        why="/usr/local/cuda pointed at a toolkit that did not install",
    ),
    Case(
        "06-cudnn.sh",
        fails=Call("apt-get", f"{APT} update -q"),
        must_not_run=Call("apt-cache"),
        why="cuDNN resolved against package lists without NVIDIA's repository",
    ),
    Case(
        "07-efa-installer.sh",
        fails=Call("gpg", "--batch --quiet --import {root}/var/tmp/gpufleet-build/efa-installer/efa-installer.key"),
        must_not_run=Call("gpg", "* --verify *"),
        why="the installer's signature checked against a key that was never imported",
    ),
    Case(
        "08-nccl.sh",
        fails=Call("make", "-C {root}/var/tmp/gpufleet-build/nccl/src/nccl-2.7.8 install PREFIX={root}/opt/nccl"),
        must_not_run=Call("ldconfig"),
        why="the loader pointed at an NCCL that did not install",
    ),
    Case(
        "09-aws-ofi-nccl.sh",
        fails=Call(
            "configure",
            "--prefix={root}/opt/aws-ofi-nccl --with-libfabric={root}/opt/amazon/efa --with-cuda={root}/usr/local/cuda "
            "--with-mpi={root}/opt/amazon/openmpi --disable-tests",
        ),
        must_not_run=Call("make"),
        why="building aws-ofi-nccl that was not configured",
    ),
    Case(
        "10-nccl-tests.sh",
        fails=Call("mkdir", "-p {root}/opt/nccl-tests"),
        must_not_run=Call("make"),
        why="building nccl-tests into a directory that is not there",
    ),
    Case(
        "11-fsx-lustre.sh",
        fails=Call("apt-get", f"{APT} update -q"),
        must_not_run=Call("apt-cache"),
        why="the Lustre client resolved against package lists without the FSx repository",
    ),
    Case(
        "12-onednn.sh",
        fails=Call(
            "cmake",
            "{root}/var/tmp/gpufleet-build/onednn/src/oneDNN-2.2.4 -DCMAKE_BUILD_TYPE=Release "
            "-DCMAKE_INSTALL_PREFIX={root}/opt/onednn -DDNNL_BUILD_TESTS=OFF -DDNNL_BUILD_EXAMPLES=OFF",
        ),
        must_not_run=Call("make"),
        why="building oneDNN that was not configured",
    ),
    Case(
        "13-container-runtime.sh",
        fails=Call("apt-get", f"{APT} install -y -q --no-install-recommends docker.io"),
        must_not_run=Call("curl"),
        why="the NVIDIA runtime configured for a Docker that is not installed",
    ),
    Case(
        "14-aws-cli.sh",
        fails=Call(
            "gpg", f"--batch --quiet --import {SCRIPTS_DIR}/lib/keys/FB5DB77FD5C118B80511ADA8A6310ACC4672475C.asc"
        ),
        must_not_run=Call("unzip"),
        why="an installer unpacked whose signature was checked against no key",
    ),
    Case(
        "15-cloudwatch-agent.sh",
        fails=Call(
            "gpg", "--batch --quiet --import {root}/var/tmp/gpufleet-build/cloudwatch-agent/amazon-cloudwatch-agent.gpg"
        ),
        must_not_run=Call("dpkg"),
        why="a package installed whose signature was checked against no key",
    ),
    Case(
        "16-cleanup.sh",
        fails=Call("apt-get", "clean"),
        must_not_run=Call("rm"),
        why="an image shipped with apt's caches while the rest looks cleaned",
    ),
    Case(
        "17-validate.sh",
        fails=Call("paste", "-sd, -"),
        must_not_run=Call("systemctl"),
        why="the driver check skipped and the image validated anyway",
    ),
]

# Scripts with no step whose failure strict mode has to catch, and why.
NOTHING_TO_CATCH = {
    "03-reboot.sh": "its one command, systemctl reboot, is the last: its status is the script's",
}


def tarball(top: str, executables: dict[str, str]) -> bytes:
    """A release tarball unpacking to the single directory TOP, holding executable scripts."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as archive:
        for name, body in executables.items():
            content = body.encode()
            entry = tarfile.TarInfo(f"{top}/{name}")
            entry.size, entry.mode = len(content), 0o755
            archive.addfile(entry, io.BytesIO(content))
    return data.getvalue()


def driver_runfile(sandbox: Sandbox) -> None:
    sandbox.write_proc_version()
    sandbox.set_state("download", "exit 0\n")


def signed_efa_installer(sandbox: Sandbox) -> None:
    sandbox.set_state("download", "downloaded\n")
    sandbox.env["GPUFLEET_EFA_INSTALLER_GPG_KEY_URL"] = "https://downloads.example/efa-installer.key"


def source_release(variable: str, top: str, executables: dict[str, str] | None = None) -> Callable[[Sandbox], None]:
    """The release's download; a build step in it that calls the same name on PATH can be made to fail."""

    def prepare(sandbox: Sandbox) -> None:
        (sandbox.state / "download").write_bytes(tarball(top, executables or {"README": "a source release\n"}))
        sandbox.env[variable] = f"https://downloads.example/{top}.tar.gz"

    return prepare


def aws_ofi_nccl_source(sandbox: Sandbox) -> None:
    source_release(
        "GPUFLEET_AWS_OFI_NCCL_URL", "aws-ofi-nccl-1.7.0", {"configure": '#!/bin/sh\nexec configure "$@"\n'}
    )(sandbox)
    sandbox.env["GPUFLEET_AWS_OFI_NCCL_VERSION"] = "1.7.0"
    sandbox.write("/opt/amazon/efa/include/rdma/fabric.h", "/* libfabric */\n")


def from_repositories(*url_variables: str) -> Callable[[Sandbox], None]:
    """Packages from the repositories (no URL: the profile's usual way), the apt directories of an Ubuntu image."""

    def prepare(sandbox: Sandbox) -> None:
        for variable in url_variables:
            sandbox.env[variable] = ""
        sandbox.set_state("download", "a signing key\n")
        for directory in ("/usr/share/keyrings", "/etc/apt/sources.list.d"):
            (sandbox.root / directory.lstrip("/")).mkdir(parents=True)

    return prepare


def nccl_tests_source(sandbox: Sandbox) -> None:
    source_release("GPUFLEET_NCCL_TESTS_URL", "nccl-tests-2.10.0")(sandbox)
    sandbox.write("/opt/amazon/openmpi/bin/mpicc", "#!/bin/sh\n", executable=True)


PREPARE: dict[str, Callable[[Sandbox], None]] = {
    "02-nvidia-driver.sh": driver_runfile,
    "04-fabric-manager.sh": from_repositories("GPUFLEET_FABRIC_MANAGER_URL"),
    "05-cuda.sh": lambda sandbox: sandbox.set_state("download", "exit 0\n"),
    "06-cudnn.sh": from_repositories("GPUFLEET_CUDNN_URL"),
    "07-efa-installer.sh": signed_efa_installer,
    "08-nccl.sh": source_release("GPUFLEET_NCCL_URL", "nccl-2.7.8", {"Makefile": "src.build:\ninstall:\n"}),
    "09-aws-ofi-nccl.sh": aws_ofi_nccl_source,
    "10-nccl-tests.sh": nccl_tests_source,
    "11-fsx-lustre.sh": from_repositories(),
    "12-onednn.sh": source_release("GPUFLEET_ONEDNN_URL", "oneDNN-2.2.4"),
    "14-aws-cli.sh": lambda sandbox: sandbox.set_state("download", "a zip\n"),
    "15-cloudwatch-agent.sh": lambda sandbox: (
        sandbox.set_state("download", "a package\n"),
        sandbox.env.update(GPUFLEET_CLOUDWATCH_AGENT_URL="https://downloads.example/amazon-cloudwatch-agent.deb"),
    ),
    "17-validate.sh": lambda sandbox: sandbox.set_state("nvidia-smi", "450.80.02\n"),
}


def test_every_script_has_a_failing_step_or_a_reason_for_none():
    assert accounted_for(CASES, NOTHING_TO_CATCH) == scripts_in(SCRIPTS_DIR)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.script)
def test_a_failing_step_stops_the_script(sandbox, tmp_path, case):
    PREPARE.get(case.script, lambda _sandbox: None)(sandbox)
    probe = StepProbe(tmp_path / "probe", sandbox.env["PATH"])
    stopped_at_the_failure = probe.install(case, root=str(sandbox.root))
    sandbox.env["PATH"] = f"{probe.bin_dir}:{sandbox.env['PATH']}"

    result = sandbox.run(case.script)

    assert probe.calls() == stopped_at_the_failure, result.stdout + result.stderr
    assert result.returncode == FAILED_STATUS, result.stderr
