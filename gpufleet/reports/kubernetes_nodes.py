"""The nodes of an eks-flavour cluster as `kubectl get nodes -o json` prints them: each node's node group, instance
type, readiness, and the GPUs and EFA devices it can hand to pods (its allocatable extended resources), judged
against what the catalog says the environment's nodes have.

gpufleet status reads this capture instead of calling the Kubernetes API itself: the cluster's endpoint is private
(stacks/eks_cluster_stack.py), so the API answers only from inside the VPC, where the operator runs kubectl (SSM
port forwarding or a host there: docs/guides/eks.md); gpufleet runs wherever the AWS credentials are and needs no
Kubernetes client.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpufleet.catalog import InstanceType
from gpufleet.environment import Environment
from gpufleet.input_files import JsonFile, item_path

# The extended resources the two device plugins advertise: the NVIDIA device plugin's nvidia.com/gpu
# (NVIDIA/k8s-device-plugin README) and the EFA device plugin's vpc.amazonaws.com/efa (aws/eks-charts
# stable/aws-efa-k8s-device-plugin; the lab's MPIJobs request both: docs/design-eks.md "The lab").
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# EKS labels every managed node with its node group: "eks.amazonaws.com/nodegroup=$nodeGroupName"
# (awsdocs/amazon-eks-user-guide latest/ug/nodes/managed-node-update-behavior.adoc at 0bfeeaf2, "Scale up phase").
NODE_GROUP_LABEL = "eks.amazonaws.com/nodegroup"
# The kubelet's well-known label of the node's EC2 instance type (kubernetes.io, "Well-Known Labels, Annotations and
# Taints": node.kubernetes.io/instance-type).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# What `kubectl get nodes -o json` prints is a v1 List; the API's own answer (GET /api/v1/nodes) is a NodeList.
LIST_KINDS = ("List", "NodeList")
# The interface types that give a node an EFA device (gpufleet.catalog.InstanceType.interface_types).
EFA_INTERFACE_TYPES = ("efa", "efa-only")
NODES_LIMIT = 16 * 1024 * 1024
NODES_FIX = "pass what `kubectl get nodes -o json` prints"


@dataclass(frozen=True)
class KubernetesNode:
    name: str
    node_group: str  # "" for a node no managed node group holds
    instance_type: str
    ready: bool
    # The Ready condition's status and reason as the node reports them ("True", "False KubeletNotReady", "missing").
    readiness: str
    gpus: int
    efa_devices: int


def read_nodes(source: str) -> list[KubernetesNode]:
    """The nodes in a `kubectl get nodes -o json` capture (a path, or - for standard input); a file of another shape
    is one line naming the file, where in it, and what was expected (exit code 1)."""
    file = JsonFile(
        Path(source),  # read as str(path): "-" stays standard input
        limit=NODES_LIMIT,
        expected="a kubectl node list (a few MB for hundreds of nodes)",
        fix=NODES_FIX,
        exit_code=1,
    )
    kind = file.get(file.document, ("kind",), str)
    if kind not in LIST_KINDS:
        raise file.problem(("kind",), " or ".join(LIST_KINDS), kind)
    items = file.get(file.document, ("items",), list)
    return [_node(file, item, item_path(("items",), index)) for index, item in enumerate(items)]


def _node(file: JsonFile, item: object, path: tuple[str, ...]) -> KubernetesNode:
    metadata = file.get(item, (*path, "metadata"), dict)
    labels = file.get(metadata, (*path, "metadata", "labels"), dict, default={})
    status = file.get(item, (*path, "status"), dict)
    allocatable = file.get(status, (*path, "status", "allocatable"), dict, default={})
    conditions_path = (*path, "status", "conditions")
    conditions = file.get(status, conditions_path, list, default=[])
    ready = [
        condition
        for index, condition in enumerate(conditions)
        if file.get(condition, (*item_path(conditions_path, index), "type"), str) == "Ready"
    ]
    readiness = "missing"
    if ready:
        readiness = " ".join(str(ready[0].get(key, "")) for key in ("status", "reason")).strip()
    return KubernetesNode(
        name=file.get(metadata, (*path, "metadata", "name"), str),
        node_group=str(labels.get(NODE_GROUP_LABEL, "")),
        instance_type=str(labels.get(INSTANCE_TYPE_LABEL, "")),
        ready=bool(ready) and ready[0].get("status") == "True",
        readiness=readiness,
        gpus=_devices(file, allocatable, (*path, "status", "allocatable", GPU_RESOURCE)),
        efa_devices=_devices(file, allocatable, (*path, "status", "allocatable", EFA_RESOURCE)),
    )


def _devices(file: JsonFile, allocatable: dict, path: tuple[str, ...]) -> int:
    """A device count the node can allocate; 0 when the node advertises none (no plugin runs there)."""
    quantity = file.get(allocatable, path, str, default="0")
    if not quantity.isdigit():
        raise file.problem(path, 'a whole number of devices such as "8"', quantity)
    return int(quantity)


def expected_efa_devices(env: Environment, spec: InstanceType) -> int:
    """The EFA devices a GPU node has: one per EFA interface of its launch template."""
    return sum(1 for kind in spec.interface_types(env.efa) if kind in EFA_INTERFACE_TYPES)


def node_problems(nodes: list[KubernetesNode], env: Environment, spec: InstanceType) -> list[str]:
    """One line per GPU node (of the environment's instance type) that is not Ready or advertises fewer GPUs or EFA
    devices than the catalog says it has: the complaints the EFA and NVIDIA plugins' users raise most
    (docs/design-eks.md, the issue's list: a plugin that does not run on the node, or one that lost the devices to the
    other)."""
    efa = expected_efa_devices(env, spec)
    problems = []
    for node in nodes:
        if node.instance_type != spec.name:
            continue
        if not node.ready:
            problems.append(f"{node.name}: not Ready ({node.readiness}): kubectl describe node {node.name}")
            continue
        if node.gpus < spec.gpu.count:
            problems.append(
                f"{node.name}: allocatable {GPU_RESOURCE} {node.gpus} of {spec.gpu.count}: the NVIDIA device plugin "
                f"does not advertise the node's GPUs (is its pod running on {node.name}?)"
            )
        if node.efa_devices < efa:
            problems.append(
                f"{node.name}: allocatable {EFA_RESOURCE} {node.efa_devices} of {efa}: the EFA device plugin does not "
                f"advertise the node's EFA interfaces (is its pod running on {node.name}? is {spec.name} in the "
                "chart's supportedInstanceLabels?)"
            )
    return problems
