"""join-runs.sh on a fake node: a node that becomes ready joins the torchrun runs described on the shared file system
whose head still answers, as the unit `gpufleet run` starts, with a rank of its own; stopped runs, runs whose head is
gone, runs already running here and nodes whose setup failed join nothing. The descriptions are the ones
gpufleet.ops.runs writes (run_description), so a change of their form shows here. The end-to-end run, with the
real torchrun behind the unit, is tests/examples/test_ddp_train.py."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.ops.fleet import FleetInstance
from gpufleet.ops.runs import plan_torchrun, run_description
from tests.gpufleet.ops.test_runs import RUN_ID, node

OTHER_RUN = "20261126-220000-beef"
BODY = (
    "set -eo pipefail\n"
    "if [ -r /etc/profile.d/gpufleet-efa.sh ]; then . /etc/profile.d/gpufleet-efa.sh; fi\n"
    "cd ~gpufleet\n"
    "exec torchrun --nnodes=1:2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:{port} "
    "--rdzv_id={run} --rdzv_conf=is_host=0,last_call_timeout=30 --max_restarts=10 train.py"
)


@pytest.fixture
def head() -> Iterator[int]:
    """A head serving its rendezvous: a port on 127.0.0.1 that takes connections (the kernel completes them for a
    listening socket; nothing need accept them)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def describe(shared: Path, run_id: str, port: int) -> Path:
    """The description `gpufleet run --torchrun` writes for a two-node run whose head is 127.0.0.1."""
    nodes: list[FleetInstance] = [
        node("i-0000000000000000a", "127.0.0.1"),
        node("i-0000000000000000b", "10.40.0.9", "spot"),
    ]
    plan = plan_torchrun(
        run_id, "dev", nodes, 8, ["train.py"], min_nodes=1, max_restarts=10, shared_dir=str(shared), port=port
    )
    directory = shared / "gpufleet-runs" / run_id
    directory.mkdir(parents=True)
    (directory / "run.json").write_text(json.dumps(run_description(plan)))
    os.chown(directory / "run.json", 2000, 2000)  # the cluster user's, as rank 0 writes it
    return directory


def join(fake, shared: Path, **settings: str):
    return fake.run(
        "join-runs.sh",
        check=False,
        GPUFLEET_SHARED_DIR=str(shared),
        GPUFLEET_CLUSTER_USER="gpufleet",
        GPUFLEET_CLUSTER_UID="2000",
        GPUFLEET_JOIN_CONNECT_SECONDS="2",
        **settings,
    )


@pytest.fixture
def shared(tmp_path) -> Path:
    directory = tmp_path / "fsx"
    directory.mkdir()
    return directory


def test_a_ready_node_joins_a_run_whose_head_answers_as_the_runs_unit_with_the_next_rank(node, shared, head):
    describe(shared, RUN_ID, head)

    result = join(node, shared)

    assert result.returncode == 0, result.stderr
    assert node.calls("systemd-run") == [
        [
            f"--unit=gpufleet-run-{RUN_ID}",
            f"--description=gpufleet run {RUN_ID}",
            "--uid=gpufleet",
            "--gid=gpufleet",
            f"--setenv=GPUFLEET_RUN_ID={RUN_ID}",
            "--setenv=GPUFLEET_NODE_COUNT=2",
            "--setenv=GPUFLEET_GPUS_PER_NODE=8",
            "--setenv=GPUFLEET_HEAD_ADDRESS=127.0.0.1",
            "--setenv=GPUFLEET_NODE_RANK=2",
            "/bin/bash",
            "-c",
            BODY.format(port=head, run=RUN_ID),
        ]
    ]
    assert result.stdout == f"join-runs: run {RUN_ID}: joined as node rank 2\n"
    assert (node.root / f"var/lib/gpufleet/run-ranks/{RUN_ID}").read_text() == "2\n"


