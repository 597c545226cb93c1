"""The network stack: private node subnet in the cluster AZ, endpoints instead of a NAT, flow logs."""

from __future__ import annotations

import pytest

from gpufleet.loading import environment_files, load_environments

NEW_VPC_ENVIRONMENTS = {env.name: env for env in load_environments(environment_files()) if env.network.creates_vpc}
# What environments/NAME.yaml says of each new VPC: region, availability_zone, network.cidr and
# network.flow_log_retention_days. The node subnet takes half of the VPC (NodeSubnetCapacityValidator's budget).
NEW_VPCS = {
    "dev": ("us-east-1", "us-east-1a", "10.40.0.0/16", 30),
    "elastic": ("us-east-1", "us-east-1a", "10.70.0.0/16", 30),
    "p5-block": ("us-east-2", "us-east-2a", "10.60.0.0/16", 30),
    "p5-eks": ("us-west-2", "us-west-2d", "10.50.0.0/16", 90),
    "prod": ("us-east-1", "us-east-1b", "10.50.0.0/16", 365),
}
INTERFACE_SERVICES = [
    "ec2",
    "ec2messages",
    "ecr.api",
    "ecr.dkr",
    "logs",
    "monitoring",
    "secretsmanager",
    "ssm",
    "ssmmessages",
    "sts",
]
# The nodes of an Auto Scaling group complete its lifecycle actions (gpufleet.node_calls): p5-block's VPC has Auto
# Scaling's endpoint too.
AUTO_SCALING_VPCS = {"p5-block"}


def network(assembly, name):
    return assembly.template(f"gpufleet-{name}-network")


def test_the_table_covers_every_new_vpc_environment():
    assert sorted(NEW_VPC_ENVIRONMENTS) == sorted(NEW_VPCS)


@pytest.mark.parametrize("name", NEW_VPCS)
def test_vpc_and_node_subnet_in_the_cluster_az(assembly, name):
    _, zone, cidr, _ = NEW_VPCS[name]
    template = network(assembly, name)
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": cidr})
    # The Vpc construct's subnets (tagged with their group name); the eks control-plane subnets are elsewhere
    # (test_eks_cluster_stack.py).
    subnets = {
        name: subnet
        for name, subnet in template.find_resources("AWS::EC2::Subnet").items()
        if any(tag["Key"] == "aws-cdk:subnet-name" for tag in subnet["Properties"]["Tags"])
    }
    assert {s["Properties"]["AvailabilityZone"] for s in subnets.values()} == {zone}
    nodes = [s for s in subnets.values() if {"Key": "aws-cdk:subnet-name", "Value": "nodes"} in s["Properties"]["Tags"]]
    assert len(nodes) == 1
    assert nodes[0]["Properties"]["MapPublicIpOnLaunch"] is False
    # The address budget NodeSubnetCapacityValidator checks: half of the /16 VPC.
    assert nodes[0]["Properties"]["CidrBlock"].endswith("/17")


@pytest.mark.parametrize("name", NEW_VPCS)
def test_endpoints_let_nodes_work_without_a_nat(assembly, name):
    template = network(assembly, name)
    endpoints = template.find_resources("AWS::EC2::VPCEndpoint")
    gateway = [e for e in endpoints.values() if e["Properties"].get("VpcEndpointType", "Gateway") == "Gateway"]
    assert len(gateway) == 1 and "s3" in str(gateway[0]["Properties"]["ServiceName"])
    interface_names = sorted(
        e["Properties"]["ServiceName"]
        for e in endpoints.values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    )
    region = NEW_VPCS[name][0]
    services = INTERFACE_SERVICES + (["autoscaling"] if name in AUTO_SCALING_VPCS else [])
    assert interface_names == sorted(f"com.amazonaws.{region}.{service}" for service in services)
    assert len(endpoints) == len(services) + 1
    for endpoint in endpoints.values():
        if endpoint["Properties"].get("VpcEndpointType") == "Interface":
            assert endpoint["Properties"]["PrivateDnsEnabled"] is True


@pytest.mark.parametrize("name", NEW_VPCS)
def test_endpoint_security_group_admits_only_https_from_the_vpc(assembly, name):
    template = network(assembly, name)
    template.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "GroupDescription": "gpufleet VPC interface endpoints: HTTPS from inside the VPC",
            "SecurityGroupIngress": [
                {
                    "CidrIp": NEW_VPCS[name][2],
                    "Description": "HTTPS from the VPC",
                    "FromPort": 443,
                    "IpProtocol": "tcp",
                    "ToPort": 443,
                }
            ],
        },
    )


@pytest.mark.parametrize(("name", "nat_gateways"), [("dev", 0), ("prod", 1), ("p5-eks", 1), ("elastic", 1)])
def test_nat_gateway_is_optional(assembly, name, nat_gateways):
    template = network(assembly, name)
    template.resource_count_is("AWS::EC2::NatGateway", nat_gateways)
    template.resource_count_is("AWS::EC2::InternetGateway", nat_gateways)


@pytest.mark.parametrize("name", NEW_VPCS)
def test_flow_logs_capture_all_traffic_and_leave_with_the_stack(assembly, name):
    template = network(assembly, name)
    template.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL", "ResourceType": "VPC"})
    retention = NEW_VPCS[name][3]
    groups = template.find_resources("AWS::Logs::LogGroup")
    assert [g["Properties"]["RetentionInDays"] for g in groups.values()] == [retention]
    assert {g["DeletionPolicy"] for g in groups.values()} == {"Delete"}


@pytest.mark.parametrize("name", NEW_VPCS)
def test_default_security_group_is_stripped(assembly, name):
    network(assembly, name).resource_count_is("Custom::VpcRestrictDefaultSG", 1)
