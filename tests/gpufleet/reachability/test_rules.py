"""The reachability rules over small templates: a network that works, and each way to break a route planted in it,
caught with its one line.

The network (stack "net", region eu-west-1): a VPC with DNS on; a public subnet (public addresses on launch) routing
to the internet gateway and holding the NAT gateway; a private subnet routing to the NAT gateway; an isolated subnet
with no route out. The S3 gateway endpoint is on the private and isolated tables; an sts interface endpoint with
private DNS sits in the isolated subnet, its security group admitting HTTPS from the VPC. The caller, a Lambda
function in the isolated subnet, may send HTTPS anywhere.
"""

from __future__ import annotations

import copy

import pytest

from gpufleet.reachability.rules import Findings, check
from gpufleet.reachability.templates import StackTemplate, read_assembly


def ref(name: str) -> dict:
    return {"Ref": name}


def group_id(name: str) -> dict:
    return {"Fn::GetAtt": [name, "GroupId"]}


HTTPS_ANYWHERE = {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "CidrIp": "0.0.0.0/0"}
NETWORK = {
    "Vpc": {
        "Type": "AWS::EC2::VPC",
        "Properties": {"CidrBlock": "10.0.0.0/16", "EnableDnsSupport": True, "EnableDnsHostnames": True},
    },
    "Igw": {"Type": "AWS::EC2::InternetGateway"},
    "IgwAttachment": {
        "Type": "AWS::EC2::VPCGatewayAttachment",
        "Properties": {"VpcId": ref("Vpc"), "InternetGatewayId": ref("Igw")},
    },
    "Public": {
        "Type": "AWS::EC2::Subnet",
        "Properties": {"VpcId": ref("Vpc"), "CidrBlock": "10.0.1.0/24", "MapPublicIpOnLaunch": True},
    },
    "PublicTable": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": ref("Vpc")}},
    "PublicTableOfPublic": {
        "Type": "AWS::EC2::SubnetRouteTableAssociation",
        "Properties": {"SubnetId": ref("Public"), "RouteTableId": ref("PublicTable")},
    },
    "PublicDefault": {
        "Type": "AWS::EC2::Route",
        "Properties": {
            "RouteTableId": ref("PublicTable"),
            "DestinationCidrBlock": "0.0.0.0/0",
            "GatewayId": ref("Igw"),
        },
    },
    "Nat": {"Type": "AWS::EC2::NatGateway", "Properties": {"SubnetId": ref("Public")}},
    "Private": {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": ref("Vpc"), "CidrBlock": "10.0.0.0/24"}},
    "PrivateTable": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": ref("Vpc")}},
    "PrivateTableOfPrivate": {
        "Type": "AWS::EC2::SubnetRouteTableAssociation",
        "Properties": {"SubnetId": ref("Private"), "RouteTableId": ref("PrivateTable")},
    },
    "PrivateDefault": {
        "Type": "AWS::EC2::Route",
        "Properties": {
            "RouteTableId": ref("PrivateTable"),
            "DestinationCidrBlock": "0.0.0.0/0",
            "NatGatewayId": ref("Nat"),
        },
    },
    "Isolated": {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": ref("Vpc"), "CidrBlock": "10.0.2.0/24"}},
    "IsolatedTable": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": ref("Vpc")}},
    "IsolatedTableOfIsolated": {
        "Type": "AWS::EC2::SubnetRouteTableAssociation",
        "Properties": {"SubnetId": ref("Isolated"), "RouteTableId": ref("IsolatedTable")},
    },
    "S3Endpoint": {
        "Type": "AWS::EC2::VPCEndpoint",
        "Properties": {
            "VpcId": ref("Vpc"),
            # As aws-cdk-lib writes it.
            "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", ref("AWS::Region"), ".s3"]]},
            "VpcEndpointType": "Gateway",
            "RouteTableIds": [ref("PrivateTable"), ref("IsolatedTable")],
        },
    },
    "EndpointGroup": {
        "Type": "AWS::EC2::SecurityGroup",
        "Properties": {
            "VpcId": ref("Vpc"),
            "GroupDescription": "endpoints",
            "SecurityGroupIngress": [{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "CidrIp": "10.0.0.0/16"}],
        },
    },
    "StsEndpoint": {
        "Type": "AWS::EC2::VPCEndpoint",
        "Properties": {
            "VpcId": ref("Vpc"),
            "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", ref("AWS::Region"), ".sts"]]},
            "VpcEndpointType": "Interface",
            "SubnetIds": [ref("Isolated")],
            "PrivateDnsEnabled": True,
            "SecurityGroupIds": [group_id("EndpointGroup")],
        },
    },
    "CallerGroup": {
        "Type": "AWS::EC2::SecurityGroup",
        "Properties": {"VpcId": ref("Vpc"), "GroupDescription": "caller", "SecurityGroupEgress": [HTTPS_ANYWHERE]},
    },
}


