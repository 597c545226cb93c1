"""gpufleet status on an eks environment: the cluster and node groups from the EKS API (answered by operation name,
tests/answering.py: moto 5.2.5's EKS knows no launch-template node groups' health), the nodes from a kubectl capture,
and the GPU nodes short of the catalog's GPUs or EFA devices."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.loading import environments_dir, load_environment, load_named_environment
from gpufleet.reports import kubernetes_nodes
from gpufleet.reports.kubernetes_nodes import KubernetesNode
from tests.answering import client_error
from tests.gpufleet.environment_files import VALID_EKS, changed

CLUSTER = "Cluster9EE0221C-0123456789abcdef"
NOW = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)


@pytest.fixture
def lab(environments: Callable[..., str]) -> str:
    """The eks lab environment: 2 x p4d.24xlarge (4 EFA interfaces each), 1 on-demand and 1 spot."""
    (environments_dir() / "lab.yaml").write_text(json.dumps(VALID_EKS))
    return "lab"


def stack_resources(params: dict[str, Any]) -> dict[str, Any]:
    assert params["StackName"] == "gpufleet-lab-eks"
    summary = {
        "LogicalResourceId": "Cluster9EE0221C",
        "PhysicalResourceId": CLUSTER,
        "ResourceType": "AWS::EKS::Cluster",
        "LastUpdatedTimestamp": NOW,
        "ResourceStatus": "CREATE_COMPLETE",
    }
    return {"StackResourceSummaries": [summary]}


def node_group(name: str, capacity: str, status: str = "ACTIVE", issues: list | None = None) -> dict[str, Any]:
    return {
        "nodegroup": {
            "nodegroupName": name,
            "clusterName": CLUSTER,
            "status": status,
            "capacityType": capacity,
            "scalingConfig": {"minSize": 1, "maxSize": 1, "desiredSize": 1},
            "health": {"issues": issues or []},
        }
    }


@pytest.fixture
def eks_api(answered) -> list:
    answered("cloudformation", {"ListStackResources": stack_resources})
    groups = {
        "OnDemandGpuNodes": node_group("OnDemandGpuNodes", "ON_DEMAND"),
        "SpotGpuNodes": node_group(
            "SpotGpuNodes",
            "SPOT",
            "DEGRADED",
            [{"code": "AsgInstanceLaunchFailures", "message": "no spot capacity", "resourceIds": ["asg-1"]}],
        ),
        "SystemNodes": node_group("SystemNodes", "ON_DEMAND"),
    }
    return answered(
        "eks",
        {
            "DescribeCluster": lambda params: {
                "cluster": {
                    "name": params["name"],
                    "status": "ACTIVE",
                    "version": "1.35",
                    "platformVersion": "eks.7",
                    "resourcesVpcConfig": {"endpointPublicAccess": False, "endpointPrivateAccess": True},
                }
            },
            "ListNodegroups": lambda params: {"nodegroups": sorted(groups)},
            "DescribeNodegroup": lambda params: groups[params["nodegroupName"]],
        },
    )


def nodes_file(tmp_path, items: list[tuple[str, str, str, dict[str, str]]]) -> str:
    """A kubectl node list of (name, node group, Ready status, allocatable devices)."""
    document = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "eks.amazonaws.com/nodegroup": group,
                        "node.kubernetes.io/instance-type": "p4d.24xlarge",
                    },
                },
                "status": {"allocatable": devices, "conditions": [{"type": "Ready", "status": ready}]},
            }
            for name, group, ready, devices in items
        ],
    }
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(document))
    return str(path)


FULL = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4"}


def test_status_shows_the_cluster_node_groups_and_how_to_read_nodes(lab, eks_api, run_cli) -> None:
    code, out, err = run_cli("status", "lab")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"EKS cluster {CLUSTER} (lab, us-east-1): ACTIVE, Kubernetes 1.35 (eks.7), endpoint private",
        "",
        "NODE GROUP        CAPACITY   STATUS    DESIRED/MIN/MAX  HEALTH ISSUES",
        "OnDemandGpuNodes  ON_DEMAND  ACTIVE    1/1/1            -",
        "SpotGpuNodes      SPOT       DEGRADED  1/1/1            AsgInstanceLaunchFailures: no spot capacity",
        "SystemNodes       ON_DEMAND  ACTIVE    1/1/1            -",
        "",
        "Kubernetes nodes not read: the cluster's endpoint is private, so run `kubectl get nodes -o json > nodes.json` "
        "where it answers (docs/guides/eks.md) and pass --nodes nodes.json",
    ]


def test_status_with_nodes_names_the_nodes_short_of_devices(lab, eks_api, run_cli, tmp_path) -> None:
    capture = nodes_file(
        tmp_path,
        [
            ("ip-10-40-0-10", "OnDemandGpuNodes", "True", FULL),
            ("ip-10-40-0-11", "SpotGpuNodes", "True", {"nvidia.com/gpu": "8"}),
        ],
    )
    code, out, _ = run_cli("status", "lab", "--nodes", capture)
    assert code == 0
    assert out.splitlines()[-5:] == [
        "NODE           NODE GROUP        INSTANCE TYPE  READY  nvidia.com/gpu  vpc.amazonaws.com/efa",
        "ip-10-40-0-10  OnDemandGpuNodes  p4d.24xlarge   True   8               4",
        "ip-10-40-0-11  SpotGpuNodes      p4d.24xlarge   True   8               0",
        "2 of 2 p4d.24xlarge nodes Ready (capacity.target 2)",
        "ip-10-40-0-11: allocatable vpc.amazonaws.com/efa 0 of 4: the EFA device plugin does not advertise the "
        "node's EFA interfaces (is its pod running on ip-10-40-0-11? is p4d.24xlarge in the chart's "
        "supportedInstanceLabels?)",
    ]


def test_status_json_of_an_eks_environment(lab, eks_api, run_json, tmp_path) -> None:
    capture = nodes_file(tmp_path, [("ip-10-40-0-10", "OnDemandGpuNodes", "False", {})])
    code, document = run_json("status", "lab", "--nodes", capture)
    assert code == 0
    assert document["cluster"]["node_groups"][1] == {
        "name": "SpotGpuNodes",
        "status": "DEGRADED",
        "capacity_type": "SPOT",
        "desired": 1,
        "minimum": 1,
        "maximum": 1,
        "issues": ["AsgInstanceLaunchFailures: no spot capacity"],
    }
    assert document["expected_per_gpu_node"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}
    assert document["node_problems"] == ["ip-10-40-0-10: not Ready (False): kubectl describe node ip-10-40-0-10"]


def test_an_eks_environment_not_deployed_is_one_line(lab, answered, run_cli) -> None:
    answered(
        "cloudformation",
        {"ListStackResources": lambda params: client_error("ValidationError", "Stack with id x does not exist")},
    )
    code, out, err = run_cli("status", "lab")
    assert (code, out) == (1, "")
    assert err.strip().endswith(
        "stack gpufleet-lab-eks in us-east-1 holds no EKS cluster: deploy the environment (cdk deploy)"
    )


def test_fleet_options_are_refused_on_eks_and_nodes_on_fleet(lab, run_cli) -> None:
    code, _, err = run_cli("status", "lab", "--group-name", "g")
    assert code == 1
    assert "--fleet-id and --group-name name a fleet flavour's node group" in err
    code, _, err = run_cli("status", "dev", "--nodes", "nodes.json")
    assert code == 1
    assert "dev: --nodes is for an eks environment (flavour: eks); leave it out" in err


@pytest.mark.parametrize(
    ("efa", "instance_type", "expected"),
    [(True, "p5.48xlarge", 32), (True, "p4d.24xlarge", 4), (False, "p4d.24xlarge", 0), (True, "g5.48xlarge", 1)],
)
def test_expected_efa_devices_follow_the_catalog(tmp_path, efa, instance_type, expected) -> None:
    document = changed({"efa": efa, "instance_type": instance_type}, VALID_EKS)
    (tmp_path / "lab.yaml").write_text(json.dumps(document))
    env = load_environment(tmp_path / "lab.yaml")
    assert kubernetes_nodes.expected_efa_devices(env, load_catalog()[instance_type]) == expected


def test_only_nodes_of_the_environment_type_are_judged(lab) -> None:
    env = load_named_environment("lab")
    system = KubernetesNode("sys", "SystemNodes", "m6i.large", False, "False", 0, 0)
    short = KubernetesNode("gpu", "OnDemandGpuNodes", "p4d.24xlarge", True, "True", 7, 4)
    assert kubernetes_nodes.node_problems([system, short], env, load_catalog()["p4d.24xlarge"]) == [
        "gpu: allocatable nvidia.com/gpu 7 of 8: the NVIDIA device plugin does not advertise the node's GPUs (is its "
        "pod running on gpu?)"
    ]
