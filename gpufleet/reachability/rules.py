"""The rules: can a caller reach a destination from a subnet it may run in. Data in (a Network and its Callers, made
from a synthesized cloud assembly by gpufleet.reachability.templates or from an existing VPC's described resources
by gpufleet.ops.reachability_preflight), problems out: one line per caller, destination and subnet that has no way
there, and one line per caller this check cannot see all of ("not checked here").

A destination is reached by the first of these ways that works (each rule's source is beside the code that asks it):
- a gateway endpoint of the service (s3, dynamodb) on the route table of the caller's subnet;
- an interface endpoint of the service in the caller's VPC, with private DNS, whose security groups admit HTTPS from
  the caller;
- a default route (0.0.0.0/0) to a public NAT gateway whose own subnet routes to an internet gateway, or to an
  internet gateway when the caller has a public address;
and, for every way, the caller's security groups allowing HTTPS out to where it leads.

AWS services speak HTTPS on port 443 at their endpoints (https://<service>.<region>.amazonaws.com: botocore 1.44.5
data/endpoints.json, "defaults" hostname and "protocols" ["https"]); so does every outside host a caller declares
(https://HOST). Network ACLs are not modelled: gpufleet creates none, and the default network ACL "allows all
inbound and outbound IPv4 traffic" (awsdocs/amazon-vpc-user-guide doc_source/vpc-network-acls.md at a16ab76); an
existing VPC's own ACLs are not checked.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from gpufleet.reachability.destinations import S3_GLOBAL, destination_problem, is_outside

HTTPS_PORT = 443
ANYWHERE = "0.0.0.0/0"
# Protocol values of a security group rule: "-1" (or "all") is every protocol, "tcp" or its number 6 is TCP (botocore
# 1.44.5 ec2 model, IpPermission IpProtocol: "Use -1 to specify all protocols").
ALL_PROTOCOLS = frozenset({"-1", "all"})
TCP = frozenset({"tcp", "6"})
# S3 and DynamoDB are the services with gateway endpoints ("Gateway endpoints provide reliable connectivity to Amazon
# S3 and DynamoDB", https://docs.aws.amazon.com/vpc/latest/privatelink/gateway-endpoints.html).
GATEWAY_SERVICES = frozenset({"s3", "dynamodb"})
# S3 without a region goes to the legacy global endpoint s3.amazonaws.com, and "Requests made with the legacy global
# endpoint go to the US East (N. Virginia) Region by default" (S3 user guide, VirtualHosting.html, "Legacy global
# endpoint"; awsdocs/amazon-s3-userguide doc_source/VirtualHosting.md). A gateway endpoint "is available only in the
# Region where you created it" (https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html,
# "Considerations"), so only a VPC in us-east-1 reaches the global endpoint through its S3 gateway endpoint.
# Unconfirmed: that s3.amazonaws.com's addresses lie in us-east-1's S3 prefix list, which the gateway endpoint's route
# names; AWS does not say so in these words. An S3 interface endpoint's private DNS names the regional hostnames
# (s3.REGION.amazonaws.com, CreateVpcEndpoint PrivateDnsEnabled in botocore 1.44.5's ec2 model: "the default public
# DNS name for the service for the Region"), so it never serves the global one.
GLOBAL_S3_REGION = "us-east-1"


class NotChecked(Exception):
    """What the network model does not hold (a subnet, route table or security group outside the assembly), so this
    check cannot decide; the caller is reported as not checked here."""


@dataclass(frozen=True)
class Rule:
    """One security group rule: a protocol and port range, and one peer (a CIDR, a security group or a prefix
    list)."""

    protocol: str
    from_port: int | None = None
    to_port: int | None = None
    cidr: str | None = None
    group: str | None = None
    prefix_list: str | None = None

    def carries_https(self) -> bool:
        if self.protocol in ALL_PROTOCOLS:
            return True
        if self.protocol not in TCP:
            return False
        # A TCP rule without ports covers them all (botocore 1.44.5 ec2 model, IpPermission FromPort/ToPort are
        # optional; CloudFormation writes both for TCP).
        low = self.from_port if self.from_port is not None else 0
        high = self.to_port if self.to_port is not None else 65535
        return low <= HTTPS_PORT <= high


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    ingress: tuple[Rule, ...] = ()
    egress: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Route:
    """A route of a route table: DESTINATION (a CIDR) to a target, KIND "nat" (a NAT gateway), "igw" (an internet
    gateway) or "other" (a transit gateway, a peering, an instance...: not followed here)."""

    destination: str
    kind: str
    target: str


@dataclass(frozen=True)
class RouteTable:
    id: str
    routes: tuple[Route, ...] = ()


@dataclass(frozen=True)
class Subnet:
    id: str
    vpc: str
    cidr: str
    route_table: str
    public_ip_on_launch: bool = False


@dataclass(frozen=True)
class NatGateway:
    id: str
    subnet: str
    public: bool = True


@dataclass(frozen=True)
class Vpc:
    id: str
    dns_support: bool = True
    dns_hostnames: bool = False
    internet_gateways: frozenset[str] = frozenset()


@dataclass(frozen=True)
class GatewayEndpoint:
    id: str
    vpc: str
    service: str
    route_tables: frozenset[str]


@dataclass(frozen=True)
class InterfaceEndpoint:
    id: str
    vpc: str
    service: str
    subnets: tuple[str, ...]
    private_dns: bool
    security_groups: tuple[str, ...]


@dataclass
class Network:
    """Everything the rules read, by id. NAMES: how to print an id (a template's logical id and stack)."""

    vpcs: dict[str, Vpc] = field(default_factory=dict)
    subnets: dict[str, Subnet] = field(default_factory=dict)
    route_tables: dict[str, RouteTable] = field(default_factory=dict)
    nat_gateways: dict[str, NatGateway] = field(default_factory=dict)
    security_groups: dict[str, SecurityGroup] = field(default_factory=dict)
    gateway_endpoints: list[GatewayEndpoint] = field(default_factory=list)
    interface_endpoints: list[InterfaceEndpoint] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)

    def name(self, resource_id: str) -> str:
        return self.names.get(resource_id, resource_id)

    def subnet(self, subnet_id: str) -> Subnet:
        if subnet_id not in self.subnets:
            raise NotChecked(f"its subnet {self.name(subnet_id)} is not described here")
        return self.subnets[subnet_id]

    def route_table(self, subnet: Subnet) -> RouteTable:
        if subnet.route_table not in self.route_tables:
            raise NotChecked(f"the route table {self.name(subnet.route_table)} is not described here")
        return self.route_tables[subnet.route_table]

    def vpc(self, vpc_id: str) -> Vpc:
        if vpc_id not in self.vpcs:
            raise NotChecked(f"the VPC {self.name(vpc_id)} is not described here")
        return self.vpcs[vpc_id]

    def group(self, group_id: str) -> SecurityGroup:
        if group_id not in self.security_groups:
            raise NotChecked(f"the security group {self.name(group_id)} is not described here")
        return self.security_groups[group_id]


