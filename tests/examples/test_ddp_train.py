"""The torchrun command line of gpufleet.ops.torchrun, run for real by torchrun: two agents on 127.0.0.1 as two nodes
(CPU, gloo) training examples/ddp_train.py; the checkpoint hook asks for a checkpoint (as a spot interruption notice
makes it do on every node); the spot node is lost (its whole process group killed, as a node's end ends every process
on it); the head's torchrun restarts its workers alone from that checkpoint; a replacement node's agent, started with
the same line, joins; the run ends with the loss going on from where it was. And on one node: old checkpoints are
deleted, and a run started again after its end resumes at the end.

Torch is Debian's python3-torch 1.13.1 for /usr/bin/python3 (scripts/dev/ensure-system-tools.sh installs it); its
torchrun needs the mend in debian_torch_shim/ on Python 3.11 (see its docstring), given through PYTHONPATH; the command
line itself is the one gpufleet generates, untouched. Marked `torch` (about a minute): `pytest -m "not torch"` leaves
it out while working on other things; make test runs it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.ops.torchrun import torchrun_command

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLE = REPOSITORY / "examples" / "ddp_train.py"
HOOK = REPOSITORY / "scripts" / "node" / "save-checkpoint.sh"
SHIM = Path(__file__).resolve().parent / "debian_torch_shim"
STEPS = 70

pytestmark = pytest.mark.torch


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """Agents on this machine standing in for nodes; each agent's output in NAME.log."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.requests = root / "run" / "gpufleet" / "checkpoint"
        self.requests.mkdir(parents=True)
        self.agents: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *, is_head: bool) -> None:
        command = torchrun_command(
            run_id="run-test-1",
            head_address="127.0.0.1",
            is_head=is_head,
            min_nodes=1,
            max_nodes=2,
            processes_per_node=1,
            max_restarts=3,
            port=self.port,
            last_call_seconds=5,
            command=[
                str(EXAMPLE),
                "--checkpoint-dir",
                str(self.root / "checkpoints"),
                "--steps",
                str(STEPS),
                "--checkpoint-every",
                "1000",  # only the hook's request makes a checkpoint: the step to resume from is known
                "--step-seconds",
                "0.25",
            ],
        )
        environment = dict(
            os.environ, PYTHONPATH=str(SHIM), GPUFLEET_CHECKPOINT_REQUESTS=str(self.requests), OMP_NUM_THREADS="1"
        )
        with (self.root / f"{name}.log").open("w") as log:
            # A session of its own: killing its process group ends the agent and its workers, as a lost node does.
            self.agents[name] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True, cwd=self.root
            )

    def lose(self, name: str) -> None:
        os.killpg(self.agents[name].pid, signal.SIGKILL)
        self.agents[name].wait()

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()}" for log in sorted(self.root.glob("*.log")))

    def segments(self) -> list[list[dict]]:
        """Rank 0's lines, one list per start of the workers (a start line, then its steps), in the order they ran."""
        segments = []
        for log in sorted(self.root.glob("*.log")):
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
        for agent in self.agents.values():
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()


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
    cluster.start("head", is_head=True)
    cluster.start("spot", is_head=False)
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
    cluster.start("replacement", is_head=False)
    assert cluster.agents["head"].wait(timeout=240) == 0, cluster.logs()
    assert cluster.agents["replacement"].wait(timeout=60) == 0, cluster.logs()

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
        {"event": "start", "resumed_from": 10, "world_size": 1, "format": "torch.save"},
        {"event": "done", "step": 10},
    ]
