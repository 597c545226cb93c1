"""A run's pip, uv and Hugging Face caches on the environment's shared file system (gpufleet/ops/runs.py
cache_steps): MOUNT/cache, outside the data folder the bucket is linked to, made by the run itself as the cluster user,
the same on every node and on a node that joins later; none without shared storage."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from gpufleet.ops import runs
from gpufleet.ops.runs import cache_steps, plan_run, plan_torchrun, run_description, unit_body
from gpufleet.user_data import SHARED_CACHE_SUBDIR, SHARED_DATA_SUBDIR
from tests.gpufleet.ops.test_runs import RUN_ID, node

NODES = [node("i-0000000000000000a", "10.40.0.4"), node("i-0000000000000000b", "10.40.0.9", "spot")]
EXPECTED = {
    "PIP_CACHE_DIR": "/fsx/cache/pip",
    "UV_CACHE_DIR": "/fsx/cache/uv",
    "UV_LINK_MODE": "copy",
    "HF_HUB_CACHE": "/fsx/cache/huggingface/hub",
    "HF_DATASETS_CACHE": "/fsx/cache/huggingface/datasets",
}


def test_the_caches_are_on_the_shared_file_system_beside_the_data_folder():
    assert SHARED_CACHE_SUBDIR == "cache" != SHARED_DATA_SUBDIR
    assert cache_steps("/fsx") == [
        "mkdir -p -m 0750 /fsx/cache",
        "export PIP_CACHE_DIR=/fsx/cache/pip UV_CACHE_DIR=/fsx/cache/uv HF_HUB_CACHE=/fsx/cache/huggingface/hub "
        "HF_DATASETS_CACHE=/fsx/cache/huggingface/datasets UV_LINK_MODE=copy",
    ]
    # A mount path with characters the shell reads is quoted.
    assert cache_steps("/shared disk")[0] == "mkdir -p -m 0750 '/shared disk/cache'"


def test_without_shared_storage_the_tools_keep_their_own_caches():
    assert cache_steps("") == []
    body = unit_body(plan_run(RUN_ID, "dev", NODES, 8, ["python", "train.py"]))
    assert not any(name in body for name in EXPECTED)


@pytest.mark.parametrize("mpi", [False, True], ids=["plain", "mpi"])
def test_every_run_on_shared_storage_gets_them_before_its_setup(mpi):
    plan = plan_run(
        RUN_ID, "prod", NODES, 8, ["python", "train.py"], setup="uv pip install torch", mpi=mpi, shared_dir="/fsx"
    )
    lines = unit_body(plan).splitlines()
    mkdir, export = cache_steps("/fsx")
    assert lines.index(mkdir) + 1 == lines.index(export) < lines.index("cd ~gpufleet")
    assert plan.joinable is False  # a plain or MPI run takes no node later: no rendezvous


def test_a_node_that_joins_later_gets_them_too():
    """The body of the run's description is what join-runs.sh starts on a replacement node."""
    plan = plan_torchrun(
        RUN_ID,
        "prod",
        NODES,
        8,
        ["train.py"],
        min_nodes=1,
        max_restarts=3,
        setup="uv pip install torch",
        shared_dir="/fsx",
    )
    for body in (run_description(plan)["body"], unit_body(plan), unit_body(plan, head=True)):
        assert all(step in body.splitlines() for step in cache_steps("/fsx"))


def test_mpirun_forwards_them_to_the_processes_on_the_other_nodes():
    plan = plan_run(RUN_ID, "prod", NODES, 8, ["all_reduce_perf"], setup="make", mpi=True, shared_dir="/fsx")
    forwarded = "-x PIP_CACHE_DIR -x UV_CACHE_DIR -x HF_HUB_CACHE -x HF_DATASETS_CACHE -x UV_LINK_MODE"
    mpiruns = [line for line in unit_body(plan).splitlines() if line.startswith(runs.MPIRUN)]
    assert len(mpiruns) == 2 and all(forwarded in line for line in mpiruns)
    without = plan_run(RUN_ID, "dev", NODES, 8, ["all_reduce_perf"], mpi=True)
    assert "-x PIP_CACHE_DIR" not in unit_body(without)


def test_the_body_makes_the_cache_as_its_own_user_and_the_tools_see_it(tmp_path):
    """The body under the real bash, as the unit runs it (its user: the cluster user on a node, the test's here): the
    cache folder made with mode 0750 by the run, which then finds every variable set, in its setup and command."""
    shared = tmp_path / "fsx"
    shared.mkdir()
    plan = plan_run(
        RUN_ID,
        "prod",
        NODES[:1],
        8,
        ["sh", "-c", 'echo "command $PIP_CACHE_DIR $UV_CACHE_DIR $UV_LINK_MODE $HF_HUB_CACHE $HF_DATASETS_CACHE"'],
        setup='echo "setup $UV_CACHE_DIR"',
        workdir=str(tmp_path),
        shared_dir=str(shared),
    )
    done = subprocess.run(
        ["/bin/bash", "-c", unit_body(plan)],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    cache = shared / "cache"
    assert done.stdout.splitlines() == [
        f"setup {cache}/uv",
        f"command {cache}/pip {cache}/uv copy {cache}/huggingface/hub {cache}/huggingface/datasets",
    ]
    assert stat.S_IMODE(cache.stat().st_mode) == 0o750
    # Made again at the next run, as it is: an existing cache is kept.
    (cache / "uv").mkdir()
    assert subprocess.run(["/bin/bash", "-c", unit_body(plan)], capture_output=True, check=False).returncode == 0
    assert (cache / "uv").is_dir()


def test_mpirun_forwards_them_under_real_open_mpi(tmp_path, monkeypatch):
    """Debian's Open MPI, one local node of two slots: every process mpirun starts sees the shared caches."""
    monkeypatch.setattr(runs, "MPIRUN", "/usr/bin/mpirun")
    shared = tmp_path / "fsx"
    shared.mkdir()
    plan = plan_run(
        RUN_ID,
        "prod",
        [node("i-0000000000000000a", "127.0.0.1")],
        2,
        ["sh", "-c", 'echo "rank $OMPI_COMM_WORLD_RANK $UV_CACHE_DIR $UV_LINK_MODE"'],
        workdir=str(tmp_path),
        mpi=True,
        shared_dir=str(shared),
    )
    root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    body = tmp_path / "body.sh"
    body.write_text(unit_body(plan))
    env = {**os.environ, **root, "TMPDIR": str(temporary)}
    for name in ("PIP_CACHE_DIR", "UV_CACHE_DIR", "UV_LINK_MODE", "HF_HUB_CACHE", "HF_DATASETS_CACHE"):
        env.pop(name, None)
    done = subprocess.run(["/bin/bash", str(body)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.splitlines()) == [f"rank {rank} {shared}/cache/uv copy" for rank in (0, 1)]


def test_the_export_line_reads_back_as_the_expected_variables():
    (_, export) = cache_steps("/fsx")
    words = shlex.split(export)
    assert words[0] == "export"
    assert dict(word.split("=", 1) for word in words[1:]) == EXPECTED
    assert Path(EXPECTED["UV_CACHE_DIR"]).parent == Path("/fsx") / SHARED_CACHE_SUBDIR
