"""An environment's existing VPC and node subnet (network.vpc_id, network.subnet_id), imported into a stack by id."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpufleet.environment import Environment


def import_network(scope: Construct, environment: Environment) -> tuple[ec2.IVpc, ec2.ISubnet]:
    """With no lookup, so synthesis stays offline."""
    network = environment.network
    vpc_id, subnet_id = network.vpc_id, network.subnet_id
    assert vpc_id is not None and subnet_id is not None, "the environment's validation: no cidr needs both"
    vpc = ec2.Vpc.from_vpc_attributes(
        scope,
        "ExistingVpc",
        vpc_id=vpc_id,
        availability_zones=[environment.availability_zone],
        isolated_subnet_ids=[subnet_id],
    )
    subnet = ec2.Subnet.from_subnet_attributes(
        scope, "ExistingNodeSubnet", subnet_id=subnet_id, availability_zone=environment.availability_zone
    )
    for imported in (vpc, subnet):
        cdk.Annotations.of(imported).acknowledge_warning(
            "@aws-cdk/aws-ec2:noSubnetRouteTableId",
            "gpufleet places nodes in the existing subnet and never reads or changes its route table",
        )
    return vpc, subnet