def function(subnet: str, *calls: str, declared: bool = True) -> dict:
    resource = {
        "Type": "AWS::Lambda::Function",
        "Properties": {"VpcConfig": {"SubnetIds": [ref(subnet)], "SecurityGroupIds": [group_id("CallerGroup")]}},
    }
    if declared:
        resource["Metadata"] = {"gpufleet:calls": {call: ["handler.py"] for call in calls}}
    return resource


def findings(resources: dict, region: str = "eu-west-1") -> Findings:
    network, callers = read_assembly([StackTemplate("net", region, {"Resources": resources})])
    return check(network, callers)


def problems(resources: dict, region: str = "eu-west-1") -> list[str]:
    found = findings(resources, region)
    assert found.not_checked == []
    return found.problems


def planted(**changes) -> dict:
    """The network with resources replaced (a dict), or removed (None)."""
    resources = copy.deepcopy(NETWORK)
    for name, resource in changes.items():
        if resource is None:
            del resources[name]
        else:
            resources[name] = resource
    return resources


NO_WAY_OUT = "its route table IsolatedTable in net has no route to a NAT or internet gateway"


def test_the_working_network_reaches_every_destination_from_every_subnet():
    resources = planted(
        Isolated_caller=function("Isolated", "s3", "sts"),
        Private_caller=function("Private", "s3", "sts", "ec2", "s3-global", "https://pypi.org"),
    )
    assert problems(resources) == []


def test_a_removed_gateway_endpoint_is_caught():
    assert problems(planted(S3Endpoint=None, Caller=function("Isolated", "s3"))) == [
        "Lambda function Caller in net cannot reach s3 from Isolated in net: no s3 gateway endpoint on its route "
        "table IsolatedTable in net; no s3 interface endpoint in the VPC Vpc in net; " + NO_WAY_OUT
    ]


def test_a_gateway_endpoint_on_another_route_table_is_caught():
    endpoint = copy.deepcopy(NETWORK["S3Endpoint"])
    endpoint["Properties"]["RouteTableIds"] = [ref("PrivateTable")]
    assert problems(planted(S3Endpoint=endpoint, Caller=function("Isolated", "s3"))) == [
        "Lambda function Caller in net cannot reach s3 from Isolated in net: no s3 gateway endpoint on its route "
        "table IsolatedTable in net; no s3 interface endpoint in the VPC Vpc in net; " + NO_WAY_OUT
    ]


def test_an_interface_endpoint_without_private_dns_is_caught():
    endpoint = copy.deepcopy(NETWORK["StsEndpoint"])
    del endpoint["Properties"]["PrivateDnsEnabled"]  # CloudFormation's default: false
    assert problems(planted(StsEndpoint=endpoint, Caller=function("Isolated", "sts"))) == [
        "Lambda function Caller in net cannot reach sts from Isolated in net: the sts interface endpoint StsEndpoint "
        "in net has private DNS off, so the service's hostname does not lead to it; " + NO_WAY_OUT
    ]


