"""The node launch template on its own: with EFA and without, and for every entry of the environment matrix."""

from __future__ import annotations

import base64
import gzip

import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from gpufleet.catalog import load_catalog
from gpufleet.user_data import launch_template_user_data
from stacks.constructs.node_launch_template import NodeLaunchTemplate
from tests.stacks.constructs.conftest import ZONE, bare_stack, environment
from tests.stacks.matrix import FLEET_ENTRIES

SUBNET, SECURITY_GROUP = "subnet-0123456789abcdef0", "sg-0123456789abcdef0"


def add_launch_template(stack, env, node_tags=None) -> NodeLaunchTemplate:
    security_group = ec2.SecurityGroup.from_security_group_id(stack, "Group", SECURITY_GROUP)
    subnet = ec2.Subnet.from_subnet_attributes(stack, "Subnet", subnet_id=SUBNET, availability_zone=ZONE)
    placement_group = ec2.PlacementGroup.from_placement_group_name(stack, "Placement", "probe-cluster")
    instance = load_catalog()[env.instance_type]
    block = env.capacity.capacity_block
    return NodeLaunchTemplate(
        stack,
        "Node",
        environment_name=env.name,
        instance=instance,
        efa=env.efa,
        ami=env.ami,
        root_volume_gib=env.root_volume_gib,
        key_pair=env.key_pair,
        backend=env.fleet.backend,
        reservation=env.capacity.reservation,
        capacity_block_id=block.reservation_id if block else None,
        subnet=subnet,
        security_group=security_group,
        placement_group=placement_group,
        node_tags=node_tags or {"Name": "probe-node"},
        user_data=launch_template_user_data(env, instance),
    )


def data_of(template: Template) -> dict:
    (launch_template,) = template.find_resources("AWS::EC2::LaunchTemplate").values()
    return launch_template["Properties"]["LaunchTemplateData"]


def launch_template_data(stack, env):
    add_launch_template(stack, env)
    return data_of(Template.from_stack(stack))


def interface(card, device, interface_type):
    # An efa-only interface has no IP address, so the template says nothing of a public one.
    public_address = {} if interface_type == "efa-only" else {"AssociatePublicIpAddress": False}
    return {
        **public_address,
        "DeleteOnTermination": True,
        "Description": f"gpufleet node network card {card}",
        "DeviceIndex": device,
        "Groups": [SECURITY_GROUP],
        "InterfaceType": interface_type,
        "NetworkCardIndex": card,
        "SubnetId": SUBNET,
    }


def test_with_efa_a_p4d_node_gets_efa_on_card_0_and_efa_only_on_its_three_other_cards(stack):
    data = launch_template_data(stack, environment())
    assert data["NetworkInterfaces"] == [interface(0, 0, "efa")] + [interface(c, 0, "efa-only") for c in (1, 2, 3)]


def test_without_efa_a_node_gets_one_plain_interface(stack):
    data = launch_template_data(stack, environment(efa=False))
    assert data["NetworkInterfaces"] == [interface(0, 0, "interface")]


def test_a_node_launches_the_fixed_image_into_the_placement_group_with_imdsv2_and_an_encrypted_gp3_root(stack):
    data = launch_template_data(stack, environment())
    assert data["ImageId"] == "ami-0123456789abcdef0"
    assert data["InstanceType"] == "p4d.24xlarge"
    assert data["Placement"] == {"GroupName": "probe-cluster"}
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 2,
        "HttpTokens": "required",
    }
    (root,) = data["BlockDeviceMappings"]
    assert root["Ebs"] == {
        "DeleteOnTermination": True,
        "Encrypted": True,
        "Iops": 3000,
        "Throughput": 125,
        "VolumeSize": 200,
        "VolumeType": "gp3",
    }
    assert data["TagSpecifications"] == [
        {"ResourceType": kind, "Tags": [{"Key": "Name", "Value": "probe-node"}]}
        for kind in ("instance", "volume", "network-interface")
    ]


