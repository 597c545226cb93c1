"""scripts/ops/run-nccl-tests.sh with stubbed mpirun and gpufleet: the mpirun line, EFA environment, busbw floor, and
the verdict without gpufleet, as on a node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts.efa_install import install_efa

SCRIPTS = Path(__file__).parents[3] / "scripts" / "ops"
EFA_ENV = Path(__file__).parents[3] / "scripts" / "node" / "efa-env.sh"


@pytest.fixture
def hostfile(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_text("10.40.0.4 slots=8\n10.40.0.5 slots=8\n")
    return path


def write_efa_environment(root: Path, layout: str, manifest: dict) -> None:
    """Runs scripts/node/efa-env.sh, as a node's setup does, on a fake EFA install (layout "ubuntu" or "al2")."""
    install_efa(root, layout)
    (root / "etc/gpufleet").mkdir(parents=True, exist_ok=True)
    (root / "etc/gpufleet/versions.json").write_text(json.dumps(manifest))
    subprocess.run(
        [str(EFA_ENV)],
        check=True,
        capture_output=True,
        text=True,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "GPUFLEET_ROOT": str(root),
            "GPUFLEET_EFA": "1",
            "GPUFLEET_GPUDIRECT_RDMA": "1",
        },
    )


@pytest.fixture
def efa_profile(tmp_path: Path) -> Path:
    """What scripts/node/efa-env.sh writes for an old aws-ofi-nccl on Ubuntu."""
    root = tmp_path / "root"
    write_efa_environment(root, "ubuntu", {"components": {"aws_ofi_nccl": "1.1.4-aws"}})
    return root / "etc" / "profile.d" / "gpufleet-efa.sh"


def settings(hostfile: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "GPUFLEET_HOSTFILE": str(hostfile),
        "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
        "GPUFLEET_NCCL_LOG": str(tmp_path / "nccl.log"),
        # What node.env sets on a p4d.24xlarge node: the catalog's 78 GB/s less 10% (gpufleet/user_data.py).
        "GPUFLEET_MIN_BUSBW": "70.2",
        **extra,
    }


def test_two_nodes_with_the_floor_of_node_env(
    run_script, calls, hostfile: Path, efa_profile: Path, tmp_path: Path
) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path))
    assert done.returncode == 0, done.stderr
    mpirun, report = calls()[-2:]
    assert mpirun.startswith(f"mpirun --hostfile {hostfile} -n 16 -N 8 --bind-to none")
    assert mpirun.endswith("/opt/nccl-tests/build/all_reduce_perf -b 8 -e 16G -f 2 -g 1")
    for variable in ("LD_LIBRARY_PATH", "PATH", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_PROTO"):
        assert f"-x {variable} " in mpirun
    assert report == f"gpufleet nccl-report {tmp_path / 'nccl.log'} --min-busbw 70.2"
    assert (tmp_path / "nccl.log").read_text() == "#  Avg bus bandwidth    : 71.5\n"
    environment = (tmp_path / "mpirun-env").read_text()
    assert "FI_PROVIDER=efa" in environment
    assert "LD_LIBRARY_PATH=/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/aws-ofi-nccl/lib\n" in environment


def test_explicit_floor_and_test(run_script, calls, hostfile: Path, tmp_path: Path) -> None:
    done = run_script(
        "run-nccl-tests.sh",
        **settings(hostfile, tmp_path, GPUFLEET_MIN_BUSBW="40", GPUFLEET_NCCL_TEST="all_gather_perf"),
    )
    assert done.returncode == 0, done.stderr
    mpirun, report = calls()[-2:]
    assert "/opt/nccl-tests/build/all_gather_perf -b 8" in mpirun
    assert " -x FI_" not in mpirun  # no EFA profile on this node
    assert report.endswith("--min-busbw 40")


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
def test_mig_nodes_are_refused(
    run_script, calls, hostfile: Path, efa_profile: Path, tmp_path: Path, modes: str, refused: str
) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path), STUB_MIG=modes)
    assert done.returncode == 2
    assert done.stderr == (
        f"run-nccl-tests: error: GPUs in MIG mode on {refused}: NCCL is not supported with MIG "
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
            {"GPUFLEET_INSTANCE_TYPE": "g5.48xlarge", "GPUFLEET_MIN_BUSBW": ""},
            "no published bus bandwidth for g5.48xlarge in the catalog: set GPUFLEET_MIN_BUSBW",
        ),
        (
            "10.0.0.1 slots=8\n",
            {"GPUFLEET_MIN_BUSBW": "70 GB/s"},
            "GPUFLEET_MIN_BUSBW must be a number of GB/s, got '70 GB/s'",
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


@pytest.mark.parametrize(
    ("layout", "paths", "library_path"),
    [
        ("ubuntu", {}, "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/aws-ofi-nccl/lib"),
        (
            "al2",
            {"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib64"},
            "/opt/amazon/efa/lib64:/opt/amazon/openmpi/lib64:/opt/amazon/ofi-nccl/lib64",
        ),
    ],
    ids=["ubuntu", "al2"],
)
def test_library_path_is_what_efa_env_found_on_the_image(
    run_script, calls, hostfile: Path, tmp_path: Path, layout: str, paths: dict[str, str], library_path: str
) -> None:
    write_efa_environment(tmp_path / "root", layout, {"components": {"aws_ofi_nccl": "1.16.3"}, "paths": paths})

    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path), LD_LIBRARY_PATH="/usr/local/cuda/lib64")

    assert done.returncode == 0, done.stderr
    assert f"LD_LIBRARY_PATH={library_path}:/usr/local/cuda/lib64\n" in (tmp_path / "mpirun-env").read_text()
    (benchmark,) = [call for call in calls() if call.startswith("mpirun") and "all_reduce_perf" in call]
    assert "-x LD_LIBRARY_PATH " in benchmark


