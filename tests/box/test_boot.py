"""Boot -> ready -> listed: each node of the box boots from the launch template's user data, which the real cloud-init
reads from the node's own metadata service (IMDSv2) and runs; the setup unit runs every step of the environment; the
node tags itself ready in the emulated EC2, where the operator's `gpufleet status` and `gpufleet hosts` (the installed
console script) read it."""

from __future__ import annotations

import gzip
import json

from gpufleet.user_data import setup_scripts

PROD_STEPS = (
    "raid0-nvme gpu-clocks efa-env shared-storage cluster-user cloudwatch-agent operator-scripts python-env node-ready "
    "join-runs"
)


def test_prod_runs_every_setup_step_the_box_expects(box_cluster):
    cluster = box_cluster.cluster
    assert " ".join(setup_scripts(cluster.env, cluster.instance)) == PROD_STEPS


def test_cloud_init_read_the_user_data_from_the_nodes_metadata_service_and_ran_it(box_cluster):
    for node in (box_cluster.head, box_cluster.spot):
        status = node.run("cloud-init", "status", "--long").stdout
        assert "status: done" in status
        assert "DataSourceEc2" in status
        # cloud-init took the node for AWS (/sys/hypervisor/uuid) and asked with IMDSv2 tokens, as on EC2.
        log = node.run("cat", "/var/log/cloud-init.log").stdout
        assert "'X-aws-ec2-metadata-token': 'REDACTED'" in log
        # The script it ran is the launch template's user data, uncompressed (cloud-init: gzip user data is taken "as
        # if it were not compressed").
        script = node.run("cat", "/var/lib/cloud/instance/scripts/part-001").stdout
        assert script == gzip.decompress(box_cluster.cluster.launch_template.user_data).decode()
        assert script.startswith("#!/bin/bash\n# gpufleet node user data for environment prod (p4d.24xlarge)")


def test_every_setup_step_ran_and_the_node_said_ready(box_cluster):
    for node in (box_cluster.head, box_cluster.spot):
        journal = node.run("journalctl", "-u", "gpufleet-node-setup", "-o", "cat", "--no-pager").stdout
        assert f"run-setup: done: {PROD_STEPS}" in journal.splitlines()
        assert f"node-ready: {node.instance_id}: gpufleet:readiness=ready" in journal.splitlines()
        assert box_cluster.cluster.readiness(node) == "ready"


def test_the_shared_file_systems_data_folder_is_every_users(box_cluster):
    """/fsx/data, the one folder linked to S3, opened to every user by shared-storage.sh at boot; the cluster user's
    home beside it, never exported."""
    head = box_cluster.head
    assert head.run("stat", "-c", "%U %a", "/fsx", "/fsx/data", "/fsx/home", "/fsx/home/gpufleet").stdout.split(
        "\n"
    ) == ["root 1777", "root 1777", "root 755", "gpufleet 750", ""]
    assert head.run("grep", "-c", "GPUFLEET_SHARED_DATA_DIR=/fsx/data", "/etc/gpufleet/node.env").stdout == "1\n"


def test_hosts_lists_the_ready_nodes_on_demand_first(box_cluster):
    cluster = box_cluster.cluster
    done = cluster.gpufleet("hosts", "prod", "--fleet-id", cluster.fleet_id, "--format", "json")
    assert done.returncode == 0, done.stderr
    hosts = json.loads(done.stdout)["hosts"]
    head, spot = box_cluster.head, box_cluster.spot
    assert [(host["instance_id"], host["lifecycle"], host["readiness"]) for host in hosts] == [
        (head.instance_id, "on-demand", "ready"),
        (spot.instance_id, "spot", "ready"),
    ]
    mpi = cluster.gpufleet("hosts", "prod", "--fleet-id", cluster.fleet_id)
    assert mpi.stdout == f"{head.spec.address} slots=8\n{spot.spec.address} slots=8\n"


def test_status_shows_both_nodes_ready(box_cluster):
    cluster = box_cluster.cluster
    done = cluster.gpufleet("status", "prod", "--fleet-id", cluster.fleet_id)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"Fleet {cluster.fleet_id} (prod, us-east-1): active, activity -, fulfilled 2/2")
    for node, market in ((box_cluster.head, "on-demand"), (box_cluster.spot, "spot")):
        (row,) = [line.split() for line in lines if line.startswith(node.instance_id)]
        assert (row[1], row[4], row[7], row[8]) == (market, node.spec.address, "running", "ready")
