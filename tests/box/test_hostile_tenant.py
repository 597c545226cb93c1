"""A hostile tenant on real nodes: the cluster user (uid 2000, any process of any run, any cluster-shell session) tries
every way it has to make root act for it, through the files root's steps touch: links and FIFOs in its home and in the
runs' folders on the shared file system, races on files root writes, values root later reads. Trust model
(docs/design.md): root on a node and the operator are trusted; the cluster user, every workload and every file the
cluster user can write are not.

Each test plants its trap as the cluster user (runuser inside the node, as a login or a workload would), makes root run
the step it aims at as root runs it on a node (the setup unit again, which every boot runs; a run's start or stop
through Run Command; a new node's join), then shows that root was not gained and nothing was written outside the
user's own files. Each trap is removed again, so the tests do not depend on their order."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from tests.box.journey import started_run

USER = "gpufleet"
HOME = "/fsx/home/gpufleet"
# A file only root may read or write, standing in for /etc/shadow.
SECRET_FILE = "/etc/box-secret"


def as_user(node, script: str):
    done = node.run("bash", "-c", script, user=USER)
    assert done.returncode == 0, done.stderr
    return done


def rerun_setup(node, seconds: float = 300) -> str:
    """The node's setup again, as at its next boot (the user data's unit, as systemd runs it), within SECONDS (a step
    that hangs fails the test here); its journal."""
    cursor = node.run("journalctl", "-u", "gpufleet-node-setup", "-n", "0", "--show-cursor", "-o", "cat").stdout
    cursor = cursor.strip().rsplit("-- cursor: ", 1)[-1]
    node.run("systemctl", "restart", "gpufleet-node-setup", timeout=seconds)
    return node.run("journalctl", "-u", "gpufleet-node-setup", f"--after-cursor={cursor}", "-o", "cat").stdout


def stat(node, path: str) -> str:
    return node.run("stat", "-c", "%U:%G %a %s", path).stdout.strip()


@pytest.fixture
def secret_file(box_cluster):
    head = box_cluster.head
    head.sh(f"printf 'root-only\\n' > {SECRET_FILE} && chmod 0600 {SECRET_FILE}")
    yield SECRET_FILE
    head.run("rm", "-f", SECRET_FILE)


@pytest.fixture
def restored_home(box_cluster):
    """Put the cluster user's .ssh back as setup makes it, whatever a test planted."""
    yield
    head = box_cluster.head
    as_user(head, f"rm -rf {HOME}/.ssh")
    journal = rerun_setup(head)
    assert "run-setup: done:" in journal, journal


def test_a_linked_ssh_folder_does_not_make_roots_keys_the_cluster_users(box_cluster, restored_home):
    """~/.ssh -> /root/.ssh: root's setup must not write the cluster key into root's authorized_keys, and the cluster
    key must not log in as root (the review's reproduction gave uid=0 with a real sshd)."""
    head, spot = box_cluster.head, box_cluster.spot
    head.sh("mkdir -p -m 0700 /root/.ssh && : > /root/.ssh/authorized_keys")
    before = head.run("sha256sum", "/root/.ssh/authorized_keys").stdout
    as_user(head, f"mv {HOME}/.ssh {HOME}/.ssh.saved && ln -s /root/.ssh {HOME}/.ssh")

    rerun_setup(head)

    assert head.run("sha256sum", "/root/.ssh/authorized_keys").stdout == before
    assert head.run("ls", "/root/.ssh").stdout.split() == ["authorized_keys"]
    as_user(head, f"rm -rf {HOME}/.ssh.saved")
    # The cluster key (on the spot node, as the cluster user) against the head's sshd, as root.
    login = spot.run(
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", f"root@{head.spec.address}", "id -u", user=USER
    )
    assert login.returncode != 0 and login.stdout == ""


def ssh_as_user(node, target: str, user: str, key: str = "~/.ssh/id_ed25519"):
    return node.run(
        "ssh",
        "-i",
        key.replace("~", HOME),
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        f"{user}@{target}",
        "id -u",
        user=USER,
    )


def test_sshd_takes_the_cluster_users_keys_from_roots_file_only(box_cluster, restored_home):
    """A key the cluster user adds to its own ~/.ssh/authorized_keys lets no one in: sshd reads the user's keys from
    /etc/ssh/gpufleet-authorized-keys/gpufleet, which only root writes; the cluster key still does."""
    head, spot = box_cluster.head, box_cluster.spot
    as_user(spot, f"ssh-keygen -q -t ed25519 -N '' -f {HOME}/planted")
    as_user(head, f"cat {HOME}/planted.pub >> {HOME}/.ssh/authorized_keys")

    planted = ssh_as_user(spot, head.spec.address, USER, key=f"{HOME}/planted")
    cluster_key = ssh_as_user(spot, head.spec.address, USER)

    assert (planted.returncode, planted.stdout) == (255, "")
    assert (cluster_key.returncode, cluster_key.stdout) == (0, "2000\n")
    as_user(head, f"rm -f {HOME}/planted {HOME}/planted.pub")