def test_without_the_efa_environment_it_warns_and_forwards_no_library_path(
    run_script, calls, hostfile: Path, tmp_path: Path
) -> None:
    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path, GPUFLEET_MIN_BUSBW="40"))

    assert done.returncode == 0, done.stderr
    assert "warning: no " + str(tmp_path / "root/etc/profile.d/gpufleet-efa.sh") in done.stderr
    (benchmark,) = [call for call in calls() if call.startswith("mpirun") and "all_reduce_perf" in call]
    assert "LD_LIBRARY_PATH" not in benchmark
    assert "LD_LIBRARY_PATH" not in (tmp_path / "mpirun-env").read_text()


NCCL_LOGS = Path(__file__).parents[2] / "fixtures" / "nccl"


@pytest.mark.parametrize(
    ("log", "floor", "status", "verdict"),
    [
        (
            "p4d_2node_all_reduce.log",
            "70.2",
            0,
            "run-nccl-tests: peak busbw 78.66 GB/s at 2147483648 bytes (floor 70.2 GB/s): OK",
        ),
        (
            "p4d_2node_all_reduce.log",
            "80",
            1,
            "run-nccl-tests: peak busbw 78.66 GB/s at 2147483648 bytes (floor 80 GB/s): FAIL: peak busbw 78.66 GB/s "
            "is below the floor 80 GB/s",
        ),
        (
            "p4d_all_reduce_wrong.log",
            "40",
            1,
            "run-nccl-tests: peak busbw 41.36 GB/s at 1073741824 bytes (floor 40 GB/s): FAIL: 1027 wrong elements",
        ),
        (
            "p4d_all_reduce_truncated.log",
            "20",
            1,
            "run-nccl-tests: peak busbw 22.93 GB/s at 1048576 bytes (floor 20 GB/s): FAIL: log cut short after 18 "
            "rows (no Avg bus bandwidth line)",
        ),
        # The old layout (nccl-tests of the NCCL 2.7.8 era): "error" is a deviation, not a count of wrong elements.
        (
            "p4d_all_reduce_nccl278.log",
            "20",
            0,
            "run-nccl-tests: peak busbw 26.86 GB/s at 1073741824 bytes (floor 20 GB/s): OK",
        ),
    ],
)
def test_without_gpufleet_the_log_is_judged_on_the_same_rules_as_nccl_report(
    run_script, calls, stub_dir: Path, hostfile: Path, tmp_path: Path, log: str, floor: str, status: int, verdict: str
) -> None:
    """A node has no gpufleet (its Python may be older than gpufleet needs): the verdicts match what
    `gpufleet nccl-report --min-busbw` says of the same logs (tests/reports/)."""
    (stub_dir / "gpufleet").unlink()
    done = run_script(
        "run-nccl-tests.sh",
        **settings(hostfile, tmp_path, GPUFLEET_MIN_BUSBW=floor),
        STUB_NCCL_OUTPUT=str(NCCL_LOGS / log),
    )
    assert done.returncode == status, done.stderr
    assert done.stdout.splitlines()[-1] == verdict
    assert (tmp_path / "nccl.log").read_text() == (NCCL_LOGS / log).read_text()


def test_without_gpufleet_a_log_with_no_table_is_unusable(
    run_script, stub_dir: Path, hostfile: Path, tmp_path: Path
) -> None:
    (stub_dir / "gpufleet").unlink()
    done = run_script(
        "run-nccl-tests.sh", **settings(hostfile, tmp_path), STUB_NCCL_OUTPUT=str(NCCL_LOGS / "no_table.log")
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"run-nccl-tests: error: no nccl-tests table in {tmp_path / 'nccl.log'}"


def test_amazons_mpirun_is_called_by_its_absolute_path_before_any_on_path(
    run_script, calls, stub_dir: Path, hostfile: Path, tmp_path: Path
) -> None:
    """Amazon's Open MPI is on PATH only through /etc/profile.d: the script calls /opt/amazon/openmpi/bin/mpirun
    itself (its absolute path also tells mpirun where orted is on the other hosts), here the stub moved there, with
    another mpirun first on PATH that must not run. Without Amazon's (the other tests) it takes the one on PATH."""
    amazon = tmp_path / "root" / "opt" / "amazon" / "openmpi" / "bin"
    amazon.mkdir(parents=True)
    (stub_dir / "mpirun").rename(amazon / "mpirun")
    (stub_dir / "mpirun").write_text('#!/bin/sh\necho "decoy mpirun $*" >> "$STUB_LOG"\nexit 7\n')
    (stub_dir / "mpirun").chmod(0o755)

    done = run_script("run-nccl-tests.sh", **settings(hostfile, tmp_path))

    assert done.returncode == 0, done.stderr
    launched = [call.split()[0] for call in calls() if call.split()[0] in ("mpirun", "decoy")]
    assert launched == ["mpirun", "mpirun"]  # the MIG check, then the benchmark; no decoy
