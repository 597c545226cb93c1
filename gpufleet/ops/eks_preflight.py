"""Pre-deployment checks of an eks-flavour environment (flavour: eks) that the fleet flavour does not need: the pinned
Kubernetes version still offered, EKS's quotas, the control-plane subnets and the VPC of an existing network, and
the nodes' way out to the image registries. Each returns a Check (gpufleet.ops.checks), as gpufleet.ops.preflight's
do; a call this caller may not make is a warn, never a crash.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import error_code, is_unavailable
from gpufleet.environment import Environment
from gpufleet.ops.checks import Check, Status, unavailable
from gpufleet.ops.eks_status import deployed_cluster_name, eks_stack_name
from gpufleet.validators.eks import CONTROL_PLANE_AVAILABILITY_ZONES

# DescribeClusterVersions' versionStatus (botocore 1.44.5, eks model, shape VersionStatus). A version in extended
# support costs more per cluster hour than one in standard support (EKS user guide, kubernetes-versions: 14 months of
# standard support, then 12 months of extended support at extra cost; docs/design-eks.md "EKS").
STANDARD_SUPPORT = "STANDARD_SUPPORT"
EXTENDED_SUPPORT = "EXTENDED_SUPPORT"

# Service Quotas of EKS (service code "eks"). L-1194D53C "Clusters" is the code several public quota tools use;
# L-6D54EA21 "Managed node groups per cluster" comes from one public quota dashboard only (unconfirmed).
# source (the quotas, 100 clusters and 30 managed node groups per cluster by default):
#   https://docs.aws.amazon.com/eks/latest/userguide/service-quotas.html
CLUSTERS_QUOTA = ("L-1194D53C", "Clusters")
NODE_GROUPS_QUOTA = ("L-6D54EA21", "Managed node groups per cluster")

# Cluster subnets: "The subnets must each have at least six IP addresses for use by Amazon EKS. However, we recommend
# at least 16 IP addresses.", "The subnets must be in at least two different Availability Zones", and they "can't
# reside in" these AZ ids.
# source: awsdocs/amazon-eks-user-guide latest/ug/networking/network-reqs.adoc at 101184ec, "Subnet requirements for
#   clusters"
CONTROL_PLANE_MINIMUM_ADDRESSES = 6
CONTROL_PLANE_RECOMMENDED_ADDRESSES = 16
DISALLOWED_CONTROL_PLANE_ZONE_IDS = {"us-east-1": "use1-az3", "us-west-1": "usw1-az2", "ca-central-1": "cac1-az3"}

# A route to everywhere is what takes the nodes to nvcr.io, Docker Hub and the charts' repositories (the add-ons'
# images: docs/design-eks.md "Device plugins"). A private subnet's nodes reach the internet through a NAT device
# ("If the subnet that you deploy a node to is a private subnet and its route table doesn't include a route to a
# network address translation (NAT) device ... add VPC endpoints": network-reqs.adoc above, "Subnet requirements for
# nodes"); VPC endpoints serve AWS's own registries only, not nvcr.io.
DEFAULT_ROUTE = "0.0.0.0/0"


def run_eks_checks(aws: Any, env: Environment, now: dt.datetime) -> list[Check]:
    eks, quotas, ec2 = aws.client("eks"), aws.client("service-quotas"), aws.client("ec2")
    return [
        check_kubernetes_version(eks, env, now),
        check_cluster_quota(eks, quotas, aws.client("cloudformation"), env),
        check_node_group_quota(quotas, env),
        check_control_plane_subnets(ec2, env),
        check_vpc_dns(ec2, env),
        check_egress(ec2, env),
    ]


def check_kubernetes_version(eks: Any, env: Environment, now: dt.datetime) -> Check:
    """The file's eks.kubernetes_version must still be one EKS creates clusters with, in this region."""
    name = "eks-version"
    assert env.eks is not None, "the environment's validation: the eks flavour has an eks section"
    version = env.eks.kubernetes_version
    try:
        # includeAll: whether the answer leaves out versions past standard support without it is (unconfirmed); with
        # it, such a version comes back with its status instead of looking withdrawn.
        pages = eks.get_paginator("describe_cluster_versions").paginate(clusterVersions=[version], includeAll=True)
        listed = [item for page in pages for item in page.get("clusterVersions", [])]
        found = [item for item in listed if item["clusterVersion"] == version]
    except ClientError as error:
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    if not found:
        return Check(
            name,
            "fail",
            f"EKS in {env.region} does not offer Kubernetes {version}: a gpufleet release that pins a newer version "
            "is needed (gpufleet.constants.EKS_KUBERNETES_VERSIONS)",
        )
    described = found[0]
    status = described.get("versionStatus", "")
    standard_end = _day(described.get("endOfStandardSupportDate"))
    extended_end = _day(described.get("endOfExtendedSupportDate"))
    if status == STANDARD_SUPPORT:
        return Check(name, "pass", f"Kubernetes {version} is in standard support in {env.region} until {standard_end}")
    if status == EXTENDED_SUPPORT:
        return Check(
            name,
            "warn",
            f"Kubernetes {version} is in extended support in {env.region} (until {extended_end}): EKS charges more per "
            "cluster hour; plan the upgrade to a version a newer gpufleet pins",
        )
    return Check(name, "fail", f"EKS lists Kubernetes {version} in {env.region} as {status or 'without a status'}")


