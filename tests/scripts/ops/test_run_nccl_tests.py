"""scripts/ops/run-nccl-tests.sh with stubbed mpirun and gpufleet: the mpirun line, EFA environment, busbw floor."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[3] / "scripts" / "ops"


@pytest.fixture
def hostfile(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_text("10.40.0.4 slots=8\n10.40.0.5 slots=8\n")
    return path


@pytest.fixture
def efa_profile(tmp_path: Path) -> Path:
    """What scripts/node/efa-env.sh writes for an old aws-ofi-nccl."""
    path = tmp_path / "root" / "etc" / "profile.d" / "gpufleet-efa.sh"
    path.parent.mkdir(parents=True)
    path.write_text("export FI_PROVIDER=efa\nexport FI_EFA_USE_DEVICE_RDMA=1\nexport NCCL_PROTO=simple\n")
    return path


def settings(hostfile: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "GPUFLEET_HOSTFILE": str(hostfile),
        "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
        "GPUFLEET_NCCL_LOG": str(tmp_path / "nccl.log"),
        "GPUFLEET_PYTHON": sys.executable,
        **extra,
    }


def test_two_nodes_with_the_catalog_floor(run_script, calls, hostfile: Path, efa_profile: Path, tmp_path: Path) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path))
    assert done.returncode == 0, done.stderr
    mpirun, report = calls()[-2:]
    assert mpirun.startswith(f"mpirun --hostfile {hostfile} -n 16 -N 8 --bind-to none")
    assert mpirun.endswith("/opt/nccl-tests/build/all_reduce_perf -b 8 -e 16G -f 2 -g 1")
    for variable in ("LD_LIBRARY_PATH", "PATH", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_PROTO"):
        assert f"-x {variable} " in mpirun
    # p4d.24xlarge: catalog 78 GB/s x 0.9
    assert report == f"gpufleet nccl-report {tmp_path / 'nccl.log'} --min-busbw 70.2"
    assert (tmp_path / "nccl.log").read_text() == "#  Avg bus bandwidth    : 71.5\n"
    environment = (tmp_path / "mpirun-env").read_text()
    assert "FI_PROVIDER=efa" in environment
    assert "LD_LIBRARY_PATH=/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/aws-ofi-nccl/lib\n" in environment


def test_explicit_floor_test_and_tolerance(run_script, calls, hostfile: Path, tmp_path: Path) -> None:
    done = run_script(
        "run-nccl-tests.sh",
        **settings(hostfile, tmp_path, GPUFLEET_MIN_BUSBW="40", GPUFLEET_NCCL_TEST="all_gather_perf"),
    )
    assert done.returncode == 0, done.stderr
    mpirun, report = calls()[-2:]
    assert "/opt/nccl-tests/build/all_gather_perf -b 8" in mpirun
    assert " -x FI_" not in mpirun  # no EFA profile on this node
    assert report.endswith("--min-busbw 40")
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path, GPUFLEET_BUSBW_TOLERANCE="0.5"))
    assert calls()[-1].endswith("--min-busbw 39.0")


def test_every_host_is_checked_for_mig_mode_first(run_script, calls, hostfile: Path, tmp_path: Path) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path))
    assert done.returncode == 0, done.stderr
    assert calls()[:3] == [
        f"mpirun --hostfile {hostfile} -n 2 -N 1 --bind-to none --tag-output "
        "nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader",
        "nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader",
        "nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader",
    ]


@pytest.mark.parametrize(
    ("modes", "refused"), [("Disabled Enabled", "10.40.0.5"), ("Enabled Enabled", "10.40.0.4 10.40.0.5")]
)
def test_mig_nodes_are_refused(run_script, calls, hostfile: Path, tmp_path: Path, modes: str, refused: str) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path), STUB_MIG=modes)
    assert done.returncode == 2
    assert done.stderr == (
        f"run-nccl-tests: GPUs in MIG mode on {refused}: NCCL is not supported with MIG "
        "(use nodes of an environment without node.mig_profile)\n"
    )
    assert not any("all_reduce_perf" in call or call.startswith("gpufleet") for call in calls())


def test_gpus_without_mig_are_not_refused(run_script, hostfile: Path, tmp_path: Path) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path), STUB_MIG="[N/A] [N/A]")
    assert done.returncode == 0, done.stderr


def test_report_verdict_is_the_exit_status(run_script, hostfile: Path, tmp_path: Path) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path), STUB_REPORT_EXIT="1")
    assert done.returncode == 1


def test_mpirun_failure_skips_the_report(run_script, calls, hostfile: Path, tmp_path: Path) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path), STUB_MPIRUN_EXIT="3")
    assert done.returncode == 1
    assert f"mpirun failed (exit 3); log: {tmp_path / 'nccl.log'}" in done.stderr
    assert not any(call.startswith("gpufleet") for call in calls())


@pytest.mark.parametrize(
    ("hosts", "extra", "message"),
    [
        (None, {}, "hostfile"),
        ("", {}, "lists no hosts"),
        ("10.0.0.1 slots=8\n10.0.0.2 slots=4\n", {}, "mixes slot counts (8 and 4)"),
        ("10.0.0.1\n", {}, "every line of"),
        (
            "10.0.0.1 slots=8\n",
            {"GPUFLEET_INSTANCE_TYPE": "g5.48xlarge"},
            "no published bus bandwidth for g5.48xlarge in the catalog: set GPUFLEET_MIN_BUSBW",
        ),
        ("10.0.0.1 slots=8\n", {"GPUFLEET_INSTANCE_TYPE": ""}, "GPUFLEET_INSTANCE_TYPE is not set"),
    ],
)
def test_bad_settings(
    run_script, calls, tmp_path: Path, hosts: str | None, extra: dict[str, str], message: str
) -> None:
    hostfile = tmp_path / "hosts"
    if hosts is not None:
        hostfile.write_text(hosts)
    done = run_script("run-nccl-tests.sh", **{**settings(hostfile, tmp_path), **extra})
    assert done.returncode == 2
    assert message in done.stderr and done.stderr.count("\n") == 1
    assert calls() == []


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (make setup installs it)")
@pytest.mark.parametrize("script", ["node-health-check.sh", "run-nccl-tests.sh"])
def test_shellcheck_clean(script: str) -> None:
    done = subprocess.run(["shellcheck", str(SCRIPTS / script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
