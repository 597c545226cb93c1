"""join-runs.sh on a fake node: a node that becomes ready joins the torchrun runs described on the shared file system
whose head still answers, as the unit `gpufleet run` starts, with a rank of its own; stopped runs, runs whose head is
gone, runs already running here and nodes whose setup failed join nothing. The descriptions are the ones
gpufleet.ops.runs writes (run_description), so a change of their form shows here. The end-to-end run, with the
real torchrun behind the unit, is tests/examples/test_ddp_train.py. The unit starts through the operator scripts'
start script, scripts/ops/start-run.sh --joined (found beside this script's folder, as /opt/gpufleet/ops on a node).

What the cluster user's processes do (list, read, claim a rank) runs through a runuser stub as the test's own user,
but for the tests that take `world` (tests/scripts/ops/test_start_run.py), which run the real runuser with a real
unprivileged user; either way root itself reads and writes nothing in the runs' folders, and each hostile shape of
them (a file named joined, a FIFO or a link for run.json, a reader that hangs) ends in bounded time with one line."""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.ops.fleet import FleetInstance
from gpufleet.ops.runs import cache_steps, plan_torchrun, run_description
from tests.gpufleet.ops.test_runs import RUN_ID
from tests.gpufleet.ops.test_runs import node as fleet_node
from tests.scripts.node.conftest import SCRIPTS_DIR, FakeNode
from tests.scripts.ops.test_start_run import as_nobody, nobody, snapshot, stub_runuser, world  # noqa: F401

OTHER_RUN = "20261126-220000-beef"
BODY = (
    "set -eo pipefail\n"
    "if [ -r /etc/profile.d/gpufleet-efa.sh ]; then . /etc/profile.d/gpufleet-efa.sh; fi\n"
    'if [ -n "${{GPUFLEET_PYTHON_VENV:-}}" ]; then export PATH="$GPUFLEET_PYTHON_VENV/bin:$PATH"; fi\n'
    "{caches}"
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


def describe(shared: Path, run_id: str, port: int, owner: int = 2000) -> Path:
    """The description `gpufleet run --torchrun` writes for a two-node run whose head is 127.0.0.1, in a folder of
    OWNER's (the cluster user's, as rank 0 makes it)."""
    nodes: list[FleetInstance] = [
        fleet_node("i-0000000000000000a", "127.0.0.1"),
        fleet_node("i-0000000000000000b", "10.40.0.9", "spot"),
    ]
    plan = plan_torchrun(
        run_id, "dev", nodes, 8, ["train.py"], min_nodes=1, max_restarts=10, shared_dir=str(shared), port=port
    )
    directory = shared / "gpufleet-runs" / run_id
    directory.mkdir(parents=True)
    (directory / "run.json").write_text(json.dumps(run_description(plan)))
    for path in (directory, directory / "run.json"):
        os.chown(path, owner, owner)  # the cluster user's, as rank 0 writes them
    return directory


def join(fake, shared: Path, **settings: str):
    cluster = {"GPUFLEET_CLUSTER_USER": "gpufleet", "GPUFLEET_CLUSTER_UID": "2000"}
    return fake.run(
        "join-runs.sh",
        check=False,
        GPUFLEET_SHARED_DIR=str(shared),
        GPUFLEET_JOIN_CONNECT_SECONDS="2",
        # runuser is in /usr/sbin (util-linux), on root's PATH on a node.
        PATH=f"{fake.bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin",
        **{**cluster, **settings},
    )


def unit_file(fake: FakeNode, run_id: str = RUN_ID) -> Path:
    return fake.root / "run" / "gpufleet" / "runs" / f"{run_id}.sh"


@pytest.fixture
def node(node: FakeNode) -> FakeNode:
    """The fake node, with runuser running the cluster user's side as the test's own user."""
    stub_runuser(node)
    return node


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
            "--property=LimitMEMLOCK=infinity",
            "--property=LimitNOFILE=131072",
            "--property=LimitSTACK=infinity",
            "--uid=gpufleet",
            "--gid=gpufleet",
            f"--setenv=GPUFLEET_RUN_ID={RUN_ID}",
            "--setenv=GPUFLEET_NODE_COUNT=2",
            "--setenv=GPUFLEET_GPUS_PER_NODE=8",
            "--setenv=GPUFLEET_HEAD_ADDRESS=127.0.0.1",
            "--setenv=GPUFLEET_NODE_RANK=2",
            "/bin/bash",
            str(unit_file(node)),
        ]
    ]
    # The runs' shared caches on the described run's file system (gpufleet/ops/runs.py cache_steps).
    caches = "".join(f"{step}\n" for step in cache_steps(str(shared)))
    assert unit_file(node).read_text() == BODY.format(port=head, run=RUN_ID, caches=caches)
    assert result.stdout == f"join-runs: run {RUN_ID}: joined as node rank 2\n"
    assert (node.root / f"var/lib/gpufleet/run-ranks/{RUN_ID}").read_text() == "2\n"
    assert (shared / "gpufleet-runs" / RUN_ID / "joined" / "2").is_dir()


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