def _day(value: Any) -> str:
    return value.date().isoformat() if isinstance(value, dt.datetime) else "an unknown date"


def _quota(quotas: Any, code: str) -> float:
    return float(quotas.get_service_quota(ServiceCode="eks", QuotaCode=code)["Quota"]["Value"])


def check_cluster_quota(eks: Any, quotas: Any, cloudformation: Any, env: Environment) -> Check:
    """The region's clusters plus this environment's (unless it is deployed already) within the Clusters quota."""
    name = "eks-quota-clusters"
    code, quota_name = CLUSTERS_QUOTA
    try:
        limit = _quota(quotas, code)
        existing = [cluster for page in eks.get_paginator("list_clusters").paginate() for cluster in page["clusters"]]
        deployed = deployed_cluster_name(cloudformation, eks_stack_name(env))
    except ClientError as error:
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    needed = 0 if deployed in existing else 1
    total = len(existing) + needed
    text = f"{quota_name} ({code}): quota {limit:g}; {len(existing)} in {env.region} + {needed} new = {total}"
    if total > limit:
        return Check(name, "fail", f"{text}: request an increase in the Service Quotas console, or delete a cluster")
    return Check(name, "pass", text)


def node_group_count(env: Environment) -> int:
    """The managed node groups of the environment's cluster: the system group and one GPU group per capacity type
    with nodes (stacks/eks_cluster_stack.py)."""
    return 1 + (env.capacity.on_demand > 0) + (env.capacity.spot > 0)


def check_node_group_quota(quotas: Any, env: Environment) -> Check:
    name = "eks-quota-node-groups"
    code, quota_name = NODE_GROUPS_QUOTA
    try:
        limit = _quota(quotas, code)
    except ClientError as error:
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    needed = node_group_count(env)
    text = f"{quota_name} ({code}): quota {limit:g}; the cluster needs {needed} (system, and GPU per capacity type)"
    if needed > limit:
        return Check(name, "fail", f"{text}: request an increase in the Service Quotas console")
    return Check(name, "pass", text)