@dataclass(frozen=True)
class Caller:
    """What runs code in a VPC. NAME: how lines name it. REGION: empty when unknown. PUBLIC_IP: whether it has a
    public IPv4 address; None when the subnet decides (MapPublicIpOnLaunch). DESTINATIONS: what its code calls; None
    when nothing declares it. UNCHECKED: why the check cannot see where it runs, when it cannot."""

    name: str
    region: str
    subnets: tuple[str, ...]
    security_groups: tuple[str, ...]
    public_ip: bool | None
    destinations: tuple[str, ...] | None
    unchecked: str | None = None


@dataclass(frozen=True)
class Findings:
    problems: list[str]
    not_checked: list[str]


def check(network: Network, callers: Iterable[Caller]) -> Findings:
    """Every caller, every destination, every subnet: the lines of what cannot be reached, and of what could not be
    checked. A caller without declarations is a problem of its own, so that nothing in a VPC goes unasked."""
    problems: list[str] = []
    not_checked: list[str] = []
    for caller in callers:
        if caller.destinations is None:
            problems.append(
                f"{caller.name} runs in a VPC but declares no calls: declare what its code calls with "
                "stacks/constructs/calls.py declare_calls"
            )
            continue
        unknown = [problem for name in caller.destinations if (problem := destination_problem(name))]
        if unknown:
            problems.extend(f"{caller.name} declares an unknown destination: {problem}" for problem in unknown)
            continue
        if caller.unchecked is not None:
            not_checked.append(f"{caller.name}: not checked here ({caller.unchecked}): gpufleet preflight checks it")
            continue
        try:
            problems.extend(_caller_problems(network, caller))
        except NotChecked as unknown:
            not_checked.append(f"{caller.name}: not checked here ({unknown}): gpufleet preflight checks it")
    return Findings(problems, not_checked)


def _caller_problems(network: Network, caller: Caller) -> Iterator[str]:
    groups = [network.group(group_id) for group_id in caller.security_groups]
    for subnet_id in caller.subnets:
        subnet = network.subnet(subnet_id)
        for destination in caller.destinations or ():
            why = _unreachable(network, caller, groups, subnet, destination)
            if why:
                yield f"{caller.name} cannot reach {destination} from {network.name(subnet.id)}: {why}"


def _unreachable(
    network: Network, caller: Caller, groups: list[SecurityGroup], subnet: Subnet, destination: str
) -> str | None:
    """Why no way leads from SUBNET to DESTINATION, or None when one does. The ways are tried in turn and lazily: one
    that works ends the search before a later one could find something it cannot check."""

    def ways() -> Iterator[str | None]:
        if destination == S3_GLOBAL:
            if not caller.region:
                raise NotChecked("its stack names no region, and where S3 without a region leads depends on it")
            if caller.region == GLOBAL_S3_REGION:
                yield _gateway_way(network, groups, subnet, "s3")
            else:
                yield (
                    f"S3 without a region goes to s3.amazonaws.com in {GLOBAL_S3_REGION}, which no endpoint in "
                    f"{caller.region} serves"
                )
        elif not is_outside(destination):
            if destination in GATEWAY_SERVICES:
                yield _gateway_way(network, groups, subnet, destination)
            yield _interface_way(network, groups, subnet, destination)
        yield _internet_way(network, caller, groups, subnet)

    reasons = []
    for reason in ways():
        if reason is None:
            return None
        reasons.append(reason)
    return "; ".join(reasons)


def _gateway_way(network: Network, groups: list[SecurityGroup], subnet: Subnet, service: str) -> str | None:
    """ "Each subnet route table must have a route that sends traffic destined for the service to the gateway endpoint
    using the prefix list for the service" (https://docs.aws.amazon.com/vpc/latest/privatelink/gateway-endpoints.html),
    and "The rules for the security groups for your instances that access Amazon S3 through a gateway endpoint must
    allow traffic to and from Amazon S3", with DNS hostnames and resolution on for the Amazon DNS server
    (https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html, "Considerations")."""
    table = network.route_table(subnet)
    endpoints = [
        endpoint
        for endpoint in network.gateway_endpoints
        if endpoint.service == service and endpoint.vpc == subnet.vpc and table.id in endpoint.route_tables
    ]
    if not endpoints:
        return f"no {service} gateway endpoint on its route table {network.name(table.id)}"
    vpc = network.vpc(subnet.vpc)
    if not (vpc.dns_support and vpc.dns_hostnames):
        return f"the VPC {network.name(vpc.id)} has {_dns_off(vpc)} off"
    # The service's addresses are public: a rule to anywhere, or to a prefix list (the gateway endpoint's own, which
    # is not told apart from others here), lets the traffic out.
    if not _egress(groups, lambda rule: rule.cidr == ANYWHERE or rule.prefix_list is not None):
        return f"its security groups allow no HTTPS out to the {service} gateway endpoint"
    return None


def _interface_way(network: Network, groups: list[SecurityGroup], subnet: Subnet, service: str) -> str | None:
    """An interface endpoint in the VPC. Its private DNS makes "the default public DNS name for the service for the
    Region" resolve to the endpoint's interfaces, and needs the VPC attributes enableDnsHostnames and
    enableDnsSupport (botocore 1.44.5 ec2 model, CreateVpcEndpoint PrivateDnsEnabled); without it the SDKs' default
    hostname resolves to the service's public addresses. "The security group rules control the traffic to the
    endpoint network interface from resources in your VPC"
    (the VPC user guide's interface endpoint page, https://docs.aws.amazon.com/vpc/latest/userguide/vpce-interface.html,
    now the PrivateLink guide's). The endpoint's interfaces
    in one subnet serve every subnet of the VPC (its local route)."""
    endpoints = [
        endpoint
        for endpoint in network.interface_endpoints
        if endpoint.service == service and endpoint.vpc == subnet.vpc
    ]
    if not endpoints:
        return f"no {service} interface endpoint in the VPC {network.name(subnet.vpc)}"
    reasons = []
    for endpoint in endpoints:
        reason = _through_interface_endpoint(network, groups, subnet, endpoint)
        if reason is None:
            return None
        reasons.append(reason)
    return "; ".join(reasons)


