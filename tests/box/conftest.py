"""The cluster in a box for the suite: the prod environment's cluster (storage, spot and on-demand nodes, the
checkpoint hook) on real systemd nodes, booted once for every test of tests/box (one xdist worker: group "box" of
tests/worker_groups.py). Its head is on-demand with a second interface, as every EFA node has; its second node is spot.

It needs root (namespaces, mounts, cgroups), mmdebstrap, dnsmasq and Debian's registry for the first build of the root
file system (then cached: tests/box/rootfs.py); without them the suite fails saying what is missing, since a box that
quietly did not run would prove nothing.
"""

from __future__ import annotations

import json
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

    def __init__(self, cluster: BoxCluster, head: Node, spot: Node, up: GpufleetRun) -> None:
        self.cluster = cluster
        self.head = head
        self.spot = spot
        self.up = up


class GpufleetRun:
    """A `gpufleet` command as a user runs it from the checkout (`up`, `down`), the installed console script against
    the box's emulator, the CDK CLI's stand-in (tests/box/cdk_stand_in.py) handing deploys and destroys to the box:
    for a deploy the box deploys its stand-ins of the stacks and its fleet launches the head (on-demand) and a spot
    node, which boot for real; for a destroy the box ends the cluster's nodes and deletes the stacks."""

    def __init__(self, cluster: BoxCluster, *arguments: str) -> None:
        self.cluster = cluster
        self.arguments = arguments
        self.lines: list[str] = []
        self.returncode: int | None = None
        self.nodes: list[Node] = []
        self.report_dir: Path | None = None  # where up's acceptance wrote its report

    def run(self, timeout: float = 900) -> GpufleetRun:
        cluster = self.cluster
        assert cluster.aws is not None
        folder = cluster.directory / "cdk"
        answered = len(list(folder.glob("request-*.done")))
        stand_in = f"{sys.executable} -m tests.box.cdk_stand_in --box-dir {cluster.directory}"
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("gpufleet")), *self.arguments],
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
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    raise AssertionError(f"gpufleet {' '.join(self.arguments)} ran too long:\n" + "\n".join(self.lines))
                request = folder / f"request-{answered}.json"
                if request.exists():
                    self._answer(json.loads(request.read_text()), folder / f"request-{answered}.done")
                    answered += 1
                time.sleep(0.2)
            self.returncode = process.wait()
        finally:
            if process.poll() is None:
                process.kill()
            reader.join(timeout=10)
        return self

    def _answer(self, arguments: list[str], done: Path) -> None:
        status = "1"
        try:
            if arguments[0] == "deploy":
                self.cluster.deploy()
                self.nodes.append(self.cluster.launch("on-demand", extra_addresses=(HEAD_SECOND_ADDRESS,)))
                self.nodes.append(self.cluster.launch("spot"))
            else:
                self.cluster.destroy([argument for argument in arguments[1:] if argument.startswith("gpufleet-")])
            status = "0"
        finally:
            done.write_text(status)

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
        report = tmp_path_factory.mktemp("acceptance") / "report"
        up = GpufleetRun(cluster, "up", cluster.env.name, "--report-dir", str(report)).run()
        up.report_dir = report
        if up.returncode != 0 or len(up.nodes) != 2:
            pytest.fail(
                f"gpufleet up {cluster.env.name} failed ({up.returncode}):\n" + "\n".join(up.lines), pytrace=False
            )
        head, spot = up.nodes
        yield Cluster(cluster, head, spot, up)
    finally:
        cluster.close()