def check_control_plane_subnets(ec2: Any, env: Environment) -> Check:
    """Where EKS puts the control plane's interfaces. A new VPC: the AZs of eks.control_plane_availability_zones (the
    network stack makes /28 subnets there) must not be ones EKS refuses. An existing VPC: the subnets of
    eks.control_plane_subnet_ids must exist in network.vpc_id, span two AZs EKS accepts, and have addresses free."""
    name = "eks-subnets"
    assert env.eks is not None, "the environment's validation: the eks flavour has an eks section"
    disallowed = DISALLOWED_CONTROL_PLANE_ZONE_IDS.get(env.region)
    try:
        if env.network.creates_vpc:
            zones = list(env.eks.control_plane_availability_zones or ())
            described = ec2.describe_availability_zones(ZoneNames=zones)["AvailabilityZones"]
            refused = [zone["ZoneName"] for zone in described if zone["ZoneId"] == disallowed]
            if refused:
                return Check(
                    name,
                    "fail",
                    f"eks.control_plane_availability_zones: {refused[0]} is {disallowed} in this account, where EKS "
                    "places no control plane: name another AZ",
                )
            return Check(name, "pass", f"the network stack makes control-plane subnets in {', '.join(zones)}")
        ids = list(env.eks.control_plane_subnet_ids or ())
        subnets = ec2.describe_subnets(SubnetIds=ids)["Subnets"]
    except ClientError as error:
        if error_code(error) == "InvalidSubnetID.NotFound":
            return Check(name, "fail", f"eks.control_plane_subnet_ids: {error.response['Error'].get('Message', '')}")
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    problems, warnings = _subnet_problems(subnets, env, disallowed)
    if problems:
        return Check(name, "fail", "; ".join(problems + warnings))
    zones = sorted({subnet["AvailabilityZone"] for subnet in subnets})
    text = f"{len(subnets)} control-plane subnets in {', '.join(zones)}"
    if warnings:
        return Check(name, "warn", f"{text}; " + "; ".join(warnings))
    return Check(name, "pass", text)


def _subnet_problems(subnets: list[dict], env: Environment, disallowed: str | None) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    warnings: list[str] = []
    for subnet in subnets:
        subnet_id, free = subnet["SubnetId"], int(subnet.get("AvailableIpAddressCount", 0))
        if subnet["VpcId"] != env.network.vpc_id:
            problems.append(f"{subnet_id} is in {subnet['VpcId']}, not network.vpc_id {env.network.vpc_id}")
        if subnet.get("AvailabilityZoneId") == disallowed:
            problems.append(f"{subnet_id} is in {disallowed}, where EKS places no control plane: name another subnet")
        if free < CONTROL_PLANE_MINIMUM_ADDRESSES:
            problems.append(
                f"{subnet_id} has {free} free addresses, EKS needs {CONTROL_PLANE_MINIMUM_ADDRESSES} for its interfaces"
            )
        elif free < CONTROL_PLANE_RECOMMENDED_ADDRESSES:
            warnings.append(
                f"{subnet_id} has {free} free addresses (EKS recommends {CONTROL_PLANE_RECOMMENDED_ADDRESSES}: an "
                "upgrade makes new interfaces)"
            )
    zones = {subnet["AvailabilityZone"] for subnet in subnets}
    if len(zones) < CONTROL_PLANE_AVAILABILITY_ZONES:
        problems.append(
            f"eks.control_plane_subnet_ids are all in {', '.join(sorted(zones))}: EKS needs subnets in at least "
            f"{CONTROL_PLANE_AVAILABILITY_ZONES} availability zones"
        )
    return problems, warnings


def check_vpc_dns(ec2: Any, env: Environment) -> Check:
    """An existing VPC must resolve names and give hostnames: "The VPC must have DNS hostname and DNS resolution
    support. Otherwise, nodes can't register to your cluster." (network-reqs.adoc above, "VPC requirements"). The
    network stack's VPC has both (aws-cdk-lib's ec2.Vpc enables them by default)."""
    name = "eks-vpc-dns"
    if env.network.creates_vpc:
        return Check(name, "pass", "the network stack's VPC resolves names and gives hostnames")
    vpc_id = env.network.vpc_id
    # DescribeVpcAttribute's attribute -> (its answer's key, the modify-vpc-attribute option that turns it on).
    attributes = {
        "enableDnsSupport": ("EnableDnsSupport", "--enable-dns-support"),
        "enableDnsHostnames": ("EnableDnsHostnames", "--enable-dns-hostnames"),
    }
    try:
        off = [
            attribute
            for attribute, (key, _) in attributes.items()
            if not ec2.describe_vpc_attribute(VpcId=vpc_id, Attribute=attribute)[key]["Value"]
        ]
    except ClientError as error:
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    if off:
        return Check(
            name,
            "fail",
            f"{vpc_id} has {' and '.join(off)} off, so nodes cannot register with the cluster: turn them on with "
            + "; ".join(f"aws ec2 modify-vpc-attribute --vpc-id {vpc_id} {attributes[a][1]}" for a in off),
        )
    return Check(name, "pass", f"{vpc_id} resolves names and gives hostnames")


