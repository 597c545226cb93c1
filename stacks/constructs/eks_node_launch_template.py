"""The launch template of an EKS managed node group of GPU nodes, held to the rules EKS sets for one (EKS user guide,
launch-templates; docs/design-eks.md "EKS"): no subnet on the interfaces (the node group names it), no instance profile
(the node group's role), no spot market options (the node group's capacity type), security groups on the interfaces
only (the EFA group and the cluster security group on every one: with groups in the template EKS adds no cluster
security group itself), the instance type here and not in the node group (aws_eks_v2 2.275 would refuse the NVIDIA
AMI type for p4d/p5/g5: its GPU list stops at g4), no image (EKS's AL2023 NVIDIA image and EKS's bootstrap, merged
with the user data here), IMDSv2 with hop limit 1: only the host's network namespace (kubelet, and the host-network
pods: aws-node, kube-proxy, the Pod Identity agent, the EFA device plugin) reaches the instance metadata and the node
role's credentials; every other pod gets its AWS access, if any, through EKS Pod Identity (docs/design-eks.md, "What
pods reach")."""

from __future__ import annotations

import base64

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpufleet.catalog import InstanceType
from gpufleet.constants import (
    EKS_NODE_METADATA_HOP_LIMIT,
    NODE_METADATA_HTTP_ENDPOINT,
    NODE_METADATA_HTTP_TOKENS,
    NODE_ROOT_VOLUME_ENCRYPTED,
    NODE_ROOT_VOLUME_TYPE,
)
from gpufleet.environment import CapacityReservation
from stacks.constructs.capacity_reservations import (
    launch_template_capacity_block,
    launch_template_market_options,
    launch_template_reservations_only,
)
from stacks.constructs.node_launch_template import ROOT_VOLUME_IOPS, ROOT_VOLUME_THROUGHPUT_MIBPS
from stacks.constructs.node_network_interfaces import node_network_interfaces

# The root device of EKS's AL2023 images: Karpenter's AL2023 AMI family maps its root volume there
# (aws/karpenter-provider-aws pkg/providers/amifamily/al2023.go, EphemeralBlockDevice returns "/dev/xvda").
AL2023_ROOT_DEVICE = "/dev/xvda"
# nodeadm reads NodeConfig documents of this MIME type from the user data, which EKS merges with its own (EKS user
# guide, launch-templates, "Amazon Linux 2023 user data"); localStorage strategy RAID0 stripes the instance-store
# drives for kubelet and containerd (amazon-eks-ami nodeadm/api/v1alpha1/nodeconfig_types.go, LocalStorageOptions).
NODE_CONFIG_MIME_TYPE = "application/node.eks.aws"
MIME_BOUNDARY = "GPUFLEET"
# Huge pages are set aside by a shell script part: NodeConfig has no setting for them (nodeconfig_types.go), and
# cloud-init runs the script before kubelet starts (amazon-eks-ami templates/al2023/runtime/rootfs/etc/systemd/system/
# nodeadm-run.service: "After=... cloud-final.service", "start after cloud-init, in order to pickup changes the user
# may have applied via cloud-init scripts"), so kubelet finds them. The sysctl.d file keeps them across reboots (the
# script runs once per instance).
HUGEPAGES_SYSCTL_FILE = "/etc/sysctl.d/90-gpufleet-hugepages.conf"
HUGEPAGE_MIB = 2


def node_user_data(*, raid0_nvme: bool, hugepages_mib: int) -> str | None:
    """The launch template's user data, base64 as EC2 takes it: a MIME multi-part archive with a NodeConfig (RAID0 of
    the NVMe drives) and a script (HUGEPAGES_MIB of 2 MiB pages), each where asked; None where there is nothing to
    add to EKS's bootstrap."""
    parts = []
    if raid0_nvme:
        parts.append(
            [
                f"Content-Type: {NODE_CONFIG_MIME_TYPE}",
                "",
                "---",
                "apiVersion: node.eks.aws/v1alpha1",
                "kind: NodeConfig",
                "spec:",
                "  instance:",
                "    localStorage:",
                "      strategy: RAID0",
            ]
        )
    if hugepages_mib:
        parts.append(
            [
                'Content-Type: text/x-shellscript; charset="us-ascii"',
                "",
                "#!/bin/bash",
                "set -euo pipefail",
                f"echo 'vm.nr_hugepages = {hugepages_mib // HUGEPAGE_MIB}' > {HUGEPAGES_SYSCTL_FILE}",
                f"sysctl -p {HUGEPAGES_SYSCTL_FILE}",
            ]
        )
    if not parts:
        return None
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"', ""]
    for part in parts:
        lines += [f"--{MIME_BOUNDARY}", *part, ""]
    lines += [f"--{MIME_BOUNDARY}--", ""]
    return base64.b64encode("\n".join(lines).encode()).decode()


class EksNodeLaunchTemplate(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance: InstanceType,
        efa: bool,
        raid0_nvme: bool,
        root_volume_gib: int,
        key_pair: str | None,
        security_group_ids: list[str],
        placement_group: ec2.IPlacementGroup | None,
        reservation: CapacityReservation | None,
        capacity_block_id: str | None,
        node_tags: dict[str, str],
        hugepages_mib: int,
    ) -> None:
        """reservation: the On-Demand Capacity Reservations this group's nodes launch into (preference only, one id or
        a resource group: gpufleet.validators), None for none. capacity_block_id: the Capacity Block every node launches
        into (market type capacity-block and the block as target, as EKS requires: EKS user guide,
        capacity-blocks-mng), None for none. hugepages_mib: 2 MiB pages set aside at boot (0 for
        none)."""
        super().__init__(scope, construct_id)
        tags = [cdk.CfnTag(key=key, value=value) for key, value in sorted(node_tags.items())]
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "Resource",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                instance_type=instance.name,
                key_name=key_pair,
                ebs_optimized=True,
                network_interfaces=node_network_interfaces(
                    instance=instance, efa=efa, subnet_id=None, security_group_ids=security_group_ids
                ),
                placement=ec2.CfnLaunchTemplate.PlacementProperty(group_name=placement_group.placement_group_name)
                if placement_group is not None
                else None,
                capacity_reservation_specification=self._reservation_target(reservation, capacity_block_id),
                instance_market_options=launch_template_market_options(capacity_block_id),
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_endpoint=NODE_METADATA_HTTP_ENDPOINT,
                    http_tokens=NODE_METADATA_HTTP_TOKENS,
                    http_put_response_hop_limit=EKS_NODE_METADATA_HOP_LIMIT,
                ),
                block_device_mappings=[
                    ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                        device_name=AL2023_ROOT_DEVICE,
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
                    ec2.CfnLaunchTemplate.TagSpecificationProperty(resource_type=resource_type, tags=tags)
                    for resource_type in ("instance", "volume", "network-interface")
                ],
                user_data=node_user_data(
                    raid0_nvme=raid0_nvme and instance.nvme.count > 0, hugepages_mib=hugepages_mib
                ),
            ),
        )

    @staticmethod
    def _reservation_target(
        reservation: CapacityReservation | None, capacity_block_id: str | None
    ) -> ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty | None:
        if capacity_block_id is not None:
            return launch_template_capacity_block(capacity_block_id)
        return launch_template_reservations_only(reservation) if reservation is not None else None
