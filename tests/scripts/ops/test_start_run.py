"""scripts/ops/start-run.sh and stop-run.sh on a fake node, called by the very text `gpufleet run` and `gpufleet stop`
send through Run Command (gpufleet.ops.runs node_script, stop_script), run by the real sh: fake IMDS (curl),
systemctl and systemd-run (which starts nothing: its call and the file it names are what the tests read), and runuser,
which here runs the command as the test's own user after checking the cluster user's name.

The tests that take `world` run the real runuser as root with a real unprivileged user (nobody) playing the
cluster user, in a folder that user owns with links planted where root wrote before: root must create, change and
follow nothing there. systemd itself is not here: that ExecStart holds a path alone, and the file the body byte for
byte, is what is checked; the box (tests/box) runs the unit under a real systemd."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.ops.runs import node_script, plan_run, run_description, stop_script, unit_body
from tests.gpufleet.ops.test_runs import RUN_ID, modelled_fleet, node, torchrun_plan, two_node_plan
from tests.scripts.node.conftest import FakeNode
from tests.scripts.ops.test_strict_mode import SCRIPTS_DIR

UNIT = f"gpufleet-run-{RUN_ID}"
CLUSTER = {"GPUFLEET_CLUSTER_USER": "gpufleet", "GPUFLEET_CLUSTER_UID": "2000"}
# runuser as root runs it for the cluster user: here the command itself, as the test's user, after checking the name;
# each call is logged (user, program).
RUNUSER_STUB = """#!/bin/bash
[[ $1 == -u && $2 == "$GPUFLEET_CLUSTER_USER" && $3 == -- ]] || { echo "runuser: unexpected $*" >&2; exit 9; }
echo "$2 $4" >>"${FAKE_LOG%/*}/runuser.log"
shift 3
exec "$@"
"""


def stub_runuser(node: FakeNode) -> None:
    (node.bin_dir / "runuser").write_text(RUNUSER_STUB)
    (node.bin_dir / "runuser").chmod(0o755)


def runuser_calls(node: FakeNode) -> list[str]:
    log = node.log_file.parent / "runuser.log"
    return log.read_text().splitlines() if log.exists() else []


def on_node(
    node: FakeNode, text: str, instance_id: str = "i-0000000000000000a", active: bool = False, **settings: str
) -> subprocess.CompletedProcess[str]:
    """TEXT as aws:runShellScript runs it (`sh -c`, as root), on a node whose node.env holds SETTINGS (the cluster
    user's unless given) and whose operator scripts are the repository's."""
    node.set_state(imds={"instance-id": [[200, instance_id]]}, active_units=[UNIT] if active else [])
    node_env = node.root.parent / "node.env"
    values = {**CLUSTER, **settings}
    node_env.write_text("".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items()))
    prefix = ". /etc/gpufleet/node.env && /opt/gpufleet/ops/"
    assert text.startswith(prefix), text
    local = f". {node_env} && {SCRIPTS_DIR}/" + text.removeprefix(prefix)
    env = {
        # runuser is in /usr/sbin (util-linux), on root's PATH on a node.
        "PATH": f"{node.bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin",
        "GPUFLEET_ROOT": str(node.root),
        "FAKE_STATE": str(node.state_file),
        "FAKE_LOG": str(node.log_file),
    }
    return subprocess.run(["sh", "-c", local], env=env, capture_output=True, text=True, timeout=60, check=False)


def unit_file(node: FakeNode) -> Path:
    return node.root / "run" / "gpufleet" / "runs" / f"{RUN_ID}.sh"


@pytest.fixture
def cluster_node(node: FakeNode) -> FakeNode:
    stub_runuser(node)
    return node


def test_each_node_starts_the_unit_with_its_own_rank_from_a_file_of_roots(cluster_node):
    plan = two_node_plan(setup="make data")

    result = on_node(cluster_node, node_script(plan), "i-0000000000000000b")

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"start-run: run {RUN_ID}: started {UNIT} on i-0000000000000000b as rank 1 of 2\n"
    assert cluster_node.calls("systemd-run") == [
        [
            f"--unit={UNIT}",
            f"--description=gpufleet run {RUN_ID}",
            "--property=LimitMEMLOCK=infinity",
            "--property=LimitNOFILE=131072",
            "--property=LimitSTACK=infinity",
            "--uid=gpufleet",
            "--gid=gpufleet",
            f"--setenv=GPUFLEET_RUN_ID={RUN_ID}",
            "--setenv=GPUFLEET_NODE_COUNT=2",
            "--setenv=GPUFLEET_GPUS_PER_NODE=8",
            "--setenv=GPUFLEET_HEAD_ADDRESS=10.40.0.4",
            "--setenv=GPUFLEET_NODE_RANK=1",
            "/bin/bash",
            str(unit_file(cluster_node)),
        ]
    ]
    assert unit_file(cluster_node).read_text() == (
        "set -eo pipefail\n"
        "if [ -r /etc/profile.d/gpufleet-efa.sh ]; then . /etc/profile.d/gpufleet-efa.sh; fi\n"
        'if [ -n "${GPUFLEET_PYTHON_VENV:-}" ]; then export PATH="$GPUFLEET_PYTHON_VENV/bin:$PATH"; fi\n'
        "cd ~gpufleet\n"
        "make data\n"
        "exec python train.py --epochs 2"
    )
    # Root's file in root's folder, readable by the unit's user; nothing else left there.
    assert stat.S_IMODE(unit_file(cluster_node).stat().st_mode) == 0o644
    assert stat.S_IMODE(unit_file(cluster_node).parent.stat().st_mode) == 0o755
    assert [path.name for path in unit_file(cluster_node).parent.iterdir()] == [f"{RUN_ID}.sh"]
    assert (cluster_node.root / f"var/lib/gpufleet/run-ranks/{RUN_ID}").read_text() == "1\n"
    assert runuser_calls(cluster_node) == []  # a run without a description has nothing for the cluster user to do


def test_execstart_holds_a_path_and_the_file_the_body_byte_for_byte_with_every_dollar_and_percent(
    cluster_node, tmp_path
):
    """systemd expands $VAR, ${VAR} and $$ in ExecStart's arguments and % specifiers in unit settings: a body passed
    as `bash -c BODY` reached bash changed. Here the unit's command line is /bin/bash and a path with neither, and the
    file holds the body as gpufleet wrote it; run by bash as systemd would, $$ is bash's own process id and ${...}
    the unit's environment."""
    setup = """printf '%s|%s|%s|%s\\n' "${GREETING:-unset}" "$$" "$BASHPID" '100% %n %% %i $HOME' > out"""
    plan = plan_run(RUN_ID, "dev", [node("i-0000000000000000a", "10.40.0.4")], 8, ["true"], setup=setup)
    plan = dataclasses.replace(plan, workdir=str(tmp_path))

    result = on_node(cluster_node, node_script(plan))

    assert result.returncode == 0, result.stderr
    (call,) = cluster_node.calls("systemd-run")
    assert call[-2:] == ["/bin/bash", str(unit_file(cluster_node))]
    assert not any(character in call[-1] for character in "$%")
    assert unit_file(cluster_node).read_bytes() == unit_body(plan).encode()
    env = {"PATH": "/usr/bin:/bin", "GREETING": "hello"}
    subprocess.run(["/bin/bash", call[-1]], env=env, check=True, cwd=tmp_path)
    greeting, pid, bash_pid, literal = (tmp_path / "out").read_text().rstrip("\n").split("|")
    assert (greeting, pid, literal) == ("hello", bash_pid, "100% %n %% %i $HOME")


def test_a_node_outside_the_batch_starts_nothing_and_says_so(cluster_node):
    result = on_node(cluster_node, node_script(two_node_plan()), "i-0000000000000000c")

    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == f"start-run: error: run {RUN_ID}: i-0000000000000000c is not one of its nodes\n"
    assert cluster_node.calls("systemd-run") == []
    assert not (cluster_node.root / "var/lib/gpufleet/run-ranks").exists()


def test_a_repeated_start_leaves_the_running_unit_alone(cluster_node):
    result = on_node(cluster_node, node_script(two_node_plan()), active=True)

    assert (result.returncode, result.stdout) == (
        0,
        f"start-run: run {RUN_ID}: already running on i-0000000000000000a\n",
    )
    assert cluster_node.calls("systemd-run") == []


@pytest.mark.parametrize(
    ("instance_id", "command"),
    [("i-0000000000000000a", "torchrun --rdzv_conf=is_host=1 train.py"), ("i-0000000000000000b", "is_host=0")],
    ids=["head", "other"],
)
def test_the_head_runs_its_own_script_from_the_same_text(cluster_node, instance_id, command):
    nodes = [node("i-0000000000000000a", "10.40.0.4"), node("i-0000000000000000b", "10.40.0.9", "spot")]
    plan = plan_run(
        RUN_ID,
        "dev",
        nodes,
        8,
        ["torchrun", "--rdzv_conf=is_host=0", "train.py"],
        head_command=["torchrun", "--rdzv_conf=is_host=1", "train.py"],
    )

    assert on_node(cluster_node, node_script(plan), instance_id).returncode == 0

    assert unit_file(cluster_node).read_text() == unit_body(plan, head=instance_id.endswith("a"))
    assert command in unit_file(cluster_node).read_text()


def test_the_last_node_of_the_second_batch_finds_rank_59(cluster_node):
    plan = plan_run(RUN_ID, "dev", modelled_fleet(60), 8, ["python", "train.py"])

    result = on_node(cluster_node, node_script(plan, 50), "i-0000000000000003b")

    assert result.stdout == f"start-run: run {RUN_ID}: started {UNIT} on i-0000000000000003b as rank 59 of 60\n"


def test_rank_0_writes_the_description_as_the_cluster_user_and_the_others_do_not(cluster_node, tmp_path):
    shared = tmp_path / "fsx"
    shared.mkdir()
    plan = torchrun_plan(shared_dir=str(shared))

    rank_1 = on_node(cluster_node, node_script(plan), "i-0000000000000000b", GPUFLEET_SHARED_DIR=str(shared))
    assert rank_1.returncode == 0, rank_1.stderr
    assert not (shared / "gpufleet-runs").exists()
    rank_0 = on_node(cluster_node, node_script(plan), "i-0000000000000000a", GPUFLEET_SHARED_DIR=str(shared))
    assert rank_0.returncode == 0, rank_0.stderr

    described = shared / "gpufleet-runs" / RUN_ID / "run.json"
    assert json.loads(described.read_text()) == run_description(plan)
    assert described.read_text().startswith('{\n "body": ')  # keys sorted, one a line
    assert stat.S_IMODE(described.stat().st_mode) == 0o644
    assert list(described.parent.iterdir()) == [described]  # no temporary file left
    assert runuser_calls(cluster_node) == ["gpufleet sh"]
    assert unit_file(cluster_node).read_text() == unit_body(plan, head=True)


def test_a_described_run_on_a_node_without_shared_storage_is_not_started(cluster_node, tmp_path):
    result = on_node(cluster_node, node_script(torchrun_plan(shared_dir="/fsx")))

    assert result.returncode == 1
    assert result.stderr == "start-run: error: GPUFLEET_SHARED_DIR is not set (from /etc/gpufleet/node.env)\n"
    assert cluster_node.calls("systemd-run") == []


NO_RUN_ID = "start-run: error: SPEC holds no run id, first rank and node count"


def call_with(spec: object) -> str:
    """A start's text with SPEC as its specification (JSON, or raw text when a str)."""
    text = spec if isinstance(spec, str) else json.dumps(spec)
    return f". /etc/gpufleet/node.env && /opt/gpufleet/ops/start-run.sh '{base64.b64encode(text.encode()).decode()}'"


def good_spec(**changes: object) -> dict:
    spec = json.loads(base64.b64decode(node_script(two_node_plan()).split("'")[1]))
    return {**spec, **changes}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            ". /etc/gpufleet/node.env && /opt/gpufleet/ops/start-run.sh 'not base64!'",
            "start-run: error: usage: start-run.sh SPEC (the run's specification, base64 of its JSON, as gpufleet run "
            "sends it)",
        ),
        (call_with("[1, 2"), "start-run: error: SPEC is not base64 of a JSON object"),
        (
            call_with(good_spec(run_id="../../etc/x")),
            "start-run: error: SPEC holds no run id, first rank and node count",
        ),
        (
            call_with(good_spec(first_rank="a[$(reboot)]")),
            "start-run: error: SPEC holds no run id, first rank and node count",
        ),
        (
            call_with(good_spec(settings={"GPUFLEET_RUN_ID": "x\n--uid=root"})),
            f"start-run: error: run {RUN_ID}: its settings are not GPUFLEET_ names with plain values: not started",
        ),
        (
            call_with(good_spec(settings={"LD_PRELOAD": "/tmp/x.so"})),
            f"start-run: error: run {RUN_ID}: its settings are not GPUFLEET_ names with plain values: not started",
        ),
        (
            call_with(good_spec(settings={"GPUFLEET_X": "$HOME%n"})),
            f"start-run: error: run {RUN_ID}: its settings are not GPUFLEET_ names with plain values: not started",
        ),
        (call_with(good_spec(body=["rm"])), f"start-run: error: run {RUN_ID}: no body to run: not started"),
    ],
    ids=["not-base64", "not-json", "run-id", "rank", "option-in-a-setting", "not-gpufleet", "dollar", "no-body"],
)
def test_a_specification_whose_values_would_reach_systemd_run_unchecked_is_refused(cluster_node, text, line):
    result = on_node(cluster_node, text)

    assert (result.returncode, result.stdout, result.stderr) == (1, "", line + "\n")
    assert cluster_node.calls("systemd-run") == []
    assert [path.name for path in (cluster_node.root / "run/gpufleet/runs").glob("*")] == []