def test_private_dns_in_a_vpc_without_dns_hostnames_is_caught():
    vpc = copy.deepcopy(NETWORK["Vpc"])
    del vpc["Properties"]["EnableDnsHostnames"]  # off by default for a nondefault VPC
    assert problems(planted(Vpc=vpc, Caller=function("Isolated", "sts"))) == [
        "Lambda function Caller in net cannot reach sts from Isolated in net: the sts interface endpoint StsEndpoint "
        "in net needs private DNS, and the VPC Vpc in net has enableDnsHostnames off; " + NO_WAY_OUT
    ]


@pytest.mark.parametrize(
    "ingress",
    [
        [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "CidrIp": "10.0.0.0/16"}],
        [{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "CidrIp": "10.0.1.0/24"}],  # another subnet's range
        [{"IpProtocol": "udp", "FromPort": 443, "ToPort": 443, "CidrIp": "10.0.0.0/16"}],
        [],
    ],
)
def test_an_endpoint_security_group_that_blocks_https_from_the_caller_is_caught(ingress):
    group = copy.deepcopy(NETWORK["EndpointGroup"])
    group["Properties"]["SecurityGroupIngress"] = ingress
    assert problems(planted(EndpointGroup=group, Caller=function("Isolated", "sts"))) == [
        "Lambda function Caller in net cannot reach sts from Isolated in net: the sts interface endpoint StsEndpoint "
        "in net's security groups admit no HTTPS from it; " + NO_WAY_OUT
    ]


def test_an_endpoint_security_group_admitting_the_callers_group_passes():
    group = copy.deepcopy(NETWORK["EndpointGroup"])
    group["Properties"]["SecurityGroupIngress"] = [
        {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "SourceSecurityGroupId": group_id("CallerGroup")}
    ]
    assert problems(planted(EndpointGroup=group, Caller=function("Isolated", "sts"))) == []


def test_a_caller_security_group_without_egress_is_caught_for_every_way():
    group = copy.deepcopy(NETWORK["CallerGroup"])
    # How aws-cdk-lib writes a group that may send nothing (allow_all_outbound=False, no rules).
    group["Properties"]["SecurityGroupEgress"] = [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "FromPort": 252,
            "IpProtocol": "icmp",
            "ToPort": 86,
        }
    ]
    assert problems(planted(CallerGroup=group, Caller=function("Private", "s3", "sts"))) == [
        "Lambda function Caller in net cannot reach s3 from Private in net: its security groups allow no HTTPS out to "
        "the s3 gateway endpoint; no s3 interface endpoint in the VPC Vpc in net; its security groups allow no HTTPS "
        "out to 0.0.0.0/0",
        "Lambda function Caller in net cannot reach sts from Private in net: its security groups allow no HTTPS out to "
        "the sts interface endpoint StsEndpoint in net; its security groups allow no HTTPS out to 0.0.0.0/0",
    ]


def test_a_group_without_egress_rules_of_its_own_sends_anywhere():
    group = copy.deepcopy(NETWORK["CallerGroup"])
    del group["Properties"]["SecurityGroupEgress"]
    assert problems(planted(CallerGroup=group, Caller=function("Private", "s3", "sts", "https://pypi.org"))) == []


def test_an_egress_rule_of_its_own_resource_counts():
    group = copy.deepcopy(NETWORK["CallerGroup"])
    group["Properties"]["SecurityGroupEgress"] = []
    rule = {
        "Type": "AWS::EC2::SecurityGroupEgress",
        "Properties": {"GroupId": group_id("CallerGroup"), **HTTPS_ANYWHERE},
    }
    assert problems(planted(CallerGroup=group, Rule=rule, Caller=function("Private", "https://pypi.org"))) == []


def test_s3_without_a_region_outside_us_east_1_needs_a_way_out():
    assert problems(planted(Caller=function("Isolated", "s3-global"))) == [
        "Lambda function Caller in net cannot reach s3-global from Isolated in net: S3 without a region goes to "
        "s3.amazonaws.com in us-east-1, which no endpoint in eu-west-1 serves; " + NO_WAY_OUT
    ]


def test_s3_without_a_region_in_us_east_1_takes_the_gateway_endpoint():
    assert problems(planted(Caller=function("Isolated", "s3-global")), region="us-east-1") == []