def test_without_the_start_script_it_says_so_in_one_line_and_joins_nothing(node, shared, head, tmp_path):
    """The operator scripts not installed (operator-scripts.sh failed, so run-setup hands this step its name and it
    joins nothing anyway; or the folder was emptied since): a copy of the node's layout without /opt/gpufleet/ops."""
    describe(shared, RUN_ID, head)
    layout = tmp_path / "opt-gpufleet"
    for folder, name in (("node", "join-runs.sh"), ("lib", "helpers.sh")):
        (layout / folder).mkdir(parents=True)
        (layout / folder / name).write_bytes((SCRIPTS_DIR.parent / folder / name).read_bytes())
    (layout / "node/join-runs.sh").chmod(0o755)

    result = node.run(
        layout / "node/join-runs.sh",
        check=False,
        GPUFLEET_SHARED_DIR=str(shared),
        GPUFLEET_CLUSTER_USER="gpufleet",
        GPUFLEET_CLUSTER_UID="2000",
    )

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"join-runs: error: not joining any run: no start script {layout}/ops/start-run.sh (the operator scripts are "
        "not installed)\n"
    )
    assert node.calls() == []


def test_a_start_that_fails_is_an_error_and_the_other_runs_are_still_joined(node, shared, head):
    """start-run.sh --joined exits 1 when systemd does not start the unit: that run's error line, and the next run is
    still joined."""
    describe(shared, RUN_ID, head)
    describe(shared, OTHER_RUN, head)
    failing = node.bin_dir / "systemd-run"
    failing.rename(node.bin_dir / "systemd-run.fake")
    failing.write_text(
        f'#!/bin/sh\ncase "$1" in --unit=gpufleet-run-{RUN_ID}) echo "Failed to start" >&2; exit 1 ;; esac\n'
        f'exec "{node.bin_dir}/systemd-run.fake" "$@"\n'
    )
    failing.chmod(0o755)

    result = join(node, shared)

    assert result.returncode == 1
    assert result.stderr == (
        f"Failed to start\nstart-run: error: run {RUN_ID}: could not start gpufleet-run-{RUN_ID}\n"
    )
    assert result.stdout == f"join-runs: run {OTHER_RUN}: joined as node rank 2\n"


def test_a_description_it_cannot_read_is_an_error_and_the_other_runs_are_still_joined(node, shared, head):
    describe(shared, RUN_ID, head)
    broken = shared / "gpufleet-runs" / OTHER_RUN
    broken.mkdir()
    (broken / "run.json").write_text('{"run_id": "20261126-220000-beef"}')
    for path in (broken, broken / "run.json"):
        os.chown(path, 2000, 2000)

    result = join(node, shared)

    assert result.returncode == 1
    assert (
        result.stderr == f"join-runs: error: run {OTHER_RUN}: {broken}/run.json is not a run description: not joined\n"
    )
    assert [call[0] for call in node.calls("systemd-run")] == [f"--unit=gpufleet-run-{RUN_ID}"]