def test_an_image_from_ssm_becomes_a_parameter_resolved_at_deploy_time(stack):
    launch_template_data(stack, environment(ami={"ssm_parameter": "/gpufleet/ami/p4d-ubuntu1804-cuda11"}))
    parameters = Template.from_stack(stack).to_json()["Parameters"]
    (name,) = [name for name in parameters if name.startswith("NodeNodeImageParameter")]
    assert parameters[name] == {
        "Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
        "Default": "/gpufleet/ami/p4d-ubuntu1804-cuda11",
        "Description": "SSM parameter holding the node AMI id (written by the gpufleet AMI pipeline)",
    }


# The environment matrix (tests/stacks/matrix.py), each entry's launch template alone in a bare stack, synthesized once.
@pytest.fixture(scope="module", params=FLEET_ENTRIES)
def matrix_launch_template(request, matrix) -> tuple[str, dict]:
    environment = matrix[request.param]
    return request.param, launch_template_data(bare_stack(environment.region), environment)


def efa_cards(count: int) -> list[dict]:
    """EFA with ENA on card 0, efa-only (no IP address) on every further card, all at device 0."""
    return [interface(0, 0, "efa")] + [interface(card, 0, "efa-only") for card in range(1, count)]


# One interface per network card of the catalog type (p4d and p4de 4, p5 32, g5 1), efa-only beyond card 0 as the
# catalog says, and one plain interface where efa is off.
MATRIX_INTERFACES = {
    "spot-p4d": efa_cards(4),
    "request-p4de": [interface(0, 0, "interface")],
    "block-p5": efa_cards(32),
    "asg-g5": [interface(0, 0, "efa")],
    "small-g5": [interface(0, 0, "efa")],
}


def test_every_matrix_entry_gets_one_interface_per_network_card_of_its_type(matrix_launch_template):
    name, data = matrix_launch_template
    assert data["NetworkInterfaces"] == MATRIX_INTERFACES[name]


# The image from SSM: a parameter CloudFormation resolves at deploy time.
SSM_IMAGE = {"Ref": "NodeNodeImageParameter5454208B"}
# Instance type, image, key pair, and the root volume on the image's root device.
MATRIX_NODES = {
    "spot-p4d": ("p4d.24xlarge", SSM_IMAGE, "ops-key", "/dev/sda1", 300),
    "request-p4de": ("p4de.24xlarge", "ami-0123456789abcdef0", None, "/dev/xvda", 200),
    "block-p5": ("p5.48xlarge", "ami-0fedcba9876543210", None, "/dev/nvme0n1", 200),
    "asg-g5": ("g5.48xlarge", SSM_IMAGE, None, "/dev/sda1", 200),
    # The Deep Learning AMI's public parameter, the same way (gpufleet/deep_learning_ami.py).
    "small-g5": ("g5.8xlarge", SSM_IMAGE, None, "/dev/sda1", 200),
}


def test_every_matrix_entry_launches_its_type_and_image_with_its_key_and_root_volume(matrix_launch_template):
    name, data = matrix_launch_template
    (root,) = data["BlockDeviceMappings"]
    assert (
        data["InstanceType"],
        data["ImageId"],
        data.get("KeyName"),
        root["DeviceName"],
        root["Ebs"]["VolumeSize"],
    ) == MATRIX_NODES[name]


def test_the_node_role_and_profile_and_the_template_keep_their_logical_ids_and_settings(stack):
    """The logical ids follow the construct path (Node/NodeRole, Node/NodeInstanceProfile, Node/Resource, the cluster
    stack's too): a new one makes CloudFormation replace the resource, and a new launch template a new node group
    configuration. The nodes may use SSM and the CloudWatch agent, through the instance profile of their role."""
    add_launch_template(stack, environment())
    resources = Template.from_stack(stack).to_json()["Resources"]
    data = resources["Node8BE85138"]["Properties"]["LaunchTemplateData"]
    assert (resources["Node8BE85138"]["Type"], data["EbsOptimized"], data["IamInstanceProfile"]) == (
        "AWS::EC2::LaunchTemplate",
        True,
        {"Arn": {"Fn::GetAtt": ["NodeNodeInstanceProfileDC384D82", "Arn"]}},
    )
    assert resources["NodeNodeInstanceProfileDC384D82"] == {
        "Type": "AWS::IAM::InstanceProfile",
        "Properties": {"Roles": [{"Ref": "NodeNodeRole8BD22AAE"}]},
    }

    def managed(policy):
        return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":iam::aws:policy/{policy}"]]}

    assert resources["NodeNodeRole8BD22AAE"] == {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}}
                ],
                "Version": "2012-10-17",
            },
            "Description": "gpufleet probe nodes: SSM managed instance and CloudWatch agent",
            # Not CloudWatchAgentServerPolicy (any log group): stacks/constructs/node_monitoring.py scopes the agent.
            "ManagedPolicyArns": [managed("AmazonSSMManagedInstanceCore")],
        },
    }


