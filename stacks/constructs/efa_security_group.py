"""The security group EFA needs: all traffic from itself AND to itself, HTTPS out, nothing else in."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct


class EfaSecurityGroup(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc) -> None:
        super().__init__(scope, construct_id)
        # allow_all_outbound=False: with True, CDK silently drops the self-egress rule EFA needs
        # (aws-ofi-nccl #663 "Unable to insert remote address into address vector").
        self.security_group = ec2.SecurityGroup(
            self,
            "Resource",
            vpc=vpc,
            allow_all_outbound=False,
            description="gpufleet EFA nodes: all traffic within the group, HTTPS out",
        )
        self.security_group.add_ingress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA and NCCL traffic from cluster nodes"
        )
        self.security_group.add_egress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA and NCCL traffic to cluster nodes"
        )
        # The S3 gateway endpoint is reached through region-specific prefix lists that are not known at synth
        # time; without a NAT gateway the route tables confine 443 to the VPC endpoints and S3.
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to VPC endpoints, S3 and (with NAT) package mirrors"
        )
