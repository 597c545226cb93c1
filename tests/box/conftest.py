"""The cluster in a box for the suite: the prod environment's cluster (storage, spot and on-demand nodes, the
checkpoint hook) on real systemd nodes, booted once for every test of tests/box (one xdist worker: group "box" of
tests/worker_groups.py). Its head is on-demand with a second interface, as every EFA node has; its second node is spot.

It needs root (namespaces, mounts, cgroups), mmdebstrap, dnsmasq and Debian's registry for the first build of the root
file system (then cached: tests/box/rootfs.py); without them the suite fails saying what is missing, since a box that
quietly did not run would prove nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.box.cluster import BoxCluster
from tests.box.nodes import Node

REPOSITORY = Path(__file__).resolve().parents[2]
ENVIRONMENT = REPOSITORY / "environments" / "prod.yaml"
REQUIRED_TOOLS = ("unshare", "nsenter", "ip", "mmdebstrap", "dnsmasq")
# The head's second interface: a network of its own, as an EFA node's further NICs are (tests/box/nodes.py).
HEAD_SECOND_ADDRESS = "172.31.200.10/24"


def missing_requirements() -> list[str]:
    problems = [
        f"{tool} is not installed (make setup installs it as root)"
        for tool in REQUIRED_TOOLS
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()
    ]
    if os.geteuid() != 0:
        problems.append("the box needs root: its nodes are namespaces, mounts and cgroups")
    if not Path("/sys/fs/cgroup/unified/cgroup.procs").exists():
        problems.append("no cgroup v2 hierarchy at /sys/fs/cgroup/unified")
    return problems


class Cluster:
    """What the box's tests share: the cluster, its first two nodes, and what `gpufleet up` printed bringing it up."""

    def __init__(self, cluster: BoxCluster, head: Node, spot: Node, up: UpRun) -> None:
        self.cluster = cluster
        self.head = head
        self.spot = spot
        self.up = up


class UpRun:
    """`gpufleet up ENV` as a user runs it from the checkout, the installed console script against the box's emulator,
    the CDK CLI's stand-in (tests/box/cdk_stand_in.py) handing the deploy to the box: when it asks, the box deploys
    its stand-ins of the stacks and its fleet launches the head (on-demand) and a spot node, which boot for real."""

    def __init__(self, cluster: BoxCluster, report_dir: Path) -> None:
        self.cluster = cluster
        self.report_dir = report_dir
        self.lines: list[str] = []
        self.returncode: int | None = None
        self.nodes: list[Node] = []

    def run(self, timeout: float = 900) -> None:
        cluster = self.cluster
        assert cluster.aws is not None
        stand_in = f"{sys.executable} -m tests.box.cdk_stand_in --box-dir {cluster.directory}"
        process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("gpufleet")),
                "up",
                cluster.env.name,
                "--report-dir",
                str(self.report_dir),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPOSITORY,
            env={
                **cluster.aws.environment(),
                "PATH": os.environ["PATH"],
                "GPUFLEET_ENVIRONMENTS_DIR": str(cluster.environments_dir),
                "PYTHONPATH": str(REPOSITORY),
                "GPUFLEET_CDK": stand_in,
            },
        )
        reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        reader.start()
        request = cluster.directory / "cdk" / "deploy-0.json"
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None and not request.exists():
                if time.monotonic() > deadline:
                    raise AssertionError("gpufleet up never asked to deploy:\n" + "\n".join(self.lines))
                time.sleep(0.2)
            if request.exists():
                status = "1"
                try:
                    cluster.deploy()
                    self.nodes.append(cluster.launch("on-demand", extra_addresses=(HEAD_SECOND_ADDRESS,)))
                    self.nodes.append(cluster.launch("spot"))
                    status = "0"
                finally:
                    (cluster.directory / "cdk" / "deploy-0.done").write_text(status)
            self.returncode = process.wait(timeout=max(deadline - time.monotonic(), 1))
        finally:
            if process.poll() is None:
                process.kill()
            reader.join(timeout=10)

    def _read(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))


@pytest.fixture(scope="session")
def box_cluster(tmp_path_factory) -> Iterator[Cluster]:
    problems = missing_requirements()
    if problems:
        pytest.fail("the cluster in a box cannot run here:\n" + "\n".join(problems), pytrace=False)
    cluster = BoxCluster(tmp_path_factory.mktemp("box"), ENVIRONMENT, capacity=(2, 1))
    try:
        cluster.start(progress=lambda *words: None, deploy=False)
        up = UpRun(cluster, tmp_path_factory.mktemp("acceptance") / "report")
        up.run()
        if up.returncode != 0 or len(up.nodes) != 2:
            pytest.fail(
                f"gpufleet up {cluster.env.name} failed ({up.returncode}):\n" + "\n".join(up.lines), pytrace=False
            )
        head, spot = up.nodes
        yield Cluster(cluster, head, spot, up)
    finally:
        cluster.close()
