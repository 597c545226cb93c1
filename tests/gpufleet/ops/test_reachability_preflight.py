"""gpufleet preflight's reachability check on an environment in an existing VPC, the VPC made in moto: the rules of
gpufleet reachability asked of the described subnets, route tables, NAT gateways, endpoints and security groups.

The VPC (10.40.0.0/16, DNS on): a public subnet routing to the internet gateway and holding a NAT gateway; the node
subnet with a route table of its own (no default route) carrying the S3 gateway endpoint; an interface endpoint for
each other service the nodes call, in the node subnet, with private DNS and a security group admitting HTTPS from
the VPC. Each test plants one fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from gpufleet.catalog import load_catalog
from gpufleet.environment import Environment
from gpufleet.loading import load_environment
from gpufleet.ops.reachability_preflight import check_reachability
from gpufleet.reachability.described import DescribedVpc, described_network
from tests.gpufleet.environment_files import VALID, VALID_EKS, changed, write

REGION = "us-east-1"
INTERFACE_SERVICES = ("ec2", "ec2messages", "logs", "monitoring", "secretsmanager", "ssm", "ssmmessages")


@pytest.fixture
def ec2(moto: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


def endpoint(ec2: Any, vpc: str, service: str, **options: Any) -> str:
    return ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.{service}", **options)[
        "VpcEndpoint"
    ]["VpcEndpointId"]


@pytest.fixture
def network(ec2: Any) -> dict[str, str]:
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.100.0/24", AvailabilityZone="us-east-1a")["Subnet"]
    public_table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=public_table, SubnetId=public["SubnetId"])
    ec2.create_route(RouteTableId=public_table, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=public["SubnetId"], AllocationId=allocation)["NatGateway"]["NatGatewayId"]
    node = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.0.0/20", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=node)
    group = ec2.create_security_group(GroupName="endpoints", Description="endpoints", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "10.40.0.0/16"}]}],
    )
    ids = {"vpc": vpc, "node": node, "table": table, "nat": nat, "group": group, "public": public["SubnetId"]}
    ids["s3"] = endpoint(ec2, vpc, "s3", VpcEndpointType="Gateway", RouteTableIds=[table])
    for service in INTERFACE_SERVICES:
        ids[service] = endpoint(
            ec2,
            vpc,
            service,
            VpcEndpointType="Interface",
            SubnetIds=[node],
            SecurityGroupIds=[group],
            PrivateDnsEnabled=True,
        )
    return ids


def fleet_env(tmp_path: Path, network: dict[str, str]) -> Environment:
    return load_environment(
        write(tmp_path, changed({"network": {"vpc_id": network["vpc"], "subnet_id": network["node"]}}, VALID))
    )


def reachability(ec2: Any, env: Environment):
    return check_reachability(ec2, env, load_catalog()[env.instance_type])


def test_a_node_subnet_with_every_endpoint_passes(tmp_path, ec2, network):
    check = reachability(ec2, fleet_env(tmp_path, network))
    assert (check.status, check.detail) == (
        "pass",
        f"every call of the nodes has a route from {network['node']}",
    )


def test_a_removed_interface_endpoint_fails_naming_the_service_and_subnet(tmp_path, ec2, network):
    ec2.delete_vpc_endpoints(VpcEndpointIds=[network["secretsmanager"]])
    check = reachability(ec2, fleet_env(tmp_path, network))
    assert (check.status, check.detail) == (
        "fail",
        f"the nodes cannot reach secretsmanager from {network['node']}: no secretsmanager interface endpoint in the "
        f"VPC {network['vpc']}; its route table {network['table']} has no route to a NAT or internet gateway",
    )


def test_a_gateway_endpoint_on_another_route_table_fails(tmp_path, ec2, network):
    ec2.delete_vpc_endpoints(VpcEndpointIds=[network["s3"]])
    other = ec2.create_route_table(VpcId=network["vpc"])["RouteTable"]["RouteTableId"]
    endpoint(ec2, network["vpc"], "s3", VpcEndpointType="Gateway", RouteTableIds=[other])
    check = reachability(ec2, fleet_env(tmp_path, network))
    assert (check.status, check.detail) == (
        "fail",
        f"the nodes cannot reach s3 from {network['node']}: no s3 gateway endpoint on its route table "
        f"{network['table']}; no s3 interface endpoint in the VPC {network['vpc']}; its route table {network['table']} "
        "has no route to a NAT or internet gateway",
    )


def test_an_endpoint_security_group_that_blocks_https_fails_for_every_interface_endpoint(tmp_path, ec2, network):
    ec2.revoke_security_group_ingress(
        GroupId=network["group"],
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "10.40.0.0/16"}]}],
    )
    check = reachability(ec2, fleet_env(tmp_path, network))
    assert check.status == "fail"
    assert check.detail.split("; its route table")[0] == (
        f"the nodes cannot reach ec2 from {network['node']}: the ec2 interface endpoint {network['ec2']}'s security "
        "groups admit no HTTPS from it"
    )
    assert check.detail.count("admit no HTTPS from it") == len(INTERFACE_SERVICES)


def test_a_vpc_without_dns_hostnames_fails_private_dns(tmp_path, ec2, network):
    ec2.modify_vpc_attribute(VpcId=network["vpc"], EnableDnsHostnames={"Value": False})
    check = reachability(ec2, fleet_env(tmp_path, network))
    assert check.status == "fail"
    assert (
        f"the nodes cannot reach ssm from {network['node']}: the ssm interface endpoint {network['ssm']} needs private "
        f"DNS, and the VPC {network['vpc']} has enableDnsHostnames off" in check.detail
    )


def test_without_endpoints_a_nat_gateway_route_is_a_way_out(tmp_path, ec2, network):
    ec2.delete_vpc_endpoints(VpcEndpointIds=[network[service] for service in ("s3", *INTERFACE_SERVICES)])
    ec2.create_route(RouteTableId=network["table"], DestinationCidrBlock="0.0.0.0/0", NatGatewayId=network["nat"])
    assert reachability(ec2, fleet_env(tmp_path, network)).status == "pass"


def test_a_route_to_the_internet_gateway_is_no_way_out_for_nodes_without_a_public_address(tmp_path, ec2, network):
    ec2.delete_vpc_endpoints(VpcEndpointIds=[network["ec2"]])
    gateway = ec2.describe_internet_gateways()["InternetGateways"][0]["InternetGatewayId"]
    ec2.create_route(RouteTableId=network["table"], DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    check = reachability(ec2, fleet_env(tmp_path, network))
    assert (check.status, check.detail) == (
        "fail",
        f"the nodes cannot reach ec2 from {network['node']}: no ec2 interface endpoint in the VPC {network['vpc']}; "
        f"its route table {network['table']} leads to the internet gateway {gateway}, and it has no public IPv4 "
        "address",
    )


def test_a_missing_vpc_fails_with_one_line(tmp_path, ec2, network):
    missing = {**network, "vpc": "vpc-0123456789abcdef0"}
    check = reachability(ec2, fleet_env(tmp_path, missing))
    assert (check.status, check.detail) == (
        "fail",
        "network.vpc_id: vpc-0123456789abcdef0 does not exist in us-east-1",
    )


def test_a_new_vpc_is_checked_at_synthesis(tmp_path, ec2):
    env = load_environment(write(tmp_path, VALID))
    check = reachability(ec2, env)
    assert (check.status, check.detail) == (
        "pass",
        "a new VPC: gpufleet reachability checks it at synthesis (make synth)",
    )


def eks_env(tmp_path: Path, network: dict[str, str], control_plane: list[str], **add_ons: bool) -> Environment:
    changes: dict[str, object] = {
        "network": {"vpc_id": network["vpc"], "subnet_id": network["node"]},
        "eks.control_plane_availability_zones": None,
        "eks.control_plane_subnet_ids": control_plane,
    }
    if add_ons:
        changes["eks.add_ons"] = add_ons
    return load_environment(write(tmp_path, changed(changes, VALID_EKS)))


def control_plane_subnets(ec2: Any, network: dict[str, str]) -> list[str]:
    return [
        ec2.create_subnet(VpcId=network["vpc"], CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for cidr, zone in (("10.40.250.0/28", "us-east-1a"), ("10.40.250.16/28", "us-east-1b"))
    ]


def test_on_eks_the_kubectl_handler_must_reach_its_services_from_the_control_plane_subnets(tmp_path, ec2, network):
    """Issue 30's D1 in an existing VPC: control-plane subnets on the VPC's main route table (no route out), no
    endpoint of EKS, Lambda or STS."""
    cp1, cp2 = control_plane_subnets(ec2, network)
    check = reachability(ec2, eks_env(tmp_path, network, [cp1, cp2]))
    assert check.status == "fail"
    main = ec2.describe_route_tables(
        Filters=[{"Name": "vpc-id", "Values": [network["vpc"]]}, {"Name": "association.main", "Values": ["true"]}]
    )["RouteTables"][0]["RouteTableId"]
    no_way_out = f"its route table {main} has no route to a NAT or internet gateway"
    assert check.detail.split("; the kubectl handler")[0] == (
        f"the kubectl handler cannot reach eks from {cp1}: no eks interface endpoint in the VPC {network['vpc']}; "
        + no_way_out
    )
    assert check.detail.count("the kubectl handler cannot reach") == 8  # eks, lambda, s3, sts from each subnet


def test_on_eks_control_plane_subnets_behind_the_nat_gateway_pass(tmp_path, ec2, network):
    subnets = control_plane_subnets(ec2, network)
    table = ec2.create_route_table(VpcId=network["vpc"])["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=network["nat"])
    for subnet in subnets:
        ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
    check = reachability(ec2, eks_env(tmp_path, network, subnets))
    assert (check.status, check.detail) == (
        "pass",
        f"every call of the kubectl handler has a route from {subnets[0]}, {subnets[1]}",
    )


def test_on_eks_without_add_ons_no_kubectl_handler_runs(tmp_path, ec2, network):
    subnets = control_plane_subnets(ec2, network)
    env = eks_env(
        tmp_path,
        network,
        subnets,
        efa_device_plugin=False,
        nvidia_device_plugin=False,
        mpi_operator=False,
        fsx_csi_driver=False,
    )
    check = reachability(ec2, env)
    assert (check.status, check.detail) == ("pass", "no add-on: no kubectl handler runs in the control-plane subnets")


def test_blackhole_routes_and_unavailable_gateways_lead_nowhere():
    """What EC2 answers (botocore's ec2 model shapes) for a route whose NAT gateway was deleted and an internet gateway
    being detached."""
    network = described_network(
        DescribedVpc(
            region=REGION,
            vpc_id="vpc-1",
            dns_support=True,
            dns_hostnames=True,
            internet_gateways=[
                {"InternetGatewayId": "igw-1", "Attachments": [{"VpcId": "vpc-1", "State": "detaching"}]}
            ],
            subnets=[{"SubnetId": "subnet-1", "VpcId": "vpc-1", "CidrBlock": "10.0.0.0/24"}],
            route_tables=[
                {
                    "RouteTableId": "rtb-1",
                    "Associations": [{"SubnetId": "subnet-1"}],
                    "Routes": [
                        {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-1", "State": "blackhole"},
                        {"DestinationCidrBlock": "10.1.0.0/16", "TransitGatewayId": "tgw-1", "State": "active"},
                    ],
                }
            ],
            nat_gateways=[{"NatGatewayId": "nat-1", "SubnetId": "subnet-1", "State": "deleted"}],
            endpoints=[
                {
                    "VpcEndpointId": "vpce-1",
                    "VpcEndpointType": "Gateway",
                    "VpcId": "vpc-1",
                    "ServiceName": f"com.amazonaws.{REGION}.s3",
                    "State": "pendingAcceptance",
                    "RouteTableIds": ["rtb-1"],
                }
            ],
            security_groups=[],
        )
    )
    assert network.vpcs["vpc-1"].internet_gateways == frozenset()
    assert [route.kind for route in network.route_tables["rtb-1"].routes] == ["other"]
    assert network.nat_gateways == {}
    assert network.gateway_endpoints == []
