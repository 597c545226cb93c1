"""The cluster user's SSH trust with the real tools: cluster-user.sh (on a fake node: fake IMDS, AWS CLI and account
tools) writes the key, the SSH client configuration and root's authorized_keys file for the user; then two real sshd
instances on loopback addresses stand for two nodes, and real Open MPI (Debian's openmpi-bin) launches a command on both
through real ssh with that configuration, with no prompt.

Loopback stands in for the node subnet: the fake IMDS gives 127.0.0.0/8 as the subnet, so the generated
configuration's checker (cluster-address.sh) and authorized_keys' from= treat the two sshd addresses as the cluster's.
The tests run as whoever runs them (root in CI): both sshd instances log that user in, with the generated key, and
mpirun gets --allow-run-as-root when that user is root (Open MPI refuses root without it: open-mpi docs,
launching-apps/ssh).

What stands in for the cluster user's home: ssh takes the default key and ~/.ssh/config from the running user's home
(ssh(1), FILES), so the test's client configuration names the generated key and includes the generated config; sshd
is pointed at the generated authorized_keys (AuthorizedKeysFile). StrictModes is off because sshd checks every
directory above authorized_keys and pytest's temporary directories lie under /tmp, which every user may write
(sshd_config(5), StrictModes); the modes cluster-user.sh gives the files are checked in test_cluster_user.py."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.scripts.fake_bin import install_fakes
from tests.scripts.node.conftest import FAKE_COMMANDS, FakeNode

SECRET = "gpufleet-lab-cluster-user-key"
MAC = "0e:12:34:56:78:9a"
ADDRESSES = ("127.0.0.2", "127.0.0.3")
# Debian's sshd, as root, needs its privilege separation directory (OpenSSH's _PATH_PRIVSEP_CHROOT_DIR; Debian's
# ssh.service makes it as RuntimeDirectory=sshd) and refuses to start without it.
PRIVSEP_DIR = Path("/run/sshd")


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


@dataclass
class Nodes:
    """Two sshd instances, one per loopback address, and what the cluster user's SSH needs to reach them."""

    ports: dict[str, int]
    host_key: Path
    directory: Path
    node: FakeNode

    @property
    def ssh_dir(self) -> Path:
        return self.node.root / "home/gpufleet/.ssh"

    def set_up_cluster_user(self, subnet: str, key: str) -> None:
        """cluster-user.sh on the fake node, IMDS giving SUBNET as the node subnet and the secret holding KEY."""
        install_fakes(self.node.bin_dir, FAKE_COMMANDS, ("aws",))
        self.node.set_state(
            imds={
                "mac": [[200, MAC]],
                f"network/interfaces/macs/{MAC}/subnet-ipv4-cidr-block": [[200, subnet]],
                "placement/region": [[200, "eu-west-1"]],
            },
            secrets={SECRET: key},
        )
        self.node.run(
            "cluster-user.sh",
            GPUFLEET_CLUSTER_USER="gpufleet",
            GPUFLEET_CLUSTER_UID="2000",
            GPUFLEET_CLUSTER_HOME="/home/gpufleet",
            GPUFLEET_CLUSTER_KEY_SECRET=SECRET,
            GPUFLEET_IMDS_URL="http://imds.test",
        )

    def client_config(self) -> Path:
        """The hosts node1 and node2 (the two sshd instances), then the generated configuration, then the generated
        key; host keys of hosts the generated configuration does not cover are checked against a file of the
        test's own."""
        aliases = "".join(
            f"Host node{index}\n  HostName {address}\n  Port {self.ports[address]}\n"
            for index, address in enumerate(ADDRESSES, start=1)
        )
        config = self.directory / "ssh_config"
        config.write_text(
            f"{aliases}"
            "Match all\n"
            f"Include {self.ssh_dir / 'config'}\n"
            "Match all\n"
            f"  IdentityFile {self.ssh_dir / 'id_ed25519'}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.directory / 'known_hosts'}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  BatchMode yes\n"
        )
        return config

    def ssh(self, host: str, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-F", str(self.client_config()), host, command],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )


def start_sshd(directory: Path, address: str, port: int, host_key: Path, authorized_keys: Path) -> subprocess.Popen:
    config = directory / f"sshd_config-{address}"
    config.write_text(
        f"ListenAddress {address}:{port}\n"
        f"HostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized_keys}\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "PermitRootLogin prohibit-password\n"
        "PidFile none\n"
    )
    log = directory / f"sshd-{address}.log"
    # -D: stay in the foreground (this test stops it); -e: log to stderr (sshd(8)).
    sshd = subprocess.Popen(
        [shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    deadline = time.monotonic() + 15
    while f"Server listening on {address} port {port}." not in log.read_text():
        if sshd.poll() is not None or time.monotonic() > deadline:
            sshd.kill()
            pytest.fail(f"sshd on {address}:{port} did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return sshd


@pytest.fixture
def nodes(node, tmp_path) -> Iterator[Nodes]:
    if os.geteuid() == 0:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    directory = tmp_path / "sshd"
    directory.mkdir()
    host_key = directory / "ssh_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    ports = {address: free_port(address) for address in ADDRESSES}
    authorized_keys = node.root / "etc/ssh/gpufleet-authorized-keys/gpufleet"
    started = []
    try:
        for address, port in ports.items():
            started.append(start_sshd(directory, address, port, host_key, authorized_keys))
        yield Nodes(ports, host_key, directory, node)
    finally:
        for sshd in started:
            sshd.terminate()
            sshd.wait(timeout=10)


def test_mpirun_reaches_both_nodes_through_the_generated_configuration_with_no_prompt(nodes, tmp_path, cluster_key):
    nodes.set_up_cluster_user("127.0.0.0/8", cluster_key[0])
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=1\nnode2 slots=1\n")

    mpirun = subprocess.run(
        [
            "mpirun",
            *(["--allow-run-as-root"] if os.geteuid() == 0 else []),
            "--hostfile",
            str(hostfile),
            "--map-by",
            "node",
            "-n",
            "2",
            "--mca",
            "plm_rsh_agent",
            f"ssh -F {nodes.client_config()}",
            "sh",
            "-c",
            'echo "$SSH_CONNECTION"',
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )

    assert mpirun.returncode == 0, mpirun.stdout + mpirun.stderr
    # SSH_CONNECTION: client address and port, then server address and port (ssh(1), ENVIRONMENT); each rank runs
    # under the Open MPI daemon that ssh started on its node, and inherits it.
    servers = sorted(tuple(line.split()[2:]) for line in mpirun.stdout.splitlines())
    assert servers == [("127.0.0.2", str(nodes.ports["127.0.0.2"])), ("127.0.0.3", str(nodes.ports["127.0.0.3"]))]
    assert not (nodes.directory / "known_hosts").exists()


def test_a_host_outside_the_node_subnet_keeps_its_host_key_checked(nodes, cluster_key):
    nodes.set_up_cluster_user("10.40.0.0/20", cluster_key[0])

    result = nodes.ssh("node1", "true")

    assert result.returncode == 255
    assert "Host key verification failed." in result.stderr


def test_the_key_is_refused_from_outside_the_node_subnet(nodes, cluster_key):
    nodes.set_up_cluster_user("10.40.0.0/20", cluster_key[0])
    # The host key known, so that only the key's from= restriction stands in the way.
    host_key = nodes.host_key.with_suffix(".pub").read_text().split()[:2]
    (nodes.directory / "known_hosts").write_text(f"[127.0.0.2]:{nodes.ports['127.0.0.2']} {' '.join(host_key)}\n")

    result = nodes.ssh("node1", "true")

    assert result.returncode == 255
    assert "Permission denied (publickey)" in result.stderr


def test_gpufleet_run_mpi_unit_reaches_both_nodes_and_forwards_the_efa_environment(
    nodes, tmp_path, cluster_key, monkeypatch
):
    """The unit body `gpufleet run --mpi` starts on the head (gpufleet.ops.runs.unit_body), run as systemd runs it
    (`/bin/bash FILE`: scripts/ops/start-run.sh), with the hostfile of two nodes at the sshd addresses: the setup runs
    once per node and the command GPUS_PER_NODE times per node, every process over ssh (sshd gives a fresh
    environment, so FI_PROVIDER reaching them shows mpirun's -x forwarding). Open MPI takes its ssh command from
    OMPI_MCA_plm_rsh_agent (an MCA parameter set in the environment, as --mca plm_rsh_agent sets it in the test
    above). The body calls mpirun by its absolute path, Amazon's on a node; here Debian's, /usr/bin/mpirun (the box,
    tests/box, has Amazon's layout)."""
    import datetime as dt

    from gpufleet.ops import runs
    from gpufleet.ops.fleet import FleetInstance
    from gpufleet.ops.runs import plan_run, unit_body

    monkeypatch.setattr(runs, "MPIRUN", "/usr/bin/mpirun")

    nodes.set_up_cluster_user("127.0.0.0/8", cluster_key[0])
    ports = "".join(f"Host {address}\n  Port {port}\n" for address, port in nodes.ports.items())
    config = tmp_path / "run_ssh_config"
    config.write_text(f"{ports}Match all\nInclude {nodes.client_config()}\n")
    launched = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    ready = [
        FleetInstance(f"i-{index:017x}", "on-demand", "az", "pg", address, launched, "running", "ami", "ready")
        for index, address in enumerate(ADDRESSES)
    ]
    work = tmp_path / "work"
    work.mkdir()
    plan = plan_run(
        "20261126-210500-3fa2",
        "dev",
        ready,
        2,
        ["sh", "-c", 'echo "$OMPI_COMM_WORLD_RANK $FI_PROVIDER ${SSH_CONNECTION##* }"'],
        setup="echo set up >> setup.log",
        workdir=str(work),
        mpi=True,
    )
    root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
    environment = {
        **os.environ,
        **root,
        "TMPDIR": str(tmp_path),
        "FI_PROVIDER": "efa",
        "OMPI_MCA_plm_rsh_agent": f"ssh -F {config}",
    }

    body = tmp_path / "unit.sh"
    body.write_text(unit_body(plan))
    run = subprocess.run(
        ["/bin/bash", str(body)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    ports_seen = {str(port): address for address, port in nodes.ports.items()}
    processes = sorted((line.split()[1], ports_seen[line.split()[2]]) for line in run.stdout.splitlines())
    assert processes == [("efa", "127.0.0.2"), ("efa", "127.0.0.2"), ("efa", "127.0.0.3"), ("efa", "127.0.0.3")]
    assert (work / "setup.log").read_text() == "set up\nset up\n"