def test_s3_without_a_region_goes_out_through_the_nat_gateway():
    assert problems(planted(Caller=function("Private", "s3-global"))) == []


def test_a_removed_nat_route_is_caught():
    assert problems(planted(PrivateDefault=None, Caller=function("Private", "https://pypi.org", "ec2"))) == [
        "Lambda function Caller in net cannot reach ec2 from Private in net: no ec2 interface endpoint in the VPC Vpc "
        "in net; its route table PrivateTable in net has no route to a NAT or internet gateway",
        "Lambda function Caller in net cannot reach https://pypi.org from Private in net: its route table "
        "PrivateTable in net has no route to a NAT or internet gateway",
    ]


def test_a_nat_gateway_in_a_subnet_without_an_internet_route_is_caught():
    assert problems(planted(PublicDefault=None, Caller=function("Private", "https://pypi.org"))) == [
        "Lambda function Caller in net cannot reach https://pypi.org from Private in net: the NAT gateway Nat in net "
        "is in Public in net, which has no route to the VPC's internet gateway"
    ]


def test_a_private_nat_gateway_is_caught():
    nat = {"Type": "AWS::EC2::NatGateway", "Properties": {"SubnetId": ref("Public"), "ConnectivityType": "private"}}
    assert problems(planted(Nat=nat, Caller=function("Private", "https://pypi.org"))) == [
        "Lambda function Caller in net cannot reach https://pypi.org from Private in net: the NAT gateway Nat in net "
        "is private: the internet gateway drops its traffic"
    ]


def test_a_function_in_a_public_subnet_has_no_public_address():
    assert problems(planted(Caller=function("Public", "https://pypi.org"))) == [
        "Lambda function Caller in net cannot reach https://pypi.org from Public in net: its route table PublicTable "
        "in net leads to the internet gateway Igw in net, and it has no public IPv4 address"
    ]


def launch_template(*, public: bool | None) -> dict:
    interface = {"DeviceIndex": 0, "SubnetId": ref("Public"), "Groups": [group_id("CallerGroup")]}
    if public is not None:
        interface["AssociatePublicIpAddress"] = public
    return {
        "Type": "AWS::EC2::LaunchTemplate",
        "Properties": {"LaunchTemplateData": {"NetworkInterfaces": [interface]}},
        "Metadata": {"gpufleet:calls": {"https://pypi.org": ["setup"]}},
    }


def test_an_instance_in_a_public_subnet_takes_the_subnets_public_address():
    assert problems(planted(Nodes=launch_template(public=None))) == []


def test_an_instance_launched_without_a_public_address_is_caught():
    assert problems(planted(Nodes=launch_template(public=False))) == [
        "launch template Nodes in net cannot reach https://pypi.org from Public in net: its route table PublicTable in "
        "net leads to the internet gateway Igw in net, and it has no public IPv4 address"
    ]


def test_an_undeclared_caller_is_a_problem_of_its_own():
    assert problems(planted(Caller=function("Isolated", declared=False))) == [
        "Lambda function Caller in net runs in a VPC but declares no calls: declare what its code calls with "
        "stacks/constructs/calls.py declare_calls"
    ]


def test_a_caller_declaring_nothing_outside_the_vpc_passes():
    assert problems(planted(Caller=function("Isolated"))) == []


def test_a_declared_name_outside_the_vocabulary_is_a_problem():
    (line,) = problems(planted(Caller=function("Isolated", "S3")))
    assert line.startswith(
        "Lambda function Caller in net declares an unknown destination: 'S3' is no destination: name an AWS service"
    )


def test_every_problem_is_reported_at_once():
    found = problems(
        planted(
            S3Endpoint=None,
            One=function("Isolated", "s3", "https://pypi.org"),
            Two=function("Isolated", declared=False),
        )
    )
    assert [line.split(":")[0] for line in found] == [
        "Lambda function One in net cannot reach https",
        "Lambda function One in net cannot reach s3 from Isolated in net",
        "Lambda function Two in net runs in a VPC but declares no calls",
    ]


