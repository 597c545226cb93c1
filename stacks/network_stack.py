"""The network of an environment that creates its VPC: a private node subnet in the cluster AZ, VPC endpoints
so nodes work without a NAT gateway, optional NAT, and flow logs. The eks flavour adds its control-plane subnets,
where the kubectl handler runs too: they get the NAT route and the S3 endpoint (docs/design-eks.md, "Where the kubectl
handler runs")."""

from __future__ import annotations

import ipaddress

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.constants import FLAVOUR_EKS
from gpufleet.environment import Environment
from gpufleet.node_calls import interface_endpoint_services
from gpufleet.rules import LOG_RETENTION_DAYS

# The eks flavour's control-plane subnets: /28, the size EKS recommends as the least ("at least six IP addresses for
# use by Amazon EKS. However, we recommend at least 16", EKS user guide, network-reqs), taken from the top of the VPC,
# above every subnet the Vpc construct allocates from the bottom (the node subnet takes the lower half, the public
# subnet a quarter of the upper half).
CONTROL_PLANE_SUBNET_PREFIX = 28


def control_plane_subnet_cidrs(vpc_cidr: str, count: int) -> list[str]:
    """The last ``count`` /28 blocks of the VPC, lowest first."""
    top = ipaddress.IPv4Network(vpc_cidr).broadcast_address + 1
    size = 2 ** (32 - CONTROL_PLANE_SUBNET_PREFIX)
    return [f"{top - size * (count - index)}/{CONTROL_PLANE_SUBNET_PREFIX}" for index in range(count)]


class NetworkStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, environment: Environment, **kwargs) -> None:
        self._availability_zone = environment.availability_zone
        super().__init__(scope, construct_id, **kwargs)
        # CDK's own AZ lookup acknowledges the literal AZs it writes; the availability_zones override must too.
        cdk.Validations.of(self).acknowledge(
            cdk.Acknowledgment(
                id="CloudFormation-Validate::W3010",
                reason="A cluster placement group lives in one AZ, so gpufleet pins the environment's AZ on purpose",
            )
        )
        network = environment.network
        cidr = network.cidr
        assert cidr is not None, "the environment's validation: a NetworkStack exists only for network.cidr"
        subnets = [
            ec2.SubnetConfiguration(
                name="nodes",
                subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS
                if network.nat_gateway
                else ec2.SubnetType.PRIVATE_ISOLATED,
                cidr_mask=network.node_subnet_prefix,
            )
        ]
        if network.nat_gateway:
            subnets.append(
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=network.node_subnet_prefix + 2
                )
            )
        # Named, so that the eks flavour's control-plane subnets can route through the same NAT gateway.
        nat_gateways = ec2.NatProvider.gateway()
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays[LOG_RETENTION_DAYS[network.flow_log_retention_days]],
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=[environment.availability_zone],
            nat_gateways=1 if network.nat_gateway else 0,
            nat_gateway_provider=nat_gateways,
            subnet_configuration=subnets,
            restrict_default_security_group=True,
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )
        node_subnets = ec2.SubnetSelection(subnet_group_name="nodes")
        self.node_subnet = self.vpc.select_subnets(subnet_group_name="nodes").subnets[0]
        endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="gpufleet VPC interface endpoints: HTTPS from inside the VPC",
        )
        # The literal CIDR (not the VPC's CidrBlock attribute) keeps the rule reviewable in the template.
        endpoint_security_group.add_ingress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS from the VPC")
        for name, service in interface_endpoint_services(environment).items():
            self.vpc.add_interface_endpoint(
                name,
                service=ec2.InterfaceVpcEndpointAwsService(service),
                subnets=node_subnets,
                private_dns_enabled=True,
                open=False,
                security_groups=[endpoint_security_group],
            )
        self.control_plane_subnets: list[ec2.ISubnet] = []
        if environment.flavour == FLAVOUR_EKS:
            self.control_plane_subnets = self._control_plane_subnets(environment, cidr, nat_gateways)
        # S3 from the node subnet and, on eks, from the control-plane subnets (the kubectl handler's chart asset and
        # CloudFormation's response URL): a gateway endpoint serves only the route tables it is given.
        s3_subnets = [node_subnets]
        if self.control_plane_subnets:
            s3_subnets.append(ec2.SubnetSelection(subnets=self.control_plane_subnets))
        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=s3_subnets)

    def _control_plane_subnets(
        self, environment: Environment, cidr: str, nat_gateways: ec2.NatProvider
    ) -> list[ec2.ISubnet]:
        """One /28 per control-plane AZ, each with a default route to the NAT gateway. EKS puts the control plane's
        interfaces there, and aws_eks_v2 puts the kubectl handler and its Provider framework function there too: with
        private endpoint access it replaces the kubectl provider's subnets with the cluster's private subnets
        (aws-cdk-lib 2.275 aws-eks-v2/lib/cluster.js, Cluster's constructor: `kubectlSubnets = privateSubnets` when
        `endpointAccess._config.privateAccess`; aws/aws-cdk packages/aws-cdk-lib/aws-eks-v2/lib/cluster.ts). Those
        functions call the EKS and Lambda APIs, S3 and the charts' repositories outside AWS: without a route out
        every chart waits for the custom resource's timeout (issue 30, D1)."""
        network = environment.network
        assert environment.eks is not None and environment.eks.control_plane_availability_zones is not None, (
            "the environment's validation: an eks environment with network.cidr names its control-plane AZs"
        )
        assert network.nat_gateway, "the environment's validation: an eks environment's new VPC has a NAT gateway"
        (gateway,) = nat_gateways.configured_gateways
        zones = environment.eks.control_plane_availability_zones
        subnets: list[ec2.ISubnet] = []
        for index, (zone, block) in enumerate(zip(zones, control_plane_subnet_cidrs(cidr, len(zones)), strict=True)):
            subnet = ec2.Subnet(
                self,
                f"ControlPlaneSubnet{index + 1}",
                vpc_id=self.vpc.vpc_id,
                availability_zone=zone,
                cidr_block=block,
            )
            subnet.add_default_nat_route(gateway.gateway_id)
            subnets.append(subnet)
        return subnets

    @property
    def availability_zones(self) -> list[str]:
        """The configured AZ: without this override CDK looks the region's AZs up, which needs credentials."""
        return [self._availability_zone]
