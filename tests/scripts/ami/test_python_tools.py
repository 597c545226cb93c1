"""01-build-tools.sh's Python tools: python3 with venv and pip per OS, uv from its release tarball checked against the
profile's sha256 and the digest the release publishes, and the profile's PyTorch in /opt/gpufleet/pytorch."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

UV_VERSION = "0.12.21"
UV_TARBALL = "uv-x86_64-unknown-linux-gnu.tar.gz"


def uv_release(box, version: str = UV_VERSION, published: str | None = None) -> str:
    """The release tarball (uv and uvx answering --version) and, beside it, URL.sha256 as the release publishes it
    (`sha256sum` output; PUBLISHED replaces the digest). Sets the profile's sha256 to the tarball's; returns it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("uv", "uvx"):
            data = f'#!/bin/sh\necho "{name} {version} (0a1b2c3d4 2026-09-01)"\n'.encode()
            info = tarfile.TarInfo(f"uv-x86_64-unknown-linux-gnu/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    box.set_state(f"downloads/{UV_TARBALL}", "")
    (box.state / "downloads" / UV_TARBALL).write_bytes(buffer.getvalue())
    box.set_state(f"downloads/{UV_TARBALL}.sha256", f"{published or digest}  {UV_TARBALL}\n")
    box.env["GPUFLEET_UV_SHA256"] = digest
    return digest


@pytest.fixture
def tools(sandbox):
    """Every build tool installed already: only the Python steps act."""
    sandbox.stub("dpkg-query", 'echo "install ok installed 1.0"')
    return sandbox


def test_uv_installs_from_the_checked_tarball_then_does_nothing(tools):
    uv_release(tools)
    result = tools.run("01-build-tools.sh")
    assert result.returncode == 0, result.stderr
    assert (tools.root / "usr/local/bin/uv").stat().st_mode & 0o777 == 0o755
    assert (tools.root / "usr/local/bin/uvx").exists()
    assert result.stdout.splitlines()[-2:] == [
        f"[gpufleet] uv {UV_VERSION} installed (/usr/local/bin/uv, uvx)",
        "[gpufleet] no PyTorch in this profile",
    ]
    assert f"[gpufleet] sha256 verified for {UV_TARBALL}" in result.stdout
    tools.clear_calls()
    again = tools.run("01-build-tools.sh")
    assert f"[gpufleet] uv already at {UV_VERSION}: nothing to do" in again.stdout
    assert not [call for call in tools.calls() if call.startswith("curl")]


def test_uv_with_another_digest_than_the_profiles_is_refused(tools):
    uv_release(tools)
    tools.env["GPUFLEET_UV_SHA256"] = "0" * 64
    result = tools.run("01-build-tools.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"[gpufleet] ERROR: sha256 mismatch for {tools.env['GPUFLEET_UV_URL']}: expected {'0' * 64}, got "
    )
    assert not (tools.root / "usr/local/bin/uv").exists()


def test_uv_whose_release_publishes_another_digest_is_refused(tools):
    digest = uv_release(tools, published="f" * 64)
    result = tools.run("01-build-tools.sh")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"[gpufleet] ERROR: uv {UV_VERSION}: the release publishes sha256 {'f' * 64}, the profile pins {digest}"
    )
    assert not (tools.root / "usr/local/bin/uv").exists()


@pytest.mark.parametrize(
    ("os_family", "os_version", "program", "expected", "absent"),
    [
        ("ubuntu", "24.04", "apt-get", ["python3", "python3-venv", "python3-pip", "curl", "gnupg"], []),
        ("amzn", "2", "yum", ["python3", "python3-pip", "curl", "gnupg2", "cmake3"], ["curl-minimal"]),
        (
            "amzn",
            "2023",
            "dnf",
            ["python3", "python3-pip", "curl-minimal", "gnupg2-minimal", "cmake"],
            ["curl", "gnupg2", "cmake3"],
        ),
    ],
)
def test_every_os_gets_python3_with_venv_and_pip(sandbox, os_family, os_version, program, expected, absent):
    sandbox.env.update(GPUFLEET_OS_FAMILY=os_family, GPUFLEET_OS_VERSION=os_version)
    sandbox.stub("amazon-linux-extras", "exit 0")
    uv_release(sandbox)
    result = sandbox.run("01-build-tools.sh")
    assert result.returncode == 0, result.stderr
    install = next(c.split() for c in sandbox.calls() if c.split()[0] == program and "install" in c.split())
    assert [name for name in expected if name not in install] == []
    assert [name for name in absent if name in install] == []


def pytorch_profile(box, python: str = "") -> None:
    box.env.update(
        GPUFLEET_PYTORCH_VERSION="2.14.0",
        GPUFLEET_PYTORCH_INDEX_URL="https://download.pytorch.org/whl/cu130",
        GPUFLEET_PYTORCH_PYTHON=python,
    )
    box.write("/usr/local/bin/uv", '#!/bin/sh\necho "uv 0.12.21 (0a1b2c3d4 2026-09-01)"\n', executable=True)


# uv as 01-build-tools.sh drives it: `uv venv --seed --python INTERPRETER DIR` makes DIR/bin/python, which answers
# torch.__version__ once `uv pip install` has installed torch==VERSION (state torch holds what it installed).
UV_STUB = r"""case "$1" in
  --version) echo "uv 0.12.21 (0a1b2c3d4 2026-09-01)" ;;
  venv) dir="${!#}"; mkdir -p "$dir/bin"
    printf '#!/bin/sh\ncat "%s/torch"\n' "$S" >"$dir/bin/python"; chmod 0777 "$dir/bin/python" ;;
  pip) for a in "$@"; do [[ "$a" == torch==* ]] && echo "${a#torch==}+cu130" >"$S/torch"; done ;;
esac"""


def test_pytorch_goes_into_a_root_virtualenv_others_cannot_write(tools):
    pytorch_profile(tools)
    tools.write("/usr/local/bin/uv", "#!/usr/bin/env bash\nS=$STUB_STATE\n" + UV_STUB + "\n", executable=True)
    tools.stub("python3", "exit 0")
    result = tools.run("01-build-tools.sh")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "[gpufleet] PyTorch 2.14.0+cu130 installed in /opt/gpufleet/pytorch (python3)"
    )
    python = tools.root / "opt/gpufleet/pytorch/bin/python"
    assert python.stat().st_mode & 0o777 == 0o755
    again = tools.run("01-build-tools.sh")
    assert again.stdout.splitlines()[-1] == "[gpufleet] PyTorch already at 2.14.0: nothing to do"


def test_pytorch_with_its_own_python_installs_that_interpreter(sandbox):
    sandbox.env.update(GPUFLEET_OS_FAMILY="amzn", GPUFLEET_OS_VERSION="2023")
    pytorch_profile(sandbox, python="3.12")
    sandbox.write("/usr/local/bin/uv", "#!/usr/bin/env bash\nS=$STUB_STATE\n" + UV_STUB + "\n", executable=True)
    sandbox.stub("python3.12", "exit 0")
    result = sandbox.run("01-build-tools.sh")
    assert result.returncode == 0, result.stderr
    install = next(c.split() for c in sandbox.calls() if c.split()[:2] == ["dnf", "install"])
    assert "python3.12" in install
    assert result.stdout.splitlines()[-1].endswith("installed in /opt/gpufleet/pytorch (python3.12)")
