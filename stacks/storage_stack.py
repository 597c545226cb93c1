"""The shared storage of an environment that creates its file system (storage.lustre), in a stack of its own so that
destroying the cluster leaves it: an FSx for Lustre file system in the node subnet, its security group, and
optionally an S3 data repository association with its bucket.

The association links one folder of the file system, MOUNT/data, to s3://BUCKET/PREFIX/data/ (ASSOCIATED_PATH says
why and with what sources): the cluster user's home, the runs' folders and everything else on the file system are
never exported to S3 and never imported from it.

The cluster stack reads the file system's security group, DNS name and mount name (and the bucket's name) through
this stack's exports, and holds every rule that lets the nodes in (stacks/constructs/shared_storage_access.py): this
stack depends on nothing of the cluster, so `cdk destroy` of the cluster stack never touches it, and CloudFormation
refuses to delete it while a cluster stack imports from it.

storage.on_destroy retain (the default): termination protection on the stack, so `cdk destroy --all` stops at it
after removing the cluster, and DeletionPolicy and UpdateReplacePolicy Retain on the file system, its association
and security group, so that even a deleted stack or a replacement leaves the file system and its data in the
account. delete: no protection, and deleting the stack deletes the file system. A bucket the stack creates is always
retained: CloudFormation cannot delete a bucket that holds objects, and those objects are the exported data.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct

from gpufleet.constants import (
    FILE_SYSTEM_OUTPUT_KEY,
    MOUNT_SOURCE_OUTPUT_KEY,
    STORAGE_BUCKET_OUTPUT_KEY,
    STORAGE_RETAIN,
    STORAGE_SECURITY_GROUP_DESCRIPTION,
)
from gpufleet.environment import Environment
from gpufleet.user_data import SHARED_DATA_SUBDIR
from stacks.constructs.shared_storage_access import LUSTRE_PORT_RANGES, SharedFileSystem, lustre_mount_source
from stacks.networking import import_network

# aws-cdk-lib's LustreFileSystem L2 opens 988-1023 (its DEFAULT_PORT_RANGE), 29 ports more than Lustre uses
# (LUSTRE_PORT_RANGES), which is one reason this stack uses the L1 resources.
# The Lustre version: data repository associations need 2.12 or newer ("supported on all FSx for Lustre 2.12 and 2.15
# file systems, excluding scratch_1", botocore's fsx model, CreateDataRepositoryAssociation), and "2.15 is supported by
# all Lustre deployment types and is recommended for all new file systems" (FileSystemTypeVersion); the default
# would be 2.10 for SCRATCH_2 and PERSISTENT_1. Which client versions mount a 2.15 file system is (unconfirmed): the
# ubuntu2204-cuda12 image has the 2.15 client, p4d-ubuntu1804-cuda11 and p4d-al2-cuda11 the 2.10 one.
LUSTRE_VERSION = "2.15"
# What the association links: one folder of the file system, /data (the nodes see MOUNT/data, GPUFLEET_SHARED_DATA_DIR),
# to s3://BUCKET/PREFIX/data/, not the file system's root: the root holds the cluster user's home (its .ssh, the
# cluster's private key among it, and every pip cache) and the runs' folders, which must never reach the bucket, where
# s3:GetObject is all it takes to read them, and which no S3 writer may create files in. Sources, botocore's fsx model
# (1.44.5), CreateDataRepositoryAssociation: FileSystemPath "points to a high-level directory (such as /ns1/) or
# subdirectory ... that will be mapped 1-1 with DataRepositoryPath", "Two data repository associations cannot have
# overlapping file system paths", and "/" may be linked only by a file system's only association; DataRepositoryPath
# is "an S3 bucket or prefix in the format s3://bucket-name/prefix/". FSx for Lustre carries POSIX metadata both ways
# (FSx for Lustre user guide, posix-metadata-support.html: x-amz-meta-file-owner, -file-group, -file-permissions, the
# file type among them, for files, directories and symlinks; setuid is not imported), so whoever may write under
# PREFIX/data/ (the node role: every workload) can make files, directories and links of any owner and mode under
# MOUNT/data: no step root runs reads or writes under it (docs/design.md, Trust on a node). The S3 side is a
# folder of the prefix too, so that what else gpufleet keeps under PREFIX/ (`gpufleet run --workdir` archives,
# PREFIX/gpufleet-runs/, gpufleet/ops/runs.py) and what an association of the whole file system exported there before
# are never imported. FileSystemPath and DataRepositoryPath are create-only (createOnlyProperties of
# AWS::FSx::DataRepositoryAssociation in the schema cfn-lint 1.58.0 bundles, with FileSystemId and
# BatchImportMetaDataOnCreate): a change replaces the association (docs/guides/storage.md says how to move a deployed
# one).
ASSOCIATED_PATH = f"/{SHARED_DATA_SUBDIR}"


class StorageStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        vpc: ec2.IVpc | None = None,
        node_subnet: ec2.ISubnet | None = None,
        **kwargs,
    ) -> None:
        """vpc and node_subnet come from the environment's NetworkStack; without them the environment's existing
        VPC and subnet are imported by id."""
        storage = environment.storage
        assert storage is not None and storage.lustre is not None, "a StorageStack exists only for storage.lustre"
        retain = storage.on_destroy == STORAGE_RETAIN
        super().__init__(scope, construct_id, termination_protection=retain, **kwargs)
        if vpc is None or node_subnet is None:
            vpc, node_subnet = import_network(self, environment)
        removal = cdk.RemovalPolicy.RETAIN if retain else cdk.RemovalPolicy.DESTROY
        lustre = storage.lustre

        self.security_group = ec2.SecurityGroup(
            self,
            "FileSystemSecurityGroup",
            vpc=vpc,
            description=STORAGE_SECURITY_GROUP_DESCRIPTION.format(name=environment.name),
        )
        retained: list[cdk.CfnResource] = [self.security_group.node.default_child]  # type: ignore[list-item]
        # The file servers talk Lustre among themselves (the user guide page above); the nodes' rules are the
        # cluster stack's.
        for low, high in LUSTRE_PORT_RANGES:
            retained.append(
                ec2.CfnSecurityGroupIngress(
                    self,
                    f"FileServersTcp{low}",
                    group_id=self.security_group.security_group_id,
                    source_security_group_id=self.security_group.security_group_id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description="Lustre between the file servers",
                )
            )
        self.file_system = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=LUSTRE_VERSION,
            storage_capacity=lustre.storage_capacity_gib,
            subnet_ids=[node_subnet.subnet_id],
            security_group_ids=[self.security_group.security_group_id],
            kms_key_id=lustre.kms_key_arn,
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
                deployment_type=lustre.deployment_type,
                per_unit_storage_throughput=lustre.throughput_mb_per_tib,
                data_compression_type=lustre.compression,
            ),
        )
        retained.append(self.file_system)
        mount_source = lustre_mount_source(self.file_system.attr_dns_name, self.file_system.attr_lustre_mount_name)
        outputs = {FILE_SYSTEM_OUTPUT_KEY: self.file_system.ref, MOUNT_SOURCE_OUTPUT_KEY: mount_source}

        repository, location = storage.data_repository, environment.data_repository_location
        if repository is not None and location is not None:
            bucket_name, prefix = location
            association = fsx.CfnDataRepositoryAssociation(
                self,
                "DataRepositoryAssociation",
                file_system_id=self.file_system.ref,
                file_system_path=ASSOCIATED_PATH,
                data_repository_path=f"s3://{bucket_name}/{prefix}/{SHARED_DATA_SUBDIR}/",
                # The files already under PREFIX/data/ appear on the file system from the start.
                batch_import_meta_data_on_create=True,
                s3=fsx.CfnDataRepositoryAssociation.S3Property(
                    auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                        events=list(repository.import_events)
                    ),
                    auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(
                        events=list(repository.export_events)
                    ),
                ),
            )
            if repository.bucket is None:
                # The association names the bucket, not a reference to it: it must wait for the bucket and its policy.
                association.node.add_dependency(self._bucket(environment.name, bucket_name))
            retained.append(association)
            outputs[STORAGE_BUCKET_OUTPUT_KEY] = bucket_name
        for resource in retained:
            resource.apply_removal_policy(removal)
        # What the cluster stack reads: CDK turns the mount source and the security group into exports of this stack
        # and imports of the cluster's.
        self.shared_file_system = SharedFileSystem(
            file_system_id=self.file_system.ref,
            dns_name=self.file_system.attr_dns_name,
            mount_name=self.file_system.attr_lustre_mount_name,
            security_group_id=self.security_group.security_group_id,
            data_repository=location,
        )
        for name, value in outputs.items():
            cdk.CfnOutput(self, name, value=value)

    def _bucket(self, environment_name: str, bucket_name: str) -> s3.Bucket:
        # A name of gpufleet's (not one CloudFormation makes up): the cluster stack names it in the node role's policy
        # without importing it, and a bucket kept after its stack was deleted is found again by its environment's
        # name (set it as storage.data_repository.bucket to use it again).
        bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        # Its TLS-only policy stays with it.
        assert bucket.policy is not None, "enforce_ssl gives the bucket a policy"
        bucket.policy.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        # On the bucket only: its policy is no finding of the rule.
        cdk.Validations.of(bucket.node.default_child).acknowledge(  # type: ignore[arg-type]
            cdk.Acknowledgment(
                id="AwsSolutions-S1",
                reason=f"the bucket holds the exported data of gpufleet {environment_name}'s shared file system, "
                "written by FSx; server access logs would need a second bucket per environment, and CloudTrail data "
                "events audit it where an account needs that",
            )
        )
        return bucket
