"""`gpufleet run --secret NAME=SECRET_ID` on the box's nodes: the AWS CLI of the image (as the cluster user, with the
node role's credentials from the node's IMDS) reads the secret from the emulator's Secrets Manager into the run's
environment on every node, a plain run's and an MPI run's processes alike, and the value is in none of what travels
or stays: the SendCommand text SSM keeps, the unit's files on the nodes, the run's journal."""

from __future__ import annotations

import hashlib
import secrets

from tests.box.journey import journal, started_run, wait_unit_over

PRINT_DIGEST = 'printf "%s" "$HF_TOKEN" | sha256sum | cut -c 1-64'


def planted_secret(box_cluster, name: str) -> tuple[str, str]:
    """A secret of the prod environment's namespace in the emulator; its value (with what a shell would expand) and
    the value's SHA-256, which the nodes print in its place."""
    value = f"hf_{secrets.token_hex(12)} $HOME `id` 'q'"
    box_cluster.cluster.aws.client("secretsmanager").create_secret(Name=name, SecretString=value)
    return value, hashlib.sha256(value.encode()).hexdigest()


def sent_commands_text(box_cluster) -> str:
    ssm = box_cluster.cluster.aws.client("ssm")
    return "\n".join(str(command["Parameters"]) for command in ssm.list_commands()["Commands"])


def run_files_text(node, run_id: str) -> str:
    return node.run(
        "sh", "-c", f"cat /run/systemd/transient/gpufleet-run-{run_id}.service /run/gpufleet/runs/{run_id}.sh"
    ).stdout


def test_every_node_reads_the_secret_and_its_value_travels_nowhere(box_cluster):
    cluster, head, spot = box_cluster.cluster, box_cluster.head, box_cluster.spot
    value, digest = planted_secret(box_cluster, "gpufleet-prod/box-plain")
    run_id = started_run(
        cluster.gpufleet(
            "run",
            "prod",
            "--fleet-id",
            cluster.fleet_id,
            "--secret",
            "HF_TOKEN=gpufleet-prod/box-plain",
            "--",
            "bash",
            "-c",
            PRINT_DIGEST,
        )
    )
    for node in (head, spot):
        assert wait_unit_over(node, run_id) == "success", "\n".join(journal(node, run_id))
        lines = journal(node, run_id)
        assert digest in lines, lines
        assert value not in "\n".join(lines)
        files = run_files_text(node, run_id)
        assert "gpufleet_secret HF_TOKEN gpufleet-prod/box-plain" in files and value not in files
    assert value not in sent_commands_text(box_cluster)


def test_every_mpi_process_reads_the_secret_on_its_own_node(box_cluster):
    cluster, head = box_cluster.cluster, box_cluster.head
    value, digest = planted_secret(box_cluster, "gpufleet-prod/box-mpi")
    run_id = started_run(
        cluster.gpufleet(
            "run",
            "prod",
            "--fleet-id",
            cluster.fleet_id,
            "--mpi",
            "--secret",
            "HF_TOKEN=gpufleet-prod/box-mpi",
            "--",
            "bash",
            "-c",
            PRINT_DIGEST,
        )
    )
    assert wait_unit_over(head, run_id) == "success", "\n".join(journal(head, run_id))
    lines = journal(head, run_id)
    # One line per process, 8 a node (prod's p4d.24xlarge), all printed through the head's mpirun.
    assert lines.count(digest) == 16, lines
    assert value not in "\n".join(lines) and value not in run_files_text(head, run_id)
    assert value not in sent_commands_text(box_cluster)


def test_a_secret_that_does_not_exist_fails_the_run_on_each_node_with_one_line(box_cluster):
    cluster, head, spot = box_cluster.cluster, box_cluster.head, box_cluster.spot
    run_id = started_run(
        cluster.gpufleet(
            "run",
            "prod",
            "--fleet-id",
            cluster.fleet_id,
            "--secret",
            "HF_TOKEN=gpufleet-prod/never-made",
            "--setup",
            "touch /var/tmp/box-secret-setup-ran",
            "--",
            "true",
        )
    )
    for node in (head, spot):
        assert wait_unit_over(node, run_id) == "exit-code"
        lines = journal(node, run_id)
        failures = [
            line for line in lines if line.startswith("gpufleet run: --secret HF_TOKEN=gpufleet-prod/never-made")
        ]
        assert len(failures) == 1, lines
        assert (
            "cannot read it in us-east-1 with the node role: An error occurred (ResourceNotFoundException)"
            in (failures[0])
        )
        assert node.run("test", "-e", "/var/tmp/box-secret-setup-ran").returncode == 1
