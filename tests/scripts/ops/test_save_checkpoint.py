"""scripts/ops/save-checkpoint.sh, the default checkpoint hook, against real processes that keep the contract of
docs/guides/interruptions.md: register in /run/gpufleet/checkpoint (under the fake root), take SIGUSR1, read the
request, acknowledge it. It runs on the node scripts' fake node (tests/scripts/node/conftest.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.checkpoint_hook import hook_command
from gpufleet.loading import load_named_environment
from gpufleet.user_data import OPS_INSTALL_DIR, SETTINGS_FILE, operator_scripts_archive, render_user_data
from tests.scripts.ops.test_strict_mode import SCRIPTS_DIR

HOOK = SCRIPTS_DIR / "save-checkpoint.sh"

# A training process as the guide shows it: register, and on SIGUSR1 read the request and (mode "ack") acknowledge
# it, (mode "ignore") never answer, or (mode "exit") exit without answering. It records each request it read.
TRAINER = """
import os, signal, sys, time
directory, name, mode, record = sys.argv[1:5]
requested = []
signal.signal(signal.SIGUSR1, lambda *_: requested.append(True))
with open(f"{directory}/{name}.pid", "w") as registration:
    registration.write(f"{os.getpid()}\\n")
print("ready", flush=True)
deadline = time.time() + 60
while time.time() < deadline:
    if requested:
        requested.clear()
        with open(f"{directory}/request") as request_file:
            text = request_file.read()
        request = dict(line.split("=", 1) for line in text.splitlines())
        with open(record, "a") as log:
            log.write(text)
        if mode == "exit":
            sys.exit(0)
        if mode == "ack":
            with open(f"{directory}/{name}.done", "w") as done:
                done.write(request["id"])
    time.sleep(0.02)
"""


@pytest.fixture
def checkpoint_dir(node) -> Path:
    directory = node.root / "run/gpufleet/checkpoint"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def trainers(checkpoint_dir, tmp_path):
    started: list[subprocess.Popen] = []

    def start(name: str, mode: str = "ack") -> Path:
        record = tmp_path / f"{name}.requests"
        process = subprocess.Popen(
            [sys.executable, "-c", TRAINER, str(checkpoint_dir), name, mode, str(record)],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        return record

    yield start
    for process in started:
        process.kill()
        process.wait()


def request_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_registered_processes_are_signalled_and_the_hook_returns_once_each_acknowledged(node, checkpoint_dir, trainers):
    records = [trainers("rank0"), trainers("rank1")]

    result = node.run(
        HOOK,
        args=["--wait", "20"],
        GPUFLEET_NOTICE_PATH="spot/instance-action",
        GPUFLEET_NOTICE='{"action": "terminate"}',
        GPUFLEET_SHARED_DIR="/shared",
        GPUFLEET_SHARED_DATA_DIR="/shared/data",
    )

    request = request_of((checkpoint_dir / "request").read_text())
    assert set(request) == {"id", "notice_path", "notice", "requested_at", "deadline", "checkpoint_dir"}
    assert (request["notice_path"], request["notice"], request["checkpoint_dir"]) == (
        "spot/instance-action",
        '{"action": "terminate"}',
        # In the folder exported to S3 (gpufleet/user_data.py shared_data_dir), not beside the cluster user's home.
        "/shared/data/checkpoints",
    )
    assert int(request["deadline"]) - int(request["requested_at"]) == 20
    assert [request_of(record.read_text()) for record in records] == [request, request]
    assert [(checkpoint_dir / f"rank{rank}.done").read_text() for rank in (0, 1)] == [request["id"]] * 2
    assert result.stdout.splitlines()[-1] == f"save-checkpoint: request {request['id']}: done"
    assert oct((checkpoint_dir / "request").stat().st_mode & 0o777) == "0o644"
    assert oct(checkpoint_dir.stat().st_mode & 0o7777) == "0o1777"


def test_with_no_process_registered_the_hook_writes_the_request_and_returns_at_once(node, checkpoint_dir):
    result = node.run(HOOK)

    request = request_of((checkpoint_dir / "request").read_text())
    assert (request["notice_path"], request["notice"], request["checkpoint_dir"]) == ("manual", "", "")
    assert int(request["deadline"]) - int(request["requested_at"]) == 90
    assert result.stdout.splitlines() == [
        f"save-checkpoint: request {request['id']} (manual): asked 0 process(es) to checkpoint (none registered); "
        "waiting up to 90s",
        f"save-checkpoint: request {request['id']}: done",
    ]


def test_a_process_that_never_acknowledges_ends_the_wait_at_the_deadline_with_status_2(node, checkpoint_dir, trainers):
    record = trainers("slow", mode="ignore")

    result = node.run(HOOK, check=False, args=["--wait", "1"])

    assert result.returncode == 2
    request = request_of((checkpoint_dir / "request").read_text())
    assert request_of(record.read_text()) == request
    assert result.stdout.splitlines()[-1] == (
        f"save-checkpoint: request {request['id']}: no acknowledgement from slow within 1s"
    )


def test_a_process_that_exits_instead_of_acknowledging_ends_the_wait(node, checkpoint_dir, trainers):
    trainers("quitter", mode="exit")

    result = node.run(HOOK, args=["--wait", "20"])

    request_id = request_of((checkpoint_dir / "request").read_text())["id"]
    assert result.stdout.splitlines()[-2:] == [
        f"save-checkpoint: quitter exited without acknowledging request {request_id}",
        f"save-checkpoint: request {request_id}: done",
    ]


def test_an_earlier_acknowledgement_does_not_answer_a_new_request(node, checkpoint_dir, trainers):
    trainers("rank0", mode="ignore")
    (checkpoint_dir / "rank0.done").write_text("1-1")

    result = node.run(HOOK, check=False, args=["--wait", "1"])

    assert result.returncode == 2


def test_registrations_that_name_no_live_process_are_skipped(node, checkpoint_dir):
    (checkpoint_dir / "garbage.pid").write_text("rank zero\n")
    (checkpoint_dir / "gone.pid").write_text("999999999\n")

    result = node.run(HOOK)

    assert result.stdout.splitlines()[:2] == [
        f"save-checkpoint: {checkpoint_dir}/garbage.pid does not hold a process id; skipped",
        f"save-checkpoint: process 999999999 of {checkpoint_dir}/gone.pid has exited; skipped",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_registration_by_another_user_than_the_process_owner_is_not_signalled(node, checkpoint_dir, tmp_path):
    """Any user may write into the folder (mode 1777): the owner check keeps a user from having root signal (and so,
    by SIGUSR1's default action, end) a process of someone else."""
    victim = subprocess.Popen(["sleep", "30"])
    try:
        registration = checkpoint_dir / "victim.pid"
        registration.write_text(str(victim.pid))
        os.chown(registration, 65534, 65534)

        result = node.run(HOOK)

        assert f"save-checkpoint: process {victim.pid} is not owned by the owner of {registration}; skipped" in (
            result.stdout.splitlines()
        )
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_registration_linked_to_roots_own_pid_file_is_not_followed(node, checkpoint_dir, tmp_path):
    """A user's link to a pid file root owns (sshd's, the SSM agent's) would pass an owner check that followed it: the
    hook skips links, so root signals no process of its own (SIGUSR1's default action ends most)."""
    victim = subprocess.Popen(["sleep", "30"])
    try:
        roots_pid_file = tmp_path / "daemon.pid"
        roots_pid_file.write_text(f"{victim.pid}\n")
        (checkpoint_dir / "daemon.pid").symlink_to(roots_pid_file)
        os.chown(checkpoint_dir / "daemon.pid", 65534, 65534, follow_symlinks=False)

        result = node.run(HOOK)

        assert "asked 0 process(es) to checkpoint (none registered)" in result.stdout
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_a_request_made_a_link_to_a_folder_is_replaced_not_written_into(node, checkpoint_dir, tmp_path):
    """`request` as a user's link to a folder: mv without -T would move root's request file into that folder."""
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (checkpoint_dir / "request").symlink_to(elsewhere)

    node.run(HOOK)

    assert list(elsewhere.iterdir()) == []
    request = checkpoint_dir / "request"
    assert request.is_file() and not request.is_symlink()
    assert request.read_text().startswith("id=")


def test_a_registration_that_is_a_fifo_does_not_hold_the_hook(node, checkpoint_dir):
    """A FIFO where a registration was (swapped in after the hook checked the name, or there from the start): the hook
    reads within its bound and goes on."""
    os.mkfifo(checkpoint_dir / "stuck.pid")

    result = node.run(HOOK, args=["--wait", "1"])

    assert "asked 0 process(es) to checkpoint (none registered)" in result.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--urgent"], "usage: save-checkpoint [--wait SECONDS] (got '--urgent')"),
        (["--wait"], "--wait needs a number of seconds"),
        (["--wait", "1.5"], "--wait must be a whole number of seconds, got '1.5'"),
    ],
)
def test_bad_usage_is_one_clear_line(node, checkpoint_dir, args, error):
    result = node.run(HOOK, check=False, args=args)

    assert (result.returncode, result.stderr) == (1, f"save-checkpoint: error: {error}\n")
    assert not (checkpoint_dir / "request").exists()


