"""scripts/ops/node-health-check.sh with stubbed nvidia-smi, systemctl, fi_info and gpufleet: pass and each failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NODE = {
    "GPUFLEET_EXPECTED_GPUS": "8",
    "GPUFLEET_EXPECTED_EFA": "4",
    "GPUFLEET_NVSWITCH": "1",
    "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
}
CHECKS = ["gpu-count", "driver", "fabric-manager", "efa", "ecc", "topology"]


@pytest.fixture(autouse=True)
def versions_manifest(tmp_path: Path) -> Path:
    manifest = tmp_path / "root" / "etc" / "gpufleet" / "versions.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"profile": "p4d-ubuntu1804-cuda11", "components": {"driver": "450.80.02"}}))
    return manifest


def results(stdout: str) -> dict[str, str]:
    return {
        line.split()[1].rstrip(":"): line.split()[0] for line in stdout.splitlines() if line[:4] in ("PASS", "FAIL")
    }


def test_healthy_node(run_script, calls, tmp_path: Path) -> None:
    done = run_script("node-health-check.sh", **NODE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results(done.stdout) == dict.fromkeys(CHECKS, "PASS")
    assert done.stdout.splitlines()[-1] == "node healthy"
    assert "PASS efa: 4 EFA devices (expected 4)" in done.stdout
    assert "gpufleet topo-check --instance-type p4d.24xlarge" in calls()
    assert (tmp_path / "topo-input").read_text() == "GPU0 X NV12\n"


@pytest.mark.parametrize(
    ("failing", "env", "message"),
    [
        ("gpu-count", {"STUB_GPUS": "7"}, "FAIL gpu-count: 7 GPUs visible (expected 8)"),
        ("driver", {"STUB_DRIVER": "470.57.02"}, "FAIL driver: driver 470.57.02 (image manifest: 450.80.02)"),
        ("fabric-manager", {"STUB_FM_STATE": "inactive"}, "FAIL fabric-manager: nvidia-fabricmanager is inactive"),
        ("efa", {"STUB_EFA": "3"}, "FAIL efa: 3 EFA devices (expected 4)"),
        ("efa", {"STUB_EFA": "0"}, "FAIL efa: fi_info -p efa found no EFA provider (fi_getinfo: -61"),
        ("ecc", {"STUB_ECC": "0 0 3 0 0 0 0 0"}, "FAIL ecc: uncorrectable ECC errors (GPU 2: 3)"),
        ("topology", {"STUB_TOPO_EXIT": "1"}, "FAIL topology: topo-check p4d.24xlarge: topology ok"),
    ],
)
def test_each_failure_is_reported_alone(run_script, failing: str, env: dict[str, str], message: str) -> None:
    done = run_script("node-health-check.sh", **NODE, **env)
    assert done.returncode == 1
    assert results(done.stdout) == {check: "FAIL" if check == failing else "PASS" for check in CHECKS}
    assert message in done.stdout
    assert done.stdout.splitlines()[-1] == "node unhealthy: 1 check(s) failed"


def test_missing_manifest_fails_the_driver_check(run_script, versions_manifest: Path) -> None:
    versions_manifest.unlink()
    done = run_script("node-health-check.sh", **NODE)
    assert done.returncode == 1
    assert f"FAIL driver: {versions_manifest} not found" in done.stdout


def test_no_nvswitch_skips_fabric_manager(run_script, calls) -> None:
    done = run_script("node-health-check.sh", **{**NODE, "GPUFLEET_NVSWITCH": "0"}, STUB_FM_STATE="inactive")
    assert done.returncode == 0
    assert "PASS fabric-manager: not needed (no NVSwitch)" in done.stdout
    assert not any(call.startswith("systemctl") for call in calls())


def test_cli_may_be_several_words(run_script, calls, stub_dir: Path) -> None:
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_CLI=f"{stub_dir}/gpufleet --verbose-unused")
    assert done.returncode == 1  # the stub rejects the unknown first argument: proves the words were split
    assert "gpufleet --verbose-unused topo-check --instance-type p4d.24xlarge" in calls()


@pytest.mark.parametrize("missing", list(NODE))
def test_required_settings(run_script, missing: str) -> None:
    done = run_script("node-health-check.sh", **{k: v for k, v in NODE.items() if k != missing})
    assert done.returncode == 2
    assert (
        done.stderr == f"node-health-check: {missing} is not set (see the header of "
        f"{Path(__file__).parents[3] / 'scripts' / 'ops' / 'node-health-check.sh'})\n"
    )
