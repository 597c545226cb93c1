"""The EFA security group on its own: all traffic from and to itself, HTTPS out, nothing else; and its logical id."""

from __future__ import annotations

from aws_cdk.assertions import Template

from stacks.constructs.efa_security_group import EfaSecurityGroup
from tests.stacks.constructs.conftest import imported_vpc


def test_the_group_lets_all_traffic_in_from_itself_and_out_to_itself_and_https_anywhere(stack):
    group = EfaSecurityGroup(stack, "Efa", vpc=imported_vpc(stack))
    template = Template.from_stack(stack)
    group_id = {"Fn::GetAtt": [stack.get_logical_id(group.security_group.node.default_child), "GroupId"]}

    (properties,) = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroup").values()]
    assert properties == {
        "GroupDescription": "gpufleet EFA nodes: all traffic within the group, HTTPS out",
        "VpcId": "vpc-1",
        "SecurityGroupEgress": [
            {
                "CidrIp": "0.0.0.0/0",
                "Description": "HTTPS to VPC endpoints, S3 and (with NAT) package mirrors",
                "FromPort": 443,
                "IpProtocol": "tcp",
                "ToPort": 443,
            }
        ],
    }
    (ingress,) = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    assert ingress == {
        "Description": "EFA and NCCL traffic from cluster nodes",
        "GroupId": group_id,
        "IpProtocol": "-1",
        "SourceSecurityGroupId": group_id,
    }
    (egress,) = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupEgress").values()]
    assert egress == {
        "Description": "EFA and NCCL traffic to cluster nodes",
        "GroupId": group_id,
        "IpProtocol": "-1",
        "DestinationSecurityGroupId": group_id,
    }


def test_the_group_keeps_its_logical_id(stack):
    """CDK derives a logical id from the construct path (EfaSecurityGroup/Resource, as the cluster stack adds the
    construct and as here), and CloudFormation replaces a resource whose logical id changes. A renamed construct id
    would give the next deploy a new group: new nodes would join it while running nodes keep the old one, and the
    group's rules admit traffic from its own members only, so EFA and NCCL traffic between old and new nodes would
    be refused (and CloudFormation could not delete the old group while nodes use it)."""
    group = EfaSecurityGroup(stack, "EfaSecurityGroup", vpc=imported_vpc(stack))
    assert stack.get_logical_id(group.security_group.node.default_child) == "EfaSecurityGroup84B158D9"
    assert list(Template.from_stack(stack).find_resources("AWS::EC2::SecurityGroup")) == ["EfaSecurityGroup84B158D9"]
