"""The EKS cluster of an environment with flavour: eks: the cluster (aws_eks_v2, access entries only), a small system
node group, the EKS Pod Identity agent and the VPC CNI as EKS add-ons made before any node, the add-ons
(stacks/constructs/eks_add_ons.py) through aws_eks_v2's kubectl handler, and what the GPU nodes share with it (their
role, the EFA security group). The GPU node groups are a stack of their own (stacks/eks_gpu_nodes_stack.py), so that a
create that fails for want of capacity rolls back only them."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from gpufleet.environment import Environment
from stacks.constructs.efa_security_group import EfaSecurityGroup
from stacks.constructs.eks_add_ons import ClusterFileSystem, EksAddOns, PodIdentityAddOns, declare_node_calls
from stacks.constructs.eks_control_plane_logs import ControlPlaneLogGroup
from stacks.constructs.shared_storage_access import SharedFileSystem, SharedStorageAccess
from stacks.networking import import_network

# eks.kubernetes_version to the aws_eks_v2 version (gpufleet.constants.EKS_KUBERNETES_VERSIONS).
KUBERNETES_VERSIONS = {"1.35": eks.KubernetesVersion.V1_35}
# The kubectl handler's layer of each version (aws_eks_v2 KubernetesVersion.V1_35's docstring: "you need to also
# specify the kubectlLayer property with a KubectlV35Layer"; PyPI aws-cdk.lambda-layer-kubectl-v35, pyproject.toml).
KUBECTL_LAYERS = {"1.35": KubectlV35Layer}
# The access policy of a cluster administrator (EKS user guide, access-policy-permissions:
# AmazonEKSClusterAdminPolicy, cluster scope) (unconfirmed: not read this round).
CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# What the nodes themselves need (EKS user guide, create-node-role): kubelet's EC2 reads and the Pod Identity agent's
# eks-auth:AssumeRoleForPodIdentity (AmazonEKSWorkerNodePolicy), pulling images from ECR. Not AmazonEKS_CNI_Policy,
# which aws_eks_v2 2.275 also gives the node role it makes (managed-nodegroup.js): its ec2:*NetworkInterface actions
# (EKS user guide, security-iam-awsmanpol) apply to every interface in the account (issue 29; the policy document
# itself not read: unconfirmed), and whatever reaches the node role's credentials would have them. The VPC CNI gets it
# on a role of its own through EKS Pod Identity (stacks/constructs/eks_add_ons.py PodIdentityAddOns).
NODE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")
# Every control-plane log type, so that the API server's and the authenticator's decisions are kept (cdk-nag
# AwsSolutions-EKS2).
CLUSTER_LOGGING = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


class EksClusterStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        vpc: ec2.IVpc | None = None,
        node_subnet: ec2.ISubnet | None = None,
        control_plane_subnets: list[ec2.ISubnet] | None = None,
        shared_file_system: SharedFileSystem | None = None,
        **kwargs,
    ) -> None:
        """vpc, node_subnet and control_plane_subnets come from the environment's NetworkStack; without them the
        environment's existing VPC, node subnet and eks.control_plane_subnet_ids are imported by id.
        shared_file_system: the environment's storage (its storage stack's or an existing one), None without."""
        super().__init__(scope, construct_id, **kwargs)
        settings = environment.eks
        assert settings is not None, "the environment's validation: the eks flavour has an eks section"
        if vpc is None or node_subnet is None or control_plane_subnets is None:
            vpc, node_subnet = import_network(self, environment)
            control_plane_subnets = [
                ec2.Subnet.from_subnet_id(self, f"ExistingControlPlaneSubnet{index + 1}", subnet_id)
                for index, subnet_id in enumerate(settings.control_plane_subnet_ids or ())
            ]
        node_subnets = ec2.SubnetSelection(subnets=[node_subnet])
        add_ons = settings.add_ons
        efa_device_plugin = add_ons.efa_device_plugin and environment.efa
        mounted_file_system = shared_file_system if add_ons.fsx_csi_driver else None
        needs_kubectl = efa_device_plugin or add_ons.nvidia_device_plugin or add_ons.mpi_operator or mounted_file_system

        # EKS writes the control plane's logs to /aws/eks/NAME/cluster: made here first, the group gets a retention,
        # goes with the stack, and a group a destroyed cluster left behind does not fail the next deploy
        # (stacks/constructs/eks_control_plane_logs.py).
        kubectl_security_group = self._kubectl_security_group(vpc) if needs_kubectl else None
        control_plane_logs = ControlPlaneLogGroup(
            self,
            "ControlPlaneLogs",
            log_group_name=f"/aws/eks/{environment.eks_cluster_name}/cluster",
            retention_days=settings.control_plane_log_retention_days,
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            # Named, so that the log group above can carry the name (CloudFormation's generated one is unknown at
            # synthesis).
            cluster_name=environment.eks_cluster_name,
            version=KUBERNETES_VERSIONS[settings.kubernetes_version],
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=control_plane_subnets)],
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            endpoint_access=self._endpoint_access(settings.endpoint_public_cidrs),
            # Who administers the cluster is the file's choice (eks.admin_principal_arns), not whoever deployed it.
            bootstrap_cluster_creator_admin_permissions=False,
            cluster_logging=CLUSTER_LOGGING,
            # Only with an add-on: the handler is a Lambda function, a layer of 35 MB and a custom resource provider.
            # aws_eks_v2 runs it and its Provider framework function in the control-plane subnets (the endpoint has
            # private access: stacks/network_stack.py _control_plane_subnets), whatever subnets are given here.
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=KUBECTL_LAYERS[settings.kubernetes_version](self, "KubectlLayer"),
                security_groups=[kubectl_security_group],
            )
            if kubectl_security_group is not None
            else None,
        )
        self.cluster.node.add_dependency(control_plane_logs)
        if kubectl_security_group is not None:
            # The handler's kubectl and helm reach the Kubernetes API at the endpoint's private side, whose interfaces
            # carry the cluster's security groups (aws_eks_v2 Cluster.connections: EKS's cluster security group and
            # the control-plane group aws_eks_v2 makes).
            self.cluster.connections.allow_from(
                kubectl_security_group, ec2.Port.tcp(443), "the kubectl handler to the Kubernetes API"
            )
        if settings.endpoint_public_cidrs:
            # On the AWS::EKS::Cluster alone (an acknowledgement reaches every child of its construct). cdk-nag 3.0.2
            # does not flag it today: its EKS1 (and EKS2) rule tests `instanceof aws_eks.CfnCluster`
            # (lib/rules/eks/EKSClusterNoEndpointPublicAccess.js) and aws_eks_v2 makes an aws_eks_v2.CfnCluster;
            # the reason is written for the day it does, and for whoever reads the template.
            assert self.cluster.node.default_child is not None, "aws_eks_v2's Cluster wraps its CfnCluster"
            cdk.Validations.of(self.cluster.node.default_child).acknowledge(
                cdk.Acknowledgment(
                    id="AwsSolutions-EKS1",
                    reason="The environment file names the networks that may reach the EKS cluster's public endpoint "
                    "(eks.endpoint_public_cidrs, public IPv4 blocks no wider than /8); every request still needs an "
                    "admin principal's access entry",
                )
            )
        for index, principal in enumerate(settings.admin_principal_arns):
            self.cluster.grant_access(
                f"Admin{index + 1}",
                principal,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        cdk.Validations.of(self.cluster.role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy]",
                reason="The policy EKS documents for the EKS cluster's service role (it manages the cluster's "
                "interfaces and security groups), maintained by AWS as EKS changes",
            )
        )
        # The Pod Identity agent and the VPC CNI with its own role, before any node (PodIdentityAddOns' boot order).
        pod_identity = PodIdentityAddOns(self, "PodIdentity", cluster=self.cluster)
        before_nodes = [pod_identity.agent, pod_identity.vpc_cni]
        # One role for every node group: the nodes of an environment need the same, and access entries follow it.
        node_role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"gpufleet {environment.name} EKS nodes: join the cluster, ECR images",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in NODE_MANAGED_POLICIES],
        )
        # On a deployed cluster the node role loses AmazonEKS_CNI_Policy only once aws-node has its own role.
        node_role.node.add_dependency(pod_identity.vpc_cni)
        for policy in NODE_MANAGED_POLICIES:
            cdk.Validations.of(node_role).acknowledge(
                cdk.Acknowledgment(
                    id=f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]",
                    reason="A policy EKS documents for managed nodes (joining the cluster and the Pod Identity agent, "
                    "pulling from ECR), maintained by AWS as EKS changes",
                )
            )
        system = settings.system_nodes
        # No launch template: EKS's own for an AL2023 managed node group, whose hop limit is 1 (EKS user guide, al2023;
        # its launch-templates page says only that EKS sets it: docs/design-eks.md, "What pods reach").
        system_nodes = self.cluster.add_nodegroup_capacity(
            "SystemNodes",
            instance_types=[ec2.InstanceType(system.instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=system.count,
            max_size=system.count,
            desired_size=system.count,
            subnets=node_subnets,
            node_role=node_role,
        )
        system_nodes.node.add_dependency(*before_nodes)
        declare_node_calls(
            system_nodes,
            gpu=False,
            nvidia_device_plugin=add_ons.nvidia_device_plugin,
            mpi_operator=add_ons.mpi_operator,
            fsx_csi_driver=mounted_file_system is not None,
        )

        # The GPU nodes' group: their interfaces carry it and the cluster's (stacks/eks_gpu_nodes_stack.py), and the
        # shared storage's rules name it (below).
        efa_security_group = EfaSecurityGroup(self, "EfaSecurityGroup", vpc=vpc)
        # What the GPU nodes stack takes from this one.
        self.node_role = node_role
        self.node_subnets = node_subnets
        self.efa_security_group = efa_security_group.security_group
        self.before_nodes = before_nodes
        if needs_kubectl:
            EksAddOns(
                self,
                "AddOns",
                cluster=self.cluster,
                region=environment.region,
                efa_device_plugin=efa_device_plugin,
                nvidia_device_plugin=add_ons.nvidia_device_plugin,
                mpi_operator=add_ons.mpi_operator,
                file_system=self._cluster_file_system(environment, mounted_file_system)
                if mounted_file_system is not None
                else None,
            )
        if mounted_file_system is not None:
            # The GPU nodes' interfaces all carry the EFA security group: the Lustre rules go between it and the
            # file system's group, as on the fleet flavour's node group.
            SharedStorageAccess(
                self,
                "SharedStorageAccess",
                file_system=mounted_file_system,
                node_security_group=efa_security_group.security_group,
                node_role=node_role,
            )

    def _kubectl_security_group(self, vpc: ec2.IVpc) -> ec2.SecurityGroup:
        """The kubectl handler's and its Provider framework's group: HTTPS out, to the Kubernetes API, the VPC's
        interface endpoints, S3 and the charts' repositories (aws_eks_v2 would give them EKS's cluster security group,
        which EKS makes, outside the template, and which every node carries too)."""
        group = ec2.SecurityGroup(
            self,
            "KubectlSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description="gpufleet kubectl handler: HTTPS to the EKS API, AWS endpoints and chart repositories",
        )
        group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to AWS APIs and chart repositories")
        return group

    @staticmethod
    def _endpoint_access(public_cidrs: tuple[str, ...]) -> eks.EndpointAccess:
        """Private only by default: the nodes have no public address either, and kubectl runs in the VPC. With
        public networks named, public and private: the nodes keep the private endpoint, kubectl from those networks
        the public one (aws_eks_v2 EndpointAccess.PUBLIC_AND_PRIVATE.onlyFrom)."""
        if not public_cidrs:
            return eks.EndpointAccess.PRIVATE
        return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*public_cidrs)

    @staticmethod
    def _cluster_file_system(environment: Environment, file_system: SharedFileSystem) -> ClusterFileSystem:
        lustre = environment.storage.lustre if environment.storage is not None else None
        return ClusterFileSystem(
            file_system_id=file_system.file_system_id,
            dns_name=file_system.dns_name,
            mount_name=file_system.mount_name,
            capacity_gib=lustre.storage_capacity_gib if lustre is not None else None,
        )
