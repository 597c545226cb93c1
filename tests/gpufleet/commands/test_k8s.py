"""gpufleet k8s efa-info|nccl-test ENV: the MPIJob as YAML on stdout or in a file, what to run next on stderr, and
one line per problem (never a traceback) for an environment or options that cannot give the job."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpufleet.cli import main
from tests.gpufleet.environment_files import VALID_EKS, changed, write
from tests.gpufleet.k8s import schemas


def test_the_shipped_p5_eks_environment_gives_a_valid_nccl_test(capsys):
    assert main(["k8s", "nccl-test", "p5-eks"]) == 0
    out, err = capsys.readouterr()
    job = yaml.safe_load(out)
    schemas.validate_manifest(job)
    assert job["metadata"] == {
        "name": "nccl-test",
        "labels": {"app.kubernetes.io/managed-by": "gpufleet", "gpufleet/environment": "p5-eks"},
    }
    # The floor: the catalog's 487 GB/s for p5.48xlarge less 10%, as on the fleet flavour's nodes.
    assert err == (
        "next: kubectl apply -f -; then kubectl logs job/nccl-test-launcher > nccl-test.log && gpufleet nccl-report "
        "--min-busbw 438.3 nccl-test.log\n"
    )


def test_the_yaml_has_no_anchors_kubectl_users_would_have_to_read(capsys):
    assert main(["k8s", "efa-info", "p5-eks"]) == 0
    assert "&id" not in capsys.readouterr().out


def test_efa_info_into_a_file_with_a_name_and_fewer_workers(tmp_path, capsys):
    output = tmp_path / "efa.yaml"
    assert main(["k8s", "efa-info", "p5-eks", "--name", "efa-check", "--workers", "1", "--output", str(output)]) == 0
    out, err = capsys.readouterr()
    job = yaml.safe_load(output.read_text())
    schemas.validate_manifest(job)
    assert (job["metadata"]["name"], job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]) == ("efa-check", 1)
    assert out == ""
    assert err == f"next: kubectl apply -f {output}; then kubectl logs -f job/efa-check-launcher\n"


def test_a_type_without_a_published_bandwidth_gets_the_report_without_a_floor(tmp_path, monkeypatch, capsys):
    write(tmp_path, changed({"instance_type": "g5.48xlarge"}, base=VALID_EKS))
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))
    assert main(["k8s", "nccl-test", "lab"]) == 0
    assert capsys.readouterr().err.endswith("&& gpufleet nccl-report nccl-test.log\n")


def test_problems_are_lines_naming_the_command_and_environment(tmp_path, monkeypatch, capsys):
    write(tmp_path, changed({"efa": False}, base=VALID_EKS))
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))
    assert main(["k8s", "efa-info", "lab", "--workers", "5"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "gpufleet k8s efa-info lab: --workers 5: must be 1 to 2 (capacity.target of lab)\n"
        "gpufleet k8s efa-info lab: efa is false in lab: its nodes have no EFA device for fi_info to list\n"
    )


def test_an_unwritable_output_is_one_line(tmp_path, capsys):
    assert main(["k8s", "nccl-test", "p5-eks", "--output", str(tmp_path / "missing" / "job.yaml")]) == 1
    assert capsys.readouterr().err == (
        f"--output {tmp_path / 'missing' / 'job.yaml'}: cannot write it (No such file or directory)\n"
    )


def test_the_launchers_log_passes_the_report_the_command_names(tmp_path, monkeypatch, capsys):
    """The p4d eks environment's nccl-test, then the report it names on a launcher's log as `kubectl logs --prefix`
    prints it (tests/fixtures/nccl/eks_all_reduce_launcher_kubectl_prefix.log: 2 p4d nodes, peak 78.05 GB/s)."""
    write(tmp_path, VALID_EKS)
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(tmp_path))
    assert main(["k8s", "nccl-test", "lab"]) == 0
    report = capsys.readouterr().err.split("&& ")[1].split()
    assert report == ["gpufleet", "nccl-report", "--min-busbw", "70.2", "nccl-test.log"]
    log = str(Path(__file__).resolve().parents[2] / "fixtures/nccl/eks_all_reduce_launcher_kubectl_prefix.log")
    assert main([*report[1:-1], log]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verdict: PASS"
