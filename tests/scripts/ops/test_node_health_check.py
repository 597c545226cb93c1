"""scripts/ops/node-health-check.sh with stubbed nvidia-smi, dmesg, systemctl, fi_info and gpufleet: pass, each failure,
the per-GPU verdicts (ok / reset / replace) from row remapping, ECC counters and Xids."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.loading import load_named_environment
from gpufleet.user_data import operator_scripts_archive, render_user_data
from tests.scripts.ops.conftest import HEALTHY, TOPOLOGY_CAPTURES

NODE = {
    "GPUFLEET_GPU_COUNT": "8",
    "GPUFLEET_EFA_COUNT": "4",
    "GPUFLEET_NVSWITCH": "1",
    "GPUFLEET_GPUDIRECT_RDMA": "1",
    "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
}
CHECKS = ["gpu-count", "image-profile", "driver", "fabric-manager", "efa", "gpu-health", "topology"]
BUSES = ["0000:10:1c", "0000:10:1d", "0000:20:1c", "0000:20:1d", "0000:90:1c", "0000:90:1d", "0000:a0:1c", "0000:a0:1d"]
REMAP_OK = "0:0:No:No"
REMAP_QUERY = (
    "nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,"
    "remapped_rows.pending,remapped_rows.failure --format=csv,noheader"
)


@pytest.fixture(autouse=True)
def versions_manifest(tmp_path: Path) -> Path:
    manifest = tmp_path / "root" / "etc" / "gpufleet" / "versions.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"profile": "p4d-ubuntu1804-cuda11", "components": {"driver": "450.80.02"}}))
    return manifest


def remap(**rows: str) -> str:
    """STUB_REMAP for 8 GPUs, healthy except the given ones: remap(gpu2="0:1:No:Yes")."""
    return "\n".join(rows.get(f"gpu{i}", REMAP_OK) for i in range(8))


def verdicts(stdout: str) -> dict[str, str]:
    """{bus: 'verdict[: notes]'} from the lines under gpu-health."""
    return {
        line.split()[1].rstrip(":"): line.split(": ", 1)[1] for line in stdout.splitlines() if line.startswith("  GPU ")
    }


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
    assert "PASS topology: p4d.24xlarge: 8 GPUs, 28 NVLink pairs, 4 NICs" in done.stdout.splitlines()
    assert not any(call.startswith("gpufleet") for call in calls())
    assert "PASS gpu-health: 8 GPUs ok" in done.stdout.splitlines()
    assert verdicts(done.stdout) == dict.fromkeys(BUSES, "ok")
    assert REMAP_QUERY in calls()
    assert "dmesg" in calls()


@pytest.mark.parametrize(
    ("failing", "env", "message", "status"),
    [
        ("gpu-count", {"STUB_GPUS": "7"}, "FAIL gpu-count: 7 GPUs visible (expected 8)", 1),
        (
            "image-profile",
            {"GPUFLEET_AMI_PROFILE": "p5-ubuntu2204-cuda12"},
            "FAIL image-profile: image built from profile p4d-ubuntu1804-cuda11 (environment: p5-ubuntu2204-cuda12)",
            1,
        ),
        ("driver", {"STUB_DRIVER": "470.57.02"}, "FAIL driver: driver 470.57.02 (image manifest: 450.80.02)", 1),
        ("fabric-manager", {"STUB_FM_STATE": "inactive"}, "FAIL fabric-manager: nvidia-fabricmanager is inactive", 1),
        ("efa", {"STUB_EFA": "3"}, "FAIL efa: 3 EFA devices (expected 4)", 1),
        ("efa", {"STUB_EFA": "0"}, "FAIL efa: fi_info -p efa found no EFA provider (fi_getinfo: -61", 1),
        ("gpu-health", {"STUB_ECC": "0 0 3 0 0 0 0 0"}, "  GPU 0000:20:1c: reset: 3 uncorrectable ECC error(s)", 3),
        ("gpu-health", {"STUB_REMAP": remap(gpu5="0:3:No:Yes")}, "  GPU 0000:90:1d: replace: row remapping failed", 1),
        (
            "topology",
            {"STUB_TOPO": str(TOPOLOGY_CAPTURES / "p4d_degraded.txt")},
            "FAIL topology: p4d.24xlarge: GPU3-GPU6: SYS, expected an NVLink (NV#) on an NVSwitch type",
            1,
        ),
    ],
)
def test_each_failure_is_reported_alone(
    run_script, failing: str, env: dict[str, str], message: str, status: int
) -> None:
    done = run_script("node-health-check.sh", **NODE, **env)
    assert done.returncode == status
    assert results(done.stdout) == {check: "FAIL" if check == failing else "PASS" for check in CHECKS}
    assert message in done.stdout
    last = "node unhealthy: GPU reset needed (reboot the node)" if status == 3 else "node unhealthy: 1 check(s) failed"
    assert done.stdout.splitlines()[-1] == last


def test_image_profile_matches_the_environment(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_AMI_PROFILE="p4d-ubuntu1804-cuda11")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "PASS image-profile: image built from profile p4d-ubuntu1804-cuda11 (environment: p4d-ubuntu1804-cuda11)"
        in done.stdout.splitlines()
    )


def test_image_profile_is_not_checked_without_one(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_AMI_PROFILE="")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "PASS image-profile: not checked (GPUFLEET_AMI_PROFILE is empty: the environment names no AMI pipeline profile)"
        in done.stdout.splitlines()
    )


def test_failed_row_remap_means_replace(run_script) -> None:
    """NVIDIA's RMA policy: the row-remapping failure flag meets the RMA criterion. Before, this node passed."""
    done = run_script("node-health-check.sh", **NODE, STUB_REMAP=remap(gpu2="0:8:No:Yes"))
    assert done.returncode == 1
    assert "FAIL gpu-health: 1 GPU(s) to replace (drain the node and replace the instance), 0 to reset" in done.stdout
    assert verdicts(done.stdout) == {
        **dict.fromkeys(BUSES, "ok"),
        "0000:20:1c": "replace: row remapping failed (remapped_rows.failure=Yes): NVIDIA's RMA criterion",
    }