def test_two_nodes_joining_take_two_ranks_and_a_node_of_the_run_keeps_its_own(node, shared, head, tmp_path):
    describe(shared, RUN_ID, head)
    (shared / "gpufleet-runs" / RUN_ID / "joined" / "2").mkdir(parents=True)  # another replacement came first
    assert join(node, shared).stdout == f"join-runs: run {RUN_ID}: joined as node rank 3\n"

    # A node that had rank 1 at the start, back from a reboot: its rank file says so.
    node.root.joinpath("var/lib/gpufleet/run-ranks", RUN_ID).write_text("1\n")
    node.clear_log()
    assert join(node, shared).stdout == f"join-runs: run {RUN_ID}: joined as node rank 1\n"
    assert "--setenv=GPUFLEET_NODE_RANK=1" in node.calls("systemd-run")[0]


def test_stopped_finished_and_running_runs_are_not_joined(node, shared, head):
    stopped = describe(shared, RUN_ID, head)
    (stopped / "stopped").touch()
    gone = closed_port()
    describe(shared, OTHER_RUN, gone)
    # Its head's torchrun ended, and the head serves another run's rendezvous on the same port now.
    ended = describe(shared, "20261126-200000-0001", head)
    (ended / "ended").touch()

    result = join(node, shared)

    assert result.returncode == 0, result.stderr
    assert node.calls("systemd-run") == []
    assert result.stdout == (
        f"join-runs: run {OTHER_RUN}: its head (127.0.0.1:{gone}) does not answer: over, or its head is gone; "
        "not joined\n"
    )

    (stopped / "stopped").unlink()
    node.set_state(active_units=[f"gpufleet-run-{RUN_ID}"])
    node.clear_log()
    assert join(node, shared).stdout.splitlines()[0] == f"join-runs: run {RUN_ID}: already running here"
    assert node.calls("systemd-run") == []


def test_a_node_whose_setup_failed_joins_nothing(node, shared, head):
    describe(shared, RUN_ID, head)

    result = join(node, shared, GPUFLEET_FAILED_SETUP_STEPS="efa-env node-ready")

    assert (result.returncode, result.stdout) == (
        0,
        "join-runs: not joining any run: setup failed (efa-env node-ready)\n",
    )
    assert node.calls("systemd-run") == []


def test_a_description_it_cannot_read_is_an_error_and_the_other_runs_are_still_joined(node, shared, head):
    describe(shared, RUN_ID, head)
    broken = shared / "gpufleet-runs" / OTHER_RUN
    broken.mkdir()
    (broken / "run.json").write_text('{"run_id": "20261126-220000-beef"}')
    os.chown(broken / "run.json", 2000, 2000)

    result = join(node, shared)

    assert result.returncode == 1
    assert (
        result.stderr == f"join-runs: error: run {OTHER_RUN}: {broken}/run.json is not a run description: not joined\n"
    )
    assert [call[0] for call in node.calls("systemd-run")] == [f"--unit=gpufleet-run-{RUN_ID}"]


def test_a_description_not_the_cluster_users_is_left_alone(node, shared, head):
    directory = describe(shared, RUN_ID, head)
    os.chown(directory / "run.json", 1001, 1001)

    result = join(node, shared)

    assert (result.returncode, node.calls("systemd-run")) == (0, [])
    assert result.stderr == (
        f"join-runs: warning: run {RUN_ID}: {directory}/run.json belongs to uid 1001, not the cluster user: "
        "not joined\n"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("head_address", "127.0.0.1/1; touch /tmp/owned #"),
        ("settings", {"GPUFLEET_RUN_ID": "x\n--uid=root"}),
        ("settings", {"LD_PRELOAD": "/tmp/x.so"}),
        ("node_count", "2; reboot"),
    ],
    ids=["shell-in-the-address", "option-in-a-setting", "not-a-gpufleet-setting", "not-a-count"],
)
def test_a_description_whose_values_would_reach_roots_shell_or_systemd_run_is_refused(node, shared, head, field, value):
    directory = describe(shared, RUN_ID, head)
    description = json.loads((directory / "run.json").read_text())
    (directory / "run.json").write_text(json.dumps({**description, field: value}))

    result = join(node, shared)

    assert result.returncode == 1
    assert (
        result.stderr == f"join-runs: error: run {RUN_ID}: {directory}/run.json is not a run description: not joined\n"
    )
    assert node.calls("systemd-run") == []
