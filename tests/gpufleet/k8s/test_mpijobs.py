"""The MPIJobs of `gpufleet k8s` (gpufleet/k8s/mpijobs.py): valid against the MPI operator's CRD and the Kubernetes
schemas (tests/gpufleet/k8s/schemas.py), a misspelt field refused by both, and the numbers each instance type gives:
the p5 layout (32 EFA devices), GPUDirect RDMA's variable on p4d/p5 only (g5 must not get it), efa off."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpufleet.catalog import load_catalog
from gpufleet.k8s.mpijobs import MpiJobError, efa_info_job, nccl_test_job
from gpufleet.loading import load_environment
from tests.gpufleet.environment_files import VALID_EKS, changed, write
from tests.gpufleet.k8s import schemas

IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests@sha256:a5390d3f0eb50f3e5854085e2ae0fef90b9eb4f3b7486ed4cab0d47864809d4c"
BUILDERS = {"efa-info": efa_info_job, "nccl-test": nccl_test_job}


def eks_environment(tmp_path, **changes):
    return load_environment(write(tmp_path, changed(changes, base=VALID_EKS)))


def job(tmp_path, kind="nccl-test", *, name="check", workers=None, **changes):
    environment = eks_environment(tmp_path, **changes)
    return BUILDERS[kind](environment, load_catalog()[environment.instance_type], name=name, workers=workers)


def launcher_command(job_):
    return job_["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]


def worker_spec(job_):
    return job_["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]


@pytest.mark.parametrize("kind", BUILDERS)
@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p4d.24xlarge", "g5.48xlarge", "g5.8xlarge"])
def test_every_job_is_valid_for_the_crd_and_the_kubernetes_schemas(tmp_path, kind, instance_type):
    schemas.validate_manifest(job(tmp_path, kind, instance_type=instance_type))


def test_the_nccl_test_job_without_efa_is_valid_too(tmp_path):
    schemas.validate_manifest(job(tmp_path, efa=False))


def test_a_misspelt_mpijob_field_fails_the_crd_check(tmp_path):
    misspelt = job(tmp_path)
    misspelt["spec"]["slotPerWorker"] = misspelt["spec"].pop("slotsPerWorker")
    with pytest.raises(jsonschema.ValidationError, match="'slotPerWorker' was unexpected"):
        schemas.validate_mpijob(misspelt)


def test_the_crd_as_shipped_lets_a_misspelt_field_through(tmp_path):
    """Why the tests close the CRD's schema: as written it names spec's properties but does not refuse others."""
    misspelt = job(tmp_path)
    misspelt["spec"]["slotPerWorker"] = misspelt["spec"].pop("slotsPerWorker")
    crd = yaml.safe_load(schemas.CRD_FILE.read_text())
    (version,) = [version for version in crd["spec"]["versions"] if version["name"] == "v2beta1"]
    jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"]).validate(misspelt)


def test_a_misspelt_pod_field_fails_both_checks(tmp_path):
    misspelt = job(tmp_path)
    worker_spec(misspelt)["nodeSelectr"] = worker_spec(misspelt).pop("nodeSelector")
    with pytest.raises(kubernetes_validate.ValidationError, match="'nodeSelectr' was unexpected"):
        schemas.validate_pod_templates(misspelt)
    with pytest.raises(jsonschema.ValidationError, match="'nodeSelectr' was unexpected"):
        schemas.validate_mpijob(misspelt)


def test_a_value_of_the_wrong_type_fails_the_crd_check(tmp_path):
    wrong = job(tmp_path)
    wrong["spec"]["slotsPerWorker"] = "8"
    with pytest.raises(jsonschema.ValidationError, match="'8' is not of type 'integer'"):
        schemas.validate_mpijob(wrong)


def test_the_crd_does_not_check_the_launcher_creation_policy(tmp_path):
    """kubeflow/mpi-operator v0.8.0 pkg/apis/kubeflow/v2beta1/types.go marks the field
    `+kubebuilder:validation:Enum:AtStartup;WaitForWorkersReady` (a colon where controller-gen reads `=`), so the CRD
    has no enum for it: neither the API server nor these tests catch a misspelt value, and the value gpufleet writes
    is held by test_images_are_pinned_by_digest_and_the_launcher_runs_once_on_a_gpu_node."""
    wrong = job(tmp_path)
    wrong["spec"]["launcherCreationPolicy"] = "WhenWorkersReady"
    schemas.validate_mpijob(wrong)


def test_the_p5_layout_every_gpu_and_all_32_efa_devices_of_each_node(tmp_path):
    p5 = job(tmp_path, instance_type="p5.48xlarge")
    assert p5["spec"]["slotsPerWorker"] == 8
    assert p5["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    resources = {
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "32",
        "hugepages-2Mi": "5120Mi",
        "memory": "1024Gi",
    }
    container = worker_spec(p5)["containers"][0]
    assert container["resources"] == {"requests": resources, "limits": resources}
    assert worker_spec(p5)["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "nvidia.com/gpu.present": "true",
        "vpc.amazonaws.com/efa.present": "true",
    }
    command = launcher_command(p5)
    assert command[command.index("-np") + 1] == "16"
    assert command[command.index("-N") + 1] == "8"


def test_the_p4d_layout(tmp_path):
    resources = worker_spec(job(tmp_path, instance_type="p4d.24xlarge"))["containers"][0]["resources"]["limits"]
    assert resources == {
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "4",
        "hugepages-2Mi": "5120Mi",
        "memory": "576Gi",
    }


def test_a_single_gpu_g5_gets_one_slot_one_efa_device_and_hugepages_for_one_rank(tmp_path):
    g5 = job(tmp_path, instance_type="g5.8xlarge")
    assert g5["spec"]["slotsPerWorker"] == 1
    assert worker_spec(g5)["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "vpc.amazonaws.com/efa": "1",
        "hugepages-2Mi": "640Mi",
        "memory": "64Gi",
    }
    command = launcher_command(g5)
    assert command[command.index("-np") + 1] == "2"


@pytest.mark.parametrize("kind", BUILDERS)
@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p4d.24xlarge"])
def test_gpudirect_rdma_types_get_fi_efa_use_device_rdma(tmp_path, kind, instance_type):
    command = launcher_command(job(tmp_path, kind, instance_type=instance_type))
    assert command[command.index("FI_EFA_USE_DEVICE_RDMA=1") - 1] == "-x"


@pytest.mark.parametrize("kind", BUILDERS)
@pytest.mark.parametrize("instance_type", ["g5.48xlarge", "g5.8xlarge"])
def test_g5_never_gets_fi_efa_use_device_rdma_libfabric_aborts_there(tmp_path, kind, instance_type):
    assert "FI_EFA_USE_DEVICE_RDMA" not in str(job(tmp_path, kind, instance_type=instance_type))


def test_the_nccl_test_runs_all_reduce_on_every_gpu_with_nccl_saying_which_network(tmp_path):
    command = launcher_command(job(tmp_path))
    assert command[:10] == [
        "/opt/amazon/openmpi/bin/mpirun",
        "--allow-run-as-root",
        "--tag-output",
        "-np",
        "16",
        "-N",
        "8",
        "--bind-to",
        "none",
        "--mca",
    ]
    assert command[-9:] == ["/opt/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "16G", "-f", "2", "-g", "1"]
    debug = command.index("NCCL_DEBUG=INFO")
    assert command[debug - 1 : debug + 1] == ["-x", "NCCL_DEBUG=INFO"]
    path = command.index("PATH")
    assert command[path - 1 : path + 3] == ["-x", "PATH", "-x", "LD_LIBRARY_PATH"]


def test_efa_info_runs_fi_info_once_per_worker_without_the_labs_typo(tmp_path):
    command = launcher_command(job(tmp_path, "efa-info", workers=1))
    assert command[command.index("-np") + 1 : command.index("-np") + 4] == ["1", "-N", "1"]
    assert command[-5:] == ["/opt/amazon/efa/bin/fi_info", "-p", "efa", "-t", "FI_EP_RDM"]
    assert not any("rsh_agent" in argument for argument in command)


def test_images_are_pinned_by_digest_and_the_launcher_retries_on_a_gpu_node(tmp_path):
    nccl = job(tmp_path)
    launcher = nccl["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert [launcher["template"]["spec"]["containers"][0]["image"], worker_spec(nccl)["containers"][0]["image"]] == [
        IMAGE,
        IMAGE,
    ]
    # Three more runs of the launcher's container in its pod, the MPI operator's default launcher restart policy
    # (kubeflow/mpi-operator v0.8.0 pkg/apis/kubeflow/v2beta1/constants.go DefaultLauncherRestartPolicy): a worker
    # not yet in DNS or not yet answering ssh fails one attempt, not the job.
    assert launcher["restartPolicy"] == "OnFailure"
    assert nccl["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 3}
    assert nccl["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    toleration = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert launcher["template"]["spec"]["tolerations"] == [toleration]
    assert launcher["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert worker_spec(nccl)["tolerations"] == [toleration]


def launcher_job(job_: dict) -> dict:
    """The batch/v1 Job the MPI operator v0.8.0 makes of an MPIJob's launcher (pkg/controller/mpi_job_controller.go
    newLauncherJob, newLauncherPodTemplate, setRestartPolicy): runPolicy.backoffLimit as the Job's backoffLimit, the
    launcher's template with the replica's restartPolicy."""
    launcher = job_["spec"]["mpiReplicaSpecs"]["Launcher"]
    template = {"spec": {**launcher["template"]["spec"], "restartPolicy": launcher["restartPolicy"]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{job_['metadata']['name']}-launcher"},
        "spec": {"backoffLimit": job_["spec"]["runPolicy"]["backoffLimit"], "template": template},
    }


@pytest.mark.parametrize("kind", BUILDERS)
def test_the_launcher_job_the_operator_makes_of_it_is_a_valid_job(tmp_path, kind):
    schemas.validate_manifest(job(tmp_path, kind))
    kubernetes_validate.validate(launcher_job(job(tmp_path, kind)), schemas.KUBERNETES_VERSION, strict=True)


def test_a_retry_count_of_the_wrong_type_fails_both_checks(tmp_path):
    wrong = job(tmp_path)
    wrong["spec"]["runPolicy"]["backoffLimit"] = "3"
    with pytest.raises(jsonschema.ValidationError, match="'3' is not of type 'integer'"):
        schemas.validate_mpijob(wrong)
    with pytest.raises(kubernetes_validate.ValidationError, match="'3' is not of type 'integer'"):
        kubernetes_validate.validate(launcher_job(wrong), schemas.KUBERNETES_VERSION, strict=True)


def test_without_efa_the_workers_ask_for_no_efa_device_and_no_hugepages(tmp_path):
    plain = job(tmp_path, efa=False)
    assert worker_spec(plain)["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8", "memory": "576Gi"}
    assert "vpc.amazonaws.com/efa.present" not in worker_spec(plain)["nodeSelector"]
    assert "FI_EFA_USE_DEVICE_RDMA" not in str(plain)


def test_efa_info_is_refused_without_efa(tmp_path):
    with pytest.raises(MpiJobError) as raised:
        job(tmp_path, "efa-info", efa=False)
    assert raised.value.problems == ("efa is false in lab: its nodes have no EFA device for fi_info to list",)


def test_a_fleet_environment_is_refused(tmp_path):
    from tests.gpufleet.environment_files import VALID

    environment = load_environment(write(tmp_path, VALID))
    with pytest.raises(MpiJobError) as raised:
        nccl_test_job(environment, load_catalog()["p4d.24xlarge"], name="check", workers=None)
    assert raised.value.problems == (
        "lab has flavour: fleet: MPIJobs run on an eks environment's cluster (on the fleet flavour, run "
        "/opt/gpufleet/ops/run-nccl-tests.sh on a node)",
    )


def test_an_add_on_the_job_needs_switched_off_is_one_problem_each(tmp_path):
    with pytest.raises(MpiJobError) as raised:
        job(
            tmp_path,
            **{"eks.add_ons": {"mpi_operator": False, "nvidia_device_plugin": False, "efa_device_plugin": False}},
        )
    assert raised.value.problems == (
        "eks.add_ons.mpi_operator is false in lab: no MPI operator runs MPIJobs, so the job would never run (set it "
        "to true and deploy)",
        "eks.add_ons.nvidia_device_plugin is false in lab: no node advertises nvidia.com/gpu, so the job would never "
        "run (set it to true and deploy)",
        "eks.add_ons.efa_device_plugin is false in lab: no node advertises vpc.amazonaws.com/efa, so the job would "
        "never run (set it to true and deploy)",
    )


def test_without_efa_the_efa_plugin_is_not_needed(tmp_path):
    schemas.validate_manifest(job(tmp_path, efa=False, **{"eks.add_ons": {"efa_device_plugin": False}}))


@pytest.mark.parametrize(
    ("name", "workers", "expected"),
    [
        ("check", 3, "--workers 3: must be 1 to 2 (capacity.target of lab)"),
        ("check", 0, "--workers 0: must be 1 to 2 (capacity.target of lab)"),
        (
            "Check",
            None,
            "--name 'Check': lower-case letters, digits and '-', starting with a letter and ending with a letter or "
            "digit (the MPI operator makes a Service and host names of it)",
        ),
        (
            "a" * 55,
            None,
            f"--name '{'a' * 55}': too long, the last worker's host name {'a' * 55}-worker-1 has 64 characters (at "
            "most 63)",
        ),
    ],
)
def test_bad_options_are_one_problem_each(tmp_path, name, workers, expected):
    with pytest.raises(MpiJobError) as raised:
        job(tmp_path, name=name, workers=workers)
    assert raised.value.problems == (expected,)


def test_the_longest_name_that_fits(tmp_path):
    schemas.validate_manifest(job(tmp_path, name="a" * 54))
