"""A node whose setup step fails says why on its readiness tag and is left out of the host lists and runs: here a node
whose nvidia-smi lists 7 of p4d's 8 GPUs (a GPU fallen off the bus), so scripts/node/gpu-clocks.sh refuses it."""

from __future__ import annotations

import json


def test_a_node_whose_setup_step_fails_is_not_ready_and_not_listed(box_cluster):
    cluster = box_cluster.cluster
    gpus = json.loads((box_cluster.head.root / "etc/box/gpus.json").read_text())
    seven = json.dumps({**gpus, "count": 7}).encode()
    broken = cluster.launch("spot", files={"/etc/box/gpus.json": (seven, 0o644)})
    try:
        assert cluster.wait_ready(broken) == "not ready: setup failed: gpu-clocks"
        journal = broken.run("journalctl", "-u", "gpufleet-node-setup", "-o", "cat").stdout.splitlines()
        assert "gpu-clocks: error: nvidia-smi lists 7 GPUs, expected 8" in journal

        listed = cluster.gpufleet("hosts", "prod", "--fleet-id", cluster.fleet_id, "--format", "json")
        assert listed.returncode == 0, listed.stderr
        ids = [host["instance_id"] for host in json.loads(listed.stdout)["hosts"]]
        assert ids == [box_cluster.head.instance_id, box_cluster.spot.instance_id]

        everything = cluster.gpufleet("hosts", "prod", "--fleet-id", cluster.fleet_id, "--include-not-ready")
        assert everything.stdout.splitlines()[-1] == f"{broken.spec.address} slots=8"
    finally:
        cluster.terminate(broken)
