"""The network and the callers of a cloud assembly's templates, for gpufleet.reachability.rules.

Every template is read together: a value one stack exports and another imports (Fn::ImportValue, how aws-cdk-lib's
strong cross-stack references are written) resolves to the exporting stack's resource. A resource of a template is
known by "STACK/LOGICAL_ID"; an id written literally (an existing VPC's subnet-..., sg-...) stands for itself and is
known only when some template creates it, which it never does: callers there are "not checked here", and gpufleet
preflight checks them against the described network.

The callers are the resources that run code in a VPC:
- a Lambda function with VpcConfig (aws-cdk-lib's provider frameworks and aws-eks-v2's kubectl handler included),
  which never has a public IPv4 address: "Connecting a function to a public subnet doesn't give it internet access or
  a public IP address" (https://docs.aws.amazon.com/lambda/latest/dg/configuration-vpc.html);
- a CodeBuild project with VpcConfig, likewise without one: "CodeBuild does not support assigning elastic IP
  addresses to the network interfaces that it creates" (https://docs.aws.amazon.com/codebuild/latest/userguide/
  vpc-support.html, "Best practices for VPCs");
- a launch template, in the subnets of its primary network interface and of the Spot Fleets, EC2 Fleets and Auto
  Scaling groups that launch it; a launch template placed nowhere in the assembly is no caller;
- an EKS managed node group, in its subnets, calling what it and its launch template declare (its pods call through
  it); the launch template of a node group is no caller of its own. Without security groups in the launch template
  the nodes get the cluster security group ("If you specify custom security groups in the launch template ... Amazon
  EKS doesn't add the cluster security group", awsdocs/amazon-eks-user-guide latest/ug/nodes/launch-templates.adoc at
  4d52b4d0, "Using custom security groups").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufleet.reachability.destinations import CALLS_METADATA_KEY
from gpufleet.reachability.rules import (
    ANYWHERE,
    Caller,
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

# The cluster security group EKS creates: "Inbound All All Self" and "Outbound All All 0.0.0.0/0" (awsdocs/amazon-
# eks-user-guide latest/ug/networking/sec-group-reqs.adoc at 4d52b4d0, "Default cluster security group"); the
# template names it Fn::GetAtt [CLUSTER, ClusterSecurityGroupId].
CLUSTER_SECURITY_GROUP = "ClusterSecurityGroupId"
# A VPC security group without egress rules of its own gets "a default egress rule that allows egress traffic on all
# ports and IP protocols to any location. The default rule is removed only when you specify one or more egress
# rules." (awsdocs/aws-cloudformation-user-guide, AWS::EC2::SecurityGroup, "Remove the default rule";
# https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-ec2-securitygroup.html). That a rule of
# its own resource (AWS::EC2::SecurityGroupEgress) leaves the default rule in place is read from the same sentence
# ("only when you specify" them on the group; unconfirmed otherwise).
DEFAULT_EGRESS = Rule(protocol="-1", cidr=ANYWHERE)
# Defaults of the properties left out (cfn-lint 1.58.0's bundled resource schemas): AWS::EC2::VPC EnableDnsSupport
# "Enabled by default", EnableDnsHostnames "Disabled by default for nondefault VPCs"; AWS::EC2::Subnet
# MapPublicIpOnLaunch "The default value is false"; AWS::EC2::VPCEndpoint VpcEndpointType "Default: Gateway",
# PrivateDnsEnabled "Default: false"; AWS::EC2::NatGateway ConnectivityType "The default is public connectivity".
GATEWAY_ENDPOINT, INTERFACE_ENDPOINT = "Gateway", "Interface"
# A subnet with no route table association of its own uses the VPC's main route table ("When a subnet does not have an
# explicit routing table associated with it, the main routing table is used by default": awsdocs/amazon-vpc-user-guide
# doc_source/VPC_Route_Tables.md at a16ab76), which for a VPC the template creates holds its local route only.
MAIN_ROUTE_TABLE = "#main-route-table"
ENDPOINT_SERVICE_PREFIX = "com.amazonaws."


@dataclass(frozen=True)
class StackTemplate:
    """A stack's template and its region (None for an environment-agnostic stack)."""

    name: str
    region: str | None
    template: dict


