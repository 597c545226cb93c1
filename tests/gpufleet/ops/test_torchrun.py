"""The torchrun command line of a run (gpufleet.ops.torchrun); tests/examples/test_ddp_train.py runs it for real."""

from __future__ import annotations

import pytest

from gpufleet.ops.torchrun import torchrun_command

RUN = {
    "run_id": "r-20261126-abc123",
    "head_address": "10.0.0.5",
    "min_nodes": 3,
    "max_nodes": 4,
    "processes_per_node": 8,
    "max_restarts": 3,
    "command": ["train.py", "--epochs", "2"],
}


def test_the_head_hosts_the_rendezvous_store_and_the_elastic_range_is_min_to_max():
    assert torchrun_command(**RUN, is_head=True) == [
        "torchrun",
        "--nnodes=3:4",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=10.0.0.5:29400",
        "--rdzv_id=r-20261126-abc123",
        "--rdzv_conf=is_host=1,last_call_timeout=30",
        "--max_restarts=3",
        "train.py",
        "--epochs",
        "2",
    ]


def test_every_other_node_connects_to_the_head_store_and_options_can_be_set():
    assert torchrun_command(
        **RUN, is_head=False, port=29555, last_call_seconds=5, torchrun="/opt/venv/bin/torchrun"
    ) == [
        "/opt/venv/bin/torchrun",
        "--nnodes=3:4",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=10.0.0.5:29555",
        "--rdzv_id=r-20261126-abc123",
        "--rdzv_conf=is_host=0,last_call_timeout=5",
        "--max_restarts=3",
        "train.py",
        "--epochs",
        "2",
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"run_id": "run 1"},
            "run id 'run 1': use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        ),
        ({"run_id": "-r"}, "run id '-r': use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"),
        (
            {"run_id": "r" * 65},
            f"run id '{'r' * 65}': use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        ),
        ({"min_nodes": 0, "max_nodes": 2}, "node range 0:2: need 1 <= minimum <= maximum"),
        ({"min_nodes": 5, "max_nodes": 4}, "node range 5:4: need 1 <= minimum <= maximum"),
        ({"processes_per_node": 0}, "processes per node 0: need at least 1"),
        ({"max_restarts": -1}, "max restarts -1: need 0 or more"),
        ({"port": 0}, "rendezvous port 0: need 1-65535"),
        ({"port": 65536}, "rendezvous port 65536: need 1-65535"),
        ({"last_call_seconds": 0}, "last call 0 s: need at least 1 second"),
        ({"command": []}, "no command to run: give a training script and its arguments"),
    ],
)
def test_a_bad_value_is_refused_with_what_to_give(changes, message):
    with pytest.raises(ValueError) as raised:
        torchrun_command(**(RUN | {"is_head": True} | changes))
    assert str(raised.value) == message


def test_every_bad_value_is_named_at_once():
    with pytest.raises(ValueError) as raised:
        torchrun_command(**(RUN | {"is_head": True, "processes_per_node": 0, "max_restarts": -1}))
    assert str(raised.value) == "processes per node 0: need at least 1; max restarts -1: need 0 or more"


def test_the_edges_of_each_range_are_accepted():
    command = torchrun_command(
        **(RUN | {"run_id": "r" * 64, "min_nodes": 1, "max_nodes": 1, "processes_per_node": 1, "max_restarts": 0}),
        is_head=True,
        port=65535,
        last_call_seconds=1,
    )
    assert command[1:8] == [
        "--nnodes=1:1",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=10.0.0.5:65535",
        f"--rdzv_id={'r' * 64}",
        "--rdzv_conf=is_host=1,last_call_timeout=1",
        "--max_restarts=0",
    ]
