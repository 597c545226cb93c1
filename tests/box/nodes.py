"""Real systemd nodes on a private network: the machinery of the cluster in a box
(docs/development/cluster-in-a-box.md).

A Box owns one directory. In it: a "switch" network namespace holding a bridge, every node's own network namespace
with a veth pair whose node end is eth0 on the bridge, every node's overlay upper directory, and the shared directory
bound at the shared mount point of every node (the FSx for Lustre stand-in). A node is systemd as PID 1 in its own
PID, mount, UTS, IPC and cgroup namespaces (tests/box/node-init.sh builds its root), with its own address, host name,
machine id, boot id, ssh host keys (made at its first boot) and metadata service (tests/box/imds.py). Namespaces
are kept as bind mounts of /proc/PID/ns/net under the box directory, never in /run/netns, and the cgroups under a
directory named after the box's, so two boxes in two directories never meet. close() always runs (the fixture and
`make box` call it from finally and a signal handler) and leaves no mount, namespace, veth or cgroup behind.

How this machine runs such nodes, and what it cannot do (memlock, open files, cgroup controllers, sysctl):
../shared/reference/nodes-in-a-box.md; docs/development/cluster-in-a-box.md says what that leaves unproven.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOX_DIR = Path(__file__).resolve().parent
NODE_INIT = BOX_DIR / "node-init.sh"
IMDS_SERVER = BOX_DIR / "imds.py"
CGROUP_ROOT = Path("/sys/fs/cgroup/unified")
IMDS_ADDRESS = "169.254.169.254"
# systemd's signal for an orderly power-off (systemd(1), SIGNALS: SIGRTMIN+4 "Powers off the machine").
POWER_OFF_SIGNAL = signal.SIGRTMIN + 4
BOOT_SECONDS = 60
# A node's processes get this long to stop at power-off before the node is killed.
POWER_OFF_SECONDS = 20
# What a node's shell gets when the box runs a command in it: systemd's default PATH for services.
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class BoxError(RuntimeError):
    pass


def run(*argv: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if check and done.returncode != 0:
        raise BoxError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


@dataclass
class NodeSpec:
    """What the box boots: EC2's view of the instance (its id, address, lifecycle) and what its metadata service
    serves (metadata: imds.py's state)."""

    instance_id: str
    address: str  # eth0's IPv4 address, in the box's subnet
    mac: str  # eth0's
    hostname: str
    metadata: dict[str, Any]
    # Further interfaces (eth1, ...), each an IPv4 address with its prefix on a network of its own: a node with a
    # secondary NIC, as every EFA node has.
    extra_addresses: tuple[str, ...] = ()


@dataclass
class Node:
    spec: NodeSpec
    directory: Path
    netns: Path
    cgroup: Path
    index: int
    pid: int = 0
    imds: subprocess.Popen | None = None
    launcher: subprocess.Popen | None = None
    powered_off: bool = False

    @property
    def instance_id(self) -> str:
        return self.spec.instance_id

    @property
    def root(self) -> Path:
        """The node's file system as the host sees it (through its PID 1), for reading what the node wrote."""
        return Path(f"/proc/{self.pid}/root")

    def command(self, *argv: str, user: str | None = None) -> list[str]:
        """ARGV as run inside the node (nsenter into all its namespaces), as root or as USER through runuser."""
        inner = ["runuser", "-u", user, "--", *argv] if user is not None else list(argv)
        return ["nsenter", "-t", str(self.pid), "-a", "--", "env", "-i", f"PATH={NODE_PATH}", *inner]

    def run(
        self, *argv: str, user: str | None = None, check: bool = False, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(*argv, user=user), capture_output=True, text=True, timeout=timeout, input=input, check=check
        )

    def sh(self, script: str, user: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run("sh", "-c", script, user=user, timeout=timeout)

    def metadata(self) -> dict[str, Any]:
        return json.loads((self.directory / "imds.json").read_text())

    def set_metadata(self, **changes: Any) -> None:
        """Change what the node's metadata service answers (a spot notice, a tag), atomically."""
        state = {**self.metadata(), **changes}
        write_json(self.directory / "imds.json", state)

    def alive(self) -> bool:
        return self.pid > 0 and Path(f"/proc/{self.pid}").exists() and not self.powered_off


def write_json(path: Path, value: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value, indent=1))
    temporary.rename(path)


class Box:
    """Nodes on one bridge. SUBNET is the node subnet (the environment's); the box keeps .1 for the bridge and .2
    for the AWS endpoints (tests/box/aws.py), both addresses EC2 reserves in every subnet (VPC user guide,
    subnet-sizing: "The first four IP addresses and the last IP address in each subnet CIDR block are not
    available")."""

    def __init__(
        self, directory: Path, subnet: str, lower: list[Path], shared_dir: Path, shared_mount: str, scratch_mount: str
    ) -> None:
        self.directory = directory
        self.subnet = ipaddress.IPv4Network(subnet)
        self.lower = lower
        self.shared_dir = shared_dir
        self.shared_mount = shared_mount
        self.scratch_mount = scratch_mount
        self.nodes: dict[str, Node] = {}
        self.switch = directory / "switch.netns"
        tag = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:12]
        self.cgroup = CGROUP_ROOT / f"gpufleet-box-{tag}"
        self.started = False
        self.dnsmasq: subprocess.Popen | None = None
        self._next_index = 0

    @property
    def bridge_address(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def endpoint_address(self) -> str:
        return str(self.subnet.network_address + 2)

    def start(self) -> None:
        """The switch: a network namespace with a bridge, the bridge holding .1 and .2."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "nodes").mkdir(exist_ok=True)
        self.shared_dir.mkdir(parents=True, exist_ok=True)
        # As scripts/node/shared-storage.sh leaves a new file system's root at its first mount (root's, 1777): the box
        # binds it before boot, so the step finds it mounted and changes nothing.
        self.shared_dir.chmod(0o1777)
        self.started = True
        self.cgroup.mkdir(exist_ok=True)
        self.switch.touch()
        run("unshare", f"--net={self.switch}", "true")
        self.ip_switch("link", "set", "lo", "up")
        self.ip_switch("link", "add", "br0", "type", "bridge")
        self.ip_switch("link", "set", "br0", "up")
        prefix = self.subnet.prefixlen
        self.ip_switch("addr", "add", f"{self.bridge_address}/{prefix}", "dev", "br0")
        self.ip_switch("addr", "add", f"{self.endpoint_address}/{prefix}", "dev", "br0")
        self.dhcp_hosts.write_text("")
        self.dns_hosts.write_text("")
        self.dnsmasq = subprocess.Popen(
            ["nsenter", f"--net={self.switch}", "dnsmasq", *self.dnsmasq_options()],
            stdout=open(self.directory / "dnsmasq.log", "w"),
            stderr=subprocess.STDOUT,
        )

    @property
    def dhcp_hosts(self) -> Path:
        return self.directory / "dhcp-hosts"

    @property
    def dns_hosts(self) -> Path:
        return self.directory / "dns-hosts"

    def dnsmasq_options(self) -> list[str]:
        """The VPC's DHCP and DNS, from dnsmasq (dnsmasq(8)) in the switch namespace: every node gets its own
        address by its MAC (cloud-init's EC2 datasource asks for a lease before it reads the metadata service, as on
        EC2: DataSourceEc2Local), and the resolver at the subnet's .2, where the Amazon DNS server answers in a VPC
        (VPC user guide, AmazonDNS concepts), answers the names in dns-hosts and nothing else (no upstream)."""
        netmask = str(self.subnet.netmask)
        return [
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--user=root",
            "--bind-interfaces",
            f"--listen-address={self.endpoint_address}",
            f"--dhcp-range={self.subnet.network_address},static,{netmask},infinite",
            f"--dhcp-hostsfile={self.dhcp_hosts}",
            f"--addn-hosts={self.dns_hosts}",
            f"--dhcp-leasefile={self.directory / 'dhcp-leases'}",
            f"--pid-file={self.directory / 'dnsmasq.pid'}",
            # No router: the box has no way out, as a subnet without a NAT gateway; the resolver is .2.
            "--dhcp-option=option:router",
            f"--dhcp-option=option:dns-server,{self.endpoint_address}",
            "--log-dhcp",
        ]

    def add_names(self, address: str, names: list[str]) -> None:
        """Let the box's resolver answer NAMES with ADDRESS (from the next query on)."""
        with self.dns_hosts.open("a") as hosts:
            hosts.write(f"{address} {' '.join(names)}\n")
        self._reload_dnsmasq()

    def _reload_dnsmasq(self) -> None:
        # SIGHUP: dnsmasq reads --dhcp-hostsfile and --addn-hosts again (dnsmasq(8), NOTES).
        if self.dnsmasq is not None:
            self.dnsmasq.send_signal(signal.SIGHUP)

    def ip_switch(self, *argv: str) -> None:
        run("nsenter", f"--net={self.switch}", "ip", *argv)

    def boot(self, spec: NodeSpec, upper_files: dict[str, tuple[bytes, int]] | None = None) -> Node:
        """Start SPEC's node: its namespace and address, its metadata service, then systemd. UPPER_FILES (path in
        the node: (content, mode)) are written into its own layer first (its /etc/hosts, the box's CA)."""
        index = self._next_index
        self._next_index += 1
        directory = self.directory / "nodes" / spec.instance_id
        directory.mkdir(parents=True)
        node = Node(spec, directory, directory / "netns", self.cgroup / spec.instance_id, index)
        self.nodes[spec.instance_id] = node
        for path, (content, mode) in (upper_files or {}).items():
            target = directory / "upper" / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(mode)
        self._network(node)
        with self.dhcp_hosts.open("a") as hosts:
            hosts.write(f"{spec.mac},{spec.address},{spec.hostname}\n")
        self.add_names(spec.address, [spec.hostname])
        write_json(directory / "imds.json", spec.metadata)
        node.imds = subprocess.Popen(
            ["nsenter", f"--net={node.netns}", "python3", str(IMDS_SERVER), str(directory / "imds.json")],
            stdout=open(directory / "imds.log", "w"),
            stderr=subprocess.STDOUT,
        )
        node.cgroup.mkdir()
        environment = {
            "PATH": os.environ.get("PATH", NODE_PATH),
            "BOX_LOWER": ":".join(str(path) for path in self.lower),
            "BOX_NODE_DIR": str(directory),
            "BOX_HOSTNAME": spec.hostname,
            "BOX_SHARED_DIR": str(self.shared_dir),
            "BOX_SHARED_MOUNT": self.shared_mount,
            "BOX_SCRATCH_MOUNT": self.scratch_mount,
            # EC2's hypervisor UUID begins with "ec2" (EC2 user guide, identify_ec2_instances.html).
            "BOX_SYSTEM_UUID": "ec2" + hashlib.md5(spec.instance_id.encode()).hexdigest()[3:],
        }
        cgroup_procs = node.cgroup / "cgroup.procs"
        node.launcher = subprocess.Popen(
            [
                "nsenter",
                f"--net={node.netns}",
                "--",
                "unshare",
                "--pid",
                "--fork",
                "--mount",
                "--uts",
                "--ipc",
                "--cgroup",
                "--",
                str(NODE_INIT),
            ],
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=open(directory / "console.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: cgroup_procs.write_text(str(os.getpid())),
        )
        node.pid = self._child_of(node.launcher.pid)
        # Where the AWS emulator's Run Command delivery finds the node (tests/box/aws_server.py).
        (directory / "pid").write_text(f"{node.pid}\n")
        (directory / "cgroup").write_text(f"{node.cgroup}\n")
        return node

    def _child_of(self, pid: int) -> int:
        """The node's PID 1 as the host numbers it: the child unshare --fork makes (nsenter execs unshare)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except FileNotFoundError:
                break
            if children:
                return int(children[0])
            time.sleep(0.02)
        raise BoxError(f"the node's init did not start (launcher {pid})")

    def _network(self, node: Node) -> None:
        node.netns.touch()
        run("unshare", f"--net={node.netns}", "true")
        veth = f"v{node.index}"
        self.ip_switch(
            "link",
            "add",
            veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "address",
            node.spec.mac,
            "netns",
            str(node.netns),
        )
        self.ip_switch("link", "set", veth, "master", "br0", "up")
        inside = ["nsenter", f"--net={node.netns}", "ip"]
        run(*inside, "link", "set", "lo", "up")
        run(*inside, "addr", "add", f"{IMDS_ADDRESS}/32", "dev", "lo")
        run(*inside, "addr", "add", f"{node.spec.address}/{self.subnet.prefixlen}", "dev", "eth0")
        run(*inside, "link", "set", "eth0", "up")
        for number, address in enumerate(node.spec.extra_addresses, start=1):
            # A second NIC on a network of its own: a veth whose other end stays unplugged in the switch namespace.
            outside = f"x{node.index}n{number}"
            self.ip_switch(
                "link", "add", outside, "type", "veth", "peer", "name", f"eth{number}", "netns", str(node.netns)
            )
            self.ip_switch("link", "set", outside, "up")
            run(*inside, "addr", "add", address, "dev", f"eth{number}")
            run(*inside, "link", "set", f"eth{number}", "up")

    def wait_running(self, node: Node, seconds: float = BOOT_SECONDS) -> str:
        """Wait until the node's systemd says running or degraded; its answer."""
        deadline = time.monotonic() + seconds
        state = ""
        while time.monotonic() < deadline:
            state = node.run("systemctl", "is-system-running", timeout=10).stdout.strip()
            if state in ("running", "degraded"):
                return state
            time.sleep(0.2)
        raise BoxError(f"{node.instance_id} did not finish booting in {seconds:.0f}s: {state or 'no answer'}")

    def power_off(self, node: Node, seconds: float = POWER_OFF_SECONDS) -> None:
        """An orderly power-off, as EC2 stops or terminates an instance: systemd stops every unit (the spot watcher,
        the runs), then the node is gone; killed when it takes longer than SECONDS."""
        if node.powered_off:
            return
        if node.pid and Path(f"/proc/{node.pid}").exists():
            os.kill(node.pid, POWER_OFF_SIGNAL)
            deadline = time.monotonic() + seconds
            while Path(f"/proc/{node.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        self._remove(node)

    def _remove(self, node: Node) -> None:
        node.powered_off = True
        (node.directory / "pid").unlink(missing_ok=True)
        if node.launcher is not None:
            try:
                os.killpg(node.launcher.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            node.launcher.wait(timeout=30)
        if node.imds is not None:
            node.imds.kill()
            node.imds.wait(timeout=30)
        remove_cgroup(node.cgroup)
        run("umount", str(node.netns), check=False)

    def close(self) -> None:
        """Take everything down: every node, the switch, the cgroups. Safe to call twice."""
        for node in self.nodes.values():
            try:
                self.power_off(node, seconds=5)
            except Exception:  # noqa: BLE001 - tear the rest down whatever one node did
                self._remove(node)
        if self.dnsmasq is not None:
            self.dnsmasq.kill()
            self.dnsmasq.wait(timeout=30)
            self.dnsmasq = None
        if self.started:
            run("umount", str(self.switch), check=False)
            remove_cgroup(self.cgroup)
            self.started = False

    def leftovers(self) -> list[str]:
        """What the box left on the host: mounts under its directory, its cgroups."""
        found = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(str(self.directory.resolve()))
        ]
        if self.cgroup.exists():
            found.append(str(self.cgroup))
        return found


def remove_cgroup(path: Path) -> None:
    """Remove a cgroup tree, deepest first; its processes must be gone (they are killed first where any remain)."""
    if not path.exists():
        return
    for _ in range(50):
        procs = [int(pid) for directory in path.rglob("cgroup.procs") for pid in directory.read_text().split()]
        if not procs:
            break
        for pid in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for directory in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        directory.rmdir()
    path.rmdir()


def copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