def test_the_node_roles_managed_policy_is_acknowledged_with_its_reason(stack):
    """cdk-nag's IAM4 finding on the AWS managed policy, acknowledged on the role (synthesis of every
    environment fails on an unacknowledged one); the reasons go into the template metadata for the audit trail."""
    launch_template = add_launch_template(stack, environment())
    acknowledged = [
        item
        for entry in launch_template.role.node.metadata
        if entry.type == "aws:cdk:acknowledged-rules"
        for item in entry.data.items()
    ]
    assert acknowledged == [
        (
            "Annotation::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
            "AWS's minimal, maintained policy for SSM Session Manager access, which replaces SSH keys and public IPs "
            "on gpufleet nodes",
        ),
    ]


def test_node_tags_are_written_in_key_order_on_nodes_volumes_and_interfaces(stack):
    """Sorted, so the same tags in another order are the same launch template (no new version)."""
    add_launch_template(stack, environment(), node_tags={"team": "research", "Name": "probe-node", "cost": "gpu"})
    tags = [
        {"Key": "Name", "Value": "probe-node"},
        {"Key": "cost", "Value": "gpu"},
        {"Key": "team", "Value": "research"},
    ]
    assert data_of(Template.from_stack(stack))["TagSpecifications"] == [
        {"ResourceType": "instance", "Tags": tags},
        {"ResourceType": "volume", "Tags": tags},
        {"ResourceType": "network-interface", "Tags": tags},
    ]


# Where each entry's nodes are placed and which capacity they launch into: the cluster placement group except in a
# Capacity Block (whose instances are placed already), the block's market type and id, and a reservation the launch
# template targets for a Spot Fleet (an Auto Scaling group names its reservations itself: asg-g5 has none here).
PLACEMENT = {"GroupName": "probe-cluster"}
MATRIX_CAPACITY = {
    "spot-p4d": (PLACEMENT, None, None),
    "request-p4de": (
        PLACEMENT,
        None,
        {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {
                "CapacityReservationResourceGroupArn": "arn:aws:resource-groups:us-west-2:123456789012:group/"
                "gpu-reservations"
            },
        },
    ),
    "block-p5": (
        None,
        {"MarketType": "capacity-block"},
        {"CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}},
    ),
    "asg-g5": (PLACEMENT, None, None),
    "small-g5": (
        PLACEMENT,
        None,
        {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"},
        },
    ),
}


def test_every_matrix_entry_is_placed_and_launches_into_its_capacity(matrix_launch_template):
    name, data = matrix_launch_template
    assert (
        data.get("Placement"),
        data.get("InstanceMarketOptions"),
        data.get("CapacityReservationSpecification"),
    ) == MATRIX_CAPACITY[name]


def test_the_nodes_user_data_is_the_gzip_compressed_setup_script_of_their_environment_and_type(stack):
    """EC2 wants UserData base64-encoded; cloud-init runs the gzip-compressed bash script (gpufleet/user_data.py,
    tests/gpufleet/test_user_data.py has the script itself), which names the environment and instance type."""
    data = launch_template_data(stack, environment())
    script = gzip.decompress(base64.b64decode(data["UserData"])).decode()
    assert script.startswith(
        "#!/bin/bash\n# gpufleet node user data for environment probe (p4d.24xlarge), from gpufleet/user_data.py.\n"
    )
    assert "export GPUFLEET_ENVIRONMENT=probe\nexport GPUFLEET_INSTANCE_TYPE=p4d.24xlarge\n" in script