@dataclass
class _Reader:
    stacks: dict[str, StackTemplate]
    exports: dict[str, tuple[str, Any]] = field(default_factory=dict)
    network: Network = field(default_factory=Network)

    def __post_init__(self) -> None:
        for stack in self.stacks.values():
            for output in _mapping(stack.template.get("Outputs")).values():
                export = _mapping(_mapping(output).get("Export")).get("Name")
                name = self.resolve(stack.name, export)
                if name is not None:
                    self.exports[name] = (stack.name, _mapping(output).get("Value"))

    def resources(self, stack: str) -> dict[str, dict]:
        return {
            logical_id: resource
            for logical_id, resource in _mapping(self.stacks[stack].template.get("Resources")).items()
            if isinstance(resource, dict)
        }

    def resource(self, identity: str) -> dict:
        """The resource of a "STACK/LOGICAL_ID" identity; {} for an id no template holds."""
        stack, _, logical_id = identity.partition("/")
        return self.resources(stack).get(logical_id, {}) if stack in self.stacks else {}

    def key(self, stack: str, logical_id: str) -> str:
        identity = f"{stack}/{logical_id}"
        self.network.names.setdefault(identity, f"{logical_id} in {stack}")
        return identity

    def resolve(self, stack: str, value: Any) -> str | None:
        """What VALUE, written in STACK, stands for: a resource's identity, a literal, or None when it cannot be told
        (a parameter, an attribute not followed here)."""
        if isinstance(value, str):
            return value
        if not isinstance(value, dict) or len(value) != 1:
            return None
        ((function, argument),) = value.items()
        resources = self.resources(stack)
        if function == "Ref":
            if argument in resources:
                return self.key(stack, argument)
            if argument == "AWS::Region":
                return self.stacks[stack].region
            return None
        if function == "Fn::GetAtt":
            logical_id, attribute = argument.split(".", 1) if isinstance(argument, str) else (argument + [None])[:2]
            if logical_id not in resources:
                return None
            if attribute == CLUSTER_SECURITY_GROUP:
                return self.key(stack, logical_id) + "." + CLUSTER_SECURITY_GROUP
            # The ids of EC2 resources that their other attributes also name (GroupId, RouteTableId, SubnetId...).
            return self.key(stack, logical_id) if str(attribute).endswith("Id") else None
        if function == "Fn::ImportValue":
            name = self.resolve(stack, argument)
            if name is None or name not in self.exports:
                return None
            exporter, exported = self.exports[name]
            return self.resolve(exporter, exported)
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
            separator, parts = argument
            resolved = [self.resolve(stack, part) for part in parts] if isinstance(parts, list) else [None]
            if not isinstance(separator, str) or any(part is None for part in resolved):
                return None
            return separator.join(part for part in resolved if part is not None)
        return None

    def resolve_all(self, stack: str, values: Any) -> list[str | None]:
        return [self.resolve(stack, value) for value in values] if isinstance(values, list) else [None]

    def typed(self, resource_type: str) -> Iterator[tuple[str, str, dict]]:
        """(stack, logical id, properties) of every resource of RESOURCE_TYPE."""
        for stack in self.stacks:
            for logical_id, resource in self.resources(stack).items():
                if resource.get("Type") == resource_type:
                    yield stack, logical_id, _mapping(resource.get("Properties"))


def read_assembly(stacks: list[StackTemplate]) -> tuple[Network, list[Caller]]:
    reader = _Reader({stack.name: stack for stack in stacks})
    _read_network(reader)
    return reader.network, list(_callers(reader))