def test_a_subnet_of_an_existing_vpc_is_not_checked_here():
    caller = function("Isolated", "s3")
    caller["Properties"]["VpcConfig"]["SubnetIds"] = ["subnet-0123456789abcdef0"]
    found = findings(planted(Caller=caller))
    assert found == Findings(
        problems=[],
        not_checked=[
            "Lambda function Caller in net: not checked here (its subnet subnet-0123456789abcdef0 is not described "
            "here): gpufleet preflight checks it"
        ],
    )


def test_an_undeclared_caller_of_an_existing_vpc_is_still_a_problem():
    caller = function("Isolated", declared=False)
    caller["Properties"]["VpcConfig"]["SubnetIds"] = ["subnet-0123456789abcdef0"]
    assert findings(planted(Caller=caller)).problems == [
        "Lambda function Caller in net runs in a VPC but declares no calls: declare what its code calls with "
        "stacks/constructs/calls.py declare_calls"
    ]


def test_a_subnet_given_as_a_parameter_is_not_checked_here():
    caller = function("Isolated", "s3")
    caller["Properties"]["VpcConfig"]["SubnetIds"] = [ref("SubnetParameter")]
    assert findings(planted(Caller=caller)).not_checked == [
        "Lambda function Caller in net: not checked here (its subnets are not written out in the template): gpufleet "
        "preflight checks it"
    ]


def test_references_across_stacks_are_followed():
    """The network in one stack, exporting its subnet and the callers' security group; the caller in another,
    importing them, as aws-cdk-lib writes strong cross-stack references."""
    exports = {
        name: {"Value": value, "Export": {"Name": f"net:{name}"}}
        for name, value in (
            ("Isolated", ref("Isolated")),
            ("Private", ref("Private")),
            ("Group", group_id("CallerGroup")),
        )
    }

    def imported(subnet: str) -> dict:
        return {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "VpcConfig": {
                    "SubnetIds": [{"Fn::ImportValue": f"net:{subnet}"}],
                    "SecurityGroupIds": [{"Fn::ImportValue": "net:Group"}],
                }
            },
            "Metadata": {"gpufleet:calls": {"https://pypi.org": ["handler.py"]}},
        }

    network, callers = read_assembly(
        [
            StackTemplate("net", "eu-west-1", {"Resources": NETWORK, "Outputs": exports}),
            StackTemplate("app", "eu-west-1", {"Resources": {"Out": imported("Private"), "In": imported("Isolated")}}),
        ]
    )
    assert check(network, callers) == Findings(
        problems=[
            "Lambda function In in app cannot reach https://pypi.org from Isolated in net: " + NO_WAY_OUT,
        ],
        not_checked=[],
    )


def test_a_subnet_without_a_route_table_of_its_own_uses_the_vpcs_main_table():
    assert problems(planted(IsolatedTableOfIsolated=None, Caller=function("Isolated", "https://pypi.org"))) == [
        "Lambda function Caller in net cannot reach https://pypi.org from Isolated in net: its route table the main "
        "route table of Vpc in net has no route to a NAT or internet gateway"
    ]


def node_launch_template(**data: object) -> dict:
    return {
        "Type": "AWS::EC2::LaunchTemplate",
        "Properties": {"LaunchTemplateData": data},
        "Metadata": {"gpufleet:calls": {"https://pypi.org": ["setup"], "s3": ["setup"]}},
    }


