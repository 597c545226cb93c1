"""gpufleet preflight's reachability check: for an environment in an existing VPC, the rules of gpufleet reachability
(gpufleet.reachability.rules) asked of the VPC as EC2 describes it, since its subnets, routes and endpoints are in no
template. A new VPC is checked at synthesis (`make synth` runs `gpufleet reachability`).

The callers are those the stacks will place in the VPC's subnets:
- the fleet flavour's nodes, in the node subnet, calling what gpufleet.node_calls lists;
- on the eks flavour, the kubectl handler and its Provider framework function, in the control-plane subnets
  (aws-cdk-lib 2.275's aws_eks_v2 runs them in the cluster's private subnets: docs/design-eks.md), calling
  KUBECTL_CALLS. Their way to the charts' repositories outside AWS, and the GPU nodes', is eks-egress's
  (gpufleet.ops.eks_preflight).
Their security groups do not exist before the deploy: each is taken as the stack makes it, HTTPS out to anywhere
(NEW_GROUP_EGRESS; tests/stacks/test_reachability.py holds it against the synthesized groups).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import error_code, is_unavailable
from gpufleet.catalog import InstanceType
from gpufleet.constants import FLAVOUR_EKS
from gpufleet.environment import Environment
from gpufleet.node_calls import node_calls
from gpufleet.ops.checks import Check, unavailable
from gpufleet.reachability.described import DescribedVpc, described_network
from gpufleet.reachability.rules import ANYWHERE, Caller, Rule, SecurityGroup, check

NAME = "reachability"
# The egress of the security groups the stacks make for the callers: the nodes' (stacks/constructs/
# efa_security_group.py) and the kubectl handler's (stacks/eks_cluster_stack.py), HTTPS to anywhere.
NEW_GROUP_EGRESS = (Rule("tcp", 443, 443, cidr=ANYWHERE),)
NODE_GROUP = "the nodes' security group (made by the deploy)"
KUBECTL_GROUP = "the kubectl handler's security group (made by the deploy)"
# The AWS services the kubectl handler and its Provider framework call whatever the add-ons: EKS and STS (the
# handler's kubeconfig and token), Lambda (the framework invokes the handler) and S3 (the framework answers
# CloudFormation at a pre-signed URL of the region's S3); declared on the functions by stacks/constructs/eks_add_ons.py
# declare_kubectl_calls, which tests/stacks/test_reachability.py holds against this.
KUBECTL_CALLS = ("eks", "lambda", "s3", "sts")


def check_reachability(ec2: Any, env: Environment, instance: InstanceType) -> Check:
    if env.network.creates_vpc:
        return Check(NAME, "pass", "a new VPC: gpufleet reachability checks it at synthesis (make synth)")
    vpc_id, subnet_id = env.network.vpc_id, env.network.subnet_id
    assert vpc_id is not None and subnet_id is not None, "the environment's validation: no cidr needs both"
    try:
        described = describe_vpc(ec2, env.region, vpc_id)
    except ClientError as error:
        if error_code(error) == "InvalidVpcID.NotFound":
            return Check(NAME, "fail", f"network.vpc_id: {vpc_id} does not exist in {env.region}")
        if is_unavailable(error):
            return unavailable(NAME, error)
        raise
    network = described_network(described)
    callers = []
    if env.flavour == FLAVOUR_EKS:
        assert env.eks is not None, "the environment's validation: the eks flavour has an eks section"
        network.security_groups[KUBECTL_GROUP] = SecurityGroup(KUBECTL_GROUP, egress=NEW_GROUP_EGRESS)
        if kubectl_runs(env):
            callers.append(
                Caller(
                    name="the kubectl handler",
                    region=env.region,
                    subnets=tuple(env.eks.control_plane_subnet_ids or ()),
                    security_groups=(KUBECTL_GROUP,),
                    public_ip=False,
                    destinations=KUBECTL_CALLS,
                )
            )
    else:
        network.security_groups[NODE_GROUP] = SecurityGroup(NODE_GROUP, egress=NEW_GROUP_EGRESS)
        destinations = sorted({name for names in node_calls(env, instance).values() for name in names})
        callers.append(
            Caller(
                name="the nodes",
                region=env.region,
                subnets=(subnet_id,),
                security_groups=(NODE_GROUP,),
                public_ip=False,  # several network cards, none with a public address (node_network_interfaces)
                destinations=tuple(destinations),
            )
        )
    if not callers:
        return Check(NAME, "pass", "no add-on: no kubectl handler runs in the control-plane subnets")
    findings = check(network, callers)
    if findings.problems:
        return Check(NAME, "fail", "; ".join(findings.problems))
    if findings.not_checked:
        return Check(NAME, "warn", "; ".join(findings.not_checked))
    where = ", ".join(subnet for caller in callers for subnet in caller.subnets)
    return Check(NAME, "pass", f"every call of {' and '.join(c.name for c in callers)} has a route from {where}")


def kubectl_runs(env: Environment) -> bool:
    """Whether the eks stack makes a kubectl handler: for any add-on it installs (stacks/eks_cluster_stack.py
    needs_kubectl)."""
    assert env.eks is not None
    add_ons = env.eks.add_ons
    return bool(
        (add_ons.efa_device_plugin and env.efa)
        or add_ons.nvidia_device_plugin
        or add_ons.mpi_operator
        or (add_ons.fsx_csi_driver and env.storage is not None)
    )


def describe_vpc(ec2: Any, region: str, vpc_id: str) -> DescribedVpc:
    in_vpc = [{"Name": "vpc-id", "Values": [vpc_id]}]

    def every(operation: str, key: str, **parameters: Any) -> list[dict]:
        pages = ec2.get_paginator(operation).paginate(**parameters)
        return [item for page in pages for item in page.get(key, [])]

    return DescribedVpc(
        region=region,
        vpc_id=vpc_id,
        dns_support=ec2.describe_vpc_attribute(VpcId=vpc_id, Attribute="enableDnsSupport")["EnableDnsSupport"]["Value"],
        dns_hostnames=ec2.describe_vpc_attribute(VpcId=vpc_id, Attribute="enableDnsHostnames")["EnableDnsHostnames"][
            "Value"
        ],
        internet_gateways=every(
            "describe_internet_gateways",
            "InternetGateways",
            Filters=[{"Name": "attachment.vpc-id", "Values": [vpc_id]}],
        ),
        subnets=every("describe_subnets", "Subnets", Filters=in_vpc),
        route_tables=every("describe_route_tables", "RouteTables", Filters=in_vpc),
        nat_gateways=every("describe_nat_gateways", "NatGateways", Filters=in_vpc),
        endpoints=every("describe_vpc_endpoints", "VpcEndpoints", Filters=in_vpc),
        security_groups=every("describe_security_groups", "SecurityGroups", Filters=in_vpc),
    )