def _read_network(reader: _Reader) -> None:
    network = reader.network
    gateways: dict[str, set[str]] = {}
    for stack, _, properties in reader.typed("AWS::EC2::VPCGatewayAttachment"):
        vpc, gateway = (
            reader.resolve(stack, properties.get("VpcId")),
            reader.resolve(stack, properties.get("InternetGatewayId")),
        )
        if vpc and gateway:
            gateways.setdefault(vpc, set()).add(gateway)
    for stack, logical_id, properties in reader.typed("AWS::EC2::VPC"):
        vpc = reader.key(stack, logical_id)
        network.vpcs[vpc] = Vpc(
            id=vpc,
            dns_support=_flag(properties.get("EnableDnsSupport"), default=True),
            dns_hostnames=_flag(properties.get("EnableDnsHostnames"), default=False),
            internet_gateways=frozenset(gateways.get(vpc, ())),
        )
        main = vpc + MAIN_ROUTE_TABLE
        network.route_tables[main] = RouteTable(id=main)
        network.names[main] = f"the main route table of {network.name(vpc)}"
    associations = {}
    for stack, _, properties in reader.typed("AWS::EC2::SubnetRouteTableAssociation"):
        subnet, table = (
            reader.resolve(stack, properties.get("SubnetId")),
            reader.resolve(stack, properties.get("RouteTableId")),
        )
        if subnet and table:
            associations[subnet] = table
    for stack, logical_id, properties in reader.typed("AWS::EC2::Subnet"):
        subnet, vpc = reader.key(stack, logical_id), reader.resolve(stack, properties.get("VpcId"))
        cidr = reader.resolve(stack, properties.get("CidrBlock"))
        if vpc is None or cidr is None:
            continue  # not described well enough: its callers are not checked here
        network.subnets[subnet] = Subnet(
            id=subnet,
            vpc=vpc,
            cidr=cidr,
            route_table=associations.get(subnet, vpc + MAIN_ROUTE_TABLE),
            public_ip_on_launch=_flag(properties.get("MapPublicIpOnLaunch"), default=False),
        )
    routes: dict[str, list[Route]] = {}
    internet_gateways = {
        reader.key(stack, logical_id) for stack, logical_id, _ in reader.typed("AWS::EC2::InternetGateway")
    }
    for stack, _, properties in reader.typed("AWS::EC2::Route"):
        table = reader.resolve(stack, properties.get("RouteTableId"))
        destination = properties.get("DestinationCidrBlock")
        if table is None or not isinstance(destination, str):
            continue
        nat = reader.resolve(stack, properties.get("NatGatewayId"))
        gateway = reader.resolve(stack, properties.get("GatewayId"))
        if nat is not None:
            route = Route(destination, "nat", nat)
        elif gateway is not None and (gateway in internet_gateways or gateway.startswith("igw-")):
            route = Route(destination, "igw", gateway)
        else:
            route = Route(destination, "other", gateway or "a target this check does not follow")
        routes.setdefault(table, []).append(route)
    for stack, logical_id, _ in reader.typed("AWS::EC2::RouteTable"):
        table = reader.key(stack, logical_id)
        network.route_tables[table] = RouteTable(id=table, routes=tuple(routes.get(table, ())))
    for stack, logical_id, properties in reader.typed("AWS::EC2::NatGateway"):
        subnet = reader.resolve(stack, properties.get("SubnetId"))
        if subnet is not None:
            nat = reader.key(stack, logical_id)
            network.nat_gateways[nat] = NatGateway(
                id=nat, subnet=subnet, public=properties.get("ConnectivityType", "public") == "public"
            )
    _read_endpoints(reader)
    _read_security_groups(reader)


def _read_endpoints(reader: _Reader) -> None:
    for stack, logical_id, properties in reader.typed("AWS::EC2::VPCEndpoint"):
        vpc = reader.resolve(stack, properties.get("VpcId"))
        service_name = reader.resolve(stack, properties.get("ServiceName"))
        region = reader.stacks[stack].region
        prefix = f"{ENDPOINT_SERVICE_PREFIX}{region}."
        if vpc is None or service_name is None or not service_name.startswith(prefix):
            continue
        endpoint, service = reader.key(stack, logical_id), service_name.removeprefix(prefix)
        kind = properties.get("VpcEndpointType", GATEWAY_ENDPOINT)
        if kind == GATEWAY_ENDPOINT:
            tables = frozenset(t for t in reader.resolve_all(stack, properties.get("RouteTableIds", [])) if t)
            reader.network.gateway_endpoints.append(GatewayEndpoint(endpoint, vpc, service, tables))
        elif kind == INTERFACE_ENDPOINT:
            # Without SecurityGroupIds "we use the default security group for the VPC" (botocore 1.44.5 ec2 model,
            # CreateVpcEndpoint SecurityGroupIds), which no template describes.
            groups = reader.resolve_all(stack, properties.get("SecurityGroupIds", [vpc + "#default-security-group"]))
            subnets = reader.resolve_all(stack, properties.get("SubnetIds", []))
            reader.network.interface_endpoints.append(
                InterfaceEndpoint(
                    id=endpoint,
                    vpc=vpc,
                    service=service,
                    subnets=tuple(s or "an unresolved subnet" for s in subnets),
                    private_dns=_flag(properties.get("PrivateDnsEnabled"), default=False),
                    security_groups=tuple(g or "an unresolved security group" for g in groups),
                )
            )


