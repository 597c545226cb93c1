"""The network of an existing VPC for gpufleet.reachability.rules, from EC2's answers (botocore 1.44.5's ec2 model:
DescribeVpcs, DescribeVpcAttribute, DescribeInternetGateways, DescribeSubnets, DescribeRouteTables,
DescribeNatGateways, DescribeVpcEndpoints, DescribeSecurityGroups). Pure: the answers in, the Network out; gpufleet
preflight makes the calls (gpufleet/ops/reachability_preflight.py).

Only what works now counts: a route whose State is "blackhole" ("the route's target isn't available", the model's
Route State), a NAT gateway not "available", an endpoint not "available" (VpcEndpoint State) and an internet gateway
not "available" on the VPC (its attachment's State) lead nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.reachability.rules import (
    GatewayEndpoint,
    InterfaceEndpoint,
    NatGateway,
    Network,
    Route,
    RouteTable,
    Rule,
    SecurityGroup,
    Subnet,
    Vpc,
)

AVAILABLE = "available"
BLACKHOLE = "blackhole"
ENDPOINT_SERVICE_PREFIX = "com.amazonaws."
# A route's target keys (the model's Route shape) other than a NAT or internet gateway: not followed.
OTHER_TARGETS = (
    "TransitGatewayId",
    "VpcPeeringConnectionId",
    "NetworkInterfaceId",
    "InstanceId",
    "EgressOnlyInternetGatewayId",
    "CarrierGatewayId",
    "LocalGatewayId",
    "CoreNetworkArn",
)


@dataclass(frozen=True)
class DescribedVpc:
    """EC2's answers about one VPC: lists of the items each Describe call returns (Vpcs, InternetGateways, Subnets,
    RouteTables, NatGateways, VpcEndpoints, SecurityGroups), and the VPC's two DNS attributes."""

    region: str
    vpc_id: str
    dns_support: bool
    dns_hostnames: bool
    internet_gateways: list[dict]
    subnets: list[dict]
    route_tables: list[dict]
    nat_gateways: list[dict]
    endpoints: list[dict]
    security_groups: list[dict]


def described_network(described: DescribedVpc) -> Network:
    network = Network()
    vpc_id = described.vpc_id
    gateways = frozenset(
        gateway["InternetGatewayId"]
        for gateway in described.internet_gateways
        if any(
            attachment.get("VpcId") == vpc_id and attachment.get("State") == AVAILABLE
            for attachment in gateway.get("Attachments", [])
        )
    )
    network.vpcs[vpc_id] = Vpc(
        id=vpc_id,
        dns_support=described.dns_support,
        dns_hostnames=described.dns_hostnames,
        internet_gateways=gateways,
    )
    associations: dict[str, str] = {}
    main_table = None
    for table in described.route_tables:
        for association in table.get("Associations", []):
            if association.get("Main"):
                main_table = table["RouteTableId"]
            elif association.get("SubnetId"):
                associations[association["SubnetId"]] = table["RouteTableId"]
        network.route_tables[table["RouteTableId"]] = RouteTable(
            id=table["RouteTableId"],
            routes=tuple(
                _route(route)
                for route in table.get("Routes", [])
                if route.get("State") != BLACKHOLE and "DestinationCidrBlock" in route
            ),
        )
    for subnet in described.subnets:
        # A subnet with no table of its own uses the VPC's main route table (awsdocs/amazon-vpc-user-guide
        # doc_source/VPC_Route_Tables.md at a16ab76, "Main route table").
        network.subnets[subnet["SubnetId"]] = Subnet(
            id=subnet["SubnetId"],
            vpc=subnet["VpcId"],
            cidr=subnet["CidrBlock"],
            route_table=associations.get(subnet["SubnetId"], main_table or f"{vpc_id}'s main route table"),
            public_ip_on_launch=bool(subnet.get("MapPublicIpOnLaunch", False)),
        )
    for nat in described.nat_gateways:
        if nat.get("State") == AVAILABLE:
            network.nat_gateways[nat["NatGatewayId"]] = NatGateway(
                id=nat["NatGatewayId"], subnet=nat["SubnetId"], public=nat.get("ConnectivityType", "public") == "public"
            )
    prefix = f"{ENDPOINT_SERVICE_PREFIX}{described.region}."
    for endpoint in described.endpoints:
        service_name = endpoint.get("ServiceName", "")
        if endpoint.get("State", "").lower() != AVAILABLE or not service_name.startswith(prefix):
            continue
        service = service_name.removeprefix(prefix)
        if endpoint.get("VpcEndpointType") == "Gateway":
            network.gateway_endpoints.append(
                GatewayEndpoint(
                    endpoint["VpcEndpointId"], endpoint["VpcId"], service, frozenset(endpoint.get("RouteTableIds", []))
                )
            )
        elif endpoint.get("VpcEndpointType") == "Interface":
            network.interface_endpoints.append(
                InterfaceEndpoint(
                    id=endpoint["VpcEndpointId"],
                    vpc=endpoint["VpcId"],
                    service=service,
                    subnets=tuple(endpoint.get("SubnetIds", [])),
                    private_dns=bool(endpoint.get("PrivateDnsEnabled", False)),
                    security_groups=tuple(group["GroupId"] for group in endpoint.get("Groups", [])),
                )
            )
    for group in described.security_groups:
        network.security_groups[group["GroupId"]] = SecurityGroup(
            id=group["GroupId"],
            ingress=tuple(rule for permission in group.get("IpPermissions", []) for rule in _rules(permission)),
            egress=tuple(rule for permission in group.get("IpPermissionsEgress", []) for rule in _rules(permission)),
        )
    return network


def _route(route: dict) -> Route:
    destination = route["DestinationCidrBlock"]
    if route.get("NatGatewayId"):
        return Route(destination, "nat", route["NatGatewayId"])
    gateway = route.get("GatewayId", "")
    if gateway.startswith("igw-"):
        return Route(destination, "igw", gateway)
    target = gateway or next((str(route[key]) for key in OTHER_TARGETS if route.get(key)), "an unknown target")
    return Route(destination, "other", target)


def _rules(permission: dict) -> list[Rule]:
    """One rule per peer of an IpPermission (its IpRanges, UserIdGroupPairs and PrefixListIds; IPv6 ranges are not
    modelled)."""
    protocol = str(permission.get("IpProtocol", "")).lower()
    ports = {"from_port": permission.get("FromPort"), "to_port": permission.get("ToPort")}
    return (
        [Rule(protocol, cidr=item["CidrIp"], **ports) for item in permission.get("IpRanges", [])]
        + [Rule(protocol, group=item["GroupId"], **ports) for item in permission.get("UserIdGroupPairs", [])]
        + [Rule(protocol, prefix_list=item["PrefixListId"], **ports) for item in permission.get("PrefixListIds", [])]
    )