# Who needs a way out from which subnets, and what fails without it: the GPU nodes pull the device plugins' and the
# jobs' images from outside AWS; the kubectl handler and its Provider framework function, which aws-cdk-lib 2.275's
# aws_eks_v2 runs in the cluster's own subnets whenever the endpoint has private access (cluster.js: `kubectlSubnets =
# privateSubnets`; docs/design-eks.md "Where the kubectl handler runs"), fetch the charts from their repositories and
# call the EKS, Lambda and S3 APIs. Neither has a public address (the nodes several network cards; "Lambda functions
# in a VPC don't have public IP addresses": Lambda developer guide, configuration-vpc-internet) (unconfirmed: that
# page not read this round), so an internet gateway route is no way out for either.
NODE_SUBNET_ROLE = ("the node subnet", "the nodes cannot pull the device plugins' images (nvcr.io) or the jobs'")
CONTROL_PLANE_SUBNET_ROLE = (
    "the control-plane subnet",
    "the kubectl handler, which aws-cdk-lib runs there, cannot fetch the add-ons' charts nor answer CloudFormation",
)
SEVERITY: dict[Status, int] = {"pass": 0, "warn": 1, "fail": 2}


def check_egress(ec2: Any, env: Environment) -> Check:
    """The default route of the node subnet and of every control-plane subnet (the kubectl handler's). A new VPC's
    network stack routes both through its NAT gateway (gpufleet validate requires network.nat_gateway on eks)."""
    name = "eks-egress"
    if env.network.creates_vpc:
        return Check(
            name,
            "pass",
            "the network stack's NAT gateway (network.nat_gateway), the route of the node subnet and of the "
            "control-plane subnets",
        )
    assert env.network.subnet_id is not None and env.eks is not None, "the environment's validation: no cidr needs both"
    subnets = [(env.network.subnet_id, NODE_SUBNET_ROLE)] + [
        (subnet_id, CONTROL_PLANE_SUBNET_ROLE) for subnet_id in dict.fromkeys(env.eks.control_plane_subnet_ids or ())
    ]
    verdicts = []
    try:
        for subnet_id, role in subnets:
            verdicts.append(_subnet_egress(subnet_id, role, _default_routes(ec2, env, subnet_id)))
    except ClientError as error:
        if is_unavailable(error):
            return unavailable(name, error)
        raise
    status = max((status for status, _ in verdicts), key=SEVERITY.__getitem__)
    return Check(name, status, "; ".join(text for _, text in verdicts))


def _default_routes(ec2: Any, env: Environment, subnet_id: str) -> list[dict]:
    tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet_id]}])[
        "RouteTables"
    ]
    if not tables:
        # A subnet with no table of its own uses the VPC's main route table (VPC user guide, route tables).
        tables = ec2.describe_route_tables(
            Filters=[
                {"Name": "vpc-id", "Values": [env.network.vpc_id]},
                {"Name": "association.main", "Values": ["true"]},
            ]
        )["RouteTables"]
    return [
        route
        for table in tables
        for route in table.get("Routes", [])
        if route.get("DestinationCidrBlock") == DEFAULT_ROUTE and route.get("State", "active") == "active"
    ]


def _subnet_egress(subnet_id: str, role: tuple[str, str], routes: list[dict]) -> tuple[Status, str]:
    """(status, text) of one subnet's way out."""
    what, consequence = role
    if not routes:
        return "fail", f"{what} {subnet_id} has no route to {DEFAULT_ROUTE}: {consequence}; add a NAT gateway route"
    route = routes[0]
    if route.get("NatGatewayId"):
        return "pass", f"{what} {subnet_id} reaches the internet through {route['NatGatewayId']}"
    if str(route.get("GatewayId", "")).startswith("igw-"):
        return (
            "fail",
            f"{what} {subnet_id} routes {DEFAULT_ROUTE} to {route['GatewayId']}, but nothing there has a public "
            f"address ({consequence}): route it through a NAT gateway",
        )
    target = next((str(value) for key, value in route.items() if key.endswith("Id") and value), "an unknown target")
    return (
        "warn",
        f"{what} {subnet_id} routes {DEFAULT_ROUTE} to {target}: check that it reaches nvcr.io, the add-ons' "
        "registries and the charts' repositories",
    )