def test_a_node_group_calls_what_it_and_its_launch_template_in_another_stack_declare():
    """The node group in one stack, its launch template in another (as the GPU node groups' stack of the eks flavour
    has them), the subnet and group imported from the network's: the launch template is no caller of its own."""
    exports = {
        name: {"Value": value, "Export": {"Name": f"net:{name}"}}
        for name, value in (("Isolated", ref("Isolated")), ("Group", group_id("CallerGroup")))
    }
    template = node_launch_template(
        NetworkInterfaces=[{"DeviceIndex": 0, "Groups": [{"Fn::ImportValue": "net:Group"}]}]
    )
    template_exports = {"Template": {"Value": ref("Template"), "Export": {"Name": "lt:Template"}}}
    group = {
        "Type": "AWS::EKS::Nodegroup",
        "Properties": {
            "ClusterName": "gpufleet-lab",
            "Subnets": [{"Fn::ImportValue": "net:Isolated"}],
            "LaunchTemplate": {"Id": {"Fn::ImportValue": "lt:Template"}},
        },
        "Metadata": {"gpufleet:calls": {"sts": ["the pods"]}},
    }
    network, callers = read_assembly(
        [
            StackTemplate("net", "eu-west-1", {"Resources": NETWORK, "Outputs": exports}),
            StackTemplate("lt", "eu-west-1", {"Resources": {"Template": template}, "Outputs": template_exports}),
            StackTemplate("nodes", "eu-west-1", {"Resources": {"Gpu": group}}),
        ]
    )
    assert [caller.name for caller in callers] == ["node group Gpu in nodes"]
    assert check(network, callers) == Findings(
        problems=["node group Gpu in nodes cannot reach https://pypi.org from Isolated in net: " + NO_WAY_OUT],
        not_checked=[],
    )


def test_a_node_group_without_groups_of_its_own_takes_the_cluster_security_group():
    group = {
        "Type": "AWS::EKS::Nodegroup",
        "Properties": {"ClusterName": ref("Cluster"), "Subnets": [ref("Private")]},
        "Metadata": {"gpufleet:calls": {"https://pypi.org": ["the pods"]}},
    }
    cluster = {"Type": "AWS::EKS::Cluster", "Properties": {}}
    # EKS's cluster security group lets everything out: the NAT gateway takes the node group to the internet.
    assert problems(planted(System=group, Cluster=cluster)) == []


def test_a_node_group_of_a_cluster_no_template_holds_is_not_checked_here():
    group = {
        "Type": "AWS::EKS::Nodegroup",
        "Properties": {"ClusterName": "gpufleet-lab", "Subnets": [ref("Private")]},
        "Metadata": {"gpufleet:calls": {"https://pypi.org": ["the pods"]}},
    }
    assert findings(planted(System=group)).not_checked == [
        "node group System in net: not checked here (its security groups are not written out in the template): "
        "gpufleet preflight checks it"
    ]


def test_a_launch_template_runs_in_the_subnets_of_the_auto_scaling_groups_and_fleets_that_launch_it():
    template = node_launch_template(SecurityGroupIds=[group_id("CallerGroup")])
    group = {
        "Type": "AWS::AutoScaling::AutoScalingGroup",
        "Properties": {
            "VPCZoneIdentifier": [ref("Private")],
            "MixedInstancesPolicy": {
                "LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateId": ref("Nodes")}}
            },
        },
    }
    fleet = {
        "Type": "AWS::EC2::SpotFleet",
        "Properties": {
            "SpotFleetRequestConfigData": {
                "LaunchTemplateConfigs": [
                    {
                        "LaunchTemplateSpecification": {"LaunchTemplateId": ref("Nodes")},
                        "Overrides": [{"SubnetId": ref("Isolated")}],
                    }
                ]
            }
        },
    }
    assert problems(planted(Nodes=template, Group=group, Fleet=fleet)) == [
        "launch template Nodes in net cannot reach https://pypi.org from Isolated in net: " + NO_WAY_OUT
    ]


def test_a_launch_template_nothing_places_is_no_caller():
    network, callers = read_assembly(
        [StackTemplate("net", "eu-west-1", {"Resources": planted(Nodes=node_launch_template())})]
    )
    assert callers == []


def test_a_codebuild_project_in_a_vpc_is_a_caller_without_a_public_address():
    project = {
        "Type": "AWS::CodeBuild::Project",
        "Properties": {"VpcConfig": {"Subnets": [ref("Public")], "SecurityGroupIds": [group_id("CallerGroup")]}},
        "Metadata": {"gpufleet:calls": {"https://pypi.org": ["buildspec"]}},
    }
    assert problems(planted(Build=project)) == [
        "CodeBuild project Build in net cannot reach https://pypi.org from Public in net: its route table PublicTable "
        "in net leads to the internet gateway Igw in net, and it has no public IPv4 address"
    ]
