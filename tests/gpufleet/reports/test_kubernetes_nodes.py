"""`kubectl get nodes -o json` captures read into nodes: readiness, node group, allocatable GPUs and EFA devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.reports.kubernetes_nodes import KubernetesNode, read_nodes


def node(
    name: str,
    *,
    ready: str = "True",
    group: str | None = "lab-OnDemandGpuNodes",
    instance_type: str = "p5.48xlarge",
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as kubectl prints it, cut to the fields read here plus a few it ignores."""
    labels = {"kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": instance_type}
    if group is not None:
        labels["eks.amazonaws.com/nodegroup"] = group
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {
            "allocatable": {"cpu": "191450m", "memory": "2027040088Ki", "pods": "737", **(allocatable or {})},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "KubeletNotReady"},
            ],
        },
    }


def capture(tmp_path: Path, items: list[Any], kind: str = "List") -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": kind, "items": items, "metadata": {"resourceVersion": ""}}))
    return str(path)


def test_each_node_is_read_with_its_devices(tmp_path) -> None:
    gpu = node("ip-10-40-1-10.ec2.internal", allocatable={"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"})
    system = node("ip-10-40-1-20.ec2.internal", group="lab-SystemNodes", instance_type="m6i.large")
    assert read_nodes(capture(tmp_path, [gpu, system])) == [
        KubernetesNode(
            "ip-10-40-1-10.ec2.internal", "lab-OnDemandGpuNodes", "p5.48xlarge", True, "True KubeletReady", 8, 32
        ),
        KubernetesNode("ip-10-40-1-20.ec2.internal", "lab-SystemNodes", "m6i.large", True, "True KubeletReady", 0, 0),
    ]


def test_a_node_not_ready_and_outside_node_groups(tmp_path) -> None:
    (read,) = read_nodes(capture(tmp_path, [node("n1", ready="False", group=None)], kind="NodeList"))
    assert (read.ready, read.readiness, read.node_group) == (False, "False KubeletNotReady", "")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"kind": "Pod", "items": []}, 'kind: expected List or NodeList, got "Pod"'),
        ({"kind": "List"}, "items: missing"),
        (
            {"kind": "List", "items": [node("n1", allocatable={"nvidia.com/gpu": "8k"})]},
            'items[0].status.allocatable.nvidia.com/gpu: expected a whole number of devices such as "8", got "8k"',
        ),
        ({"kind": "List", "items": [{"status": {}}]}, "items[0].metadata: missing"),
    ],
)
def test_a_capture_of_another_shape_is_one_line(tmp_path, document: dict, message: str) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(document))
    with pytest.raises(GpufleetError) as raised:
        read_nodes(str(path))
    assert str(raised.value) == f"{path}: {message}; pass what `kubectl get nodes -o json` prints"
