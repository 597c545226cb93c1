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
    """What the box's tests share: the cluster and its first two nodes."""

    def __init__(self, cluster: BoxCluster, head: Node, spot: Node) -> None:
        self.cluster = cluster
        self.head = head
        self.spot = spot


@pytest.fixture(scope="session")
def box_cluster(tmp_path_factory) -> Iterator[Cluster]:
    problems = missing_requirements()
    if problems:
        pytest.fail("the cluster in a box cannot run here:\n" + "\n".join(problems), pytrace=False)
    cluster = BoxCluster(tmp_path_factory.mktemp("box"), ENVIRONMENT)
    try:
        cluster.start(progress=lambda *words: None)
        head = cluster.launch("on-demand", extra_addresses=(HEAD_SECOND_ADDRESS,))
        spot = cluster.launch("spot")
        for node in (head, spot):
            assert cluster.wait_ready(node) == "ready"
        yield Cluster(cluster, head, spot)
    finally:
        cluster.close()
