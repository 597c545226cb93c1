"""efa-env.sh with a damaged versions manifest (the fuzz suite, tests/fuzz/inputs.py): it writes the environment
or exits 1 with one line of its own, never a Python traceback or a half-written file."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from tests.fuzz.inputs import damaged, fuzz_settings
from tests.scripts.efa_install import install_efa

SETTINGS = {"GPUFLEET_EFA": "1", "GPUFLEET_GPUDIRECT_RDMA": "1"}
# As scripts/ami/17-validate.sh writes it.
MANIFEST = json.dumps(
    {
        "profile": "p4d-ubuntu1804-cuda11",
        "os": {"family": "ubuntu", "version": "18.04"},
        "components": {"driver": "450.80.02", "nccl": "2.7.8", "aws_ofi_nccl": "1.7.3-aws"},
        "paths": {"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib"},
    }
).encode()


@pytest.fixture(autouse=True)
def ubuntu_efa(node):
    install_efa(node.root, "ubuntu")


@fuzz_settings(examples=15)
@given(data=damaged([MANIFEST]))
def test_damaged_manifest(node, data):
    manifest = node.root / "etc/gpufleet/versions.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_bytes(data)
    (node.root / "etc/gpufleet/efa.env").unlink(missing_ok=True)
    result = node.run("efa-env.sh", check=False, **SETTINGS)
    assert result.returncode in (0, 1), result.stderr
    if result.returncode == 1:
        assert [line.split(": ", 1)[0] for line in result.stderr.splitlines()] == ["efa-env"]
        assert not (node.root / "etc/gpufleet/efa.env").exists()
    else:
        env = (node.root / "etc/gpufleet/efa.env").read_text()
        assert all(line.startswith(("#", "FI_", "NCCL_", "GPUFLEET_")) for line in env.splitlines()), env
