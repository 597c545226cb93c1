"""The GPU cluster of one environment: EFA security group, cluster placement group, node launch template, the nodes'
log group and dashboard, and the node group of its fleet.backend (a Spot Fleet or an Auto Scaling group) with its
teardown guarantee."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.catalog import InstanceType
from gpufleet.constants import (
    AVAILABILITY_ZONE_OUTPUT_KEY,
    CLUSTER_SHELL_DOCUMENT_OUTPUT_KEY,
    CLUSTER_USER_NAME,
    LAUNCH_TEMPLATE_OUTPUT_KEY,
    PLACEMENT_GROUP_OUTPUT_KEY,
    SECURITY_GROUP_OUTPUT_KEY,
    SHARED_STORAGE_TAG_KEY,
    SPOT_INTERRUPTION_TEMPLATE_OUTPUT_KEY,
    SUBNET_OUTPUT_KEY,
)
from gpufleet.environment import Environment
from gpufleet.node_calls import node_calls
from gpufleet.user_data import launch_template_user_data, operator_scripts_archive, operator_scripts_location
from stacks.constructs.calls import declare_calls
from stacks.constructs.capacity_block_warning import CapacityBlockWarning
from stacks.constructs.capacity_fallback.infrastructure import CapacityFallback
from stacks.constructs.cluster_user.infrastructure import ClusterUser
from stacks.constructs.efa_security_group import EfaSecurityGroup
from stacks.constructs.interruption_fanout.infrastructure import InterruptionFanOut
from stacks.constructs.node_group import node_group
from stacks.constructs.node_launch_template import NodeLaunchTemplate
from stacks.constructs.node_monitoring import NodeMonitoring
from stacks.constructs.node_readiness import let_nodes_mark_their_readiness
from stacks.constructs.operator_scripts import OperatorScripts
from stacks.constructs.run_secrets import let_nodes_read_run_secrets
from stacks.constructs.shared_storage_access import SharedFileSystem, SharedStorageAccess
from stacks.constructs.spot_interruption_rehearsal import SpotInterruptionRehearsal
from stacks.networking import import_network


class ClusterStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        instance: InstanceType,
        vpc: ec2.IVpc | None = None,
        node_subnet: ec2.ISubnet | None = None,
        shared_file_system: SharedFileSystem | None = None,
        **kwargs,
    ) -> None:
        """vpc and node_subnet come from the environment's NetworkStack; without them the environment's existing VPC
        and subnet are imported (by id, with no lookup, so synthesis stays offline); shared_file_system: the file
        system the nodes mount (storage), from the environment's StorageStack or its storage.existing."""
        super().__init__(scope, construct_id, **kwargs)
        if vpc is None or node_subnet is None:
            vpc, node_subnet = import_network(self, environment)
        node_tags = {**environment.resource_tags, "Name": f"{environment.stack_prefix}-node"}

        efa_security_group = EfaSecurityGroup(self, "EfaSecurityGroup", vpc=vpc)
        placement_group = ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
        block = environment.capacity.capacity_block
        launch_template = NodeLaunchTemplate(
            self,
            "NodeLaunchTemplate",
            environment_name=environment.name,
            instance=instance,
            efa=environment.efa,
            ami=environment.fleet_ami,
            root_volume_gib=environment.root_volume_gib,
            key_pair=environment.key_pair,
            backend=environment.fleet.backend,
            reservation=environment.capacity.reservation,
            capacity_block_id=block.reservation_id if block else None,
            subnet=node_subnet,
            security_group=efa_security_group.security_group,
            placement_group=placement_group,
            node_tags=node_tags,
            user_data=launch_template_user_data(environment, instance),
            metadata_tags={SHARED_STORAGE_TAG_KEY: shared_file_system.mount_source} if shared_file_system else None,
        )
        # What the nodes' code calls, for the reachability check (gpufleet reachability).
        for source, destinations in node_calls(environment, instance).items():
            declare_calls(launch_template.launch_template, *destinations, source=source)
        # sshd is reachable from the node security group only: EfaSecurityGroup lets in nothing but the group's own
        # traffic, and the nodes have no public address.
        cluster_user = ClusterUser(
            self,
            "ClusterUser",
            environment_name=environment.name,
            user_name=CLUSTER_USER_NAME,
            secret_name=environment.cluster_user_key_secret_name,
            key_pair_prefix=f"{environment.stack_prefix}-cluster-user",
            document_name=environment.cluster_shell_document_name,
            node_role=launch_template.role,
            tags=environment.resource_tags,
            log_retention=logs.RetentionDays.ONE_MONTH,
        )
        NodeMonitoring(
            self,
            "NodeMonitoring",
            environment_name=environment.name,
            node_role=launch_template.role,
            log_retention_days=environment.monitoring.log_retention_days,
            efa=environment.efa and instance.efa_supported,
        )
        OperatorScripts(
            self,
            "OperatorScripts",
            archive=operator_scripts_archive(),
            location=operator_scripts_location(environment),
            node_role=launch_template.role,
        )
        if shared_file_system is not None:
            SharedStorageAccess(
                self,
                "SharedStorageAccess",
                file_system=shared_file_system,
                node_security_group=efa_security_group.security_group,
                node_role=launch_template.role,
            )
        let_nodes_mark_their_readiness(self, role=launch_template.role, environment_name=environment.name)
        let_nodes_read_run_secrets(self, role=launch_template.role, stack_prefix=environment.stack_prefix)
        nodes = node_group(
            self,
            environment_name=environment.name,
            instance_type=environment.instance_type,
            capacity=environment.capacity,
            fleet=environment.fleet,
            group_name_prefix=environment.auto_scaling_group_prefix,
            launch_template=launch_template,
            subnet_id=node_subnet.subnet_id,
            checkpoint_hook=bool(environment.node.checkpoint_hook),
            guarded=[placement_group, efa_security_group, launch_template],
        )
        # The key is in its secret before any node boots and asks for it (cluster-user.sh), and stays there until
        # the last node is gone.
        nodes.resource.node.add_dependency(cluster_user)
        if block is not None:
            CapacityBlockWarning(
                self, "CapacityBlockWarning", environment_name=environment.name, block_id=block.reservation_id
            )
        rehearsal = None
        if environment.capacity.spot > 0:
            rehearsal = SpotInterruptionRehearsal(self, "SpotInterruptionRehearsal", environment_name=environment.name)
        if environment.capacity.spot > 0 and environment.node.checkpoint_hook:
            InterruptionFanOut(
                self,
                "InterruptionFanOut",
                environment_name=environment.name,
                log_retention=logs.RetentionDays.ONE_MONTH,
            )
        if environment.fleet.fallback is not None:
            CapacityFallback(
                self,
                "CapacityFallback",
                backend=nodes.kind,
                node_group_id=nodes.id,
                environment_name=environment.name,
                target=environment.capacity.target,
                on_demand_floor=environment.capacity.on_demand,
                fallback=environment.fleet.fallback,
                checkpoint_hook=bool(environment.node.checkpoint_hook),
                log_retention=logs.RetentionDays.ONE_MONTH,
                launch_template_id=launch_template.launch_template.ref,
                node_role_arn=launch_template.role.role_arn,
            )

        outputs = {
            nodes.output_key: nodes.id,
            PLACEMENT_GROUP_OUTPUT_KEY: placement_group.placement_group_name,
            SECURITY_GROUP_OUTPUT_KEY: efa_security_group.security_group.security_group_id,
            LAUNCH_TEMPLATE_OUTPUT_KEY: launch_template.launch_template.ref,
            SUBNET_OUTPUT_KEY: node_subnet.subnet_id,
            AVAILABILITY_ZONE_OUTPUT_KEY: environment.availability_zone,
            CLUSTER_SHELL_DOCUMENT_OUTPUT_KEY: cluster_user.document.ref,
        }
        if rehearsal is not None:
            # Its Id attribute: the template's id, which StartExperiment takes as experimentTemplateId. Id is the
            # primaryIdentifier and a readOnlyProperty of AWS::FIS::ExperimentTemplate in the resource schema cfn-lint
            # bundles (tests/stacks/test_cluster_stack.py reads it), so Fn::GetAtt Id returns it.
            outputs[SPOT_INTERRUPTION_TEMPLATE_OUTPUT_KEY] = rehearsal.template.attr_id
        for name, value in outputs.items():
            cdk.CfnOutput(self, name, value=value)