# stop-run.sh


def test_stop_marks_a_described_run_stopped_as_the_cluster_user_then_stops_its_unit(cluster_node, tmp_path):
    shared = tmp_path / "fsx"
    described = shared / "gpufleet-runs" / RUN_ID
    described.mkdir(parents=True)
    unit_file(cluster_node).parent.mkdir(parents=True)
    unit_file(cluster_node).write_text("exec true")

    result = on_node(cluster_node, stop_script(RUN_ID), active=True, GPUFLEET_SHARED_DIR=str(shared))

    assert (result.returncode, result.stdout, result.stderr) == (0, f"stop-run: run {RUN_ID}: stopped\n", "")
    assert (described / "stopped").is_file()
    assert runuser_calls(cluster_node) == ["gpufleet sh"]
    assert ["stop", UNIT] in cluster_node.calls("systemctl")
    assert not unit_file(cluster_node).exists()


def test_stop_of_a_run_without_description_or_unit_changes_nothing(cluster_node, tmp_path):
    shared = tmp_path / "fsx"
    (shared / "gpufleet-runs").mkdir(parents=True)

    result = on_node(cluster_node, stop_script(RUN_ID), GPUFLEET_SHARED_DIR=str(shared))
    assert (result.returncode, result.stdout) == (0, f"stop-run: run {RUN_ID}: not running\n")
    assert list((shared / "gpufleet-runs").iterdir()) == []
    assert not any(call[0] == "stop" for call in cluster_node.calls("systemctl"))

    # Without shared storage (GPUFLEET_SHARED_DIR empty, as node.env has it then) the cluster user is not asked.
    (cluster_node.log_file.parent / "runuser.log").unlink()
    result = on_node(cluster_node, stop_script(RUN_ID), active=True, GPUFLEET_SHARED_DIR="")
    assert (result.returncode, result.stdout) == (0, f"stop-run: run {RUN_ID}: stopped\n")
    assert runuser_calls(cluster_node) == []


