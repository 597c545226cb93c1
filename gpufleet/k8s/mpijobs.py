"""The MPIJobs `gpufleet k8s efa-info|nccl-test ENV` writes, for an environment with flavour: eks.

They are the kubeflow.org/v2beta1 MPIJobs of the EKS EFA lab (aws-ia/terraform-aws-eks-blueprints
patterns/nvidia-gpu-efa, generate-efa-info-test.sh and generate-efa-nccl-test.sh at 98d0eb40), with every number the
lab wrote in (workers, slots, GPUs, EFA devices, memory, hugepages, the EFA environment) taken from the environment
and the catalog instead. Where they differ from the lab, on purpose:

- the image by digest, not ``:latest`` (NCCL_TESTS_IMAGE);
- no ``--mca pml_rsh_agent=ssh`` (the lab's efa-info typo for plm_rsh_agent): ssh is Open MPI's default agent and the
  MPI operator sets its options (OMPI_MCA_plm_rsh_args, kubeflow/mpi-operator v0.8.0
  pkg/controller/mpi_job_controller.go);
- no PATH or LD_LIBRARY_PATH in the pod's env: Kubernetes expands ``$(VAR)`` in an env value, not ``$VAR`` (API
  reference, EnvVar.value), so the lab's ``...:$LD_LIBRARY_PATH`` reached the programs as written. The image's own
  are forwarded to the ranks with ``-x`` (ssh starts them without the image's environment);
- the launcher is created once every worker is Ready (launcherCreationPolicy WaitForWorkersReady) and is retried a
  few times (LAUNCHER_RETRIES) where the lab's was up to 20: see LAUNCHER_RETRIES;
- the launcher runs on a GPU node (which pulls the image for its worker anyway), not on a small system node;
- /dev/shm is a memory-backed emptyDir of the pod, not the host's /dev/shm (hostPath: other pods' shared memory);
- of the lab's EFA/NCCL variables only FI_EFA_USE_DEVICE_RDMA, and only where the catalog says GPUDirect RDMA (see
  efa_environment).
"""

from __future__ import annotations

import re

from gpufleet.catalog import InstanceType
from gpufleet.constants import (
    EKS_EFA_NODE_LABEL,
    EKS_GPU_NODE_LABEL,
    EKS_GPU_NODE_TAINT_KEY,
    EKS_GPU_NODE_TAINT_VALUE,
)
from gpufleet.environment import Environment
from gpufleet.user_data import expected_efa_devices

