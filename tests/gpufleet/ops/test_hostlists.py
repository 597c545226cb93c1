"""Host lists for launchers from the nodes' private IPs: OpenMPI hostfile, torchrun arguments, Slurm node list."""

from __future__ import annotations

import pytest

from gpufleet.ops.hostlists import hostname, mpi_hostfile, slurm_nodelist, torchrun_arguments


def test_the_host_name_is_ec2s_default_private_name():
    assert hostname("10.0.12.5") == "ip-10-0-12-5"


def test_the_mpi_hostfile_has_one_line_per_node_in_launch_order():
    assert mpi_hostfile(["10.0.0.9", "10.0.0.5"], 8) == "10.0.0.9 slots=8\n10.0.0.5 slots=8\n"


def test_torchrun_meets_on_the_first_node():
    assert torchrun_arguments(["10.0.0.9", "10.0.0.5"], 8, "dev") == (
        "--nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=10.0.0.9:29500 --rdzv_id=gpufleet-dev\n"
    )


@pytest.mark.parametrize(
    ("ips", "nodelist"),
    [
        (["10.0.0.5"], "ip-10-0-0-5\n"),
        (["10.0.0.6", "10.0.0.5"], "ip-10-0-0-[5-6]\n"),
        (["10.0.0.9", "10.0.0.5", "10.0.0.7", "10.0.0.6"], "ip-10-0-0-[5-7,9]\n"),
        (["10.0.0.3", "10.0.0.5", "10.0.0.9"], "ip-10-0-0-[3,5,9]\n"),
        (["10.0.0.10", "10.0.0.9", "10.0.0.11", "10.0.0.20"], "ip-10-0-0-[9-11,20]\n"),
        (["10.0.1.4", "10.0.0.250", "10.0.0.251", "10.0.0.7"], "ip-10-0-0-[7,250-251],ip-10-0-1-4\n"),
        (["10.0.1.4", "10.0.0.7"], "ip-10-0-0-7,ip-10-0-1-4\n"),
        (["10.0.0.5", "10.0.0.5"], "ip-10-0-0-5\n"),
    ],
    ids=["lone", "pair", "run-and-gap", "all-gaps", "numeric-order", "two-subnets", "two-lone", "duplicate"],
)
def test_the_slurm_nodelist_folds_runs_of_the_last_octet(ips, nodelist):
    assert slurm_nodelist(ips) == nodelist