def test_installed_by_the_user_data_the_hook_answers_the_interruption_fan_outs_command(node, tmp_path):
    """dev names /usr/local/bin/save-checkpoint: its user data installs the link and the folder on the fake node, and
    operator-scripts.sh the hook itself at boot (here the archive unpacked as it unpacks it); the command the fan-out
    sends (the node's settings, then the hook) reaches a registered process, which acknowledges."""
    user_data = tmp_path / "user-data.sh"
    user_data.write_text(render_user_data(load_named_environment("dev"), load_catalog()["p4d.24xlarge"]))
    user_data.chmod(0o755)
    node.run(user_data)
    with tarfile.open(fileobj=io.BytesIO(operator_scripts_archive()), mode="r:gz") as archive:
        archive.extractall(node.root / OPS_INSTALL_DIR.lstrip("/"), filter="data")
    settings = node.root / SETTINGS_FILE.lstrip("/")
    # The hook as the node runs it, under the fake root.
    settings.write_text(settings.read_text().replace("/usr/local/bin/", f"{node.root}/usr/local/bin/"))
    checkpoint_dir = node.root / "run/gpufleet/checkpoint"
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(checkpoint_dir), "rank0", "ack", str(tmp_path / "rank0.requests")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert trainer.stdout is not None and trainer.stdout.readline() == "ready\n"
        command = hook_command(str(settings), "peer/spot-interruption", "i-0123456789abcdef0")

        result = subprocess.run(
            ["sh", "-c", command],
            env={"PATH": "/usr/bin:/bin", "GPUFLEET_ROOT": str(node.root)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        trainer.kill()
        trainer.wait()

    assert result.returncode == 0, result.stderr
    request = request_of((checkpoint_dir / "request").read_text())
    assert (request["notice_path"], request["notice"]) == ("peer/spot-interruption", "i-0123456789abcdef0")
    assert (checkpoint_dir / "rank0.done").read_text() == request["id"]
    assert result.stdout.splitlines()[-1] == f"save-checkpoint: request {request['id']}: done"
