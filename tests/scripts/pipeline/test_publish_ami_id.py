"""scripts/pipeline/publish-ami-id.sh with a recording `aws` stub on PATH."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "pipeline" / "publish-ami-id.sh"
BUILD_ID = "gpufleet-ami:0b1c2d3e"


@pytest.fixture
def workspace(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "aws"
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> "{tmp_path}/aws.calls"\n')
    stub.chmod(0o755)
    return tmp_path


def run(workspace: Path, manifest: dict | None, **overrides: str) -> subprocess.CompletedProcess[str]:
    manifest_path = workspace / "manifest.json"
    if manifest is not None:
        manifest_path.write_text(json.dumps(manifest))
    env = {"PATH": f"{workspace / 'bin'}:{os.environ['PATH']}", "GPUFLEET_PROFILE": "ubuntu2204-cuda12",
           "PACKER_MANIFEST": str(manifest_path), "GPUFLEET_BUILD_ID": BUILD_ID, **overrides}
    return subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True)


def calls(workspace: Path) -> list[str]:
    path = workspace / "aws.calls"
    return path.read_text().splitlines() if path.exists() else []


def manifest_of(*runs: tuple[str, str], last: str) -> dict:
    return {"builds": [{"packer_run_uuid": uuid, "artifact_id": artifact} for uuid, artifact in runs],
            "last_run_uuid": last}


def test_publishes_the_image_of_the_last_run_and_tags_the_parameter(workspace):
    manifest = manifest_of(("old", "us-east-1:ami-0aaaaaaaaaaaaaaaa"), ("new", "us-east-1:ami-0123456789abcdef0"),
                           last="new")
    result = run(workspace, manifest)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"published ami-0123456789abcdef0 to /gpufleet/ami/ubuntu2204-cuda12 (build {BUILD_ID})"
    )
    put, tag = calls(workspace)
    assert put.startswith("ssm put-parameter --name /gpufleet/ami/ubuntu2204-cuda12 --type String "
                          "--data-type aws:ec2:image --value ami-0123456789abcdef0 --overwrite")
    assert tag == ("ssm add-tags-to-resource --resource-type Parameter --resource-id /gpufleet/ami/ubuntu2204-cuda12 "
                   f"--tags Key=gpufleet:profile,Value=ubuntu2204-cuda12 Key=gpufleet:build-id,Value={BUILD_ID}")


@pytest.mark.parametrize(("manifest", "overrides", "message"), [
    (manifest_of(("a", "us-east-1:ami-0123456789abcdef0"), last="a"), {"GPUFLEET_PROFILE": ""},
     "publish-ami-id: GPUFLEET_PROFILE is not set"),
    (manifest_of(("a", "us-east-1:ami-0123456789abcdef0"), last="a"), {"GPUFLEET_BUILD_ID": ""},
     "publish-ami-id: GPUFLEET_BUILD_ID is not set"),
    (None, {}, "not found (did packer build finish?)"),
    (manifest_of(("a", "us-east-1:ami-0123456789abcdef0"), last="b"), {},
     "publish-ami-id: no AMI id in the last run of"),
    (manifest_of(("a", "us-east-1:snap-0123"), last="a"), {}, "(found 'snap-0123')"),
])
def test_refuses_without_publishing(workspace, manifest, overrides, message):
    result = run(workspace, manifest, **overrides)
    assert result.returncode == 1
    assert message in result.stderr
    assert calls(workspace) == []


def test_shellcheck_clean():
    result = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
