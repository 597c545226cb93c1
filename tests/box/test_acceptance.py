"""`gpufleet acceptance` on the box: the installed console script runs the health check and fi_info on every node
through Run Command, then nccl-tests from the head as the cluster user, mpirun (Amazon's, by its absolute path) over
the cluster user's SSH to every ready node; the all_reduce_perf stand-in prints a real p4d log from rank 0, which the
report judges against the catalog's floor."""

from __future__ import annotations

import json


def stand_in_ranks(node) -> list[str]:
    """The ranks of nccl-tests' stand-in the node has started, as its log of calls holds them."""
    return [
        line
        for line in node.run("cat", "/var/log/box-stand-ins.log").stdout.splitlines()
        if line.startswith("all_reduce_perf rank")
    ]


def test_acceptance_passes_on_the_boxs_nodes(box_cluster, tmp_path):
    cluster, head, spot = box_cluster.cluster, box_cluster.head, box_cluster.spot
    report = tmp_path / "report"

    # `gpufleet up` ran acceptance too when it brought the box up: this run's ranks are the ones logged after it.
    before = {node.instance_id: len(stand_in_ranks(node)) for node in (head, spot)}
    done = cluster.gpufleet("acceptance", "prod", "--fleet-id", cluster.fleet_id, "--report-dir", str(report))

    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((report / "acceptance.json").read_text())
    assert document["passed"] is True
    nodes = {node["instance_id"]: node for node in document["nodes"]}
    assert sorted(nodes) == sorted([head.instance_id, spot.instance_id])
    for node in nodes.values():
        assert {name: check["status"] for name, check in node["checks"].items()} == {
            "ready": "pass",
            "health": "pass",
            "efa": "pass",
        }
    assert sorted(path.name for path in report.iterdir()) == [
        "acceptance.json",
        "acceptance.txt",
        "busbw.png",
        "nccl.log",
    ]
    # mpirun started a rank of the stand-in per GPU on both nodes, rank 0 printing the table.
    for node in (head, spot):
        ranks = stand_in_ranks(node)[before[node.instance_id] :]
        assert len(ranks) == 8, ranks
