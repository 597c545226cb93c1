"""scripts/pipeline/install-tools.sh: Packer is unpacked only after its signature and checksums verify."""

from __future__ import annotations

import hashlib

import pytest

from tests.scripts.pipeline.conftest import SCRIPTS_DIR
from tests.scripts.pipeline.fake_tools import FINGERPRINT, PACKER_ZIP

SCRIPT = SCRIPTS_DIR / "install-tools.sh"
RELEASES = "https://releases.hashicorp.com/packer/1.11.2"
SETTINGS = {
    "GPUFLEET_PACKER_VERSION": "1.11.2",
    "GPUFLEET_PACKER_SHA256": "",
    "GPUFLEET_HASHICORP_KEY_FINGERPRINT": FINGERPRINT,
    "GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION": "1.2.764.0",
}


def install(tools, tmp_path, **overrides):
    return tools.run(SCRIPT, **{**SETTINGS, "GPUFLEET_TOOLS_BIN_DIR": str(tmp_path / "tools"), **overrides})


def test_downloads_verifies_then_installs_packer_and_the_plugin(tools, tmp_path):
    result = install(tools, tmp_path, GPUFLEET_PACKER_SHA256=hashlib.sha256(PACKER_ZIP).hexdigest())
    assert result.returncode == 0, result.stderr
    calls = tools.calls()
    downloads = [call[-1] for call in calls if call[0] == "curl"]
    assert downloads == [
        f"{RELEASES}/packer_1.11.2_linux_amd64.zip",
        f"{RELEASES}/packer_1.11.2_SHA256SUMS",
        f"{RELEASES}/packer_1.11.2_SHA256SUMS.sig",
        "https://www.hashicorp.com/.well-known/pgp-key.txt",
        "https://s3.amazonaws.com/session-manager-downloads/plugin/1.2.764.0/ubuntu_64bit/session-manager-plugin.deb",
    ]
    order = [
        call[0] if call[0] != "gpg" else next(f"gpg {a}" for a in call if a in ("--import", "--verify"))
        for call in calls
        if call[0] != "curl"
    ]
    assert order == ["gpg --import", "gpg --verify", "unzip", "packer", "dpkg", "session-manager-plugin"]
    (unzip,) = tools.calls("unzip")
    assert unzip[1:4] == ["-o", "-d", str(tmp_path / "tools")]
    assert (tmp_path / "tools" / "packer").exists()
    assert "Packer v1.11.2" in result.stdout
    # The downloads lived in a temporary directory that is gone.
    assert list(tools.tmp_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("state", "settings", "message"),
    [
        (
            {"packer_zip": "a tampered zip"},
            {},
            "install-tools: error: packer_1.11.2_linux_amd64.zip does not match packer_1.11.2_SHA256SUMS",
        ),
        (
            {},
            {"GPUFLEET_PACKER_SHA256": "0" * 64},
            "install-tools: error: packer_1.11.2_linux_amd64.zip does not match GPUFLEET_PACKER_SHA256 "
            "(packer.sha256 of ami/pipeline.yaml)",
        ),
        (
            {"fail": ["gpg --verify"]},
            {},
            "install-tools: error: the signature of packer_1.11.2_SHA256SUMS does not verify",
        ),
        ({"signer": "B" * 40}, {}, f"install-tools: error: packer_1.11.2_SHA256SUMS is not signed by {FINGERPRINT}"),
        ({"fail": [f"curl {RELEASES}/packer_1.11.2_SHA256SUMS.sig"]}, {}, "curl: (22)"),
    ],
)
def test_nothing_is_unpacked_unless_every_check_passes(tools, tmp_path, state, settings, message):
    tools.set_state(**state)
    result = install(tools, tmp_path, **settings)
    assert result.returncode != 0
    assert message in result.stderr
    assert tools.calls("unzip") == [] and tools.calls("dpkg") == []
    assert not (tmp_path / "tools").exists()


def test_refuses_without_its_settings(tools, tmp_path):
    result = install(tools, tmp_path, GPUFLEET_HASHICORP_KEY_FINGERPRINT="")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "install-tools: error: GPUFLEET_HASHICORP_KEY_FINGERPRINT is not set (set by the AMI pipeline's CodeBuild "
        "project, or by start-build --environment-variables-override)"
    ]
    assert tools.calls() == []
