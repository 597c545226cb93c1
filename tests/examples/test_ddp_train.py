"""`gpufleet run --torchrun` run for real: the node script its plan sends through Run Command (gpufleet.ops.runs),
run by the real sh on this machine for two "nodes" (rank 0, the head, and rank 1, a spot node), each with its own
GPUFLEET_ROOT, fake curl (IMDSv2: the node's instance id) and a fake systemd-run that really runs the unit's body in
the background, in a session of its own (as systemd runs it in a cgroup of its own); Debian's torchrun behind it runs
examples/ddp_train.py with gloo on the CPU. The checkpoint hook asks for a checkpoint (as a spot interruption notice
makes it do on every node); the spot node is lost (its unit's whole process group killed, as a node's end ends every
process on it); the head's torchrun restarts its workers alone from that checkpoint; a replacement node becomes ready
and its setup's last step, the real scripts/node/join-runs.sh, reads the run's description that rank 0 wrote on the
shared storage (here a folder) and starts the run's unit; the run ends with the loss going on from where it was and
both remaining agents exiting 0. And on one node: old checkpoints are deleted, and a run started again after its end
resumes at the end.

The start is the real scripts/ops/start-run.sh, called by the very text Run Command sends, with a node.env of the
test's. Where this differs from a node: there is no cluster user here, so the test's own user plays it (its uid is
GPUFLEET_CLUSTER_UID, and a fake runuser runs the cluster user's side as that user); the fake systemd-run ignores
--uid/--gid and passes its own environment on, where systemd would give the unit only its --setenv variables: that is
how PYTHONPATH (the mend below) and GPUFLEET_CHECKPOINT_REQUESTS (a folder of the test's; /run/gpufleet/checkpoint on a
node) reach the workers. Both "nodes" share 127.0.0.1: the head's argv names itself the store's host (is_host=1),
the others not, so the agents behave as on separate machines.

Torch is Debian's python3-torch 1.13.1 for /usr/bin/python3 (scripts/dev/ensure-system-tools.sh installs it); its
torchrun needs the mend in debian_torch_shim/ on Python 3.11 (see its docstring), given through PYTHONPATH; the command
line itself is the one gpufleet generates, untouched. Marked `torch` (about a minute): `pytest -m "not torch"` leaves
it out while working on other things; make test runs it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.ops.fleet import FleetInstance
from gpufleet.ops.runs import node_script, plan_torchrun
from gpufleet.ops.torchrun import torchrun_command

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLES = REPOSITORY / "examples"
EXAMPLE = EXAMPLES / "ddp_train.py"
OPS_SCRIPTS = REPOSITORY / "scripts" / "ops"
HOOK = OPS_SCRIPTS / "save-checkpoint.sh"
JOIN_STEP = REPOSITORY / "scripts" / "node" / "join-runs.sh"
SHIM = Path(__file__).resolve().parent / "debian_torch_shim"
RUN_ID = "20261126-223000-5eed"
STEPS = 70

pytestmark = pytest.mark.torch

# Node stand-ins. systemd-run: the options up to the program, then the program (/bin/bash FILE) started in its own
# session with the --setenv variables, its output in $GPUFLEET_ROOT/unit.log, its process id in unit.pid and, once it
# ended, its exit status in unit.status. It returns at once, as systemd-run does once the unit has started. runuser:
# the command itself, as the test's user, after checking it is asked for the cluster user.
FAKE_COMMANDS = {
    "curl": 'case "$*" in *api/token*) echo TOKEN ;; *instance-id*) echo "$FAKE_INSTANCE_ID" ;; *) exit 22 ;; esac',
    "systemctl": "exit 3",  # is-active: no unit of the run is active on a node that starts it
    "runuser": '[[ "$1 $2 $3" == "-u gpufleet --" ]] || exit 9\nshift 3\nexec "$@"',
    "systemd-run": """settings=()
while [ "${1#--}" != "$1" ]; do
  case $1 in --setenv=*) settings+=("${1#--setenv=}") ;; esac
  shift
