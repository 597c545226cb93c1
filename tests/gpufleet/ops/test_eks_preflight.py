"""gpufleet preflight on an eks environment: EKS's version, quotas, control-plane subnets, VPC DNS and egress.

EC2 (subnets, route tables, VPC attributes, AZs) runs against moto; EKS, Service Quotas and CloudFormation are
answered by operation name (tests/answering.py: parameters and answers checked against botocore's model), because
moto 5.2.5 has no DescribeClusterVersions and no eks quotas.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpufleet.environment import Environment
from gpufleet.loading import load_environment
from gpufleet.ops import eks_preflight
from tests.answering import answering_client, client_error
from tests.gpufleet.environment_files import VALID_EKS, changed, write

NOW = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
REGION = "us-east-1"
# Control-plane subnets for the checks that do not read them.
CONTROL_PLANE_IDS = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]


def eks_env(tmp_path: Path, changes: dict[str, object] | None = None) -> Environment:
    return load_environment(write(tmp_path, changed(changes or {}, VALID_EKS)))


def existing_vpc_env(tmp_path: Path, vpc_id: str, node_subnet: str, control_plane: list[str]) -> Environment:
    return eks_env(
        tmp_path,
        {
            "network": {"vpc_id": vpc_id, "subnet_id": node_subnet},
            "eks.control_plane_availability_zones": None,
            "eks.control_plane_subnet_ids": control_plane,
        },
    )


def eks_client(versions: list[dict[str, Any]], clusters: list[str] | None = None) -> tuple[Any, list]:
    return answering_client(
        "eks",
        {
            "DescribeClusterVersions": lambda params: {"clusterVersions": versions},
            "ListClusters": lambda params: {"clusters": clusters or []},
        },
        region_name=REGION,
    )


def quotas_client(values: dict[str, float]) -> Any:
    def quota(params: dict[str, Any]) -> dict[str, Any]:
        code = params["QuotaCode"]
        return {"Quota": {"ServiceCode": "eks", "QuotaCode": code, "Value": values[code]}}

    return answering_client("service-quotas", {"GetServiceQuota": quota}, region_name=REGION)[0]


def stack_client(cluster: str | None) -> Any:
    def resources(params: dict[str, Any]) -> dict[str, Any]:
        if cluster is None:
            return client_error("ValidationError", f"Stack with id {params['StackName']} does not exist")
        summary = {
            "LogicalResourceId": "Cluster9EE0221C",
            "PhysicalResourceId": cluster,
            "ResourceType": "AWS::EKS::Cluster",
            "LastUpdatedTimestamp": NOW,
            "ResourceStatus": "CREATE_COMPLETE",
        }
        return {"StackResourceSummaries": [summary]}

    return answering_client("cloudformation", {"ListStackResources": resources}, region_name=REGION)[0]


def version(status: str) -> dict[str, Any]:
    return {
        "clusterVersion": "1.35",
        "versionStatus": status,
        "endOfStandardSupportDate": dt.datetime(2027, 3, 27, tzinfo=dt.UTC),
        "endOfExtendedSupportDate": dt.datetime(2028, 3, 27, tzinfo=dt.UTC),
    }


def test_a_version_in_standard_support_passes_with_its_end(tmp_path) -> None:
    eks, calls = eks_client([version("STANDARD_SUPPORT")])
    check = eks_preflight.check_kubernetes_version(eks, eks_env(tmp_path), NOW)
    assert (check.status, check.detail) == (
        "pass",
        "Kubernetes 1.35 is in standard support in us-east-1 until 2027-03-27",
    )
    assert calls == [("DescribeClusterVersions", {"clusterVersions": ["1.35"], "includeAll": True})]


def test_a_version_in_extended_support_warns_of_the_cost(tmp_path) -> None:
    eks, _ = eks_client([version("EXTENDED_SUPPORT")])
    check = eks_preflight.check_kubernetes_version(eks, eks_env(tmp_path), NOW)
    assert (check.status, check.detail) == (
        "warn",
        "Kubernetes 1.35 is in extended support in us-east-1 (until 2028-03-27): EKS charges more per cluster hour; "
        "plan the upgrade to a version a newer gpufleet pins",
    )


@pytest.mark.parametrize(
    ("versions", "detail"),
    [
        (
            [],
            "EKS in us-east-1 does not offer Kubernetes 1.35: a gpufleet release that pins a newer version is needed "
            "(gpufleet.constants.EKS_KUBERNETES_VERSIONS)",
        ),
        ([version("UNSUPPORTED")], "EKS lists Kubernetes 1.35 in us-east-1 as UNSUPPORTED"),
    ],
)
def test_a_version_no_longer_offered_fails(tmp_path, versions: list[dict[str, Any]], detail: str) -> None:
    eks, _ = eks_client(versions)
    check = eks_preflight.check_kubernetes_version(eks, eks_env(tmp_path), NOW)
    assert (check.status, check.detail) == ("fail", detail)


def test_a_caller_without_eks_access_gets_a_warn(tmp_path) -> None:
    eks, _ = answering_client(
        "eks",
        {"DescribeClusterVersions": lambda params: client_error("AccessDeniedException", "not allowed", 403)},
        region_name=REGION,
    )
    check = eks_preflight.check_kubernetes_version(eks, eks_env(tmp_path), NOW)
    assert (check.status, check.detail) == (
        "warn",
        "could not check: DescribeClusterVersions AccessDeniedException: not allowed",
    )


def test_the_cluster_quota_counts_the_new_cluster(tmp_path) -> None:
    eks, _ = eks_client([], clusters=["a", "b"])
    quotas = quotas_client({"L-1194D53C": 3})
    check = eks_preflight.check_cluster_quota(eks, quotas, stack_client(None), eks_env(tmp_path))
    assert (check.status, check.detail) == ("pass", "Clusters (L-1194D53C): quota 3; 2 in us-east-1 + 1 new = 3")


def test_a_full_cluster_quota_fails(tmp_path) -> None:
    eks, _ = eks_client([], clusters=["a", "b", "c"])
    quotas = quotas_client({"L-1194D53C": 3})
    check = eks_preflight.check_cluster_quota(eks, quotas, stack_client(None), eks_env(tmp_path))
    assert (check.status, check.detail) == (
        "fail",
        "Clusters (L-1194D53C): quota 3; 3 in us-east-1 + 1 new = 4: request an increase in the Service Quotas "
        "console, or delete a cluster",
    )


def test_a_deployed_environment_needs_no_new_cluster(tmp_path) -> None:
    eks, _ = eks_client([], clusters=["a", "b", "Cluster-lab"])
    check = eks_preflight.check_cluster_quota(
        eks, quotas_client({"L-1194D53C": 3}), stack_client("Cluster-lab"), eks_env(tmp_path)
    )
    assert (check.status, check.detail) == ("pass", "Clusters (L-1194D53C): quota 3; 3 in us-east-1 + 0 new = 3")


@pytest.mark.parametrize(
    ("capacity", "limit", "status", "needed"),
    [({"capacity.on_demand": 1}, 3, "pass", 3), ({"capacity.on_demand": 2}, 2, "pass", 2), ({}, 2, "fail", 3)],
)
def test_the_node_group_quota_counts_system_and_gpu_groups(tmp_path, capacity, limit, status, needed) -> None:
    env = eks_env(tmp_path, {"capacity.target": 2, **capacity})
    check = eks_preflight.check_node_group_quota(quotas_client({"L-6D54EA21": limit}), env)
    assert check.status == status
    assert check.detail.startswith(
        f"Managed node groups per cluster (L-6D54EA21): quota {limit}; the cluster needs {needed} "
    )


@pytest.fixture
def ec2(moto: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


def subnet(ec2: Any, vpc_id: str, cidr: str, zone: str) -> str:
    return ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]


@pytest.fixture
def vpc(ec2: Any) -> str:
    return ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]


def test_control_plane_subnets_in_two_zones_pass(tmp_path, ec2, vpc) -> None:
    ids = [subnet(ec2, vpc, "10.40.250.0/28", "us-east-1a"), subnet(ec2, vpc, "10.40.250.16/28", "us-east-1b")]
    env = existing_vpc_env(tmp_path, vpc, subnet(ec2, vpc, "10.40.0.0/20", "us-east-1a"), ids)
    check = eks_preflight.check_control_plane_subnets(ec2, env)
    # A /28 has 11 free addresses (AWS keeps five): fewer than EKS's recommended 16.
    assert (check.status, check.detail) == (
        "warn",
        f"2 control-plane subnets in us-east-1a, us-east-1b; {ids[0]} has 11 free addresses (EKS recommends 16: an "
        f"upgrade makes new interfaces); {ids[1]} has 11 free addresses (EKS recommends 16: an upgrade makes new "
        "interfaces)",
    )


def test_control_plane_subnets_in_one_zone_fail(tmp_path, ec2, vpc) -> None:
    ids = [subnet(ec2, vpc, "10.40.248.0/24", "us-east-1a"), subnet(ec2, vpc, "10.40.249.0/24", "us-east-1a")]
    env = existing_vpc_env(tmp_path, vpc, subnet(ec2, vpc, "10.40.0.0/20", "us-east-1a"), ids)
    check = eks_preflight.check_control_plane_subnets(ec2, env)
    assert (check.status, check.detail) == (
        "fail",
        "eks.control_plane_subnet_ids are all in us-east-1a: EKS needs subnets in at least 2 availability zones",
    )


def test_a_control_plane_subnet_of_another_vpc_fails(tmp_path, ec2, vpc) -> None:
    other = ec2.create_vpc(CidrBlock="10.41.0.0/16")["Vpc"]["VpcId"]
    ids = [subnet(ec2, vpc, "10.40.248.0/24", "us-east-1a"), subnet(ec2, other, "10.41.249.0/24", "us-east-1b")]
    env = existing_vpc_env(tmp_path, vpc, subnet(ec2, vpc, "10.40.0.0/20", "us-east-1a"), ids)
    check = eks_preflight.check_control_plane_subnets(ec2, env)
    assert (check.status, check.detail) == ("fail", f"{ids[1]} is in {other}, not network.vpc_id {vpc}")


def test_a_missing_control_plane_subnet_fails(tmp_path, ec2, vpc) -> None:
    node = subnet(ec2, vpc, "10.40.0.0/20", "us-east-1a")
    env = existing_vpc_env(tmp_path, vpc, node, ["subnet-0123456789abcdef0", node])
    check = eks_preflight.check_control_plane_subnets(ec2, env)
    assert check.status == "fail"
    # EC2's own message follows (moto 5.2.5 names some other id in it than the missing one).
    assert check.detail.startswith("eks.control_plane_subnet_ids: The subnet ID ")
    assert check.detail.endswith("does not exist")


def test_a_new_vpc_in_a_zone_eks_refuses_fails(tmp_path, ec2) -> None:
    zones = {zone["ZoneId"]: zone["ZoneName"] for zone in ec2.describe_availability_zones()["AvailabilityZones"]}
    refused = zones["use1-az3"]
    accepted = next(name for zone_id, name in zones.items() if zone_id != "use1-az3")
    env = eks_env(tmp_path, {"eks.control_plane_availability_zones": [accepted, refused]})
    check = eks_preflight.check_control_plane_subnets(ec2, env)
    assert (check.status, check.detail) == (
        "fail",
        f"eks.control_plane_availability_zones: {refused} is use1-az3 in this account, where EKS places no control "
        "plane: name another AZ",
    )


def test_an_existing_vpc_without_dns_hostnames_fails(tmp_path, ec2, vpc) -> None:
    node = subnet(ec2, vpc, "10.40.0.0/20", "us-east-1a")
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": False})
    check = eks_preflight.check_vpc_dns(ec2, existing_vpc_env(tmp_path, vpc, node, CONTROL_PLANE_IDS))
    assert (check.status, check.detail) == (
        "fail",
        f"{vpc} has enableDnsHostnames off, so nodes cannot register with the cluster: turn them on with "
        f"aws ec2 modify-vpc-attribute --vpc-id {vpc} --enable-dns-hostnames",
    )


def test_an_existing_vpc_with_dns_passes(tmp_path, ec2, vpc) -> None:
    node = subnet(ec2, vpc, "10.40.0.0/20", "us-east-1a")
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    check = eks_preflight.check_vpc_dns(ec2, existing_vpc_env(tmp_path, vpc, node, CONTROL_PLANE_IDS))
    assert (check.status, check.detail) == ("pass", f"{vpc} resolves names and gives hostnames")


def route_table(ec2: Any, vpc: str, node: str, **target: str) -> None:
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=node)
    if target:
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", **target)


def nat_gateway(ec2: Any, vpc: str) -> str:
    public = subnet(ec2, vpc, "10.40.16.0/24", "us-east-1a")
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    return ec2.create_nat_gateway(SubnetId=public, AllocationId=allocation)["NatGateway"]["NatGatewayId"]


@pytest.fixture
def routed(ec2: Any, vpc: str) -> dict[str, str]:
    """A node subnet and two control-plane subnets, each with a route table of its own whose default route goes to
    one NAT gateway; a test changes the route it is about."""
    nat = nat_gateway(ec2, vpc)
    subnets = {
        "node": subnet(ec2, vpc, "10.40.0.0/20", "us-east-1a"),
        "cp1": subnet(ec2, vpc, "10.40.250.0/28", "us-east-1a"),
        "cp2": subnet(ec2, vpc, "10.40.250.16/28", "us-east-1b"),
    }
    for subnet_id in subnets.values():
        route_table(ec2, vpc, subnet_id, NatGatewayId=nat)
    return {**subnets, "nat": nat}


def egress(tmp_path: Path, ec2: Any, vpc: str, routed: dict[str, str]):
    env = existing_vpc_env(tmp_path, vpc, routed["node"], [routed["cp1"], routed["cp2"]])
    return eks_preflight.check_egress(ec2, env)


def default_route_to(ec2: Any, subnet_id: str, **target: str) -> None:
    """Replace SUBNET_ID's default route (its own table's) by one to TARGET, or by none."""
    (table,) = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet_id]}])[
        "RouteTables"
    ]
    ec2.delete_route(RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0")
    if target:
        ec2.create_route(RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0", **target)


def test_the_node_and_control_plane_subnets_behind_a_nat_gateway_have_egress(tmp_path, ec2, vpc, routed) -> None:
    check = egress(tmp_path, ec2, vpc, routed)
    nat = routed["nat"]
    assert (check.status, check.detail) == (
        "pass",
        f"the node subnet {routed['node']} reaches the internet through {nat}; the control-plane subnet "
        f"{routed['cp1']} reaches the internet through {nat}; the control-plane subnet {routed['cp2']} reaches the "
        f"internet through {nat}",
    )


def test_a_node_subnet_without_a_default_route_fails(tmp_path, ec2, vpc, routed) -> None:
    default_route_to(ec2, routed["node"])
    check = egress(tmp_path, ec2, vpc, routed)
    assert check.status == "fail"
    assert check.detail.startswith(
        f"the node subnet {routed['node']} has no route to 0.0.0.0/0: the nodes cannot pull the device plugins' images "
        "(nvcr.io) or the jobs'; add a NAT gateway route; "
    )


def test_a_control_plane_subnet_without_a_default_route_fails(tmp_path, ec2, vpc, routed) -> None:
    """Issue 30: the check looked at the node subnet only, where the kubectl handler does not run."""
    default_route_to(ec2, routed["cp2"])
    check = egress(tmp_path, ec2, vpc, routed)
    assert check.status == "fail"
    assert check.detail.endswith(
        f"the control-plane subnet {routed['cp2']} has no route to 0.0.0.0/0: the kubectl handler, which aws-cdk-lib "
        "runs there, cannot fetch the add-ons' charts nor answer CloudFormation; add a NAT gateway route"
    )


def test_a_control_plane_subnet_on_the_vpcs_main_table_is_judged_by_it(tmp_path, ec2, vpc, routed) -> None:
    """A subnet with no table of its own uses the VPC's main one, which here has only the local route."""
    lonely = subnet(ec2, vpc, "10.40.250.32/28", "us-east-1b")
    env = existing_vpc_env(tmp_path, vpc, routed["node"], [routed["cp1"], lonely])
    check = eks_preflight.check_egress(ec2, env)
    assert check.status == "fail"
    assert f"the control-plane subnet {lonely} has no route to 0.0.0.0/0" in check.detail