MPIJOB_API_VERSION = "kubeflow.org/v2beta1"
MPIJOB_KIND = "MPIJob"
# public.ecr.aws/hpc-cloud/nccl-tests, tag cuda13.0.2-efa1.48.0-ofiv1.19.0-ncclv2.30.4-1-testsv2.18.3 (CUDA 13.0.2,
# EFA installer 1.48.0, aws-ofi-nccl 1.19.0, NCCL 2.30.4, nccl-tests 2.18.3), the image the lab runs as :latest. The
# digest and what the tag holds as awslabs/awsome-distributed-ai records them (examples/use-cases/
# gpu-cluster-failure-patterns/pins.env and README.md at 90ad1f87, "Registry tag resolved on 2026-09-06")
# (unconfirmed: not pulled here). CUDA 13.0 needs an NVIDIA driver >= 580.65.06 on the node (ami/compatibility.yaml,
# cuda_minimum_driver, from NVIDIA's CUDA Toolkit release notes); whether EKS's AL2023 NVIDIA image for 1.35 has one is
# (unconfirmed).
NCCL_TESTS_IMAGE = (
    "public.ecr.aws/hpc-cloud/nccl-tests@sha256:a5390d3f0eb50f3e5854085e2ae0fef90b9eb4f3b7486ed4cab0d47864809d4c"
)
# Where that image has its programs: Amazon's Open MPI and libfabric from the EFA installer, nccl-tests built under
# /opt/nccl-tests/build (the lab's generators; the Dockerfile built FROM the digest above, same repository and commit,
# runs make in /opt/nccl-tests and copies the *_perf programs to /opt/nccl-tests/build).
MPIRUN = "/opt/amazon/openmpi/bin/mpirun"
FI_INFO = "/opt/amazon/efa/bin/fi_info"
ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"
# 2 MiB hugepages per rank: the lab asks 5120Mi for a p5 worker of 8 ranks. libfabric's EFA provider takes its
# internal buffers from hugepages where the node has them (unconfirmed: the amount a rank needs is not documented);
# a pod may ask for hugepages only when it also asks for memory or cpu, requests equal to limits (kubernetes.io,
# "Manage HugePages"), and stays Pending when the node has not reserved them.
HUGEPAGES_2MI_PER_RANK_MIB = 640
# The worker asks for half of the node's memory: it is the node's only job pod (it takes every GPU), the rest stays
# for the kubelet, the system and the daemon sets, and a test is not killed for memory as under the lab's 32000Mi.
WORKER_MEMORY_SHARE = 2
# nccl-tests as scripts/ops/run-nccl-tests.sh runs it on the fleet flavour (8 bytes to 16 GiB, doubling, one GPU per
# rank); MPI only starts the ranks, its own traffic on TCP, pinning left to NCCL.
ALL_REDUCE_ARGUMENTS = ("-b", "8", "-e", "16G", "-f", "2", "-g", "1")
MPI_TRANSPORT_OPTIONS = ("--mca", "pml", "^cm,ucx", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_exclude", "lo")
# How often the launcher runs again after it fails. A worker that is Ready can still be unknown to the cluster's DNS or
# not yet answer ssh for a moment, and mpirun then fails at once; run again, the launcher finds it. The MPI operator
# v0.8.0 copies runPolicy.backoffLimit into the launcher Job's backoffLimit (kubeflow/mpi-operator v0.8.0
# pkg/controller/mpi_job_controller.go:1543, newLauncherJob) and restarts the launcher OnFailure unless told
# otherwise (pkg/apis/kubeflow/v2beta1/constants.go:23, DefaultLauncherRestartPolicy): the container starts again in
# the same pod, so `kubectl logs job/NAME-launcher` shows the last attempt, the one `gpufleet nccl-report` judges
# (`--previous` the one before). With OnFailure the Job counts the container's restarts against backoffLimit
# (kubernetes.io, Jobs, "Pod backoff failure policy") (unconfirmed: that page not read this round). 3, not the lab's
# 20 (docs/design-eks.md, the lab): a test that fails for a real reason (a NCCL error, a bad EFA device) holds every
# GPU of the job while it repeats, and kubelet waits 10 s, 20 s, 40 s between attempts, long enough for DNS and sshd
# to catch up.
LAUNCHER_RETRIES = 3
LAUNCHER_RESTART_POLICY = "OnFailure"
# The MPI operator names the launcher Job NAME-launcher and the workers NAME-worker-INDEX, each also a host name
# (kubeflow/mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go launcherSuffix, workerSuffix); a host name is a
# DNS label of at most 63 characters (RFC 1123), and the job's Service is named NAME, a DNS-1035 label (starts with a
# letter).
JOB_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_MAX = 63


class MpiJobError(ValueError):
    """The environment or the options cannot give this MPIJob; one message per problem."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def efa_environment(instance: InstanceType, efa: bool) -> dict[str, str]:
    """The EFA variables every rank gets: FI_EFA_USE_DEVICE_RDMA=1 only where the catalog says GPUDirect RDMA, as the
    lab sets it for p5 (aws-ofi-nccl doc/efa-env-var.md: needed by plugin versions before 1.7, harmless after); on g5,
    whose EFA device has no RDMA read, it makes libfabric abort (issue 22) (unconfirmed: not read in libfabric's
    source). The image's aws-ofi-nccl 1.19.0 needs neither FI_PROVIDER nor NCCL_PROTO (only <= 1.5.0 did), and the
    same document says not to set FI_EFA_FORK_SAFE or NCCL_BUFFSIZE, which the lab set."""
    return {"FI_EFA_USE_DEVICE_RDMA": "1"} if efa and instance.gpudirect_rdma else {}


def efa_info_job(environment: Environment, instance: InstanceType, *, name: str, workers: int | None) -> dict:
    """An MPIJob that runs `fi_info -p efa -t FI_EP_RDM` once on every worker: the EFA devices the pod was given, as
    libfabric sees them (the lab ran it on every GPU's rank: the same answer eight times per node)."""
    problems = _job_problems(environment, name, workers)
    if not environment.efa:
        problems.append(f"efa is false in {environment.name}: its nodes have no EFA device for fi_info to list")
    if problems:
        raise MpiJobError(*problems)
    count = workers or environment.capacity.target
    command = [
        MPIRUN,
        "--allow-run-as-root",
        "--tag-output",
        "-np",
        str(count),
        "-N",
        "1",
        "--bind-to",
        "none",
        "-x",
        "PATH",
        "-x",
        "LD_LIBRARY_PATH",
        *_forwarded(efa_environment(instance, environment.efa)),
        FI_INFO,
        "-p",
        "efa",
        "-t",
        "FI_EP_RDM",
    ]
    return _mpijob(environment, instance, name=name, workers=count, launcher_command=command)


def nccl_test_job(environment: Environment, instance: InstanceType, *, name: str, workers: int | None) -> dict:
    """An MPIJob that runs nccl-tests all_reduce_perf on every GPU of every worker; its launcher's log is what
    `gpufleet nccl-report` reads. NCCL_DEBUG=INFO so the log says which network NCCL chose ("Using network ...")."""
    problems = _job_problems(environment, name, workers)
    if problems:
        raise MpiJobError(*problems)
    count = workers or environment.capacity.target
    gpus = instance.gpu.count
    variables = {**efa_environment(instance, environment.efa), "NCCL_DEBUG": "INFO"}
    command = [
        MPIRUN,
        "--allow-run-as-root",
        "--tag-output",
        "-np",
        str(count * gpus),
        "-N",
        str(gpus),
        "--bind-to",
        "none",
        *MPI_TRANSPORT_OPTIONS,
        "-x",
        "PATH",
        "-x",
        "LD_LIBRARY_PATH",
        *_forwarded(variables),
        ALL_REDUCE_PERF,
        *ALL_REDUCE_ARGUMENTS,
    ]
    return _mpijob(environment, instance, name=name, workers=count, launcher_command=command)


def _forwarded(variables: dict[str, str]) -> list[str]:
    """mpirun's -x NAME=VALUE for each variable: the ranks start through ssh, without the launcher's environment."""
    return [argument for item in variables.items() for argument in ("-x", "=".join(item))]


def _job_problems(environment: Environment, name: str, workers: int | None) -> list[str]:
    problems: list[str] = []
    eks = environment.eks
    if eks is None:
        return [
            f"{environment.name} has flavour: {environment.flavour}: MPIJobs run on an eks environment's cluster "
            "(on the fleet flavour, run /opt/gpufleet/ops/run-nccl-tests.sh on a node)"
        ]
    needed = {
        "mpi_operator": (eks.add_ons.mpi_operator, "no MPI operator runs MPIJobs"),
        "nvidia_device_plugin": (eks.add_ons.nvidia_device_plugin, "no node advertises nvidia.com/gpu"),
        "efa_device_plugin": (
            eks.add_ons.efa_device_plugin or not environment.efa,
            "no node advertises vpc.amazonaws.com/efa",
        ),
    }
    for add_on, (installed, consequence) in needed.items():
        if not installed:
            problems.append(
                f"eks.add_ons.{add_on} is false in {environment.name}: {consequence}, so the job would never run "
                f"(set it to true and deploy)"
            )
    target = environment.capacity.target
    if workers is not None and not 1 <= workers <= target:
        problems.append(f"--workers {workers}: must be 1 to {target} (capacity.target of {environment.name})")
    count = workers or target
    longest = f"{name}-worker-{count - 1}"
    if not JOB_NAME.fullmatch(name):
        problems.append(
            f"--name {name!r}: lower-case letters, digits and '-', starting with a letter and ending with a letter or "
            "digit (the MPI operator makes a Service and host names of it)"
        )
    elif len(longest) > DNS_LABEL_MAX:
        problems.append(
            f"--name {name!r}: too long, the last worker's host name {longest} has {len(longest)} characters "
            f"(at most {DNS_LABEL_MAX})"
        )
    return problems


def _mpijob(
    environment: Environment, instance: InstanceType, *, name: str, workers: int, launcher_command: list[str]
) -> dict:
    launcher = {
        "replicas": 1,
        "restartPolicy": LAUNCHER_RESTART_POLICY,
        "template": {
            "spec": {
                "nodeSelector": {EKS_GPU_NODE_LABEL: "true"},
                "tolerations": [_gpu_node_toleration()],
                "containers": [
                    {
                        "name": "launcher",
                        "image": NCCL_TESTS_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": launcher_command,
                    }
                ],
            }
        },
    }
    worker_selector = {"node.kubernetes.io/instance-type": instance.name, EKS_GPU_NODE_LABEL: "true"}
    if environment.efa:
        worker_selector[EKS_EFA_NODE_LABEL] = "true"
    worker = {
        "replicas": workers,
        "template": {
            "spec": {
                "nodeSelector": worker_selector,
                "tolerations": [_gpu_node_toleration()],
                "containers": [
                    {
                        "name": "worker",
                        "image": NCCL_TESTS_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "resources": _worker_resources(environment, instance),
                        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                    }
                ],
                "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
            }
        },
    }
    return {
        "apiVersion": MPIJOB_API_VERSION,
        "kind": MPIJOB_KIND,
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "gpufleet", "gpufleet/environment": environment.name},
        },
        "spec": {
            "slotsPerWorker": instance.gpu.count,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": LAUNCHER_RETRIES},
            "mpiReplicaSpecs": {"Launcher": launcher, "Worker": worker},
        },
    }


def _gpu_node_toleration() -> dict:
    """A new one per pod template: YAML would write a shared object once and refer to it (an anchor)."""
    return {
        "key": EKS_GPU_NODE_TAINT_KEY,
        "operator": "Equal",
        "value": EKS_GPU_NODE_TAINT_VALUE,
        "effect": "NoSchedule",
    }


def _worker_resources(environment: Environment, instance: InstanceType) -> dict:
    """Every GPU and every EFA device of the node, with hugepages for the EFA ranks and half the node's memory;
    requests equal limits (extended resources and hugepages must: kubernetes.io "Manage HugePages", and device
    plugins' resources cannot be overcommitted)."""
    gpus = instance.gpu.count
    resources = {"nvidia.com/gpu": str(gpus)}
    efa_devices = expected_efa_devices(environment, instance)
    if efa_devices:
        resources["vpc.amazonaws.com/efa"] = str(efa_devices)
        resources["hugepages-2Mi"] = f"{HUGEPAGES_2MI_PER_RANK_MIB * gpus}Mi"
    resources["memory"] = f"{instance.memory_gib // WORKER_MEMORY_SHARE}Gi"
    return {"requests": dict(resources), "limits": dict(resources)}
