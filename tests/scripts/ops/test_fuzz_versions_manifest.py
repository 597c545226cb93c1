"""node-health-check.sh with a damaged versions manifest (the fuzz suite, tests/fuzz/inputs.py): it exits with a
status it documents (0, 1, 2, 3), every output line is a report line, and nothing else breaks."""

from __future__ import annotations

import json

from hypothesis import given

from tests.fuzz.inputs import damaged, fuzz_settings

NODE = {
    "GPUFLEET_GPU_COUNT": "8",
    "GPUFLEET_EFA_COUNT": "4",
    "GPUFLEET_NVSWITCH": "1",
    "GPUFLEET_GPUDIRECT_RDMA": "1",
    "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
    "GPUFLEET_AMI_PROFILE": "p4d-ubuntu1804-cuda11",
}
# As scripts/ami/17-validate.sh writes it.
MANIFEST = json.dumps(
    {
        "profile": "p4d-ubuntu1804-cuda11",
        "os": {"family": "ubuntu", "version": "18.04"},
        "components": {"driver": "450.80.02", "cuda": "11.0", "nccl": "2.7.8", "aws_ofi_nccl": "1.1.1"},
        "paths": {"aws_ofi_nccl_lib": "/opt/aws-ofi-nccl/lib"},
    }
).encode()
REPORT_LINES = ("PASS ", "FAIL ", "  GPU ", "node ")


@fuzz_settings(examples=12)
@given(data=damaged([MANIFEST]))
def test_damaged_manifest(run_script, tmp_path, data):
    manifest = tmp_path / "root" / "etc" / "gpufleet" / "versions.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_bytes(data)
    done = run_script("node-health-check.sh", **NODE)
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr
    assert done.stderr == ""
    for line in done.stdout.splitlines():
        assert line.startswith(REPORT_LINES), f"not a report line: {line!r}"