# Root against an unprivileged cluster user (the real runuser, a real uid).


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder every user may enter (the test's own tmp_path is root's alone), with a stand-in for /etc: root's,
    0755, holding a file only root may read."""
    if os.geteuid() != 0:
        pytest.skip("runuser needs root")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody to play the cluster user")
    base = Path(tempfile.mkdtemp(prefix="gpufleet-runs-test-", dir="/tmp"))
    base.chmod(0o755)
    etc = base / "etc"
    etc.mkdir(mode=0o755)
    (etc / "shadow").write_text("root:secret\n")
    (etc / "shadow").chmod(0o600)
    try:
        yield base
    finally:
        shutil.rmtree(base)


def nobody() -> dict[str, str]:
    entry = pwd.getpwnam("nobody")
    return {"GPUFLEET_CLUSTER_USER": entry.pw_name, "GPUFLEET_CLUSTER_UID": str(entry.pw_uid)}


def as_nobody(path: Path, mode: int = 0o755) -> Path:
    entry = pwd.getpwnam("nobody")
    path.mkdir(mode=mode)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry under FOLDER, links not followed: (owner, mode, content or link target)."""
    entries = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        content: bytes | str = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else b""
        entries[str(path.relative_to(folder))] = (info.st_uid, info.st_mode, content)
    return entries


