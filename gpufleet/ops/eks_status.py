"""An eks-flavour environment's cluster as the EKS API describes it: the cluster and its managed node groups. What its
nodes can hand to pods comes from a kubectl capture instead (gpufleet.reports.kubernetes_nodes says why).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import error_code
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError


def eks_stack_name(env: Environment) -> str:
    """The stack of the eks flavour's cluster and node groups (app.py, stacks/eks_cluster_stack.py)."""
    return f"{env.stack_prefix}-eks"


def deployed_cluster_name(cloudformation: Any, stack_name: str) -> str | None:
    """The EKS cluster the environment's eks stack made (its AWS::EKS::Cluster resource), None when the stack or the
    cluster is not there. The stack names no cluster (aws_eks_v2 lets CloudFormation name it), so it is read from the
    stack's resources."""
    try:
        pages = cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name)
        clusters = [
            summary["PhysicalResourceId"]
            for page in pages
            for summary in page["StackResourceSummaries"]
            if summary["ResourceType"] == "AWS::EKS::Cluster" and summary.get("PhysicalResourceId")
        ]
    except ClientError as error:
        # A stack that does not exist answers ValidationError "Stack with id NAME does not exist" (botocore's
        # cloudformation model documents no own error for it; gpufleet.ops.fleet.node_group_id reads it the same way).
        if error_code(error) == "ValidationError" and "does not exist" in str(error):
            return None
        raise
    return clusters[0] if clusters else None


@dataclass(frozen=True)
class EksNodeGroup:
    name: str
    status: str  # DescribeNodegroup status: ACTIVE, CREATING, UPDATING, DEGRADED, ...
    capacity_type: str  # ON_DEMAND | SPOT | CAPACITY_BLOCK
    desired: int
    minimum: int
    maximum: int
    # DescribeNodegroup health.issues, one "CODE: message" each (e.g. AsgInstanceLaunchFailures: capacity).
    issues: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "issues": list(self.issues)}


@dataclass(frozen=True)
class EksCluster:
    name: str
    status: str
    kubernetes_version: str
    platform_version: str
    endpoint_public: bool
    node_groups: tuple[EksNodeGroup, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "node_groups": [group.as_dict() for group in self.node_groups]}


def describe_cluster(aws: Any, env: Environment) -> EksCluster:
    stack = eks_stack_name(env)
    name = deployed_cluster_name(aws.client("cloudformation"), stack)
    if name is None:
        raise GpufleetError(f"stack {stack} in {env.region} holds no EKS cluster: deploy the environment (cdk deploy)")
    eks = aws.client("eks")
    cluster = eks.describe_cluster(name=name)["cluster"]
    group_names = [
        group
        for page in eks.get_paginator("list_nodegroups").paginate(clusterName=name)
        for group in page["nodegroups"]
    ]
    groups = [
        _node_group(eks.describe_nodegroup(clusterName=name, nodegroupName=group)["nodegroup"])
        for group in sorted(group_names)
    ]
    return EksCluster(
        name=name,
        status=cluster.get("status", ""),
        kubernetes_version=cluster.get("version", ""),
        platform_version=cluster.get("platformVersion", ""),
        endpoint_public=bool(cluster.get("resourcesVpcConfig", {}).get("endpointPublicAccess", False)),
        node_groups=tuple(groups),
    )


def _node_group(described: dict[str, Any]) -> EksNodeGroup:
    scaling = described.get("scalingConfig", {})
    issues = described.get("health", {}).get("issues", [])
    return EksNodeGroup(
        name=described["nodegroupName"],
        status=described.get("status", ""),
        capacity_type=described.get("capacityType", ""),
        desired=int(scaling.get("desiredSize", 0)),
        minimum=int(scaling.get("minSize", 0)),
        maximum=int(scaling.get("maxSize", 0)),
        issues=tuple(f"{issue.get('code', '?')}: {issue.get('message', '')}" for issue in issues),
    )