def test_a_node_subnet_routed_to_an_internet_gateway_fails(tmp_path, ec2, vpc, routed) -> None:
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    default_route_to(ec2, routed["node"], GatewayId=gateway)
    check = egress(tmp_path, ec2, vpc, routed)
    assert check.status == "fail"
    assert check.detail.startswith(f"the node subnet {routed['node']} routes 0.0.0.0/0 to {gateway}, but nothing")


def test_a_control_plane_subnet_routed_to_an_internet_gateway_fails(tmp_path, ec2, vpc, routed) -> None:
    """A Lambda function in a VPC has no public address: an internet gateway route is no way out for it."""
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    default_route_to(ec2, routed["cp1"], GatewayId=gateway)
    check = egress(tmp_path, ec2, vpc, routed)
    assert check.status == "fail"
    assert f"the control-plane subnet {routed['cp1']} routes 0.0.0.0/0 to {gateway}, but nothing there" in check.detail


def test_a_control_plane_subnet_routed_elsewhere_warns(tmp_path, ec2, vpc, routed) -> None:
    """A transit gateway or a firewall may lead out or not: only a person can tell."""
    peer = ec2.create_vpc(CidrBlock="10.60.0.0/16")["Vpc"]["VpcId"]
    peering = ec2.create_vpc_peering_connection(VpcId=vpc, PeerVpcId=peer)["VpcPeeringConnection"]
    default_route_to(ec2, routed["cp1"], VpcPeeringConnectionId=peering["VpcPeeringConnectionId"])
    check = egress(tmp_path, ec2, vpc, routed)
    assert check.status == "warn"
    assert (
        f"the control-plane subnet {routed['cp1']} routes 0.0.0.0/0 to {peering['VpcPeeringConnectionId']}: check"
        in check.detail
    )


def test_a_new_vpc_has_its_nat_gateway(tmp_path) -> None:
    """No EC2 call for a new VPC (passing None as the client proves it)."""
    check = eks_preflight.check_egress(None, eks_env(tmp_path))
    assert (check.status, check.detail) == (
        "pass",
        "the network stack's NAT gateway (network.nat_gateway), the route of the node subnet and of the control-plane "
        "subnets",
    )
