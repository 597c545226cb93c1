"""`gpufleet run --mpi` across the box's nodes: the real Open MPI (laid out where the EFA installer puts it, off the
default PATH) starting its daemons over the real sshd with the cluster user's key, from a unit systemd started. The
user's command carries `${VAR}`, `$$` and `%` that must reach bash unchanged: systemd expands `$`/`${}` and `%`
specifiers in an ExecStart command line (systemd.service(5), "Command lines"; systemd.unit(5), "Specifiers")."""

from __future__ import annotations

import re

from tests.box.journey import journal, started_run, wait_unit_over

LINE = re.compile(r"rank=(?P<rank>[0-9]+) pid=(?P<pid>[0-9]+) literal=%n host=(?P<host>\S+) dir=(?P<dir>\S+)")


def test_mpi_runs_the_command_unchanged_on_every_slot_of_every_node(box_cluster):
    cluster, head, spot = box_cluster.cluster, box_cluster.head, box_cluster.spot
    command = 'echo "rank=${OMPI_COMM_WORLD_RANK} pid=$$ literal=%n host=$(hostname) dir=${PWD}"'
    setup = 'echo "setup on $(hostname) as ${USER:-$(id -un)} pid=$$" >> /fsx/mpi-setup.log'

    run_id = started_run(
        cluster.gpufleet(
            "run", "prod", "--fleet-id", cluster.fleet_id, "--mpi", "--setup", setup, "--", "bash", "-c", command
        )
    )
    assert wait_unit_over(head, run_id) == "success", "\n".join(journal(head, run_id))

    lines = [LINE.fullmatch(line) for line in journal(head, run_id)]
    found = [match for match in lines if match]
    assert sorted(int(match["rank"]) for match in found) == list(range(16)), "\n".join(journal(head, run_id))
    hosts = sorted(match["host"] for match in found)
    assert hosts == sorted([head.spec.hostname] * 8 + [spot.spec.hostname] * 8)
    assert {match["dir"] for match in found} == {"/fsx/home/gpufleet"}
    setup_lines = head.run("cat", "/fsx/mpi-setup.log").stdout.splitlines()
    assert sorted(line.split(" as ")[0] for line in setup_lines) == sorted(
        f"setup on {node.spec.hostname}" for node in (head, spot)
    )
    assert all(re.fullmatch(r"setup on \S+ as gpufleet pid=[0-9]+", line) for line in setup_lines)
