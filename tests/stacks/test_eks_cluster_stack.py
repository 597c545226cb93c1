"""The EKS cluster stack of the shipped eks environment (environments/p5-eks.yaml): the cluster, its access entries,
the node groups, and the GPU launch templates held to the rules EKS sets for a managed node group's template, which
cfn-lint does not check (EKS user guide, launch-templates; docs/design-eks.md). And in every eks stack (the shipped
one, the matrix's, a Capacity Block's): no pod off the host network reaches the node role through IMDS, and the VPC
CNI's policy is on aws-node's own role, not the node role (docs/design-eks.md, "What pods reach")."""

from __future__ import annotations

import base64
import json
import re

import pytest
from aws_cdk.assertions import Match, Template

from tests.conftest import synthesize
from tests.gpufleet.environment_files import VALID_EKS, changed, write

STACK = "gpufleet-p5-eks-eks"
# The GPU node groups' own stack (stacks/eks_gpu_nodes_stack.py).
GPU_STACK = "gpufleet-p5-eks-gpu-nodes"


@pytest.fixture(scope="module")
def template(assembly):
    return assembly.template(STACK)


@pytest.fixture(scope="module")
def launch_templates(assembly) -> dict[str, dict]:
    resources = assembly.template_json(GPU_STACK)["Resources"]
    return {
        name: resource["Properties"]["LaunchTemplateData"]
        for name, resource in resources.items()
        if resource["Type"] == "AWS::EC2::LaunchTemplate"
    }


def test_the_cluster_is_private_logged_and_administered_by_the_files_principals(template):
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Version": "1.35",
            "AccessConfig": {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": False},
            "ResourcesVpcConfig": Match.object_like({"EndpointPrivateAccess": True, "EndpointPublicAccess": False}),
            "Logging": {
                "ClusterLogging": {
                    "EnabledTypes": [
                        {"Type": "api"},
                        {"Type": "audit"},
                        {"Type": "authenticator"},
                        {"Type": "controllerManager"},
                        {"Type": "scheduler"},
                    ]
                }
            },
        },
    )
    # The file's admin, and the kubectl handler's role (aws_eks_v2 gives it one to install the add-ons).
    template.resource_count_is("AWS::EKS::AccessEntry", 2)
    template.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {
            "PrincipalArn": "arn:aws:iam::123456789012:role/Admin",
            "AccessPolicies": [
                {
                    "AccessScope": {"Type": "cluster"},
                    "PolicyArn": Match.any_value(),
                }
            ],
        },
    )


def test_the_control_plane_sits_in_the_two_subnets_of_the_network_stack(assembly):
    network = assembly.template("gpufleet-p5-eks-network")
    network.has_resource_properties(
        "AWS::EC2::Subnet", {"AvailabilityZone": "us-west-2a", "CidrBlock": "10.50.255.224/28"}
    )
    network.has_resource_properties(
        "AWS::EC2::Subnet", {"AvailabilityZone": "us-west-2b", "CidrBlock": "10.50.255.240/28"}
    )
    cluster = next(
        resource
        for resource in assembly.template_json(STACK)["Resources"].values()
        if resource["Type"] == "AWS::EKS::Cluster"
    )
    subnets = cluster["Properties"]["ResourcesVpcConfig"]["SubnetIds"]
    assert [subnet["Fn::ImportValue"].split("ExportsOutputRef")[1][:19] for subnet in subnets] == [
        "ControlPlaneSubnet1",
        "ControlPlaneSubnet2",
    ]


def test_one_system_group_and_one_gpu_group_per_capacity_type(template, assembly):
    """The system group in the cluster's stack, the GPU groups in their own (stacks/eks_gpu_nodes_stack.py)."""
    template.resource_count_is("AWS::EKS::Nodegroup", 1)
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "AmiType": "AL2023_x86_64_STANDARD",
            "InstanceTypes": ["m6i.large"],
            "ScalingConfig": {"DesiredSize": 2, "MaxSize": 2, "MinSize": 2},
        },
    )
    gpu = assembly.template(GPU_STACK)
    gpu.resource_count_is("AWS::EKS::Nodegroup", 2)
    for capacity_type in ("ON_DEMAND", "SPOT"):
        gpu.has_resource_properties(
            "AWS::EKS::Nodegroup",
            {
                "AmiType": "AL2023_x86_64_NVIDIA",
                "CapacityType": capacity_type,
                "ClusterName": {"Fn::ImportValue": "gpufleet-p5-eks-eks:ExportsOutputRefClusterEB0386A796A0E3FE"},
                "ScalingConfig": {"DesiredSize": 1, "MaxSize": 1, "MinSize": 1},
                "Labels": {"nvidia.com/gpu.present": "true", "vpc.amazonaws.com/efa.present": "true"},
                "Taints": [{"Effect": "NO_SCHEDULE", "Key": "nvidia.com/gpu", "Value": "true"}],
                "LaunchTemplate": Match.object_like({"Id": Match.any_value()}),
                # The instance type is in the launch template: a group that names one too fails to create.
                "InstanceTypes": Match.absent(),
                "DiskSize": Match.absent(),
                "RemoteAccess": Match.absent(),
            },
        )


def test_a_gpu_node_group_short_of_capacity_rolls_back_only_its_own_stack(assembly, matrix_assembly):
    """EKS fails a managed node group's create when EC2 has no capacity (aws/containers-roadmap#2204), and
    CloudFormation rolls back the stack of the failed resource: the GPU groups, their launch templates and placement
    group are a stack of their own (as eksctl makes a stack per node group, eksctl-io/eksctl#4406), deployed after
    the cluster's, whose stack holds nothing that a GPU node group's failure takes with it."""
    for source, environment in ((assembly, "p5-eks"), (matrix_assembly, "eks-p5"), (matrix_assembly, "eks-g5")):
        cluster_stack, gpu_stack = f"gpufleet-{environment}-eks", f"gpufleet-{environment}-gpu-nodes"
        cluster = source.template_json(cluster_stack)["Resources"]
        gpu = source.template_json(gpu_stack)["Resources"]
        assert cluster_stack in source.manifest["artifacts"][gpu_stack]["dependencies"], environment
        assert gpu_stack not in source.manifest["artifacts"][cluster_stack].get("dependencies", []), environment
        assert sorted({resource["Type"] for resource in gpu.values()}) == [
            "AWS::EC2::LaunchTemplate",
            "AWS::EC2::PlacementGroup",
            "AWS::EKS::Nodegroup",
        ], environment
        assert [
            resource["Properties"]["AmiType"]
            for resource in cluster.values()
            if resource["Type"] == "AWS::EKS::Nodegroup"
        ] == ["AL2023_x86_64_STANDARD"], environment
        assert not [resource for resource in cluster.values() if resource["Type"] == "AWS::EC2::LaunchTemplate"]


def test_gpu_launch_templates_keep_the_managed_node_group_rules(launch_templates):
    assert len(launch_templates) == 2
    for data in launch_templates.values():
        assert "IamInstanceProfile" not in data
        assert "InstanceMarketOptions" not in data
        assert "SecurityGroupIds" not in data and "SecurityGroups" not in data
        assert "ImageId" not in data
        assert data["InstanceType"] == "p5.48xlarge"
        placement_group, attribute = data["Placement"]["GroupName"]["Fn::GetAtt"]
        assert placement_group.startswith("PlacementGroup") and attribute == "GroupName"
        interfaces = data["NetworkInterfaces"]
        assert len(interfaces) == 32
        for interface in interfaces:
            assert "SubnetId" not in interface
            efa_group, cluster_group = (group["Fn::ImportValue"] for group in interface["Groups"])
            assert efa_group.startswith("gpufleet-p5-eks-eks:ExportsOutputFnGetAttEfaSecurityGroup")
            assert (
                cluster_group
                == "gpufleet-p5-eks-eks:ExportsOutputFnGetAttClusterEB0386A7ClusterSecurityGroupIdC1CF079A"
            )
        assert [interface["InterfaceType"] for interface in interfaces] == ["efa"] + ["efa-only"] * 31


def test_the_nvme_drives_become_one_raid0_volume_and_2560_huge_pages_are_set_aside(launch_templates):
    """RAID0 through nodeadm's NodeConfig; 5120 MiB of 2 MiB pages (what the lab's workers request) by a script that
    cloud-init runs before nodeadm starts kubelet, kept across reboots in sysctl.d."""
    user_data = {base64.b64decode(data["UserData"]).decode() for data in launch_templates.values()}
    assert user_data == {
        "MIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="GPUFLEET"\n'
        "\n"
        "--GPUFLEET\n"
        "Content-Type: application/node.eks.aws\n"
        "\n"
        "---\n"
        "apiVersion: node.eks.aws/v1alpha1\n"
        "kind: NodeConfig\n"
        "spec:\n"
        "  instance:\n"
        "    localStorage:\n"
        "      strategy: RAID0\n"
        "\n"
        "--GPUFLEET\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n'
        "\n"
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        "echo 'vm.nr_hugepages = 2560' > /etc/sysctl.d/90-gpufleet-hugepages.conf\n"
        "sysctl -p /etc/sysctl.d/90-gpufleet-hugepages.conf\n"
        "\n"
        "--GPUFLEET--\n"
    }


def node_role_of(group: dict) -> str:
    """The logical id of a node group's role: a Fn::GetAtt in the cluster's stack, an import of the cluster stack's
    export (whose name holds the logical id) in the GPU nodes' stack."""
    role = group["Properties"]["NodeRole"]
    if "Fn::GetAtt" in role:
        return role["Fn::GetAtt"][0]
    (logical_id,) = re.findall(r"ExportsOutputFnGetAtt(NodeRole[0-9A-F]{8})Arn", role["Fn::ImportValue"])
    return logical_id


def test_every_node_group_shares_one_node_role_without_the_cni_policy(eks_templates):
    """What the nodes themselves need (EKS user guide, create-node-role): AmazonEKSWorkerNodePolicy (kubelet, and the
    Pod Identity agent's eks-auth:AssumeRoleForPodIdentity) and ECR. AmazonEKS_CNI_Policy is aws-node's alone."""
    for name, template in eks_templates.items():
        resources = template["Resources"]
        roles = {node_role_of(group) for group in of_type(template, "AWS::EKS::Nodegroup").values()}
        assert len(roles) == 1, name
        (role,) = roles
        assert [arn["Fn::Join"][1][-1] for arn in resources[role]["Properties"]["ManagedPolicyArns"]] == [
            ":iam::aws:policy/AmazonEKSWorkerNodePolicy",
            ":iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
        ], name


def merged(source, environment: str) -> dict:
    """An eks environment's cluster stack and GPU nodes stack as one template (their logical ids do not meet)."""
    cluster = source.template_json(f"gpufleet-{environment}-eks")["Resources"]
    gpu = source.template_json(f"gpufleet-{environment}-gpu-nodes")["Resources"]
    assert not set(cluster) & set(gpu), environment
    return {"Resources": {**cluster, **gpu}}


@pytest.fixture(scope="module")
def eks_templates(assembly, matrix_assembly, block_template) -> dict[str, dict]:
    """Every eks environment the tests synthesize, its two stacks merged: the shipped environment, the matrix's two
    and the Capacity Block's."""
    names = sorted(
        name.removeprefix("gpufleet-").removesuffix("-eks")
        for source in (assembly, matrix_assembly)
        for name in source.stack_names
        if name.endswith("-eks")
    )
    assert names == ["eks-g5", "eks-p5", "p5-eks"]
    return {
        "gpufleet-p5-eks-eks": merged(assembly, "p5-eks"),
        "gpufleet-eks-p5-eks": merged(matrix_assembly, "eks-p5"),
        "gpufleet-eks-g5-eks": merged(matrix_assembly, "eks-g5"),
        "gpufleet-block-eks": block_template,
    }


def of_type(template: dict, resource_type: str) -> dict[str, dict]:
    return {name: resource for name, resource in template["Resources"].items() if resource["Type"] == resource_type}


def test_no_pod_off_the_host_network_reaches_the_instance_metadata_of_a_gpu_node(eks_templates):
    """Hop limit 1 on every GPU node group's launch template: IMDS's answer to a pod in its own network namespace
    dies one hop short, so such a pod never gets the node role's credentials. The system group has no launch template:
    EKS's own for an AL2023 group, hop limit 1 (EKS user guide, al2023)."""
    for name, template in eks_templates.items():
        launch_templates = of_type(template, "AWS::EC2::LaunchTemplate")
        groups = of_type(template, "AWS::EKS::Nodegroup").values()
        gpu_groups = [group for group in groups if group["Properties"]["AmiType"] == "AL2023_x86_64_NVIDIA"]
        assert gpu_groups and len(launch_templates) == len(gpu_groups), name
        assert sorted(group["Properties"]["LaunchTemplate"]["Id"]["Ref"] for group in gpu_groups) == sorted(
            launch_templates
        ), name
        for logical_id, launch_template in launch_templates.items():
            assert launch_template["Properties"]["LaunchTemplateData"]["MetadataOptions"] == {
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 1,
                "HttpTokens": "required",
            }, (name, logical_id)
        (system,) = [group["Properties"] for group in groups if group not in gpu_groups]
        assert system["AmiType"] == "AL2023_x86_64_STANDARD" and "LaunchTemplate" not in system, name


def cni_policy_holders(template: dict) -> list[str]:
    return [
        logical_id
        for logical_id, role in of_type(template, "AWS::IAM::Role").items()
        if any("AmazonEKS_CNI_Policy" in json.dumps(arn) for arn in role["Properties"].get("ManagedPolicyArns", []))
    ]


def test_the_vpc_cni_gets_its_policy_through_its_own_pod_identity_before_any_node(eks_templates):
    """EKS user guide, cni-iam-role ("We recommend that you assign it to a separate role"), pod-id-role (the trust
    policy), add-ons-iam (an add-on's Pod Identity association). aws-node must have its credentials before a node
    can give any pod an address, and crashes without the agent (aws/amazon-vpc-cni-k8s#3840): every node group, and
    the node role that loses the policy, come after both add-ons."""
    for name, template in eks_templates.items():
        resources = template["Resources"]
        add_ons = {
            resource["Properties"]["AddonName"]: logical_id
            for logical_id, resource in of_type(template, "AWS::EKS::Addon").items()
        }
        assert sorted(add_ons) == ["eks-pod-identity-agent", "vpc-cni"], name
        cni = resources[add_ons["vpc-cni"]]
        assert cni["DependsOn"] == [add_ons["eks-pod-identity-agent"]]
        properties = cni["Properties"]
        (association,) = properties["PodIdentityAssociations"]
        assert association["ServiceAccount"] == "aws-node"
        assert (properties["ResolveConflicts"], properties["PreserveOnDelete"]) == ("OVERWRITE", True)
        role_id = association["RoleArn"]["Fn::GetAtt"][0]
        assert cni_policy_holders(template) == [role_id], name
        (cluster_id,) = of_type(template, "AWS::EKS::Cluster")
        assert resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
            {
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-arn": {"Fn::GetAtt": [cluster_id, "Arn"]},
                        "aws:RequestTag/kubernetes-namespace": "kube-system",
                        "aws:RequestTag/kubernetes-service-account": "aws-node",
                    }
                },
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
            }
        ]
        groups = of_type(template, "AWS::EKS::Nodegroup").values()
        (node_role,) = {node_role_of(group) for group in groups}
        assert add_ons["vpc-cni"] in resources[node_role]["DependsOn"], name
        # The system group waits for both in its stack; the GPU groups' stack comes after the cluster's whole
        # (test_a_gpu_node_group_short_of_capacity_rolls_back_only_its_own_stack).
        (system,) = [group for group in groups if group["Properties"]["AmiType"] == "AL2023_x86_64_STANDARD"]
        assert set(add_ons.values()) <= set(system["DependsOn"]), name


@pytest.fixture(scope="module")
def existing_vpc_template(tmp_path_factory):
    """An eks environment in an existing VPC (no network stack: the node subnet and the control-plane subnets are the
    file's, imported by id), every add-on on, in eu-south-2, whose EKS add-on registry is not 602401143452's."""
    document = {
        **{key: value for key, value in VALID_EKS.items() if key != "network"},
        "name": "existing",
        "region": "eu-south-2",
        "availability_zone": "eu-south-2a",
        "network": {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d"},
        "eks": {
            **{key: value for key, value in VALID_EKS["eks"].items() if key != "control_plane_availability_zones"},
            "control_plane_subnet_ids": ["subnet-0a1b2c3e", "subnet-0a1b2c3f"],
        },
    }
    directory = tmp_path_factory.mktemp("existing-vpc")
    environments = directory / "environments"
    environments.mkdir()
    write(environments, document, "existing")
    assembly = synthesize(directory / "cdk.out", environments)
    assert assembly.stack_names == ["gpufleet-existing-eks", "gpufleet-existing-gpu-nodes"]
    return merged(assembly, "existing")


def test_an_existing_vpc_gives_the_cluster_its_named_control_plane_subnets(existing_vpc_template):
    template = Template.from_json(existing_vpc_template)
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {"ResourcesVpcConfig": Match.object_like({"SubnetIds": ["subnet-0a1b2c3e", "subnet-0a1b2c3f"]})},
    )
    template.has_resource_properties(
        "AWS::EKS::Nodegroup", {"CapacityType": "ON_DEMAND", "Subnets": ["subnet-0a1b2c3d"]}
    )
    # The kubectl handler and its Provider framework run in the file's control-plane subnets (aws_eks_v2's choice):
    # gpufleet preflight's eks-egress checks their route out.
    for logical_id in KUBECTL_FUNCTIONS:
        subnets = existing_vpc_template["Resources"][logical_id]["Properties"]["VpcConfig"]["SubnetIds"]
        assert subnets == ["subnet-0a1b2c3e", "subnet-0a1b2c3f"], logical_id


def test_the_efa_plugin_pulls_from_the_regions_own_add_on_registry(existing_vpc_template):
    """eu-south-2's registry is account 455263428931's (EKS user guide, add-ons-images), not 602401143452's: from the
    old fallback's account no node there would advertise vpc.amazonaws.com/efa."""
    (efa,) = [
        resource["Properties"]
        for resource in existing_vpc_template["Resources"].values()
        if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart"
        and resource["Properties"]["Release"] == "aws-efa-k8s-device-plugin"
    ]
    pieces = efa["Values"]["Fn::Join"][1]
    assert pieces[:2] == ['{"image":{"repository":"455263428931.dkr.ecr.eu-south-2.', {"Ref": "AWS::URLSuffix"}]


KUBECTL_FUNCTIONS = ("ClusterKubectlProviderHandler2E05C68A", "ClusterKubectlProviderframeworkonEvent68E0CF80")
AWS_CUSTOM_RESOURCE_FUNCTION = "AWS679f53fac002430cb0da5b7982bd22872D164C4C"


def test_the_kubectl_handler_and_its_provider_run_in_the_control_plane_subnets_which_route_out(assembly):
    """Issue 30, D1. aws_eks_v2 puts both functions in the cluster's private subnets whenever the endpoint has private
    access (aws-cdk-lib 2.275 aws-eks-v2/lib/cluster.js: `kubectlSubnets = privateSubnets`): here the network stack's
    control-plane subnets. Each of those has a default route to the VPC's NAT gateway (the charts' repositories, the
    EKS, Lambda and STS APIs), the S3 gateway endpoint on its route table (the chart asset, CloudFormation's response
    URL), and the interface endpoints (STS among them) answer it on 443. The functions' own group lets HTTPS out, and
    the cluster's groups let it in to the private endpoint."""
    resources = assembly.template_json(STACK)["Resources"]
    network = assembly.template_json("gpufleet-p5-eks-network")["Resources"]
    for logical_id in KUBECTL_FUNCTIONS:
        vpc_config = resources[logical_id]["Properties"]["VpcConfig"]
        assert [subnet["Fn::ImportValue"].split("ExportsOutputRef")[1][:19] for subnet in vpc_config["SubnetIds"]] == [
            "ControlPlaneSubnet1",
            "ControlPlaneSubnet2",
        ], logical_id
        assert vpc_config["SecurityGroupIds"] == [{"Fn::GetAtt": ["KubectlSecurityGroupF060FCAE", "GroupId"]}]
    group = resources["KubectlSecurityGroupF060FCAE"]["Properties"]
    assert [
        (rule["CidrIp"], rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) for rule in group["SecurityGroupEgress"]
    ] == [("0.0.0.0/0", "tcp", 443, 443)]
    admitted = sorted(
        json.dumps(rule["Properties"]["GroupId"])
        for rule in resources.values()
        if rule["Type"] == "AWS::EC2::SecurityGroupIngress"
        and rule["Properties"].get("SourceSecurityGroupId")
        == {"Fn::GetAtt": ["KubectlSecurityGroupF060FCAE", "GroupId"]}
        and (rule["Properties"]["FromPort"], rule["Properties"]["ToPort"]) == (443, 443)
    )
    assert admitted == [
        '{"Fn::GetAtt": ["ClusterControlPlaneSecurityGroupD274242C", "GroupId"]}',
        '{"Fn::GetAtt": ["ClusterEB0386A7", "ClusterSecurityGroupId"]}',
    ]
    (nat_gateway,) = [name for name, resource in network.items() if resource["Type"] == "AWS::EC2::NatGateway"]
    tables = {"ControlPlaneSubnet1RouteTable5339B122", "ControlPlaneSubnet2RouteTableDD876247"}
    routes = [
        resource["Properties"]
        for resource in network.values()
        if resource["Type"] == "AWS::EC2::Route" and resource["Properties"]["RouteTableId"]["Ref"] in tables
    ]
    assert sorted(
        (route["RouteTableId"]["Ref"], route["DestinationCidrBlock"], route["NatGatewayId"]) for route in routes
    ) == [
        ("ControlPlaneSubnet1RouteTable5339B122", "0.0.0.0/0", {"Ref": nat_gateway}),
        ("ControlPlaneSubnet2RouteTableDD876247", "0.0.0.0/0", {"Ref": nat_gateway}),
    ]
    endpoints = [resource["Properties"] for resource in network.values() if resource["Type"] == "AWS::EC2::VPCEndpoint"]
    (s3,) = [endpoint for endpoint in endpoints if endpoint.get("VpcEndpointType") == "Gateway"]
    assert tables <= {table["Ref"] for table in s3["RouteTableIds"]}
    (sts,) = [endpoint for endpoint in endpoints if endpoint["ServiceName"] == "com.amazonaws.us-west-2.sts"]
    assert sts["PrivateDnsEnabled"] is True
    (endpoint_group,) = sts["SecurityGroupIds"]
    ingress = network[endpoint_group["Fn::GetAtt"][0]]["Properties"]["SecurityGroupIngress"]
    assert [(rule["CidrIp"], rule["FromPort"], rule["ToPort"]) for rule in ingress] == [("10.50.0.0/16", 443, 443)]


def test_the_kubectl_functions_declare_what_they_call(assembly):
    """For the reachability check (stacks/constructs/calls.py): the charts of p5-eks's add-ons (the EFA and NVIDIA
    device plugins from their GitHub Pages repositories, the MPI operator's from the CDK assets bucket)."""
    resources = assembly.template_json(STACK)["Resources"]
    handler, framework = (resources[logical_id]["Metadata"]["gpufleet:calls"] for logical_id in KUBECTL_FUNCTIONS)
    assert sorted(handler) == ["eks", "https://aws.github.io", "https://nvidia.github.io", "s3", "sts"]
    assert sorted(framework) == ["lambda", "s3"]


def test_every_function_of_an_eks_stack_logs_to_a_group_cdk_destroy_removes(eks_templates):
    """Issue 30: without a log group of its own a function logs to /aws/lambda/NAME, which Lambda makes and nothing
    deletes. aws_eks_v2 passes the kubectl functions none, so gpufleet sets their LoggingConfig.LogGroup."""
    for name, template in eks_templates.items():
        resources = template["Resources"]
        functions = of_type(template, "AWS::Lambda::Function")
        # The kubectl functions where there are add-ons, and everywhere the one function of aws-cdk-lib's
        # AwsCustomResource (the control-plane log group's calls).
        expected = [*KUBECTL_FUNCTIONS, AWS_CUSTOM_RESOURCE_FUNCTION]
        if name in ("gpufleet-p5-eks-eks", "gpufleet-eks-p5-eks"):
            assert sorted(functions) == sorted(expected), name
        else:
            assert sorted(functions) == [AWS_CUSTOM_RESOURCE_FUNCTION], name
        for logical_id, function in functions.items():
            group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
            assert resources[group]["Type"] == "AWS::Logs::LogGroup", (name, logical_id)
            assert resources[group]["DeletionPolicy"] == "Delete", (name, logical_id)
            assert resources[group]["Properties"]["RetentionInDays"] == 30, (name, logical_id)
            assert "LogGroupName" not in resources[group]["Properties"], (name, logical_id)


def control_plane_log_calls(template: dict) -> dict[str, dict]:
    """The control-plane log group's SDK calls (stacks/constructs/eks_control_plane_logs.py), by custom resource
    (Create, Retention) and event (Create, Update, Delete), parsed."""
    return {
        logical_id.removeprefix("ControlPlaneLogs")[:-8]: {
            event: json.loads(resource["Properties"][event])
            for event in ("Create", "Update", "Delete")
            if event in resource["Properties"]
        }
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "Custom::AWS" and logical_id.startswith("ControlPlaneLogs")
    }


def test_the_control_plane_log_group_is_made_before_the_cluster_adopted_if_left_and_deleted_with_it(assembly):
    """EKS writes to /aws/eks/NAME/cluster and makes it again when a deleted cluster writes a last line
    (terraform-aws-eks#2486, #2763): an AWS::Logs::LogGroup of that name would then fail the next deploy "already
    exists". So the group is made by CreateLogGroup with "already exists" taken for success, given the file's
    retention on every deploy, deleted with the stack ("not found" taken for success), all before the cluster."""
    template = assembly.template_json(STACK)
    resources = template["Resources"]
    assert not [
        logical_id
        for logical_id, resource in of_type(template, "AWS::Logs::LogGroup").items()
        if "LogGroupName" in resource["Properties"]
    ]
    name = {"logGroupName": "/aws/eks/gpufleet-p5-eks/cluster"}
    physical_id = {"id": "/aws/eks/gpufleet-p5-eks/cluster"}
    create = {
        "action": "createLogGroup",
        "service": "CloudWatchLogs",
        "ignoreErrorCodesMatching": "ResourceAlreadyExistsException",
        "parameters": name,
        "physicalResourceId": physical_id,
    }
    retention = {
        "action": "putRetentionPolicy",
        "service": "CloudWatchLogs",
        "parameters": {**name, "retentionInDays": 30},
        "physicalResourceId": physical_id,
    }
    assert control_plane_log_calls(template) == {
        "Create": {
            "Create": create,
            "Update": create,
            "Delete": {
                "action": "deleteLogGroup",
                "service": "CloudWatchLogs",
                "ignoreErrorCodesMatching": "ResourceNotFoundException",
                "parameters": name,
            },
        },
        "Retention": {"Create": retention, "Update": retention},
    }
    (cluster,) = of_type(template, "AWS::EKS::Cluster").values()
    custom = [logical_id for logical_id in resources if logical_id.startswith("ControlPlaneLogs")]
    assert set(custom) <= set(cluster["DependsOn"])
    retention_id = next(logical_id for logical_id in custom if logical_id.startswith("ControlPlaneLogsRetention"))
    create_id = next(logical_id for logical_id in custom if logical_id.startswith("ControlPlaneLogsCreate"))
    assert create_id in resources[retention_id]["DependsOn"]
    arn = {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":logs:us-west-2:123456789012:log-group:/aws/eks/gpufleet-p5-eks/cluster:*",
            ],
        ]
    }
    granted = sorted(
        (statement["Action"], json.dumps(statement["Resource"]))
        for logical_id in custom
        if resources[logical_id]["Type"] == "AWS::IAM::Policy"
        for statement in resources[logical_id]["Properties"]["PolicyDocument"]["Statement"]
    )
    assert granted == [
        (action, json.dumps(arn))
        for action in ("logs:CreateLogGroup", "logs:DeleteLogGroup", "logs:PutRetentionPolicy")
    ]


def test_the_error_codes_taken_for_success_are_the_ones_cloudwatch_logs_answers():
    """botocore's CloudWatch Logs model: CreateLogGroup answers ResourceAlreadyExistsException for a group that
    exists, DeleteLogGroup ResourceNotFoundException for one that does not."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("logs")
    errors = {
        operation: [shape.name for shape in model.operation_model(operation).error_shapes]
        for operation in ("CreateLogGroup", "DeleteLogGroup")
    }
    assert "ResourceAlreadyExistsException" in errors["CreateLogGroup"]
    assert "ResourceNotFoundException" in errors["DeleteLogGroup"]


def eks1_acknowledgements(template: dict) -> list[tuple[str, str]]:
    return [
        (resource["Type"], rule["reason"])
        for resource in template["Resources"].values()
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
        if rule["id"] == "AwsSolutions-EKS1"
    ]


def test_the_endpoint_stays_private_without_public_networks(assembly):
    template = assembly.template_json(STACK)
    (cluster,) = [resource for resource in template["Resources"].values() if resource["Type"] == "AWS::EKS::Cluster"]
    assert "PublicAccessCidrs" not in cluster["Properties"]["ResourcesVpcConfig"]
    assert eks1_acknowledgements(template) == []


def test_public_networks_make_the_endpoint_public_to_them_and_private(matrix_assembly):
    """eks-p5 names two networks (tests/stacks/matrix.py). The AwsSolutions-EKS1 acknowledgement is on its cluster
    only (cdk-nag 3.0.2's rule does not recognise aws_eks_v2's CfnCluster, so nothing fails without it today)."""
    stack = matrix_assembly.template("gpufleet-eks-p5-eks")
    stack.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Name": "gpufleet-eks-p5",
            "ResourcesVpcConfig": Match.object_like(
                {
                    "EndpointPrivateAccess": True,
                    "EndpointPublicAccess": True,
                    "PublicAccessCidrs": ["1.2.3.0/24", "1.2.4.8/32"],
                }
            ),
        },
    )
    retention = control_plane_log_calls(matrix_assembly.template_json("gpufleet-eks-p5-eks"))["Retention"]["Create"]
    assert retention["parameters"] == {"logGroupName": "/aws/eks/gpufleet-eks-p5/cluster", "retentionInDays": 90}
    assert eks1_acknowledgements(matrix_assembly.template_json("gpufleet-eks-p5-eks")) == [
        (
            "AWS::EKS::Cluster",
            "The environment file names the networks that may reach the EKS cluster's public endpoint "
            "(eks.endpoint_public_cidrs, public IPv4 blocks no wider than /8); every request still needs an admin "
            "principal's access entry",
        )
    ]


@pytest.fixture(scope="module")
def block_template(tmp_path_factory):
    """An eks environment in a Capacity Block (p4d, 2 nodes, the add-ons off to keep the synthesis short)."""
    directory = tmp_path_factory.mktemp("block")
    document = changed(
        {
            "name": "block",
            "capacity.target": 2,
            "capacity.on_demand": 2,
            "capacity.capacity_block": {
                "reservation_id": "cr-0123456789abcdef0",
                "start": "2099-01-05T11:30:00Z",
                "end": "2099-01-12T11:30:00Z",
            },
            "eks.add_ons": {
                "efa_device_plugin": False,
                "nvidia_device_plugin": False,
                "mpi_operator": False,
                "fsx_csi_driver": False,
            },
        },
        base=VALID_EKS,
    )
    environments = directory / "environments"
    environments.mkdir()
    write(environments, document, "block")
    return merged(synthesize(directory / "cdk.out", environments), "block")


def test_a_capacity_block_gets_one_capacity_block_node_group_that_eks_scales(block_template):
    """EKS user guide, capacity-blocks-mng: capacity type CAPACITY_BLOCK; a desired size given at create time is
    reached once the block is active; EKS scales the group in to zero itself (so the minimum is 0)."""
    groups = {
        name: resource["Properties"]
        for name, resource in block_template["Resources"].items()
        if resource["Type"] == "AWS::EKS::Nodegroup" and "LaunchTemplate" in resource["Properties"]
    }
    assert len(groups) == 1
    [(name, group)] = groups.items()
    # Named after the block: a new block makes a new group, created with the block's nodes as its desired size. (The
    # logical id lost its Cluster/Nodegroup prefix when the GPU groups moved to a stack of their own: a construct of
    # that stack, no longer the cluster's child.)
    assert name.startswith("CapacityBlock0123456789abcdef0GpuNodes")
    assert group["CapacityType"] == "CAPACITY_BLOCK"
    assert group["ScalingConfig"] == {"DesiredSize": 2, "MaxSize": 2, "MinSize": 0}


def test_a_capacity_blocks_launch_template_targets_the_block_as_eks_requires(block_template):
    [data] = [
        resource["Properties"]["LaunchTemplateData"]
        for resource in block_template["Resources"].values()
        if resource["Type"] == "AWS::EC2::LaunchTemplate"
    ]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert data["InstanceType"] == "p4d.24xlarge"
    # EC2 places a block's instances: no placement group, as on the fleet flavour.
    assert "Placement" not in data