def test_pending_row_remap_means_reset(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, STUB_REMAP=remap(gpu7="0:1:Yes:No"), STUB_ECC="0 0 0 0 0 0 0 1")
    assert done.returncode == 3
    assert "FAIL gpu-health: 1 GPU(s) need a reset: reboot the node, then run this check again" in done.stdout
    assert verdicts(done.stdout)["0000:a0:1d"] == (
        "reset: 1 uncorrectable ECC error(s) since the driver loaded; "
        "row remap pending (remapped_rows.pending=Yes): applied at the next GPU reset"
    )


def test_replace_outranks_reset_on_one_gpu(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, STUB_REMAP=remap(gpu0="0:8:No:Yes"), STUB_ECC="4 0 0 0 0 0 0 0")
    assert done.returncode == 1
    assert verdicts(done.stdout)["0000:10:1c"].startswith("replace: 4 uncorrectable ECC error(s)")


def test_remapped_rows_are_noted_on_a_healthy_gpu(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, STUB_REMAP=remap(gpu3="2:1:No:No"))
    assert done.returncode == 0
    assert verdicts(done.stdout)["0000:20:1d"] == "ok: rows remapped: 2 correctable, 1 uncorrectable"


def test_reset_with_another_failure_exits_1(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, STUB_REMAP=remap(gpu1="0:1:Yes:No"), STUB_DRIVER="470.57.02")
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == "node unhealthy: 2 check(s) failed"


# Kernel log lines as the driver writes them (samples: Xid 79 NVIDIA/open-gpu-kernel-modules#461 and #1151 and the
# NVIDIA developer forum; 63 stas00/ml-engineering; 48 NVIDIA/gpu-operator#1146; 94/95 NVIDIA's GPU Memory Error
# Management "User Visible Statistics"; 119 open-gpu-kernel-modules#461; 13 the NVIDIA developer forum), moved onto
# this node's bus addresses.
XID_79 = "[155044.078590] NVRM: Xid (PCI:0000:a0:1c): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."