@pytest.mark.parametrize(("folder", "file"), [(2000, 1001), (1001, 2000)], ids=["file", "folder"])
def test_a_description_not_the_cluster_users_is_left_alone(node, shared, head, folder, file):
    directory = describe(shared, RUN_ID, head)
    os.chown(directory, folder, folder)
    os.chown(directory / "run.json", file, file)

    result = join(node, shared)

    assert (result.returncode, node.calls("systemd-run")) == (0, [])
    assert result.stderr == (
        f"join-runs: warning: run {RUN_ID}: {directory} (uid {folder}) and its run.json (uid {file}) must be the "
        "cluster user's: not joined\n"
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


# Hostile shapes of the runs' folders: each ends in bounded time, with one line, and the other runs are still joined.


def test_a_file_named_joined_is_a_clear_error_at_once_and_the_other_runs_are_still_joined(node, shared, head):
    """Before, root's `until mkdir joined/N` went on for ever (about 140 tries a second) when joined was not a
    folder."""
    trapped = describe(shared, RUN_ID, head)
    (trapped / "joined").write_text("")
    describe(shared, OTHER_RUN, head)

    started = time.monotonic()
    result = join(node, shared)

    assert time.monotonic() - started < 30
    assert result.returncode == 1
    assert result.stderr == (
        f"join-runs: error: run {RUN_ID}: could not take a rank in {trapped}/joined as gpufleet "
        f"({trapped}/joined is not a folder: remove it): not joined\n"
    )
    assert [call[0] for call in node.calls("systemd-run")] == [f"--unit=gpufleet-run-{OTHER_RUN}"]


def test_ranks_taken_past_the_bound_are_a_clear_error(node, shared, head):
    directory = describe(shared, RUN_ID, head)
    for rank in range(2, 1002):
        (directory / "joined" / str(rank)).mkdir(parents=True)

    result = join(node, shared)

    assert result.returncode == 1
    assert result.stderr == (
        f"join-runs: error: run {RUN_ID}: could not take a rank in {directory}/joined as gpufleet "
        "(ranks 2 to 1001 are all taken): not joined\n"
    )
    assert node.calls("systemd-run") == []


@pytest.mark.parametrize("shape", ["fifo", "link"])
def test_a_run_json_that_is_a_fifo_or_a_link_is_left_alone_at_once(node, shared, head, tmp_path, shape):
    """Before, a link was followed (stat and jq by root) to whatever it named: here a description of the cluster
    user's elsewhere, which was then joined."""
    directory = describe(shared, RUN_ID, head)
    elsewhere = describe(tmp_path / "elsewhere", RUN_ID, head) / "run.json"
    (directory / "run.json").unlink()
    if shape == "fifo":
        os.mkfifo(directory / "run.json")
    else:
        (directory / "run.json").symlink_to(elsewhere)
    os.lchown(directory / "run.json", 2000, 2000)  # the tenant's, as the tenant makes it
    describe(shared, OTHER_RUN, head)

    started = time.monotonic()
    result = join(node, shared)

    assert time.monotonic() - started < 30
    assert result.returncode == 0
    assert result.stderr == (
        f"join-runs: warning: run {RUN_ID}: {directory}/run.json is a link or not a regular file: not joined\n"
    )
    assert [call[0] for call in node.calls("systemd-run")] == [f"--unit=gpufleet-run-{OTHER_RUN}"]


def test_a_run_json_swapped_for_a_fifo_after_the_checks_is_read_from_the_file_opened(node, shared, head):
    """The tenant wins the race between the checks and the read: run.json becomes a FIFO of the tenant's when stat
    runs (a stat of the test's on PATH does the swap). Before, root's stat came between its check and jq's open, and
    jq blocked on the FIFO for ever; now the reader stats the file it has open, so the swap changes nothing it
    reads."""
    directory = describe(shared, RUN_ID, head)
    swap = node.bin_dir / "stat"
    swap.write_text(
        f"#!/bin/sh\nif [ ! -p {directory}/run.json ]; then\n"
        f"  mv {directory}/run.json {directory}/moved.json && mkfifo {directory}/run.json\n"
        f"  /bin/chown -h 2000:2000 {directory}/run.json\nfi\n"
        'exec /usr/bin/stat "$@"\n'
    )
    swap.chmod(0o755)

    started = time.monotonic()
    result = join(node, shared)

    assert time.monotonic() - started < 30
    assert (result.returncode, result.stdout) == (0, f"join-runs: run {RUN_ID}: joined as node rank 2\n")
    assert (directory / "run.json").is_fifo()


HELPERS = SCRIPTS_DIR.parent / "lib" / "helpers.sh"


def test_a_cluster_user_process_that_hangs_or_lingers_holds_root_no_longer_than_its_bound(node):
    """as_cluster_user, which every read and write in the runs' folders goes through: a process of the user's that
    never ends is stopped at the bound (timeout, as root), and one that slips out into a session of its own, keeping
    what it was given as output, does not hold root: its output is a file, not a pipe root waits on."""
    script = (
        f'source "{HELPERS}"\n'
        'as_cluster_user 1 sh -c "setsid sleep 20 & echo partial; sleep 20"\n'
        'echo "status $? ($CLUSTER_USER_ERROR)"\n'
    )
    env = {"PATH": f"{node.bin_dir}:/usr/bin:/bin", "GPUFLEET_CLUSTER_USER": "gpufleet", "FAKE_LOG": str(node.log_file)}

    started = time.monotonic()
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)

    assert time.monotonic() - started < 10
    assert result.stdout == "partial\nstatus 124 (no answer within 1s)\n"


def test_joined_as_a_link_to_roots_folder_gets_nothing_made_there(world, tmp_path):  # noqa: F811
    """The real runuser, nobody as the cluster user: before, root's `mkdir -p DIR/joined` and `mkdir DIR/joined/N`
    followed a link named joined and made folders wherever it pointed."""
    from tests.scripts.fake_bin import install_fakes
    from tests.scripts.node.conftest import FAKE_COMMANDS, FAKED

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    install_fakes(bin_dir, FAKE_COMMANDS, [name for name in FAKED if name != "runuser"])
    fake = FakeNode(tmp_path / "root", bin_dir, tmp_path / "state.json", tmp_path / "calls.log")
    fake.root.mkdir()
    fake.set_state()
    shared = world / "fsx"
    shared.mkdir()
    uid = pwd.getpwnam("nobody").pw_uid
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        directory = describe(shared, RUN_ID, listener.getsockname()[1], owner=uid)
        (directory / "joined").symlink_to(world / "etc")
        shared.joinpath("gpufleet-runs").chmod(0o755)
        etc_before = snapshot(world / "etc")

        result = join(fake, shared, **nobody())

    assert result.returncode == 1
    assert result.stderr == (
        f"join-runs: error: run {RUN_ID}: could not take a rank in {directory}/joined as nobody "
        f"({directory}/joined is not a folder: remove it): not joined\n"
    )
    assert snapshot(world / "etc") == etc_before
    assert fake.calls("systemd-run") == []