done
(
  env "${settings[@]}" setsid "$@" >"$GPUFLEET_ROOT/unit.log" 2>&1 &
  echo $! >"$GPUFLEET_ROOT/unit.pid"
  wait $!
  echo $? >"$GPUFLEET_ROOT/unit.status"
) >/dev/null 2>&1 </dev/null &""",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fleet_node(instance_id: str, lifecycle: str) -> FleetInstance:
    launched = dt.datetime(2026, 11, 26, 22, 0, tzinfo=dt.UTC)
    return FleetInstance(instance_id, lifecycle, "us-east-1a", "pg", "127.0.0.1", launched, "running", "ami-1", "ready")


class Cluster:
    """Nodes on this machine: each a folder (its GPUFLEET_ROOT) with the unit's log, process id and exit status."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = root / "fsx"
        self.shared.mkdir()
        self.requests = root / "run" / "gpufleet" / "checkpoint"
        self.requests.mkdir(parents=True)
        self.bin = root / "bin"
        self.bin.mkdir()
        for name, body in FAKE_COMMANDS.items():
            (self.bin / name).write_text(f"#!/bin/bash\n{body}\n")
            (self.bin / name).chmod(0o755)
        plan = plan_torchrun(
            RUN_ID,
            "test",
            [fleet_node("i-0000000000000000b", "spot"), fleet_node("i-0000000000000000a", "on-demand")],
            1,
            [
                "ddp_train.py",
                "--checkpoint-dir",
                str(self.shared / "checkpoints" / RUN_ID),
                "--steps",
                str(STEPS),
                "--checkpoint-every",
                "1000",  # only the hook's request makes a checkpoint: the step to resume from is known
                "--step-seconds",
                "0.25",
            ],
            min_nodes=1,
            max_restarts=3,
            shared_dir=str(self.shared),
            port=free_port(),
            last_call_seconds=5,
        )
        # The working directory gpufleet run --workdir would unpack on the node: examples/ itself.
        self.plan = dataclasses.replace(plan, workdir=str(EXAMPLES))

    def node(self, name: str, instance_id: str = "i-0000000000000000c") -> dict[str, str]:
        """The environment of node NAME's Run Command shell or setup unit."""
        (self.root / name).mkdir()
        return dict(
            os.environ,
            PATH=f"{self.bin}:{os.environ['PATH']}",
            GPUFLEET_ROOT=str(self.root / name),
            FAKE_INSTANCE_ID=instance_id,
            PYTHONPATH=str(SHIM),
            GPUFLEET_CHECKPOINT_REQUESTS=str(self.requests),
            OMP_NUM_THREADS="1",
        )

    @property
    def settings(self) -> dict[str, str]:
        """What node.env holds for the run's scripts; the test's own user plays the cluster user."""
        return {
            "GPUFLEET_SHARED_DIR": str(self.shared),
            "GPUFLEET_CLUSTER_USER": "gpufleet",
            "GPUFLEET_CLUSTER_UID": str(os.getuid()),
        }

    def start(self, name: str, instance_id: str) -> None:
        """What Run Command does on the node: `sh -c` the start's text, its node.env and operator scripts this
        test's."""
        node_env = self.root / "node.env"
        node_env.write_text("".join(f"export {key}='{value}'\n" for key, value in self.settings.items()))
        text = node_script(self.plan)
        prefix = ". /etc/gpufleet/node.env && /opt/gpufleet/ops/"
        assert text.startswith(prefix)
        started = subprocess.run(
            ["sh", "-c", f". {node_env} && {OPS_SCRIPTS}/" + text.removeprefix(prefix)],
            env=self.node(name, instance_id),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert started.returncode == 0, started.stdout + started.stderr

    def join(self, name: str) -> subprocess.CompletedProcess:
        """The replacement node's last setup step."""
        return subprocess.run(
            [str(JOIN_STEP)], env={**self.node(name), **self.settings}, capture_output=True, text=True, timeout=30
        )

    def lose(self, name: str) -> None:
        """The node's end: every process of its unit, the agent and its workers."""
        os.killpg(int((self.root / name / "unit.pid").read_text()), signal.SIGKILL)
        self.exit_status(name, 30)

    def exit_status(self, name: str, seconds: float) -> int:
        status = self.root / name / "unit.status"
        deadline = time.monotonic() + seconds
        while not status.exists() or not status.read_text().strip():
            if time.monotonic() > deadline:
                pytest.fail(f"the unit on {name} did not end within {seconds:g} s:\n{self.logs()}")
            time.sleep(0.5)
        return int(status.read_text())

    def logs(self) -> str:
        return "\n".join(f"--- {log.parent.name}\n{log.read_text()}" for log in sorted(self.root.glob("*/unit.log")))

    def segments(self) -> list[list[dict]]:
        """Rank 0's lines, one list per start of the workers (a start line, then its steps), in the order they ran."""
        segments = []
        for log in sorted(self.root.glob("*/unit.log")):
            for line in log.read_text().splitlines():
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                if event["event"] == "start":
                    segments.append([event])
                else:
                    segments[-1].append(event)
        return sorted(segments, key=lambda segment: segment[0]["resumed_from"] or -1)

    def wait_until(self, condition: Callable[[list[list[dict]]], bool], what: str, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition(self.segments()):
                return
            time.sleep(0.5)
        pytest.fail(f"no {what} within {seconds:g} s:\n{self.logs()}")

    def stop_all(self) -> None:
        for pid_file in self.root.glob("*/unit.pid"):
            if not (pid_file.parent / "unit.status").exists():
                try:
                    os.killpg(int(pid_file.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def steps(segment: list[dict]) -> list[int]:
    return [event["step"] for event in segment if event["event"] == "step"]


def losses(segment: list[dict]) -> list[float]:
    return [event["loss"] for event in segment if event["event"] == "step"]


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_a_lost_node_costs_a_restart_from_the_last_checkpoint_and_a_replacement_joins(cluster):
    cluster.start("head", "i-0000000000000000a")
    cluster.start("spot", "i-0000000000000000b")
    # Rank 0 described the run for replacement nodes, as the cluster user's file (the test's user plays it).
    description = cluster.shared / "gpufleet-runs" / RUN_ID / "run.json"
    assert description.stat().st_uid == os.getuid()
    cluster.wait_until(lambda segments: any(len(steps(segment)) >= 15 for segment in segments), "15 steps on two nodes")

    # The spot watcher's run of the hook on an interruption notice (docs/guides/interruptions.md).
    hook = subprocess.run(
        [str(HOOK), "--wait", "60"],
        env=dict(os.environ, GPUFLEET_ROOT=str(cluster.root), GPUFLEET_NOTICE_PATH="spot/instance-action"),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert hook.returncode == 0, hook.stdout + hook.stderr + cluster.logs()
    request_id = dict(line.split("=", 1) for line in (cluster.requests / "request").read_text().splitlines())["id"]
    cluster.lose("spot")

    # Five steps alone before the replacement comes, as a replacement node takes minutes to be ready.
    cluster.wait_until(
        lambda segments: len(segments) >= 2 and len(steps(segments[1])) >= 5, "five steps on the head alone"
    )
    joined = cluster.join("replacement")
    assert (joined.returncode, joined.stdout) == (0, f"join-runs: run {RUN_ID}: joined as node rank 2\n"), (
        joined.stderr + cluster.logs()
    )
    assert cluster.exit_status("head", 240) == 0, cluster.logs()
    assert cluster.exit_status("replacement", 60) == 0, cluster.logs()
    assert (description.parent / "ended").exists()  # no node joins the run from now on

    first, alone, rejoined = cluster.segments()
    saved = [event for event in first if event["event"] == "checkpoint"]
    assert [event["request"] for event in saved] == [request_id], cluster.logs()
    saved_step = saved[0]["step"]
    assert [segment[0]["world_size"] for segment in (first, alone, rejoined)] == [2, 1, 2]
    assert [segment[0]["resumed_from"] for segment in (first, alone, rejoined)] == [None, saved_step, saved_step]
    assert [segment[0]["format"] for segment in (first, alone, rejoined)] == ["torch.save"] * 3  # torch 1.13
    # Each start goes on from the checkpoint's step, not from step 1, and the last one runs to the end.
    assert steps(alone)[0] == saved_step + 1
    assert steps(rejoined) == list(range(saved_step + 1, STEPS + 1))
    assert rejoined[-1] == {"event": "done", "step": STEPS}
    # The loss goes on from where it was: well under the run's first steps right after the restart, and falling.
    assert mean(losses(alone)[:5]) < 0.5 * mean(losses(first)[:5]), cluster.logs()
    assert mean(losses(rejoined)[-5:]) < 0.5 * mean(losses(rejoined)[:5]), cluster.logs()
    # The ranks gpufleet logs --node finds the nodes by: 0 and 1 from the start, 2 for the node that joined.
    ranks = {
        name: (cluster.root / name / "var/lib/gpufleet/run-ranks" / RUN_ID).read_text()
        for name in ("head", "spot", "replacement")
    }
    assert ranks == {"head": "0\n", "spot": "1\n", "replacement": "2\n"}


def run_alone(root: Path, *extra: str) -> subprocess.CompletedProcess:
    """One agent for one node (the head), one worker: the example run start to end."""
    command = torchrun_command(
        run_id="run-test-2",
        head_address="127.0.0.1",
        is_head=True,
        min_nodes=1,
        max_nodes=1,
        processes_per_node=1,
        max_restarts=0,
        port=free_port(),
        command=[str(EXAMPLE), "--checkpoint-dir", str(root / "checkpoints"), *extra],
    )
    return subprocess.run(
        command,
        env=dict(os.environ, PYTHONPATH=str(SHIM), GPUFLEET_CHECKPOINT_REQUESTS=str(root / "absent")),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )


def test_older_checkpoints_go_and_a_finished_run_started_again_has_nothing_to_do(tmp_path):
    first = run_alone(tmp_path, "--steps", "10", "--checkpoint-every", "2", "--keep", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    checkpoints = tmp_path / "checkpoints"
    assert sorted(path.name for path in checkpoints.iterdir()) == ["LATEST", "step-00000008", "step-00000010"]
    assert (checkpoints / "LATEST").read_text() == "step-00000010"

    again = run_alone(tmp_path, "--steps", "10", "--checkpoint-every", "2", "--keep", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    events = [json.loads(line) for line in again.stdout.splitlines() if line.startswith("{")]
    assert events == [
        {"event": "start", "resumed_from": 10, "world_size": 1, "format": "torch.save", "collective_timeout": 300.0},
        {"event": "done", "step": 10},
    ]


@pytest.mark.parametrize(
    ("arguments", "environment", "expected"),
    [
        ((), {}, 300.0),  # the documented default
        ((), {"DDP_TRAIN_COLLECTIVE_TIMEOUT": "90"}, 90.0),
        (("--collective-timeout", "45.5"), {"DDP_TRAIN_COLLECTIVE_TIMEOUT": "90"}, 45.5),  # the flag wins
    ],
)
def test_the_collective_timeout_is_the_flag_else_the_environment_else_five_minutes(
    tmp_path, monkeypatch, arguments, environment, expected
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    done = run_alone(tmp_path, "--steps", "1", *arguments)
    assert done.returncode == 0, done.stdout + done.stderr
    start = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert start["collective_timeout"] == expected


@pytest.mark.parametrize(
    ("arguments", "environment", "message"),
    [
        (("--collective-timeout", "0"), {}, "argument --collective-timeout: must be more than 0 seconds, got '0'"),
        (("--collective-timeout", "nan"), {}, "argument --collective-timeout: must be more than 0 seconds, got 'nan'"),
        ((), {"DDP_TRAIN_COLLECTIVE_TIMEOUT": "5m"}, "argument --collective-timeout: not a number of seconds: '5m'"),
    ],
)
def test_a_collective_timeout_that_is_not_a_positive_number_is_refused(tmp_path, arguments, environment, message):
    """Before any process group: python ddp_train.py alone, as torchrun's worker would start it."""
    done = subprocess.run(
        ["/usr/bin/python3", str(EXAMPLE), "--checkpoint-dir", str(tmp_path), *arguments],
        env=dict(os.environ, PYTHONPATH=str(SHIM), **environment),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(f"error: {message}")


def test_a_rank_whose_node_asked_nothing_has_nothing_to_acknowledge(tmp_path):
    """The agreement to save is cluster-wide, a request one node's: the ranks of a node whose hook did not run (no
    request file there) save with the others and acknowledge nothing; a rank that heard its node's request
    acknowledges it. Seen on the box (tests/box/test_torchrun_journey.py): every rank of the other node died reading a
    request file its node never had."""
    probe = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(EXAMPLES)!r})
import torch, ddp_train
folder = Path({str(tmp_path)!r})
requests = ddp_train.CheckpointRequests(folder, "ddp-train-rank9", torch.device("cpu"))
print(requests.acknowledge())
(folder / "request").write_text("id=1796194756-784\\nnotice_path=spot/instance-action\\n")
requests.heard = True
print(requests.acknowledge())
"""
    done = subprocess.run(["/usr/bin/python3", "-c", probe], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["None", "1796194756-784"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "ddp-train-rank9.done",
        "ddp-train-rank9.pid",
        "request",
    ]
    assert (tmp_path / "ddp-train-rank9.done").read_text() == "1796194756-784"