@pytest.mark.parametrize(
    ("line", "bus", "verdict"),
    [
        (XID_79, "0000:a0:1c", "reset: Xid 79 x1 since boot (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: RESTART_BM)"),
        (
            "[ 9316.411202] NVRM: Xid (PCI:0000:90:1c): 48, pid='<unknown>', name=<unknown>, An uncorrectable double "
            "bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, "
            "subpartition 1",
            "0000:90:1c",
            "reset: Xid 48 x1 since boot (ROBUST_CHANNEL_GPU_ECC_DBE (double-bit ECC error): WORKFLOW_XID_48)",
        ),
        (
            "[ 812.004417] NVRM: Xid (PCI:0000:20:1d): 95, pid=7062, Uncontained: LTC TAG (0x2,0x0). "
            "RST: Yes, D-RST: No",
            "0000:20:1d",
            "reset: Xid 95 x1 since boot (ROBUST_CHANNEL_UNCONTAINED_ERROR (uncontained ECC error): RESET_GPU)",
        ),
        (
            "[ 4321.000001] NVRM: Xid (PCI:0000:10:1d): 119, pid=430, name=nv_queue, Timeout waiting for RPC from GSP!",
            "0000:10:1d",
            "reset: Xid 119 x1 since boot (GSP_RPC_TIMEOUT: RESET_GPU)",
        ),
        (
            "[ 77.123456] NVRM: Xid (PCI:0000:10:1c GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No",
            "0000:10:1c",
            "ok: Xid 94 x1 since boot (not a node fault in NVIDIA's catalog)",
        ),
        (
            "[680111.646286] NVRM: Xid (PCI:0000:10:1c): 63, pid=1850, Row Remapper: New row marked for remapping, "
            "reset gpu to activate.",
            "0000:10:1c",
            "ok: Xid 63 x1 since boot (not a node fault in NVIDIA's catalog)",
        ),
        (
            "NVRM: Xid (0000:20:1c): 13, Graphics SM Warp Exception on (GPC 1, TPC 0): Out Of Range Address",
            "0000:20:1c",
            "ok: Xid 13 x1 since boot (not a node fault in NVIDIA's catalog)",
        ),
    ],
)
def test_xid_lines_map_to_verdicts(run_script, line: str, bus: str, verdict: str) -> None:
    done = run_script("node-health-check.sh", **NODE, STUB_DMESG=line)
    assert verdicts(done.stdout) == {**dict.fromkeys(BUSES, "ok"), bus: verdict}
    assert done.returncode == (3 if verdict.startswith("reset") else 0)


def test_node_with_xid_79_fails(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, STUB_DMESG=f"{XID_79}\n{XID_79}")
    assert done.returncode == 3
    assert results(done.stdout)["gpu-health"] == "FAIL"
    assert verdicts(done.stdout)["0000:a0:1c"].startswith("reset: Xid 79 x2 since boot")


def test_xid_on_a_gpu_nvidia_smi_no_longer_lists(run_script) -> None:
    """A GPU that fell off the bus is missing from nvidia-smi; its Xid still names it."""
    done = run_script(
        "node-health-check.sh",
        **NODE,
        STUB_GPUS="7",
        STUB_ECC="0 0 0 0 0 0 0",
        STUB_REMAP="\n".join([REMAP_OK] * 7),
        STUB_DMESG=XID_79.replace("a0:1c", "a0:1d"),
    )
    assert done.returncode == 1
    assert results(done.stdout)["gpu-count"] == "FAIL"
    assert verdicts(done.stdout)["0000:a0:1d"].startswith("reset: Xid 79 x1")


@pytest.mark.parametrize(
    ("mode", "note"),
    [
        ("na", "row remapping not reported: [N/A]"),
        ("no-devices", "row remapping not reported: No devices were found"),
        ("old-driver", 'row remapping not reported: Field "remapped_rows.correctable" is not a valid field to query.'),
        # NVML: remapped rows are "not supported" on MIG-enabled GPUs with active instances (nvmlDeviceGetRemappedRows).
        ("mig", "row remapping not reported: [Not Supported]"),
    ],
)
def test_gpus_without_row_remapping_pass(run_script, mode: str, note: str) -> None:
    """V100 and T4 have no row remapping (NVIDIA's GPU Memory Error Management, "Supported GPUs")."""
    done = run_script("node-health-check.sh", **NODE, STUB_REMAP_MODE=mode)
    assert done.returncode == 0
    assert f"PASS gpu-health: 8 GPUs ok; {note}" in done.stdout.splitlines()