def _read_security_groups(reader: _Reader) -> None:
    ingress: dict[str, list[Rule]] = {}
    egress: dict[str, list[Rule]] = {}
    inline_egress: set[str] = set()
    groups = []
    for stack, logical_id, properties in reader.typed("AWS::EC2::SecurityGroup"):
        group = reader.key(stack, logical_id)
        groups.append(group)
        for entry in _list(properties.get("SecurityGroupIngress")):
            ingress.setdefault(group, []).append(_rule(reader, stack, entry, "Source"))
        if "SecurityGroupEgress" in properties:
            inline_egress.add(group)
            for entry in _list(properties.get("SecurityGroupEgress")):
                egress.setdefault(group, []).append(_rule(reader, stack, entry, "Destination"))
    for resource_type, rules, peer in (
        ("AWS::EC2::SecurityGroupIngress", ingress, "Source"),
        ("AWS::EC2::SecurityGroupEgress", egress, "Destination"),
    ):
        for stack, _, properties in reader.typed(resource_type):
            target = reader.resolve(stack, properties.get("GroupId"))
            if target is not None:
                rules.setdefault(target, []).append(_rule(reader, stack, properties, peer))
    for group in groups:
        default = () if group in inline_egress else (DEFAULT_EGRESS,)
        reader.network.security_groups[group] = SecurityGroup(
            id=group, ingress=tuple(ingress.get(group, ())), egress=(*default, *egress.get(group, ()))
        )
    for stack, logical_id, _ in reader.typed("AWS::EKS::Cluster"):
        group = reader.key(stack, logical_id) + "." + CLUSTER_SECURITY_GROUP
        reader.network.names[group] = (
            f"the cluster security group of {reader.network.name(reader.key(stack, logical_id))}"
        )
        reader.network.security_groups[group] = SecurityGroup(
            id=group, ingress=(Rule(protocol="-1", group=group),), egress=(Rule(protocol="-1", cidr=ANYWHERE),)
        )


def _rule(reader: _Reader, stack: str, entry: Any, peer: str) -> Rule:
    entry = _mapping(entry)
    return Rule(
        protocol=str(entry.get("IpProtocol", "")).lower(),
        from_port=_port(entry.get("FromPort")),
        to_port=_port(entry.get("ToPort")),
        cidr=entry.get("CidrIp") if isinstance(entry.get("CidrIp"), str) else None,
        group=reader.resolve(stack, entry.get(f"{peer}SecurityGroupId")),
        prefix_list=reader.resolve(stack, entry.get(f"{peer}PrefixListId")),
    )


@dataclass(frozen=True)
class _Placement:
    subnets: list[str | None]
    groups: list[str | None]
    public_ip: bool | None


def _callers(reader: _Reader) -> Iterator[Caller]:
    for stack, logical_id, properties in reader.typed("AWS::Lambda::Function"):
        config = _mapping(properties.get("VpcConfig"))
        if config.get("SubnetIds"):
            placement = _Placement(
                reader.resolve_all(stack, config["SubnetIds"]),
                reader.resolve_all(stack, config.get("SecurityGroupIds", [])),
                public_ip=False,
            )
            yield _caller(reader, stack, logical_id, "Lambda function", placement, [reader.key(stack, logical_id)])
    for stack, logical_id, properties in reader.typed("AWS::CodeBuild::Project"):
        config = _mapping(properties.get("VpcConfig"))
        if config.get("Subnets"):
            placement = _Placement(
                reader.resolve_all(stack, config["Subnets"]),
                reader.resolve_all(stack, config.get("SecurityGroupIds", [])),
                public_ip=False,
            )
            yield _caller(reader, stack, logical_id, "CodeBuild project", placement, [reader.key(stack, logical_id)])
    node_group_templates = set()
    for stack, logical_id, properties in reader.typed("AWS::EKS::Nodegroup"):
        template = reader.resolve(stack, _mapping(properties.get("LaunchTemplate")).get("Id"))
        interface = _primary_interface(reader, template)
        # The launch template's values are written in its own stack.
        template_stack = (template or stack).partition("/")[0]
        groups: list[str | None] = (
            reader.resolve_all(template_stack, interface["Groups"]) if interface.get("Groups") else []
        )
        if not groups:
            cluster = reader.resolve(stack, properties.get("ClusterName"))
            is_cluster = cluster is not None and reader.resource(cluster).get("Type") == "AWS::EKS::Cluster"
            groups = [f"{cluster}.{CLUSTER_SECURITY_GROUP}" if is_cluster else None]
        placement = _Placement(reader.resolve_all(stack, properties.get("Subnets")), groups, _public_ip(interface))
        declared = [reader.key(stack, logical_id)]
        if template is not None:
            node_group_templates.add(template)
            declared.append(template)
        yield _caller(reader, stack, logical_id, "node group", placement, declared)
    placed = _launch_template_subnets(reader)
    for stack, logical_id, _ in reader.typed("AWS::EC2::LaunchTemplate"):
        template = reader.key(stack, logical_id)
        interface = _primary_interface(reader, template)
        subnets = ([reader.resolve(stack, interface["SubnetId"])] if "SubnetId" in interface else []) + placed.get(
            template, []
        )
        if template in node_group_templates or not subnets:
            continue
        data = _mapping(_mapping(reader.resources(stack)[logical_id].get("Properties")).get("LaunchTemplateData"))
        groups = interface.get("Groups") or data.get("SecurityGroupIds") or []
        placement = _Placement(list(dict.fromkeys(subnets)), reader.resolve_all(stack, groups), _public_ip(interface))
        yield _caller(reader, stack, logical_id, "launch template", placement, [template])