def _through_interface_endpoint(
    network: Network, groups: list[SecurityGroup], subnet: Subnet, endpoint: InterfaceEndpoint
) -> str | None:
    name = f"the {endpoint.service} interface endpoint {network.name(endpoint.id)}"
    if not endpoint.private_dns:
        return f"{name} has private DNS off, so the service's hostname does not lead to it"
    vpc = network.vpc(endpoint.vpc)
    if not (vpc.dns_support and vpc.dns_hostnames):
        return f"{name} needs private DNS, and the VPC {network.name(vpc.id)} has {_dns_off(vpc)} off"
    caller_groups = {group.id for group in groups}
    endpoint_groups = [network.group(group_id) for group_id in endpoint.security_groups]
    admitted = any(
        rule.carries_https()
        and ((rule.group is not None and rule.group in caller_groups) or _covers(rule.cidr, subnet.cidr))
        for group in endpoint_groups
        for rule in group.ingress
    )
    if not admitted:
        return f"{name}'s security groups admit no HTTPS from it"
    endpoint_cidrs = [network.subnet(subnet_id).cidr for subnet_id in endpoint.subnets]
    if not _egress(
        groups,
        lambda rule: (
            (rule.group is not None and rule.group in endpoint.security_groups)
            or any(_covers(rule.cidr, cidr) for cidr in endpoint_cidrs)
        ),
    ):
        return f"its security groups allow no HTTPS out to {name}"
    return None


def _internet_way(network: Network, caller: Caller, groups: list[SecurityGroup], subnet: Subnet) -> str | None:
    """Out through the default route. A public NAT gateway sits in a public subnet and sends its traffic on to the
    VPC's internet gateway; an internet gateway serves only an instance with a public IPv4 address ("Ensure that
    instances in your subnet have a public IPv4 address"; awsdocs/amazon-vpc-user-guide doc_source/vpc-nat-gateway.md
    and VPC_Internet_Gateway.md at a16ab76, now https://docs.aws.amazon.com/vpc/latest/userguide/vpc-nat-gateway.html
    and VPC_Internet_Gateway.html). A private NAT gateway's traffic the internet gateway drops (the same page)."""
    table = network.route_table(subnet)
    route = _default_route(table)
    if route is None:
        return f"its route table {network.name(table.id)} has no route to a NAT or internet gateway"
    if route.kind == "nat":
        if route.target not in network.nat_gateways:
            raise NotChecked(f"the NAT gateway {network.name(route.target)} is not described here")
        nat = network.nat_gateways[route.target]
        if not nat.public:
            return f"the NAT gateway {network.name(nat.id)} is private: the internet gateway drops its traffic"
        nat_subnet = network.subnet(nat.subnet)
        nat_route = _default_route(network.route_table(nat_subnet))
        vpc = network.vpc(nat_subnet.vpc)
        if nat_route is None or nat_route.kind != "igw" or nat_route.target not in vpc.internet_gateways:
            return (
                f"the NAT gateway {network.name(nat.id)} is in {network.name(nat_subnet.id)}, which has no route to "
                "the VPC's internet gateway"
            )
    elif route.kind == "igw":
        vpc = network.vpc(subnet.vpc)
        if route.target not in vpc.internet_gateways:
            return f"the internet gateway {network.name(route.target)} is not attached to its VPC"
        public = subnet.public_ip_on_launch if caller.public_ip is None else caller.public_ip
        if not public:
            return (
                f"its route table {network.name(table.id)} leads to the internet gateway {network.name(route.target)}, "
                "and it has no public IPv4 address"
            )
    else:
        raise NotChecked(f"its route table sends {ANYWHERE} to {route.target}, which this check does not follow")
    if not network.vpc(subnet.vpc).dns_support:
        return f"the VPC {network.name(subnet.vpc)} has enableDnsSupport off: no name resolves"
    if not _egress(groups, lambda rule: rule.cidr == ANYWHERE):
        return f"its security groups allow no HTTPS out to {ANYWHERE}"
    return None


def _default_route(table: RouteTable) -> Route | None:
    """The route every address outside the VPC takes when no narrower one matches: 0.0.0.0/0. Routes to narrower
    ranges (a peering, a VPN) are not the way to an AWS service's or a host's public address."""
    return next((route for route in table.routes if route.destination == ANYWHERE), None)


def _egress(groups: list[SecurityGroup], to: Callable[[Rule], bool]) -> bool:
    """Whether any of the caller's security groups has an outbound rule carrying HTTPS to a peer TO accepts.
    Security groups are stateful: the replies need no rule of their own."""
    return any(rule.carries_https() and to(rule) for group in groups for rule in group.egress)


def _covers(cidr: str | None, inner: str) -> bool:
    if cidr is None:
        return False
    try:
        outer_network, inner_network = (
            ipaddress.ip_network(cidr, strict=False),
            ipaddress.ip_network(inner, strict=False),
        )
    except ValueError:
        return False
    return inner_network.version == outer_network.version and inner_network.subnet_of(outer_network)  # type: ignore[arg-type]


def _dns_off(vpc: Vpc) -> str:
    return " and ".join(
        name
        for name, on in (("enableDnsSupport", vpc.dns_support), ("enableDnsHostnames", vpc.dns_hostnames))
        if not on
    )
