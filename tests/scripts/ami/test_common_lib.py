"""The shared library: retried, checksum-verified downloads and version matching."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

PAYLOAD = b"#!/bin/sh\necho fake installer\n"
URL = "https://downloads.example/installer.run"


@pytest.fixture
def payload_sha256(sandbox) -> str:
    (sandbox.state / "download").write_bytes(PAYLOAD)
    return hashlib.sha256(PAYLOAD).hexdigest()


def test_download_with_matching_checksum_keeps_the_file(sandbox, payload_sha256, tmp_path):
    dest = tmp_path / "installer.run"
    result = sandbox.bash(f'download "{URL}" "{dest}" "{payload_sha256}"')
    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == PAYLOAD
    assert "[gpufleet] sha256 verified for installer.run" in result.stdout
    assert result.stderr == ""


def test_download_with_mismatching_checksum_fails_and_removes_the_file(sandbox, payload_sha256, tmp_path):
    dest = tmp_path / "installer.run"
    wrong = "0" * 64
    result = sandbox.bash(f'download "{URL}" "{dest}" "{wrong}"; echo not reached')
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"[gpufleet] ERROR: sha256 mismatch for {URL}: expected {wrong}, got {payload_sha256}"
    ]
    assert "not reached" not in result.stdout
    assert not dest.exists()


def test_download_retries_and_fails_on_http_errors(sandbox, payload_sha256, tmp_path):
    result = sandbox.bash(f'download "{URL}" "{tmp_path / "x"}" "{payload_sha256}"')
    assert result.returncode == 0, result.stderr
    (curl_call,) = [call for call in sandbox.calls() if call.startswith("curl ")]
    flags = curl_call.split()
    assert flags[flags.index("--retry") + 1] == "5"
    for flag in ("--retry-connrefused", "--fail", "--location"):
        assert flag in flags
    assert flags[-1] == URL


def test_download_failure_after_retries_is_one_clear_line(sandbox, tmp_path):
    sandbox.set_state("curl.fail", "")
    result = sandbox.bash(f'download "{URL}" "{tmp_path / "x"}" ""')
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == f"[gpufleet] ERROR: download failed after retries: {URL}"


def test_download_without_checksum_warns_that_it_is_unverified(sandbox, payload_sha256, tmp_path):
    result = sandbox.bash(f'download "{URL}" "{tmp_path / "x"}" ""')
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        f"[gpufleet] WARNING: the profile gives no sha256 for {URL}: installing an UNVERIFIED download"
    ]


@pytest.mark.parametrize(
    "found,pinned,matches",
    [
        ("450.80.02", "450.80.02", True),
        ("450.80.02-1", "450.80.02", True),
        ("1:450.80.02-1", "450.80.02", True),
        ("2.7.8-1+cuda11.0", "2.7.8-1+cuda11.0", True),
        ("2.7.8-1+cuda11.0", "2.7.8", True),
        ("450.80.021", "450.80.02", False),
        ("450.80.01-1", "450.80.02", False),
        ("", "450.80.02", False),
    ],
)
def test_version_matches(sandbox, found, pinned, matches):
    result = sandbox.bash(f'version_matches "{found}" "{pinned}"')
    assert (result.returncode == 0) is matches


def test_apt_candidate_resolves_the_pinned_version_from_the_repository(sandbox):
    sandbox.set_state("madison/nvidia-fabricmanager-450", "450.80.02-1\n450.51.06-1\n")
    assert sandbox.bash("apt_candidate nvidia-fabricmanager-450 450.51.06").stdout == "450.51.06-1"
    missing = sandbox.bash("apt_candidate nvidia-fabricmanager-450 450.80.01")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "[gpufleet] ERROR: no version 450.80.01 of package nvidia-fabricmanager-450 in the configured apt repositories"
    )


@pytest.fixture
def release_tarball(sandbox, tmp_path) -> str:
    """A release tarball with one top-level directory, served by the stub curl; returns its sha256."""
    source = tmp_path / "release" / "nccl-2.7.8-1"
    source.mkdir(parents=True)
    (source / "README").write_text("release\n")
    archive = tmp_path / "v2.7.8-1.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(source.parent), source.name], check=True)
    (sandbox.state / "download").write_bytes(archive.read_bytes())
    return hashlib.sha256(archive.read_bytes()).hexdigest()


def test_fetch_source_prints_only_the_unpacked_directory(sandbox, release_tarball):
    result = sandbox.bash(
        f'dir="$(fetch_source nccl https://downloads.example/v2.7.8-1.tar.gz {release_tarball})"; cat "$dir/README"; '
        'echo "$dir"'
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "release"
    assert result.stdout.splitlines()[1].endswith("/nccl/src/nccl-2.7.8-1")
    assert "[gpufleet] sha256 verified for v2.7.8-1.tar.gz" in result.stderr


def test_fetch_source_with_a_bad_checksum_stops_the_script(sandbox, release_tarball):
    wrong = "0" * 64
    result = sandbox.bash(f'dir="$(fetch_source nccl https://downloads.example/v2.7.8-1.tar.gz {wrong})"; echo reached')
    assert result.returncode == 1
    assert "reached" not in result.stdout
    assert result.stderr.splitlines()[-1].startswith("[gpufleet] ERROR: sha256 mismatch for ")