def _caller(
    reader: _Reader, stack: str, logical_id: str, kind: str, placement: _Placement, declared_on: list[str]
) -> Caller:
    """DECLARED_ON: the resources ("STACK/LOGICAL_ID") whose Metadata declare the caller's calls (a node group and
    its launch template, which may be another stack's)."""
    metadata = [_mapping(reader.resource(identity).get("Metadata")) for identity in declared_on]
    declarations = [entry[CALLS_METADATA_KEY] for entry in metadata if CALLS_METADATA_KEY in entry]
    destinations = (
        tuple(sorted({str(name) for declared in declarations for name in _mapping(declared)})) if declarations else None
    )
    unresolved = [
        what
        for what, values in (("subnets", placement.subnets), ("security groups", placement.groups))
        if None in values
    ]
    return Caller(
        name=f"{kind} {logical_id} in {stack}",
        region=reader.stacks[stack].region or "",
        subnets=tuple(s for s in placement.subnets if s is not None),
        security_groups=tuple(g for g in placement.groups if g is not None),
        public_ip=placement.public_ip,
        destinations=destinations,
        unchecked=f"its {' and '.join(unresolved)} are not written out in the template" if unresolved else None,
    )


def _primary_interface(reader: _Reader, template: str | None) -> dict:
    """The launch template's network interface on card 0 at device index 0, the one its subnet and public address
    are of; {} without one."""
    if template is None:
        return {}
    data = _mapping(_mapping(reader.resource(template).get("Properties")).get("LaunchTemplateData"))
    for interface in _list(data.get("NetworkInterfaces")):
        interface = _mapping(interface)
        if interface.get("DeviceIndex", 0) == 0 and interface.get("NetworkCardIndex", 0) == 0:
            return interface
    return {}


def _public_ip(interface: dict) -> bool | None:
    value = interface.get("AssociatePublicIpAddress")
    return None if value is None else _flag(value, default=False)


def _launch_template_subnets(reader: _Reader) -> dict[str, list[str | None]]:
    """The subnets each launch template is launched into by a fleet or an Auto Scaling group."""
    placed: dict[str, list[str | None]] = {}
    for resource_type, config_key in (
        ("AWS::EC2::SpotFleet", "SpotFleetRequestConfigData"),
        ("AWS::EC2::EC2Fleet", None),
    ):
        for stack, _, properties in reader.typed(resource_type):
            config = _mapping(properties.get(config_key)) if config_key else properties
            for launch_config in _list(config.get("LaunchTemplateConfigs")):
                launch_config = _mapping(launch_config)
                template = reader.resolve(
                    stack, _mapping(launch_config.get("LaunchTemplateSpecification")).get("LaunchTemplateId")
                )
                if template is not None:
                    subnets = [
                        reader.resolve(stack, _mapping(o).get("SubnetId"))
                        for o in _list(launch_config.get("Overrides"))
                        if "SubnetId" in _mapping(o)
                    ]
                    placed.setdefault(template, []).extend(subnets)
    for stack, _, properties in reader.typed("AWS::AutoScaling::AutoScalingGroup"):
        specification = _mapping(properties.get("LaunchTemplate")) or _mapping(
            _mapping(_mapping(properties.get("MixedInstancesPolicy")).get("LaunchTemplate")).get(
                "LaunchTemplateSpecification"
            )
        )
        template = reader.resolve(stack, specification.get("LaunchTemplateId"))
        if template is not None and properties.get("VPCZoneIdentifier"):
            placed.setdefault(template, []).extend(reader.resolve_all(stack, properties["VPCZoneIdentifier"]))
    return placed


def _flag(value: Any, *, default: bool) -> bool:
    """A CloudFormation Boolean: true, or the string "true" (any case)."""
    if value is None:
        return default
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _port(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []
