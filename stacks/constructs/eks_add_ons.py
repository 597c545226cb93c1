"""What gpufleet installs into an EKS cluster through aws_eks_v2's kubectl handler, each at a pinned version with the
upstream bug it avoids next to it (sources: docs/design-eks.md, "Device plugins", "Kubeflow MPI operator"):
the EFA device plugin, the NVIDIA device plugin, the Kubeflow MPI operator (a vendored local chart) and the
FSx for Lustre CSI driver with the environment's file system as a PersistentVolume and a claim pods mount. And, as EKS
add-ons every eks cluster gets, the EKS Pod Identity agent and the VPC CNI with a role of its own (PodIdentityAddOns:
docs/design-eks.md, "What pods reach")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import custom_resources as cr
from constructs import Construct, IConstruct

from gpufleet.constants import (
    EKS_ADD_ON_REGISTRY_ACCOUNTS,
    EKS_EFA_NODE_LABEL,
    EKS_GPU_NODE_LABEL,
    EKS_GPU_NODE_TAINT_KEY,
    EKS_SHARED_STORAGE_CLAIM,
)
from stacks.constructs.calls import declare_calls
from stacks.constructs.lambda_functions import log_group
from stacks.constructs.provider_findings import acknowledge_provider

# How long the kubectl handler's and its Provider's logs are kept: a month, as the fleet flavour's functions keep theirs
# (stacks/cluster_stack.py).
KUBECTL_LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# The GPU nodes' taint (stacks/eks_cluster_stack.py GPU_NODE_TAINT): a daemon that must run there tolerates it.
GPU_TOLERATION = {"key": EKS_GPU_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

# aws/eks-charts stable/aws-efa-k8s-device-plugin at 5239609 (2026-08-03): chart v0.5.30, appVersion and image tag
# v0.5.20. Plugin >= 0.5.1 mounts /dev/infiniband (aws/eks-charts#1069); >= 0.5.10 stops counting the p6-b200 NVLink
# ibp* devices as EFA (aws/sagemaker-hyperpod-cli#282). The chart schedules the plugin only on the instance types of
# its supportedInstanceLabels.values (tests/stacks/test_eks_add_ons.py checks every catalog type with EFA is there: a
# missing type is the "plugin advertises no EFA" complaint).
EFA_PLUGIN_REPOSITORY = "https://aws.github.io/eks-charts"
EFA_PLUGIN_CHART = "aws-efa-k8s-device-plugin"
EFA_PLUGIN_CHART_VERSION = "v0.5.30"
EFA_PLUGIN_IMAGE_TAG = "v0.5.20"
# The chart's image defaults to us-west-2's registry (602401143452.dkr.ecr.us-west-2...): each region serves EKS's
# add-on images from its own registry, some from another account (gpufleet.constants.EKS_ADD_ON_REGISTRY_ACCOUNTS).

# NVIDIA/k8s-device-plugin v0.19.3 (2026-06-16), chart deployments/helm/nvidia-device-plugin 0.19.3. v0.19.0 turned
# MOFED on by default (#1550), and MOFED mounts every /dev/infiniband/uverbsN, taking the EFA plugin's devices (#1692);
# 0.19.3 turns it off again (#1837). mofedEnabled false is written out so that a later chart cannot turn it back on.
NVIDIA_PLUGIN_REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_PLUGIN_CHART = "nvidia-device-plugin"
NVIDIA_PLUGIN_CHART_VERSION = "0.19.3"

# kubeflow/mpi-operator v0.8.0 (2026-02) deploy/v2beta1/mpi-operator.yaml, vendored as a local chart (its README
# there). Its CRD (313477 bytes as compact JSON) is over the 262144-byte cap of the last-applied annotation that
# kubectl create --save-config and client-side apply write (the handler's only ways to apply a manifest in aws_eks_v2
# 2.275): Helm installs a chart's crds/ without that annotation. The ClusterRole grants coordination.k8s.io leases
# (the leader-election error of kubeflow/mpi-operator#508 came from a file that lacked them).
MPI_OPERATOR_CHART = Path(__file__).with_name("mpi_operator_chart")
MPI_OPERATOR_NAMESPACE = "mpi-operator"

# kubernetes-sigs/aws-fsx-csi-driver at 5b22712 (2026-04-21): chart 1.17.0, driver v1.9.0 (charts/aws-fsx-csi-driver/
# Chart.yaml; repository from docs/install.md). Only the node component: a PersistentVolume of an existing file system
# (static provisioning, examples/kubernetes/static_provisioning) is mounted by the node plugin; the controller only
# creates and deletes file systems, which would need an IAM role with FSx permissions. The node DaemonSet tolerates
# every taint by default (values.yaml node.tolerateAllTaints), so it runs on the GPU nodes. It is not a host-network
# pod (templates/node-daemonset.yaml), so with the GPU nodes' hop limit 1 IMDS does not answer it: node.region sets
# its AWS_REGION, without which it asks IMDS for the region at start and falls back to the Kubernetes API only after
# that call fails (pkg/driver/node.go newNodeService, pkg/cloud/metadata.go NewMetadataService); its node id comes
# from CSI_NODE_NAME, which the chart sets (NodeGetInfo). It calls no AWS API: a mount needs none.
FSX_CSI_REPOSITORY = "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
# The chart's archive itself is a GitHub release asset that the repository's index.yaml points to (chart-releaser's
# layout: github.com/kubernetes-sigs/aws-fsx-csi-driver/releases/download/...) (unconfirmed: the index not read here).
FSX_CSI_CHART_HOST = "https://github.com"
FSX_CSI_CHART = "aws-fsx-csi-driver"
FSX_CSI_CHART_VERSION = "1.17.0"
FSX_CSI_DRIVER = "fsx.csi.aws.com"
SHARED_STORAGE_VOLUME = "gpufleet-shared"
# The claim binds to the volume by name; Kubernetes still compares sizes, and FSx does not enforce one on a mount, so
# a file system whose size the file does not state is given the smallest FSx for Lustre size, 1200 GiB (FSx for
# Lustre user guide, storage capacity) (unconfirmed that the CSI driver ignores it).
NOMINAL_CAPACITY_GIB = 1200


@dataclass(frozen=True)
class ClusterFileSystem:
    """The environment's FSx for Lustre file system as a PersistentVolume names it (deploy-time values for a file
    system of the storage stack)."""

    file_system_id: str
    dns_name: str
    mount_name: str
    capacity_gib: int | None


class EksAddOns(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        region: str,
        efa_device_plugin: bool,
        nvidia_device_plugin: bool,
        mpi_operator: bool,
        file_system: ClusterFileSystem | None,
    ) -> None:
        """Each add-on is installed when its flag is on; file_system None installs no CSI driver."""
        super().__init__(scope, construct_id)
        # The outside hosts the kubectl handler's helm fetches charts from.
        chart_hosts: list[str] = []
        if efa_device_plugin:
            chart_hosts.append(EFA_PLUGIN_REPOSITORY)
            cluster.add_helm_chart(
                "EfaDevicePlugin",
                repository=EFA_PLUGIN_REPOSITORY,
                chart=EFA_PLUGIN_CHART,
                version=EFA_PLUGIN_CHART_VERSION,
                release="aws-efa-k8s-device-plugin",
                namespace="kube-system",
                values={
                    "image": {
                        "repository": f"{EKS_ADD_ON_REGISTRY_ACCOUNTS[region]}.dkr.ecr.{region}.{cdk.Aws.URL_SUFFIX}"
                        "/eks/aws-efa-k8s-device-plugin",
                        "tag": EFA_PLUGIN_IMAGE_TAG,
                    },
                    "nodeSelector": {EKS_EFA_NODE_LABEL: "true"},
                    "tolerations": [GPU_TOLERATION],
                },
            )
        if nvidia_device_plugin:
            chart_hosts.append(NVIDIA_PLUGIN_REPOSITORY)
            cluster.add_helm_chart(
                "NvidiaDevicePlugin",
                repository=NVIDIA_PLUGIN_REPOSITORY,
                chart=NVIDIA_PLUGIN_CHART,
                version=NVIDIA_PLUGIN_CHART_VERSION,
                release="nvidia-device-plugin",
                namespace="nvidia-device-plugin",
                values={
                    "mofedEnabled": False,
                    "nodeSelector": {EKS_GPU_NODE_LABEL: "true"},
                    "tolerations": [GPU_TOLERATION],
                },
            )
        if mpi_operator:
            cluster.add_helm_chart(
                "MpiOperator",
                chart_asset=s3_assets.Asset(self, "MpiOperatorChart", path=str(MPI_OPERATOR_CHART)),
                release="mpi-operator",
                namespace=MPI_OPERATOR_NAMESPACE,
            )
        if file_system is not None:
            chart_hosts += [FSX_CSI_REPOSITORY, FSX_CSI_CHART_HOST]
            self._shared_storage(cluster, file_system, region)
        acknowledge_kubectl_handler(cluster)
        declare_kubectl_calls(cluster, chart_hosts, local_chart=mpi_operator)
        self._kubectl_log_groups(cluster)

    def _kubectl_log_groups(self, cluster: eks.Cluster) -> None:
        """A log group of the stack's for the kubectl handler and one for its Provider framework function, so that
        `cdk destroy` takes their logs too: without, Lambda writes to /aws/lambda/FUNCTION, a group it makes itself
        and nothing deletes. aws_eks_v2 2.275 passes neither function a log group and offers no option to
        (kubectl-provider.js), so each function's LoggingConfig.LogGroup is set on its CfnFunction
        (AWS::Lambda::Function LoggingConfig: "The name of the Amazon CloudWatch log group the function sends logs
        to"; its AWSLambdaBasicExecutionRole may write to any group). The function refers to its group, so
        CloudFormation deletes the function first and the group after."""
        kubectl = cluster.node.find_child("KubectlProvider")
        functions = {
            "KubectlHandlerLogs": kubectl.node.find_child("Handler"),
            "KubectlProviderLogs": kubectl.node.find_child("Provider").node.find_child("framework-onEvent"),
        }
        for construct_id, function in functions.items():
            group = log_group(self, construct_id, KUBECTL_LOG_RETENTION)
            resource = cast(lambda_.CfnFunction, function.node.default_child)
            resource.add_property_override("LoggingConfig.LogGroup", group.log_group_name)

    def _shared_storage(self, cluster: eks.Cluster, file_system: ClusterFileSystem, region: str) -> None:
        driver = cluster.add_helm_chart(
            "FsxCsiDriver",
            repository=FSX_CSI_REPOSITORY,
            chart=FSX_CSI_CHART,
            version=FSX_CSI_CHART_VERSION,
            release="aws-fsx-csi-driver",
            namespace="kube-system",
            values={"nodeComponentOnly": True, "node": {"region": region}},
        )
        capacity = f"{file_system.capacity_gib or NOMINAL_CAPACITY_GIB}Gi"
        # As the driver's static provisioning example writes them (pv.yaml, claim.yaml): ReadWriteMany, Retain (the
        # storage stack, not Kubernetes, owns the file system), flock for applications that lock files.
        volume = cluster.add_manifest(
            "SharedStorage",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": SHARED_STORAGE_VOLUME},
                "spec": {
                    "capacity": {"storage": capacity},
                    "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteMany"],
                    "mountOptions": ["flock"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "csi": {
                        "driver": FSX_CSI_DRIVER,
                        "volumeHandle": file_system.file_system_id,
                        "volumeAttributes": {"dnsname": file_system.dns_name, "mountname": file_system.mount_name},
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": EKS_SHARED_STORAGE_CLAIM, "namespace": "default"},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    # Empty: bind to the volume above, not to a dynamically provisioned one.
                    "storageClassName": "",
                    "resources": {"requests": {"storage": capacity}},
                    "volumeName": SHARED_STORAGE_VOLUME,
                },
            },
        )
        volume.node.add_dependency(driver)


# EKS Pod Identity (EKS user guide, pod-identities): EKS sets credential variables in the containers of a pod whose
# service account has an association, and the EKS Pod Identity agent, a DaemonSet on the host network of every node,
# hands that pod the credentials of the associated role; the agent itself uses the node role's
# eks-auth:AssumeRoleForPodIdentity, which AmazonEKSWorkerNodePolicy grants (pod-id-agent-setup, create-node-role). The
# agent's chart tolerates every taint (aws/eks-pod-identity-agent charts/eks-pod-identity-agent values.yaml), so it runs
# on the GPU nodes. The agent reaches the EKS Auth API through the node subnet's NAT route (pod-id-agent-setup: "For
# private clusters, the eks-auth endpoint in AWS PrivateLink is required").
POD_IDENTITY_AGENT_ADD_ON = "eks-pod-identity-agent"
# The trust policy of a role pods assume through EKS Pod Identity (EKS user guide, pod-id-role), held to the request
# tags EKS Pod Identity sends (the cluster, the namespace, the service account), so no other association can use it.
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
# The VPC CNI, as an EKS add-on with a Pod Identity association for its service account kube-system/aws-node and
# AmazonEKS_CNI_Policy on that role (EKS user guide, cni-iam-role: "We recommend that you assign it to a separate role";
# the policy is for IPv4 clusters, gpufleet's; "Step 3: Remove the CNI policy from the node IAM role"). As an add-on,
# EKS owns the association and restarts aws-node when it changes (add-ons-iam); OVERWRITE takes over the self-managed
# VPC CNI that EKS installs with every cluster (aws_eks_v2 ClusterProps.bootstrap_self_managed_addons, default true).
# The add-ons' versions are EKS's default for the cluster's Kubernetes version at creation (unconfirmed which: not
# pinned, no EKS API read offline).
VPC_CNI_ADD_ON = "vpc-cni"
VPC_CNI_NAMESPACE = "kube-system"
VPC_CNI_SERVICE_ACCOUNT = "aws-node"
VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"


class PodIdentityAddOns(Construct):
    """The EKS Pod Identity agent and the VPC CNI as EKS add-ons, aws-node with AmazonEKS_CNI_Policy through its own
    role. Boot order: aws-node must have its credentials before any pod gets an address, and without the agent an
    aws-node set up for Pod Identity crashes (aws/amazon-vpc-cni-k8s#3840), so the caller makes the node groups (and
    the node role, which then loses the CNI policy) depend on both add-ons: created before any node, as
    terraform-aws-eks creates the vpc-cni and eks-pod-identity-agent add-ons `before_compute` (its README and
    main.tf). Both are host-network DaemonSets, which need no pod network to start."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.Cluster) -> None:
        super().__init__(scope, construct_id)
        agent = cluster.eks_pod_identity_agent
        assert agent is not None, "aws_eks_v2's Cluster makes the agent's add-on when asked"
        self.agent = agent
        self.vpc_cni_role = iam.Role(
            self,
            "VpcCniRole",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)).with_conditions(
                {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-arn": cluster.cluster_arn,
                        "aws:RequestTag/kubernetes-namespace": VPC_CNI_NAMESPACE,
                        "aws:RequestTag/kubernetes-service-account": VPC_CNI_SERVICE_ACCOUNT,
                    }
                }
            ),
            description="The VPC CNI (kube-system/aws-node) through EKS Pod Identity: pods' interfaces and addresses",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(VPC_CNI_POLICY)],
        )
        cdk.Validations.of(self.vpc_cni_role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{VPC_CNI_POLICY}]",
                reason="The policy EKS documents for the VPC CNI's own role (its network interfaces and addresses), "
                "maintained by AWS as the CNI changes; only aws-node in kube-system of this EKS cluster may assume it",
            )
        )
        self.vpc_cni = eks.CfnAddon(
            self,
            "VpcCni",
            cluster_name=cluster.cluster_name,
            addon_name=VPC_CNI_ADD_ON,
            resolve_conflicts="OVERWRITE",
            # Removed from the template (or replaced), the add-on leaves aws-node and its association in place: the
            # pods' network never goes with a template change.
            preserve_on_delete=True,
            pod_identity_associations=[
                eks.CfnAddon.PodIdentityAssociationProperty(
                    role_arn=self.vpc_cni_role.role_arn, service_account=VPC_CNI_SERVICE_ACCOUNT
                )
            ],
        )
        self.vpc_cni.node.add_dependency(agent)


# The managed policies aws_eks_v2 2.275 gives the kubectl handler's role (kubectl-provider.js): logs, its interfaces in
# the VPC, and pulling images from ECR (the public registry's policy under a condition).
KUBECTL_HANDLER_MANAGED_POLICIES = {
    "service-role/AWSLambdaBasicExecutionRole": "writes the handler's logs",
    "service-role/AWSLambdaVPCAccessExecutionRole": "creates the handler's network interfaces in the node subnet (the "
    "cluster's endpoint is private)",
    "AmazonEC2ContainerRegistryReadOnly": "pulls a chart from an OCI repository in ECR",
}
ECR_PUBLIC_CONDITIONAL_POLICY = (
    '{"Fn::If":["ClusterKubectlProviderHandlerHasEcrPublic69E09706",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},'
    '":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
)
# What the handler's role may read from the CDK bootstrap bucket (aws_eks_v2 grants it read on the chart assets'
# bucket): grantRead's actions, on the whole bucket (default qualifier hnb659fds, CDK's bootstrap template).
KUBECTL_HANDLER_ASSET_ACTIONS = ("s3:GetObject*", "s3:GetBucket*", "s3:List*")


# What every EKS node calls from the node subnet, for the reachability check: the VPC CNI (aws-node) manages the node's
# interfaces and addresses through the EC2 API; the kubelet pulls the images of EKS's own add-ons (the pause image,
# aws-node, kube-proxy, CoreDNS, the Pod Identity agent, the EFA device plugin) from the region's EKS registry in ECR,
# whose layers ECR serves from S3 (ECR user guide, vpc-endpoints: "Amazon ECR uses Amazon S3 to store your image
# layers"); the Pod Identity agent asks EKS Auth for the VPC CNI's credentials (EKS user guide, pod-id-agent-setup).
# The Kubernetes API is the endpoint's private side, inside the VPC.
EKS_NODE_CALLS = {
    "ec2": "aws-node (the VPC CNI): the node's interfaces and addresses",
    "ecr.api": "kubelet's ECR credential provider: the EKS registry's images",
    "ecr.dkr": "kubelet: EKS's add-on images (pause, aws-node, kube-proxy, CoreDNS, Pod Identity agent, EFA plugin)",
    "s3": "kubelet: the layers of images from ECR",
    "eks-auth": "the EKS Pod Identity agent: AssumeRoleForPodIdentity",
}
# Images from outside AWS, by where their pods run. The NVIDIA device plugin's image is nvcr.io/nvidia/
# k8s-device-plugin (chart 0.19.3 values.yaml; docs/design-eks.md "Device plugins"); the MPI operator's is Docker Hub's
# mpioperator/mpi-operator (the vendored chart), served by registry-1.docker.io with its token from auth.docker.io
# and its layers from production.cloudflare.docker.com (unconfirmed: Docker's registry hosts, not read this round);
# the jobs' nccl-tests image and the FSx CSI driver's come from public.ecr.aws (gpufleet/k8s/mpijobs.py; the driver's
# chart default, unconfirmed).
NVIDIA_PLUGIN_IMAGE_HOST = "https://nvcr.io"
DOCKER_HUB_HOSTS = (
    "https://registry-1.docker.io",
    "https://auth.docker.io",
    "https://production.cloudflare.docker.com",
)
PUBLIC_ECR_HOST = "https://public.ecr.aws"


def declare_node_calls(
    node_group: IConstruct, *, gpu: bool, nvidia_device_plugin: bool, mpi_operator: bool, fsx_csi_driver: bool
) -> None:
    """What a node group's nodes (and their pods) call, for the reachability check. GPU: the GPU groups, whose taint
    keeps every pod but the GPU daemons and the jobs off them; the system group runs the rest (the MPI operator)."""
    for destination, source in EKS_NODE_CALLS.items():
        declare_calls(node_group, destination, source=source)
    if gpu:
        declare_calls(node_group, PUBLIC_ECR_HOST, source="kubelet: the MPIJobs' nccl-tests image")
        if nvidia_device_plugin:
            declare_calls(node_group, NVIDIA_PLUGIN_IMAGE_HOST, source="kubelet: the NVIDIA device plugin's image")
        if fsx_csi_driver:
            declare_calls(node_group, PUBLIC_ECR_HOST, source="kubelet: the FSx for Lustre CSI driver's image")
    elif mpi_operator:
        declare_calls(node_group, *DOCKER_HUB_HOSTS, source="kubelet: the MPI operator's image from Docker Hub")


def declare_kubectl_calls(cluster: eks.Cluster, chart_repositories: list[str], *, local_chart: bool) -> None:
    """What the kubectl handler and its Provider framework function call from the subnets they run in (aws-cdk-lib
    2.275's kubectl handler, custom-resource-handlers/dist/aws-eks-v2/kubectl-handler: helm/__init__.py and
    apply/__init__.py), for the reachability check. The Kubernetes API itself is the endpoint's private side, inside
    the VPC."""
    kubectl = cluster.node.find_child("KubectlProvider")
    handler = kubectl.node.find_child("Handler")
    framework = kubectl.node.find_child("Provider").node.find_child("framework-onEvent")
    declare_calls(handler, "eks", source="the kubectl handler: aws eks update-kubeconfig (DescribeCluster)")
    declare_calls(
        handler,
        "sts",
        source="the kubectl handler: aws eks get-token, kubectl's credential, signs an STS GetCallerIdentity request "
        "(aws_eks_v2 sets AWS_STS_REGIONAL_ENDPOINTS=regional for its AWS CLI)",
    )
    if local_chart:
        declare_calls(handler, "s3", source="the kubectl handler: aws s3 cp of the MPI operator's chart asset")
    hosts = sorted({"https://" + url.removeprefix("https://").split("/")[0] for url in chart_repositories})
    if hosts:
        declare_calls(handler, *hosts, source="the kubectl handler: helm fetches each chart's index and archive")
    declare_calls(framework, "lambda", source="the kubectl Provider framework: invokes the kubectl handler")
    declare_calls(
        framework,
        "s3",
        source="the kubectl Provider framework: answers CloudFormation at the request's ResponseURL, a pre-signed "
        "URL of a bucket in the stack's region",
    )


def acknowledge_kubectl_handler(cluster: eks.Cluster) -> None:
    """cdk-nag's findings on the kubectl handler aws_eks_v2 makes for the cluster (a function and a custom resource
    Provider, roles and policies of aws-cdk-lib's making), acknowledged with the reason for each."""
    stack = cdk.Stack.of(cluster)
    kubectl = cluster.node.find_child("KubectlProvider")
    handler = kubectl.node.find_child("Handler")
    provider = cast(cr.Provider, kubectl.node.find_child("Provider"))
    acknowledge_provider(provider, [handler], "the EKS cluster's kubectl handler")  # type: ignore[list-item]
    framework_role = provider.node.find_child("framework-onEvent").node.find_child("ServiceRole")
    handler_role = handler.node.find_child("ServiceRole")
    policy = "Policy::arn:<AWS::Partition>:iam::aws:policy/"
    cdk.Validations.of(framework_role).acknowledge(
        cdk.Acknowledgment(
            id=f"AwsSolutions-IAM4[{policy}service-role/AWSLambdaVPCAccessExecutionRole]",
            reason="the Provider framework function of the EKS cluster's kubectl handler runs in the node subnet "
            "beside the handler; aws-cdk-lib creates this role with the managed VPC access policy and offers no other",
        )
    )
    for name, purpose in KUBECTL_HANDLER_MANAGED_POLICIES.items():
        cdk.Validations.of(handler_role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM4[{policy}{name}]",
                reason=f"the EKS cluster's kubectl handler {purpose} with the AWS managed policy aws_eks_v2 "
                "attaches to the role it creates",
            )
        )
    cdk.Validations.of(handler_role).acknowledge(
        cdk.Acknowledgment(
            id=f"AwsSolutions-IAM4[Policy::{ECR_PUBLIC_CONDITIONAL_POLICY}]",
            reason="aws_eks_v2 gives the EKS cluster's kubectl handler the managed ECR Public read policy where the "
            "partition has ECR Public (its condition), for charts from public.ecr.aws",
        )
    )
    bucket = f"arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-{stack.account}-{stack.region}/*"
    for finding in (*(f"Action::{action}" for action in KUBECTL_HANDLER_ASSET_ACTIONS), f"Resource::{bucket}"):
        cdk.Validations.of(handler_role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM5[{finding}]",
                reason="the EKS cluster's kubectl handler reads the local chart (the MPI operator's) from the CDK "
                "assets bucket; aws_eks_v2 grants read on the bucket's objects, whose keys are content hashes",
            )
        )
    cdk.Validations.of(handler.node.default_child).acknowledge(  # type: ignore[arg-type]
        cdk.Acknowledgment(
            id="AwsSolutions-L1",
            reason="aws_eks_v2 2.275 sets the runtime of the EKS cluster's kubectl handler (Python 3.13, with the "
            "kubectl layer built for it); a newer runtime is aws-cdk-lib's to choose",
        )
    )
