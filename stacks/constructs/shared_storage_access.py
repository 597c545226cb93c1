"""What lets the nodes use the shared file system, all in the cluster stack so that the storage stack depends on
nothing of the cluster: the Lustre ports between the node security group and the file system's (in both directions,
as the FSx for Lustre user guide's client rules ask), and the node role's access to the data repository's prefix.

The rule on the file system's security group is a resource of the cluster stack, for a file system of the storage
stack and for an existing one alike: CloudFormation adds it to a group it does not own, changes nothing else there,
and removes it when the cluster stack is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.constructs.capacity_fallback.infrastructure import nag_rendering

# TCP 988 and 1018-1023. source: the FSx for Lustre user guide, "File system access control with Amazon VPC"
# (limit-access-security-groups.html: the Lustre client rules, inbound and outbound, to and from the file system's
# security groups) and "Cannot create a file system because of misconfigured security group" (cannot-create-fs.html:
# "ports 988 and 1018-1023"; the guide's 2020 edition gave 1021-1023).
LUSTRE_PORT_RANGES = ((988, 988), (1018, 1023))
# What training code does with the data repository's prefix: read, write and delete objects (a multipart upload that
# stops half way is aborted), and list the prefix.
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


def lustre_mount_source(dns_name: str, mount_name: str) -> str:
    """What mount -t lustre takes for an FSx for Lustre file system: DNS_NAME@tcp:/MOUNT_NAME (FSx for Lustre user
    guide, mounting-ec2-instance.html)."""
    return f"{dns_name}@tcp:/{mount_name}"


@dataclass(frozen=True)
class SharedFileSystem:
    """The shared file system as the cluster sees it: plain values for an existing one, the storage stack's
    deploy-time values (imported) for a new one."""

    file_system_id: str
    dns_name: str
    mount_name: str
    security_group_id: str
    # The data repository's bucket and key prefix, when there is one: the file system's data folder maps to
    # PREFIX/data/ (stacks/storage_stack.py ASSOCIATED_PATH), and `gpufleet run --workdir` uploads its archives to
    # PREFIX/gpufleet-runs/, outside it, so they are never imported (gpufleet/ops/runs.py upload_workdir).
    data_repository: tuple[str, str] | None = None

    @property
    def mount_source(self) -> str:
        return lustre_mount_source(self.dns_name, self.mount_name)


class SharedStorageAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        file_system: SharedFileSystem,
        node_security_group: ec2.ISecurityGroup,
        node_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        node_group_id = node_security_group.security_group_id
        for low, high in LUSTRE_PORT_RANGES:
            ec2.CfnSecurityGroupIngress(
                self,
                f"FileSystemFromNodesTcp{low}",
                group_id=file_system.security_group_id,
                source_security_group_id=node_group_id,
                description="Lustre from the gpufleet nodes",
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
            )
            ec2.CfnSecurityGroupEgress(
                self,
                f"NodesToFileSystemTcp{low}",
                group_id=node_group_id,
                destination_security_group_id=file_system.security_group_id,
                description="Lustre to the shared file system",
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
            )
            ec2.CfnSecurityGroupIngress(
                self,
                f"NodesFromFileSystemTcp{low}",
                group_id=node_group_id,
                source_security_group_id=file_system.security_group_id,
                description="Lustre from the shared file system",
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
            )
        if file_system.data_repository is not None:
            self._data_repository_access(node_role, *file_system.data_repository)

    def _data_repository_access(self, node_role: iam.IRole, bucket_name: str, prefix: str) -> None:
        stack = cdk.Stack.of(self)
        bucket_arn = stack.format_arn(service="s3", region="", account="", resource=bucket_name)
        objects = f"{bucket_arn}/{prefix}/*"
        policy = iam.Policy(
            self,
            "DataRepositoryAccess",
            statements=[
                iam.PolicyStatement(actions=list(OBJECT_ACTIONS), resources=[objects]),
                # ListBucket takes the bucket as its resource; s3:prefix narrows it to the prefix (Service
                # Authorization Reference, Amazon S3: ListBucket's condition keys include s3:prefix).
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
                ),
            ],
        )
        policy.attach_to_role(node_role)
        cdk.Validations.of(policy).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::{nag_rendering(stack, objects)}]",
                reason="the objects under the environment's data repository prefix: the data folder the shared file "
                "system imports and exports, and the working directories gpufleet run uploads; checkpoints and "
                "datasets get names no policy can list in advance",
            )
        )
