"""A run's --setup as the elastic training guide writes it: a virtualenv made on every node before the command
(docs/guides/elastic-training.md). On Debian and Ubuntu, `python3 -m venv` needs python3-venv (ensurepip is split out
of python3), which the box has exactly when scripts/ami/01-build-tools.sh installs it on Ubuntu images."""

from __future__ import annotations

from tests.box.journey import journal, started_run, wait_unit_over


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