def test_ecc_not_reported_is_not_a_fault(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, STUB_ECC=" ".join(["[N/A]"] * 8))
    assert done.returncode == 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"STUB_DMESG_EXIT": "1"},
            "FAIL gpu-health: could not judge the GPUs: dmesg could not read the kernel log: "
            "dmesg: read kernel buffer failed: Operation not permitted (verdicts below are partial)",
        ),
        (  # nvidia-smi's bracketed error form; "[Unknown Error]" for this field is an assumption (unconfirmed)
            {"STUB_REMAP": remap(gpu4="0:0:[Unknown Error]:No")},
            "FAIL gpu-health: could not judge the GPUs: GPU 0000:90:1c: unexpected row remapping values "
            "'[Unknown Error]', 'No' (verdicts below are partial)",
        ),
    ],
)
def test_unreadable_gpu_state_fails(run_script, env: dict[str, str], message: str) -> None:
    done = run_script("node-health-check.sh", **NODE, **env)
    assert done.returncode == 1
    assert message in done.stdout.splitlines()


def test_missing_manifest_fails_the_driver_check(run_script, versions_manifest: Path) -> None:
    versions_manifest.unlink()
    done = run_script("node-health-check.sh", **NODE)
    assert done.returncode == 1
    assert f"FAIL driver: {versions_manifest} not found" in done.stdout


DLAMI = "pytorch-2.11-ubuntu-24.04"


def write_dlami_versions(versions_manifest: Path, document: object) -> Path:
    """What scripts/node/deep-learning-ami.sh writes at boot on a Deep Learning AMI, beside the manifest it lacks."""
    path = versions_manifest.with_name("deep-learning-ami.json")
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def test_a_deep_learning_ami_reports_the_versions_the_node_shows(run_script, versions_manifest: Path) -> None:
    versions_manifest.unlink()
    write_dlami_versions(
        versions_manifest,
        {
            "deep_learning_ami": DLAMI,
            "components": {"aws_ofi_nccl": "1.18.0", "efa_installer": "1.47.0"},
            "paths": {"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"},
        },
    )
    done = run_script(
        "node-health-check.sh",
        **NODE,
        GPUFLEET_DEEP_LEARNING_AMI=DLAMI,
        GPUFLEET_AMI_PROFILE="",
        STUB_DRIVER="595.91.07",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert results(done.stdout) == dict.fromkeys(CHECKS, "PASS")
    assert (
        f"PASS driver: driver 595.91.07 on Deep Learning AMI {DLAMI} (no versions manifest to compare with; "
        "aws-ofi-nccl 1.18.0, EFA installer 1.47.0)" in done.stdout.splitlines()
    )


def test_a_deep_learning_ami_whose_boot_record_is_missing_still_reports_its_driver(
    run_script, versions_manifest: Path
) -> None:
    versions_manifest.unlink()
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_DEEP_LEARNING_AMI=DLAMI, STUB_DRIVER="595.91.07")
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("PASS driver: "))
    assert line.startswith(
        f"PASS driver: driver 595.91.07 on Deep Learning AMI {DLAMI} (no versions manifest to compare with; "
        f"{versions_manifest.with_name('deep-learning-ami.json')} is not a versions manifest (jq: error"
    )


def test_a_deep_learning_ami_whose_gpus_show_no_driver_fails(run_script, versions_manifest: Path) -> None:
    versions_manifest.unlink()
    write_dlami_versions(versions_manifest, {"deep_learning_ami": DLAMI, "components": {}, "paths": {}})
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_DEEP_LEARNING_AMI=DLAMI, STUB_DRIVER="")
    assert done.returncode == 1
    assert (
        f"FAIL driver: driver  on Deep Learning AMI {DLAMI} (no versions manifest to compare with; aws-ofi-nccl none, "
        "EFA installer unknown)" in done.stdout.splitlines()
    )


def test_a_manifest_on_a_deep_learning_ami_is_compared_as_on_any_image(run_script) -> None:
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_DEEP_LEARNING_AMI=DLAMI, STUB_DRIVER="470.57.02")
    assert done.returncode == 1
    assert "FAIL driver: driver 470.57.02 (image manifest: 450.80.02)" in done.stdout.splitlines()