def test_root_logs_in_by_no_key_even_one_it_trusts(box_cluster):
    """Root's own authorized_keys holding the cluster key (an administrator's copy, or any way a key got there) still
    lets no one in as root: the block cluster-user.sh keeps in sshd_config says PermitRootLogin no for root."""
    head, spot = box_cluster.head, box_cluster.spot
    public = head.run("cat", f"{HOME}/.ssh/id_ed25519.pub").stdout
    head.sh(f"mkdir -p -m 0700 /root/.ssh && printf '%s' {shlex.quote(public)} > /root/.ssh/authorized_keys")
    try:
        login = ssh_as_user(spot, head.spec.address, "root")
        assert (login.returncode, login.stdout) == (255, "")
    finally:
        head.run("rm", "-f", "/root/.ssh/authorized_keys")
    assert head.run("sshd", "-T", "-C", "user=root,host=x,addr=10.50.0.5").stdout.count("permitrootlogin no") == 1


def test_linked_key_files_do_not_lead_root_to_another_file(box_cluster, secret_file, restored_home):
    """The key files as links to a root-only file: root's setup must neither write through them nor chmod them."""
    head = box_cluster.head
    before = stat(head, secret_file)
    for name in ("id_ed25519.pub", "authorized_keys", "config", "id_ed25519"):
        as_user(head, f"ln -sfn {secret_file} {HOME}/.ssh/{name}")

    rerun_setup(head)

    assert stat(head, secret_file) == before == "root:root 600 10"
    assert head.run("cat", secret_file).stdout == "root-only\n"


def test_a_linked_home_parent_is_refused(box_cluster):
    """The home's parent as the user's own folder or a link (the shared file system is writable by all): root must
    refuse to make or chown the home there. The user cannot replace /fsx/home itself (root's, in a sticky /fsx), so
    the trap is a second environment's home path the user made first, checked on the same script by its settings."""
    head = box_cluster.head
    as_user(head, "mkdir -p /fsx/trap && ln -sfn /etc /fsx/trap/home")
    settings = "GPUFLEET_CLUSTER_HOME=/fsx/trap/home/boxuser GPUFLEET_CLUSTER_USER=boxuser GPUFLEET_CLUSTER_UID=2001"
    done = head.sh(f". /etc/gpufleet/node.env && {settings} /opt/gpufleet/node/cluster-user.sh")
    try:
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1] == (
            "cluster-user: error: /fsx/trap, a parent of boxuser's home, is a link or not root's: remove it (it may "
            "be a trap) and run again"
        )
        assert head.run("test", "-e", "/etc/boxuser").returncode == 1
    finally:
        head.sh("userdel boxuser 2>/dev/null; groupdel boxuser 2>/dev/null; rm -rf /fsx/trap")


def test_a_workload_planting_the_link_gains_nothing_either(box_cluster, restored_home):
    """The same trap set by a process of a run (gpufleet run, as a workload would), not by a login."""
    cluster, head = box_cluster.cluster, box_cluster.head
    head.sh("mkdir -p -m 0700 /root/.ssh && : > /root/.ssh/authorized_keys")
    started = cluster.gpufleet(
        "run",
        "prod",
        "--fleet-id",
        cluster.fleet_id,
        "--",
        "sh",
        "-c",
        f"rm -rf {HOME}/.ssh && ln -s /root/.ssh {HOME}/.ssh",
    )
    assert started.returncode == 0, started.stderr
    head.run("sh", "-c", f"until [ -L {shlex.quote(HOME)}/.ssh ]; do sleep 0.2; done", timeout=60)

    rerun_setup(head)

    assert head.run("cat", "/root/.ssh/authorized_keys").stdout == ""


# -- the runs' folders on the shared file system ----------------------------------------------------------------------

FAKE_RUN = "20261202-120000-beef"
RUNS = "/fsx/gpufleet-runs"


