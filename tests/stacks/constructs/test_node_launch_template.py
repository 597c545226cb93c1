"""The node launch template on its own, with EFA and without."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from gpufleet.catalog import load_catalog
from stacks.constructs.node_launch_template import NodeLaunchTemplate
from tests.stacks.constructs.conftest import ZONE, environment

SUBNET, SECURITY_GROUP = "subnet-0123456789abcdef0", "sg-0123456789abcdef0"


def launch_template_data(stack, env):
    security_group = ec2.SecurityGroup.from_security_group_id(stack, "Group", SECURITY_GROUP)
    subnet = ec2.Subnet.from_subnet_attributes(stack, "Subnet", subnet_id=SUBNET, availability_zone=ZONE)
    placement_group = ec2.PlacementGroup.from_placement_group_name(stack, "Placement", "probe-cluster")
    NodeLaunchTemplate(
        stack,
        "Node",
        environment=env,
        instance=load_catalog()[env.instance_type],
        subnet=subnet,
        security_group=security_group,
        placement_group=placement_group,
        node_tags={"Name": "probe-node"},
    )
    (template,) = Template.from_stack(stack).find_resources("AWS::EC2::LaunchTemplate").values()
    return template["Properties"]["LaunchTemplateData"]


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