def test_rank_0_never_writes_through_a_link_the_cluster_user_planted(node, world):
    """Before, root wrote run.json.tmp, chowned it and renamed it in the user's folder: a link planted there made root
    write and chown any file (here the stand-in for /etc/shadow). Now the user's own process writes the description;
    the links lead it nowhere it may write."""
    (node.bin_dir / "runuser").unlink(missing_ok=True)  # the real one
    shared = world / "fsx"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    folder = as_nobody(as_nobody(shared / "gpufleet-runs") / RUN_ID)
    (folder / "run.json.tmp").symlink_to(world / "etc" / "shadow")
    (folder / "run.json").symlink_to(world / "etc" / "passwd")
    for link in (folder / "run.json.tmp", folder / "run.json"):
        os.lchown(link, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
    etc_before = snapshot(world / "etc")
    plan = torchrun_plan(shared_dir=str(shared))

    result = on_node(node, node_script(plan), GPUFLEET_SHARED_DIR=str(shared), **nobody())

    assert result.returncode == 0, result.stderr
    assert snapshot(world / "etc") == etc_before
    described = folder / "run.json"
    assert not described.is_symlink() and described.stat().st_uid == pwd.getpwnam("nobody").pw_uid
    assert json.loads(described.read_text()) == run_description(plan)
    assert [path for path in folder.iterdir() if path.lstat().st_uid == 0] == []


def test_a_run_folder_that_is_a_link_to_roots_folder_gets_nothing_written_there(node, world):
    (node.bin_dir / "runuser").unlink(missing_ok=True)
    shared = world / "fsx"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    runs = as_nobody(shared / "gpufleet-runs")
    (runs / RUN_ID).symlink_to(world / "etc")
    etc_before = snapshot(world / "etc")

    result = on_node(
        node, node_script(torchrun_plan(shared_dir=str(shared))), GPUFLEET_SHARED_DIR=str(shared), **nobody()
    )

    assert result.returncode == 1
    assert result.stderr.startswith(
        f"start-run: error: run {RUN_ID}: could not write its description {runs}/{RUN_ID}/run.json as nobody (mktemp: "
    )
    assert result.stderr.endswith("Permission denied): not started\n")
    assert snapshot(world / "etc") == etc_before
    assert node.calls("systemd-run") == []


def test_stop_never_creates_a_file_through_a_planted_stopped_link(node, world):
    """Before, `touch DIR/stopped` as root followed a link the user planted: one to /etc/nologin locked every
    non-root login. Now the user's own process touches it, which may not create a file in root's folder."""
    (node.bin_dir / "runuser").unlink(missing_ok=True)
    shared = world / "fsx"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    folder = as_nobody(as_nobody(shared / "gpufleet-runs") / RUN_ID)
    (folder / "stopped").symlink_to(world / "etc" / "nologin")
    etc_before = snapshot(world / "etc")

    result = on_node(node, stop_script(RUN_ID), GPUFLEET_SHARED_DIR=str(shared), **nobody())

    assert (result.returncode, result.stdout) == (0, f"stop-run: run {RUN_ID}: not running\n")
    assert result.stderr.startswith(f"stop-run: warning: run {RUN_ID}: could not mark it stopped as nobody (touch: ")
    assert snapshot(world / "etc") == etc_before