def test_no_nvswitch_skips_fabric_manager(run_script, calls) -> None:
    done = run_script("node-health-check.sh", **{**NODE, "GPUFLEET_NVSWITCH": "0"}, STUB_FM_STATE="inactive")
    assert done.returncode == 0
    assert "PASS fabric-manager: not needed (no NVSwitch)" in done.stdout
    assert not any(call.startswith("systemctl") for call in calls())


@pytest.mark.parametrize(
    ("capture", "settings", "verdict"),
    [
        # The rules of gpufleet topo-check, on the captures its own tests use (tests/reports/, tests/fixtures/topo/).
        ("p4d_ansi.txt", {}, "PASS topology: p4d.24xlarge: 8 GPUs, 28 NVLink pairs, 4 NICs"),
        ("p4d_no_nic_legend.txt", {}, "PASS topology: p4d.24xlarge: 8 GPUs, 28 NVLink pairs, 4 NICs"),
        ("p4d_truncated.txt", {}, "FAIL topology: p4d.24xlarge: row GPU5 is cut short"),
        ("p4d.txt", {"GPUFLEET_GPU_COUNT": "4"}, "FAIL topology: p4d.24xlarge: 8 GPUs in the matrix, expected 4"),
        (
            "p5.txt",
            {},
            "FAIL topology: p4d.24xlarge: 32 NICs in the matrix, expected 4 (one per EFA device)",
        ),
        # Without GPUDirect RDMA the NICs are not counted, and without NVSwitch PCIe pairs are no problem (g5).
        (
            "g5_48xlarge.txt",
            {"GPUFLEET_NVSWITCH": "0", "GPUFLEET_GPUDIRECT_RDMA": "0"},
            "PASS topology: p4d.24xlarge: 8 GPUs, 0 NVLink pairs, 1 NICs",
        ),
    ],
)
def test_topology_is_checked_on_the_node_without_gpufleet(
    run_script, calls, capture: str, settings: dict[str, str], verdict: str
) -> None:
    done = run_script("node-health-check.sh", **{**NODE, **settings}, STUB_TOPO=str(TOPOLOGY_CAPTURES / capture))
    assert verdict in done.stdout.splitlines()
    assert "nvidia-smi topo -m" in calls()


def test_a_pair_with_fewer_nvlinks_fails_the_topology(run_script, tmp_path: Path) -> None:
    capture = (TOPOLOGY_CAPTURES / "p4d.txt").read_text()
    rows = capture.splitlines(keepends=True)
    rows[2] = rows[2].replace("GPU1\tNV12", "GPU1\tNV6")  # GPU1's row: its link to GPU0
    rows[1] = rows[1].replace("\t X \tNV12", "\t X \tNV6")  # GPU0's row: its link to GPU1
    (tmp_path / "fewer.txt").write_text("".join(rows))
    done = run_script("node-health-check.sh", **NODE, STUB_TOPO=str(tmp_path / "fewer.txt"))
    assert done.returncode == 1
    assert (
        "FAIL topology: p4d.24xlarge: GPU0-GPU1: NV6, fewer NVLinks than the other pairs (NV12)"
        in done.stdout.splitlines()
    )


@pytest.mark.parametrize("missing", list(NODE))
def test_required_settings(run_script, missing: str) -> None:
    done = run_script("node-health-check.sh", **{k: v for k, v in NODE.items() if k != missing})
    assert done.returncode == 2
    assert done.stderr == (
        f"node-health-check: error: {missing} is not set (see the header of scripts/ops/node-health-check.sh)\n"
    )


# A damaged versions manifest (issue 23): jq's failure ended the script before (exit 4 or 5, no other check run).
@pytest.mark.parametrize(
    "data",
    [b"{", b"[1]", b"\xff\xfe", b"", b"{} {}"],
    ids=["truncated", "array", "binary", "empty", "two objects"],
)
def test_damaged_manifest_fails_its_checks_and_the_others_run(run_script, versions_manifest, data) -> None:
    versions_manifest.write_bytes(data)
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_AMI_PROFILE="p4d-ubuntu1804-cuda11")
    assert done.returncode == 1, done.stdout + done.stderr
    assert results(done.stdout) == {**dict.fromkeys(CHECKS, "PASS"), "image-profile": "FAIL", "driver": "FAIL"}
    for check in ("image-profile", "driver"):
        assert f"FAIL {check}: {versions_manifest} is not a versions manifest (" in done.stdout


