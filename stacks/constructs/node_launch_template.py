"""The node launch template: EFA interfaces per network card, IMDSv2, encrypted gp3 root, SSM-managed role, and the
capacity source (stacks/constructs/capacity_reservations.py)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpufleet.catalog import InstanceType
from gpufleet.constants import (
    NODE_METADATA_HOP_LIMIT,
    NODE_METADATA_HTTP_ENDPOINT,
    NODE_METADATA_HTTP_TOKENS,
    NODE_ROOT_VOLUME_ENCRYPTED,
    NODE_ROOT_VOLUME_TYPE,
)
from gpufleet.environment import Ami, CapacityReservation
from stacks.constructs.capacity_reservations import (
    launch_template_capacity_reservation,
    launch_template_market_options,
)
from stacks.constructs.node_network_interfaces import node_network_interfaces

ROOT_VOLUME_IOPS = 3000
ROOT_VOLUME_THROUGHPUT_MIBPS = 125


class NodeLaunchTemplate(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        instance: InstanceType,
        efa: bool,
        ami: Ami,
        root_volume_gib: int,
        key_pair: str | None,
        backend: str,
        reservation: CapacityReservation | None,
        capacity_block_id: str | None,
        subnet: ec2.ISubnet,
        security_group: ec2.ISecurityGroup,
        placement_group: ec2.IPlacementGroup,
        node_tags: dict[str, str],
        user_data: str,
        metadata_tags: dict[str, str] | None = None,
    ) -> None:
        """backend, reservation, capacity_block_id: the capacity source (stacks/constructs/capacity_reservations.py
        says which the launch template targets); user_data: base64, as gpufleet.user_data renders it;
        metadata_tags: instance tags the node reads from its instance metadata at boot (values known only at deploy,
        which the compressed user data cannot hold): with them the launch template allows tags in the metadata
        (MetadataOptions InstanceMetadataTags, EC2 user guide, work-with-tags-in-IMDS.html)."""
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            # The CloudWatch agent's permissions are scoped to the environment's log group and metric namespace
            # (stacks/constructs/node_monitoring.py), not AWS's CloudWatchAgentServerPolicy (any log group).
            description=f"gpufleet {environment_name} nodes: SSM managed instance and CloudWatch agent",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
        )
        cdk.Validations.of(self.role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
                reason="AWS's minimal, maintained policy for SSM Session Manager access, "
                "which replaces SSH keys and public IPs on gpufleet nodes",
            )
        )
        instance_profile = iam.InstanceProfile(self, "NodeInstanceProfile", role=self.role)

        # The image the nodes launch from: a fixed ami.id, or the SSM parameter's value at deploy time
        # (ami.ssm_parameter, or a Deep Learning AMI's public parameter).
        self.image_id = self._image_id(ami)
        tags = [cdk.CfnTag(key=key, value=value) for key, value in sorted(node_tags.items())]
        instance_tags = [cdk.CfnTag(key=key, value=value) for key, value in sorted((metadata_tags or {}).items())]
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "Resource",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                image_id=self.image_id,
                instance_type=instance.name,
                key_name=key_pair,
                ebs_optimized=True,
                iam_instance_profile=ec2.CfnLaunchTemplate.IamInstanceProfileProperty(
                    arn=instance_profile.instance_profile_arn
                ),
                network_interfaces=node_network_interfaces(
                    instance=instance,
                    efa=efa,
                    subnet_id=subnet.subnet_id,
                    security_group_ids=[security_group.security_group_id],
                ),
                placement=self._placement(capacity_block_id, placement_group),
                instance_market_options=launch_template_market_options(capacity_block_id),
                capacity_reservation_specification=launch_template_capacity_reservation(
                    capacity_block_id=capacity_block_id, reservation=reservation, backend=backend
                ),
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_endpoint=NODE_METADATA_HTTP_ENDPOINT,
                    http_tokens=NODE_METADATA_HTTP_TOKENS,
                    http_put_response_hop_limit=NODE_METADATA_HOP_LIMIT,
                    instance_metadata_tags="enabled" if metadata_tags else None,
                ),
                block_device_mappings=[
                    ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                        device_name=ami.root_device_name,
                        ebs=ec2.CfnLaunchTemplate.EbsProperty(
                            volume_size=root_volume_gib,
                            volume_type=NODE_ROOT_VOLUME_TYPE,
                            iops=ROOT_VOLUME_IOPS,
                            throughput=ROOT_VOLUME_THROUGHPUT_MIBPS,
                            encrypted=NODE_ROOT_VOLUME_ENCRYPTED,
                            delete_on_termination=True,
                        ),
                    )
                ],
                tag_specifications=[
                    ec2.CfnLaunchTemplate.TagSpecificationProperty(
                        resource_type=resource_type, tags=tags + (instance_tags if resource_type == "instance" else [])
                    )
                    for resource_type in ("instance", "volume", "network-interface")
                ],
                user_data=user_data,
            ),
        )

    @staticmethod
    def _placement(
        capacity_block_id: str | None, placement_group: ec2.IPlacementGroup
    ) -> ec2.CfnLaunchTemplate.PlacementProperty | None:
        """The cluster placement group, except for a Capacity Block: its instances are already placed close together
        (EC2 user guide, capacity-blocks-using.html: "there is no need to use a cluster placement group with a
        Capacity Block"), and a placement constraint outside the block can fail launches while the block still has
        room (ParallelCluster's PlacementGroupCapacityTypeValidator, cli/src/pcluster/validators/ec2_validators.py)."""
        if capacity_block_id is not None:
            return None
        return ec2.CfnLaunchTemplate.PlacementProperty(group_name=placement_group.placement_group_name)

    def _image_id(self, ami: Ami) -> str:
        if ami.id is not None:
            return ami.id
        # A parameter of this type is resolved by CloudFormation at deploy time: synthesis stays offline. AWS's public
        # parameters take it too, the Deep Learning AMIs' among them (Systems Manager user guide,
        # parameter-store-public-parameters; gpufleet/deep_learning_ami.py).
        deep_learning = ami.deep_learning
        parameter = cdk.CfnParameter(
            self,
            "NodeImageParameter",
            type="AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
            default=ami.parameter,
            description=(
                f"Public SSM parameter holding the id of the newest AWS Deep Learning AMI {deep_learning.name}"
                if deep_learning is not None
                else "SSM parameter holding the node AMI id (written by the gpufleet AMI pipeline)"
            ),
        )
        return parameter.value_as_string
