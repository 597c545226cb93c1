"""A run's --setup as the elastic training guide writes it: a virtualenv made on every node before the command
(docs/guides/elastic-training.md). On Debian and Ubuntu, `python3 -m venv` needs python3-venv (ensurepip is split out
of python3), which the box has exactly when scripts/ami/01-build-tools.sh installs it on Ubuntu images."""

from __future__ import annotations

from tests.box.journey import journal, started_run, unit_state, wait_unit_over


def test_a_setup_that_makes_a_virtualenv_works_on_every_node(box_cluster):
    cluster = box_cluster.cluster
    venv = "/var/tmp/box-venv"
    run_id = started_run(
        cluster.gpufleet(
            "run",
            "prod",
            "--fleet-id",
            cluster.fleet_id,
            "--setup",
            f"python3 -m venv {venv}",
            "--",
            f"{venv}/bin/python",
            "-c",
            "import sys; print('prefix', sys.prefix)",
        )
    )
    for node in (box_cluster.head, box_cluster.spot):
        assert wait_unit_over(node, run_id) == "success", "\n".join(journal(node, run_id))
        assert f"prefix {venv}" in journal(node, run_id)
        assert node.run("test", "-x", f"{venv}/bin/pip").returncode == 0


def test_a_run_unit_asks_for_unlimited_memlock_and_stop_ends_it_everywhere(box_cluster):
    """The run's unit as systemd holds it: the limits it asks for (the box cannot raise the live memlock and open-files
    limits past 8 MiB and 20000, so the unit's own file says what a node gets: docs/development/cluster-in-a-box.md),
    then `gpufleet stop` ends it on every node."""
    cluster, head, spot = box_cluster.cluster, box_cluster.head, box_cluster.spot
    run_id = started_run(cluster.gpufleet("run", "prod", "--fleet-id", cluster.fleet_id, "--", "sleep", "600"))
    unit = f"gpufleet-run-{run_id}.service"
    for node in (head, spot):
        assert unit_state(node, run_id) == "active"
        transient = node.run("cat", f"/run/systemd/transient/{unit}").stdout.splitlines()
        assert {"LimitMEMLOCK=infinity", "LimitNOFILE=131072", "LimitSTACK=infinity"} <= set(transient), transient
        assert f'ExecStart="/bin/bash" "/run/gpufleet/runs/{run_id}.sh"' in transient, transient

    stopped = cluster.gpufleet("stop", "prod", run_id, "--fleet-id", cluster.fleet_id)

    assert stopped.returncode == 0, stopped.stderr
    for node in (head, spot):
        assert unit_state(node, run_id) in ("inactive", "failed")