def test_values_of_the_manifest_stay_on_one_line(run_script, versions_manifest) -> None:
    versions_manifest.write_text(json.dumps({"profile": "p4d\nx", "components": {"driver": ["450.80.02"]}}))
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_AMI_PROFILE="p4d-ubuntu1804-cuda11")
    assert "FAIL image-profile: image built from profile p4d?x (environment: p4d-ubuntu1804-cuda11)" in done.stdout
    assert f"FAIL driver: {versions_manifest} has no components.driver" in done.stdout


def test_a_manifest_far_larger_than_one_is_not_read(run_script, versions_manifest) -> None:
    with versions_manifest.open("ab") as handle:
        handle.truncate(256 * 1024 * 1024)  # sparse: nothing written
    done = run_script("node-health-check.sh", **NODE, GPUFLEET_AMI_PROFILE="p4d-ubuntu1804-cuda11")
    assert done.returncode == 1
    assert (
        f"FAIL driver: {versions_manifest} is 268435456 bytes, more than a versions manifest (65536 at most): not read"
        in done.stdout
    )


def test_the_health_check_the_user_data_installs_runs_on_the_settings_of_node_env(
    stub_dir: Path, calls, tmp_path: Path
) -> None:
    """environments/dev.yaml's user data on a fake root and the operator scripts' archive unpacked where
    operator-scripts.sh puts it (tests/scripts/node/test_operator_scripts.py runs that step), then
    /opt/gpufleet/ops/node-health-check.sh as node-ready.sh runs it: the settings from node.env alone, the helpers
    from /opt/gpufleet/lib, no gpufleet."""
    root = tmp_path / "root"
    installer_bin = tmp_path / "installer-bin"
    installer_bin.mkdir()
    (installer_bin / "systemctl").write_text("#!/bin/sh\n")
    (installer_bin / "systemctl").chmod(0o755)
    user_data = tmp_path / "user-data.sh"
    user_data.write_text(render_user_data(load_named_environment("dev"), load_catalog()["p4d.24xlarge"]))
    base = {"HOME": str(tmp_path), "GPUFLEET_ROOT": str(root)}
    subprocess.run(["bash", str(user_data)], check=True, env={**base, "PATH": f"{installer_bin}:/usr/bin:/bin"})
    with tarfile.open(fileobj=io.BytesIO(operator_scripts_archive()), mode="r:gz") as archive:
        archive.extractall(root / "opt/gpufleet/ops", filter="data")

    stubs = {**HEALTHY, "STUB_LOG": str(tmp_path / "calls.log"), "STUB_DIR": str(tmp_path)}
    done = subprocess.run(
        ["bash", "-c", f'. "{root}/etc/gpufleet/node.env" && exec "{root}/opt/gpufleet/ops/node-health-check.sh"'],
        env={**base, **stubs, "PATH": f"{stub_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert results(done.stdout) == dict.fromkeys(CHECKS, "PASS")
    assert (
        "PASS image-profile: image built from profile p4d-ubuntu1804-cuda11 (environment: p4d-ubuntu1804-cuda11)"
        in (done.stdout.splitlines())
    )
    assert not any(call.startswith("gpufleet") for call in calls())


def test_fi_info_is_found_where_the_efa_installer_puts_it(run_script, stub_dir: Path, tmp_path: Path) -> None:
    """node-ready.sh runs the check from a systemd unit, whose PATH lacks the installer's /opt/amazon/efa/bin."""
    installed = tmp_path / "root" / "opt" / "amazon" / "efa" / "bin"
    installed.mkdir(parents=True)
    (stub_dir / "fi_info").rename(installed / "fi_info")

    done = run_script("node-health-check.sh", **NODE)

    assert "PASS efa: 4 EFA devices (expected 4)" in done.stdout.splitlines(), done.stdout + done.stderr
