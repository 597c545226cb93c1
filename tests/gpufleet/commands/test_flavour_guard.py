"""The commands of one flavour refuse an environment of the other with one line (exit 2) naming the command and what
to use instead, before anything asks AWS: the fleet flavour's node commands on an eks environment (which has no stack
gpufleet-ENV-cluster), and `gpufleet k8s` on a fleet environment (which has no Kubernetes cluster)."""

from __future__ import annotations

import pytest

from gpufleet.aws import Aws
from gpufleet.cli import main
from tests.gpufleet.environment_files import VALID, VALID_EKS, write

FLEET_NODES = (
    "the fleet flavour's nodes (stack gpufleet-lab-cluster, reached through Run Command): on eks, use {instead} "
    "(see docs/guides/eks.md)"
)


@pytest.fixture
def no_aws(monkeypatch):
    """Any AWS client a command asks for fails the test: the refusal must come first."""

    def refuse(self, service):
        raise AssertionError(f"the command asked for an AWS {service} client")

    monkeypatch.setattr(Aws, "client", refuse)


def lab(tmp_path, monkeypatch, document):
    write(tmp_path, document)
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))


@pytest.mark.parametrize(
    ("argv", "instead"),
    [
        (["hosts", "lab"], "`kubectl get nodes -o wide` (the MPI operator gives an MPIJob its hosts)"),
        (
            ["hosts", "lab", "--format", "json"],
            "`kubectl get nodes -o wide` (the MPI operator gives an MPIJob its hosts)",
        ),
        (
            ["run", "lab", "--", "nvidia-smi"],
            "an MPIJob with `kubectl apply -f` (`gpufleet k8s nccl-test lab` writes one)",
        ),
        (["runs", "lab"], "`kubectl get mpijobs`"),
        (["stop", "lab", "20261126-210500-3fa2"], "`kubectl delete mpijob NAME`"),
        (["logs", "lab", "20261126-210500-3fa2", "--node", "1"], "`kubectl logs job/NAME-launcher`"),
        (
            ["acceptance", "lab"],
            "`gpufleet status lab --nodes FILE`, `gpufleet k8s efa-info lab` and `gpufleet k8s nccl-test lab`",
        ),
        (["down", "lab"], "`npx cdk destroy -c env=lab --all`, then the storage as docs/guides/storage.md says"),
        (
            ["down", "lab", "--keep-data"],
            "`npx cdk destroy -c env=lab --all`, then the storage as docs/guides/storage.md says",
        ),
        (["rehearse", "lab"], "an AWS FIS experiment of your own (action aws:ec2:send-spot-instance-interruptions)"),
    ],
    ids=["hosts", "hosts-json", "run", "runs", "stop", "logs", "acceptance", "down", "down-keep-data", "rehearse"],
)
def test_a_fleet_command_refuses_an_eks_environment(argv, instead, tmp_path, monkeypatch, capsys, no_aws):
    lab(tmp_path, monkeypatch, VALID_EKS)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"gpufleet {argv[0]} lab: lab has flavour: eks, and `gpufleet {argv[0]}` needs "
        + FLEET_NODES.format(instead=instead)
        + "\n"
    )


@pytest.mark.parametrize(
    ("command", "instead"),
    [
        ("efa-info", "`gpufleet acceptance lab` (fi_info -p efa on every node)"),
        ("nccl-test", "`gpufleet acceptance lab` (nccl-tests all_reduce across the ready nodes)"),
    ],
)
def test_a_k8s_command_refuses_a_fleet_environment(command, instead, tmp_path, monkeypatch, capsys, no_aws):
    lab(tmp_path, monkeypatch, VALID)
    assert main(["k8s", command, "lab", "--output", str(tmp_path / "job.yaml")]) == 2
    out, err = capsys.readouterr()
    assert (out, (tmp_path / "job.yaml").exists()) == ("", False)
    assert err == (
        f"gpufleet k8s {command} lab: lab has flavour: fleet, and `gpufleet k8s {command}` needs the eks flavour's "
        f"Kubernetes cluster and its MPI operator: on fleet, use {instead} (see docs/guides/acceptance.md)\n"
    )


def test_a_fleet_environment_passes_to_the_fleet_command(tmp_path, monkeypatch, no_aws):
    """The check lets the command's own flavour through: `gpufleet runs` goes on to ask AWS for the node group."""
    lab(tmp_path, monkeypatch, VALID)
    with pytest.raises(AssertionError, match="asked for an AWS cloudformation client"):
        main(["runs", "lab"])


def test_an_unknown_environment_is_still_named_as_such(tmp_path, monkeypatch, capsys, no_aws):
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))
    assert main(["hosts", "nowhere"]) == 1
    assert capsys.readouterr().err == f"{tmp_path / 'nowhere.yaml'}: unknown environment 'nowhere' (known: " + (
        "none; run gpufleet where environments/ is, or set GPUFLEET_ENVIRONMENTS_DIR)\n"
    )