def plant_run(box_cluster, body: str = "sleep 1") -> str:
    """A run folder the cluster user made itself, with a well-formed description whose head answers (the head's sshd),
    as any workload can: the steps root runs for runs must not trust it beyond a value."""
    head = box_cluster.head
    description = {
        "run_id": FAKE_RUN,
        "environment": "prod",
        "head_address": head.spec.address,
        "rendezvous_port": 22,
        "node_count": 2,
        "command": ["sleep", "1"],
        "setup": "",
        "workdir_archive": "",
        "settings": {"GPUFLEET_RUN_ID": FAKE_RUN, "GPUFLEET_NODE_COUNT": "2"},
        "body": body,
    }
    folder = f"{RUNS}/{FAKE_RUN}"
    as_user(head, f"mkdir -p {folder} && cat > {folder}/run.json <<'EOF'\n{json.dumps(description)}\nEOF")
    return folder


@pytest.fixture
def cleaned_runs(box_cluster):
    yield
    box_cluster.head.sh(f"rm -rf {RUNS}/{FAKE_RUN}")
    for node in (box_cluster.head, box_cluster.spot):
        node.sh(f"systemctl stop gpufleet-run-{FAKE_RUN} 2>/dev/null; rm -f /var/lib/gpufleet/run-ranks/{FAKE_RUN}")


def test_a_joined_link_leads_the_rank_claim_nowhere(box_cluster, cleaned_runs):
    head, spot = box_cluster.head, box_cluster.spot
    spot.sh("rm -rf /etc/box-joined && mkdir -m 0755 /etc/box-joined")
    folder = plant_run(box_cluster)
    as_user(head, f"ln -s /etc/box-joined {folder}/joined")

    journal = rerun_setup(spot, 120)

    assert spot.run("ls", "-A", "/etc/box-joined").stdout == ""
    assert f"run {FAKE_RUN}: joined" not in journal
    spot.sh("rm -rf /etc/box-joined")


def test_a_file_named_joined_ends_the_claim_at_once(box_cluster, cleaned_runs):
    """The review saw root's mkdir loop spin for 20 minutes at every boot on a plain file named `joined`."""
    spot = box_cluster.spot
    folder = plant_run(box_cluster)
    as_user(box_cluster.head, f": > {folder}/joined")

    journal = rerun_setup(spot, 90)

    assert f"run {FAKE_RUN}: joined" not in journal
    assert f"join-runs: error: run {FAKE_RUN}: could not take a rank" in journal


def test_a_run_description_that_is_a_fifo_does_not_hold_the_boot(box_cluster, cleaned_runs):
    spot = box_cluster.spot
    folder = f"{RUNS}/{FAKE_RUN}"
    as_user(box_cluster.head, f"mkdir -p {folder} && mkfifo {folder}/run.json")

    journal = rerun_setup(spot, 90)

    assert "run-setup: done:" in journal, journal


def test_a_stopped_link_does_not_make_root_create_the_file_it_names(box_cluster, cleaned_runs):
    """`gpufleet stop` marks a run stopped in its folder: a `stopped` link to /etc/nologin must not lock every
    non-root login of the node (the review's stand-in was created)."""
    cluster, head = box_cluster.cluster, box_cluster.head
    folder = plant_run(box_cluster)
    as_user(head, f"ln -s /etc/nologin {folder}/stopped")

    done = cluster.gpufleet("stop", "prod", FAKE_RUN, "--fleet-id", cluster.fleet_id)

    assert done.returncode == 0, done.stdout + done.stderr
    for node in (head, box_cluster.spot):
        assert node.run("test", "-e", "/etc/nologin").returncode == 1


def test_the_description_write_at_a_runs_start_never_goes_through_a_link(box_cluster, secret_file, cleaned_runs):
    """Rank 0 writes the run's description at the start of a torchrun run; a process of the cluster user's keeps
    swapping the temporary file for a link to a root-only file (the review won 13 of 20 starts on root's chown)."""
    cluster, head = box_cluster.cluster, box_cluster.head
    racer = head.command(
        "bash",
        "-c",
        f"end=$((SECONDS + 30)); while ((SECONDS < end)); do for d in {RUNS}/*/; do "
        f'ln -sfn {secret_file} "$d"run.json.tmp 2>/dev/null; done; done',
        user=USER,
    )
    swapping = subprocess.Popen(racer, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_id = started_run(
            cluster.gpufleet(
                "run", "prod", "--fleet-id", cluster.fleet_id, "--torchrun", "--", "/fsx/no-such-script.py"
            )
        )
    finally:
        swapping.kill()
        swapping.wait()
    assert stat(head, secret_file) == "root:root 600 10"
    assert head.run("cat", secret_file).stdout == "root-only\n"
    head.sh(f"rm -rf {RUNS}/{run_id}")
    for node in (head, box_cluster.spot):
        node.sh(f"systemctl stop gpufleet-run-{run_id}; systemctl reset-failed gpufleet-run-{run_id}")
