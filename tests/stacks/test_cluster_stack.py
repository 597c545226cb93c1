"""What the cluster stack of each shipped environment must say, asserted on the synthesized templates."""

from __future__ import annotations

import datetime as dt
import json

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk.assertions import Capture, Match
from botocore.stub import Stubber
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from gpufleet.catalog import load_catalog
from gpufleet.constants import BACKEND_SPOT_FLEET
from gpufleet.loading import environment_files, load_environments
from stacks.constructs.block_capacity.runtime import handler as block_capacity
from stacks.constructs.fleet_teardown.infrastructure import TOTAL_TIMEOUT
from stacks.environment_stacks import add_compliance_checks, add_environment_stacks
from tests.conftest import CDK_CONTEXT

# The shipped environments of the fleet flavour (p5-eks has its own stack: tests/stacks/test_eks_cluster_stack.py).
ENVIRONMENTS = {env.name: env for env in load_environments(environment_files()) if env.flavour == "fleet"}
SPOT_FLEET_ENVIRONMENTS = [name for name, env in ENVIRONMENTS.items() if env.fleet.backend == BACKEND_SPOT_FLEET]
# What environments/NAME.yaml says: region, instance_type and tags.
SHIPPED = {
    "dev": ("us-east-1", "p4d.24xlarge", {"team": "ml-platform", "cost-center": "research"}),
    "elastic": ("us-east-1", "p5.48xlarge", {"team": "ml-platform", "cost-center": "research"}),
    "h100": ("us-west-2", "p5.48xlarge", {"team": "foundation-models"}),
    "p5-block": ("us-east-2", "p5.48xlarge", {"team": "foundation-models"}),
    "prod": ("us-east-1", "p4d.24xlarge", {"team": "ml-platform", "cost-center": "production"}),
}
# A Capacity Block's nodes are placed by EC2; every other environment's by the cluster placement group.
PLACEMENT_GROUP_ENVIRONMENTS = [name for name, env in ENVIRONMENTS.items() if env.capacity.capacity_block is None]


def test_shipped_environments_cover_both_backends():
    assert SPOT_FLEET_ENVIRONMENTS == ["dev", "elastic", "h100", "prod"]
    assert PLACEMENT_GROUP_ENVIRONMENTS == ["dev", "elastic", "h100", "prod"]
    assert sorted(ENVIRONMENTS) == sorted(SHIPPED) == ["dev", "elastic", "h100", "p5-block", "prod"]


def cluster(assembly, name):
    return assembly.template(f"gpufleet-{name}-cluster")


def only_resource(template, resource_type):
    (resource,) = template.find_resources(resource_type).values()
    return resource["Properties"]


def template_string(value):
    """A Fn::Join of literal text and references, each reference written as its logical id."""
    if isinstance(value, str):
        return value
    (separator, parts) = value["Fn::Join"]
    return separator.join(part if isinstance(part, str) else next(iter(part.values()))[0] for part in parts)


def logical_id(template, resource_type):
    (logical,) = template.find_resources(resource_type)
    return logical


def test_every_environment_has_a_cluster_stack_named_after_it(assembly):
    assert {f"gpufleet-{name}-cluster" for name in ENVIRONMENTS} <= set(assembly.stack_names)
    networks = {env.name for env in load_environments(environment_files()) if env.network.creates_vpc}
    assert {n for n in assembly.stack_names if n.endswith("-network")} == {f"gpufleet-{n}-network" for n in networks}


@pytest.mark.parametrize("name", PLACEMENT_GROUP_ENVIRONMENTS)
def test_placement_group_is_cluster_strategy_and_used_by_the_launch_template(assembly, name):
    template = cluster(assembly, name)
    template.resource_count_is("AWS::EC2::PlacementGroup", 1)
    template.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})
    placement = only_resource(template, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]["Placement"]
    assert placement == {"GroupName": {"Fn::GetAtt": [logical_id(template, "AWS::EC2::PlacementGroup"), "GroupName"]}}


@pytest.mark.parametrize(("name", "cards"), [("dev", 4), ("prod", 4), ("h100", 32), ("p5-block", 32), ("elastic", 32)])
def test_card_0_efa_at_device_0_and_every_other_card_efa_only_at_device_0(assembly, name, cards):
    assert load_catalog()[ENVIRONMENTS[name].instance_type].network_cards == cards
    template = cluster(assembly, name)
    interfaces = only_resource(template, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]["NetworkInterfaces"]
    security_group = logical_id(template, "AWS::EC2::SecurityGroup")
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(cards))
    assert [i["DeviceIndex"] for i in interfaces] == [0] * cards
    assert [i["InterfaceType"] for i in interfaces] == ["efa"] + ["efa-only"] * (cards - 1)
    # Only the primary interface has an address; an efa-only interface has none to make public.
    assert [i.get("AssociatePublicIpAddress") for i in interfaces] == [False] + [None] * (cards - 1)
    for interface in interfaces:
        assert interface["DeleteOnTermination"] is True
        assert interface["Groups"] == [{"Fn::GetAtt": [security_group, "GroupId"]}]
    assert "SecurityGroupIds" not in only_resource(template, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_security_group_lets_efa_talk_both_ways_and_nothing_else_in(assembly, name):
    template = cluster(assembly, name)
    group = {"Fn::GetAtt": [logical_id(template, "AWS::EC2::SecurityGroup"), "GroupId"]}
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress", {"IpProtocol": "-1", "GroupId": group, "SourceSecurityGroupId": group}
    )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress", {"IpProtocol": "-1", "GroupId": group, "DestinationSecurityGroupId": group}
    )
    # prod's and elastic's nodes mount their shared file system: the Lustre ports also open both ways between the node
    # group and the file system's (tests/stacks/test_storage_stack.py), 2 rules each way.
    template.resource_count_is("AWS::EC2::SecurityGroupIngress", 5 if ENVIRONMENTS[name].storage else 1)
    properties = only_resource(template, "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in properties
    (egress,) = properties["SecurityGroupEgress"]
    assert {key: egress[key] for key in ("CidrIp", "IpProtocol", "FromPort", "ToPort")} == {
        "CidrIp": "0.0.0.0/0",
        "IpProtocol": "tcp",
        "FromPort": 443,
        "ToPort": 443,
    }


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_launch_template_requires_imdsv2_and_encrypts_a_gp3_root(assembly, name):
    environment = ENVIRONMENTS[name]
    cluster(assembly, name).has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {
            "LaunchTemplateData": Match.object_like(
                {
                    "MetadataOptions": {
                        "HttpEndpoint": "enabled",
                        "HttpTokens": "required",
                        "HttpPutResponseHopLimit": 2,
                    },
                    "BlockDeviceMappings": [
                        {
                            "DeviceName": environment.ami.root_device_name,
                            "Ebs": {
                                "VolumeSize": environment.root_volume_gib,
                                "VolumeType": "gp3",
                                "Iops": 3000,
                                "Throughput": 125,
                                "Encrypted": True,
                                "DeleteOnTermination": True,
                            },
                        }
                    ],
                    "InstanceType": environment.instance_type,
                }
            )
        },
    )


@pytest.mark.parametrize(
    ("name", "ssm_parameter"),
    [
        ("dev", "/gpufleet/ami/p4d-ubuntu1804-cuda11"),
        # ami.deep_learning_ami: AWS's public parameter of the DLAMI (gpufleet/deep_learning_ami.py).
        (
            "elastic",
            "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id",
        ),
        ("h100", "/gpufleet/ami/ubuntu2204-cuda12"),
        ("p5-block", "/gpufleet/ami/ubuntu2204-cuda12"),
        ("prod", "/gpufleet/ami/ubuntu2204-cuda12"),
    ],
)
def test_node_image_is_resolved_from_ssm_at_deploy_time(assembly, name, ssm_parameter):
    """The parameter each environments/NAME.yaml names in ami.ssm_parameter, or its Deep Learning AMI's."""
    template_json = assembly.template_json(f"gpufleet-{name}-cluster")
    image = template_json["Resources"][logical_id(cluster(assembly, name), "AWS::EC2::LaunchTemplate")]
    parameter = image["Properties"]["LaunchTemplateData"]["ImageId"]["Ref"]
    assert template_json["Parameters"][parameter]["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert template_json["Parameters"][parameter]["Default"] == ssm_parameter


def test_a_deep_learning_ami_is_resolved_at_deploy_time_and_keeps_ubuntus_root_device(assembly):
    """environments/elastic.yaml: the DLAMI's public parameter, described as such; its root volume on /dev/sda1 (the
    variant's root device), 500 GiB, encrypted gp3 as on every image. Synthesis made no AWS call to resolve it."""
    template_json = assembly.template_json("gpufleet-elastic-cluster")
    data = only_resource(cluster(assembly, "elastic"), "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    parameter = template_json["Parameters"][data["ImageId"]["Ref"]]
    assert parameter == {
        "Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
        "Default": "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id",
        "Description": "Public SSM parameter holding the id of the newest AWS Deep Learning AMI "
        "pytorch-2.11-ubuntu-24.04",
    }
    (root,) = data["BlockDeviceMappings"]
    assert root["DeviceName"] == "/dev/sda1"
    assert root["Ebs"]["VolumeSize"] == 500 and root["Ebs"]["Encrypted"] is True


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_tags_reach_instances_volumes_and_interfaces(assembly, name):
    data = only_resource(cluster(assembly, name), "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    assert [spec["ResourceType"] for spec in data["TagSpecifications"]] == ["instance", "volume", "network-interface"]
    for spec in data["TagSpecifications"]:
        tags = {tag["Key"]: tag["Value"] for tag in spec["Tags"]}
        assert tags["gpufleet:environment"] == name
        assert SHIPPED[name][2].items() <= tags.items()


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_node_role_is_ssm_and_the_environments_cloudwatch_agent_only(assembly, name):
    template = cluster(assembly, name)
    managed = Capture()
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": Match.object_like(
                {"Statement": [Match.object_like({"Principal": {"Service": "ec2.amazonaws.com"}})]}
            ),
            "ManagedPolicyArns": managed,
        },
    )
    arns = [arn["Fn::Join"][1][-1] for arn in managed.as_array()]
    # The CloudWatch agent's permissions are the environment's own (tests/stacks/constructs/test_node_monitoring.py).
    assert arns == [":iam::aws:policy/AmazonSSMManagedInstanceCore"]
    node_role = next(
        logical
        for logical, role in template.find_resources("AWS::IAM::Role").items()
        if "ec2.amazonaws.com" in str(role["Properties"]["AssumeRolePolicyDocument"])
    )
    attached = [
        logical
        for logical, policy in template.find_resources("AWS::IAM::Policy").items()
        if {"Ref": node_role} in policy["Properties"]["Roles"]
    ]
    # Nodes read the cluster user's key (tests/stacks/test_cluster_user.py) and their environment's run secrets
    # (below), run the CloudWatch agent and set their readiness tag (tests/stacks/constructs/test_node_readiness.py)
    # (tests/stacks/constructs/test_node_monitoring.py) and fetch the operator scripts
    # (tests/stacks/constructs/test_operator_scripts.py); prod's and elastic's reach their shared file system's data
    # repository prefix
    # (tests/stacks/test_storage_stack.py); nodes of a group complete their own termination lifecycle action
    # (tests/stacks/test_auto_scaling_group.py).
    expected = [
        "ClusterUserNodesReadTheKey9B7D92B9",
        "NodeMonitoringAgentPolicyF3A4C9C0",
        "NodeReadinessTag939A92B1",
        "NodesReadRunSecretsCFBF1909",
        "OperatorScriptsNodesReadTheArchive7617C101",
    ]
    if name in ("prod", "elastic"):
        expected.append("SharedStorageAccessDataRepositoryAccessEE56BB49")
    if ENVIRONMENTS[name].fleet.backend != BACKEND_SPOT_FLEET:
        expected.append("NodeGroupCompleteLifecycleActionFE2A0165")
    assert sorted(attached) == sorted(expected), "the node role must not gain other permissions"


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_the_node_role_reads_the_run_secrets_of_its_environments_namespace_only(assembly, name):
    """`gpufleet run --secret` (gpufleet/ops/runs.py): the node role may read the secrets named gpufleet-NAME/... of
    its account and region, whatever random suffix their ARNs end with (tests/stacks/constructs/test_run_secrets.py),
    and no other secret but the cluster user's key."""
    template = cluster(assembly, name)
    region, account = SHIPPED[name][0], ENVIRONMENTS[name].account
    node_role = next(
        logical
        for logical, role in template.find_resources("AWS::IAM::Role").items()
        if "ec2.amazonaws.com" in str(role["Properties"]["AssumeRolePolicyDocument"])
    )
    template.has_resource_properties(
        "AWS::IAM::Policy",
        Match.object_like(
            {
                "PolicyDocument": {
                    "Statement": [
                        {
                            "Action": "secretsmanager:GetSecretValue",
                            "Effect": "Allow",
                            "Resource": {
                                "Fn::Join": [
                                    "",
                                    [
                                        "arn:",
                                        {"Ref": "AWS::Partition"},
                                        f":secretsmanager:{region}:{account}:secret:gpufleet-{name}/*",
                                    ],
                                ]
                            },
                        }
                    ],
                    "Version": "2012-10-17",
                },
                "Roles": [{"Ref": node_role}],
            }
        ),
    )


EXPECTED_FLEETS = {
    "dev": {
        "Type": "maintain",
        "TargetCapacity": 2,
        "OnDemandTargetCapacity": 1,
        "AllocationStrategy": "priceCapacityOptimized",
        "ReplaceUnhealthyInstances": True,
    },
    "prod": {
        "Type": "maintain",
        "TargetCapacity": 8,
        "OnDemandTargetCapacity": 2,
        "AllocationStrategy": "capacityOptimized",
        "ReplaceUnhealthyInstances": True,
        "SpotMaintenanceStrategies": {
            "CapacityRebalance": {"ReplacementStrategy": "launch-before-terminate", "TerminationDelay": 300}
        },
    },
    "h100": {
        "Type": "request",
        "TargetCapacity": 2,
        "OnDemandTargetCapacity": 2,
        "AllocationStrategy": "priceCapacityOptimized",
    },
    # The head on-demand (torchrun's rendezvous store), one spot node the fleet replaces.
    "elastic": {
        "Type": "maintain",
        "TargetCapacity": 2,
        "OnDemandTargetCapacity": 1,
        "AllocationStrategy": "priceCapacityOptimized",
        "ReplaceUnhealthyInstances": True,
    },
}


@pytest.mark.parametrize(("name", "expected"), EXPECTED_FLEETS.items())
def test_spot_fleet_mix_and_interruption_behaviour(assembly, name, expected):
    template = cluster(assembly, name)
    config = only_resource(template, "AWS::EC2::SpotFleet")["SpotFleetRequestConfigData"]
    assert {key: config.get(key) for key in expected} == expected
    assert config["InstanceInterruptionBehavior"] == "terminate"
    assert config["TerminateInstancesWithExpiration"] is True
    assert config["OnDemandAllocationStrategy"] == "lowestPrice"
    (launch_config,) = config["LaunchTemplateConfigs"]
    launch_template = logical_id(template, "AWS::EC2::LaunchTemplate")
    assert launch_config["LaunchTemplateSpecification"] == {
        "LaunchTemplateId": {"Ref": launch_template},
        "Version": {"Fn::GetAtt": [launch_template, "LatestVersionNumber"]},
    }
    assert launch_config["Overrides"] == [{"InstanceType": SHIPPED[name][1]}]
    if name != "prod":
        assert "SpotMaintenanceStrategies" not in config
    if expected["Type"] == "request":
        assert "ReplaceUnhealthyInstances" not in config


@pytest.mark.parametrize("name", SPOT_FLEET_ENVIRONMENTS)
def test_fleet_role_is_trusted_by_spot_fleet_only(assembly, name):
    template = cluster(assembly, name)
    config = only_resource(template, "AWS::EC2::SpotFleet")["SpotFleetRequestConfigData"]
    role_logical = config["IamFleetRole"]["Fn::GetAtt"][0]
    role = template.to_json()["Resources"][role_logical]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "spotfleet.amazonaws.com"}}
    ]
    assert (
        role["ManagedPolicyArns"][0]["Fn::Join"][1][-1] == ":iam::aws:policy/service-role/AmazonEC2SpotFleetTaggingRole"
    )


@pytest.mark.parametrize("name", SPOT_FLEET_ENVIRONMENTS)
def test_teardown_runs_before_fleet_placement_group_and_security_group_are_deleted(assembly, name):
    template = cluster(assembly, name)
    resources = template.to_json()["Resources"]
    ((teardown_id, teardown),) = template.find_resources("Custom::GpufleetFleetTeardown").items()
    fleet = logical_id(template, "AWS::EC2::SpotFleet")
    assert teardown["Properties"]["FleetRequestId"] == {"Ref": fleet}
    depends_on = set(teardown["DependsOn"])
    guarded = {
        logical_id(template, "AWS::EC2::PlacementGroup"),
        logical_id(template, "AWS::EC2::SecurityGroup"),
        logical_id(template, "AWS::EC2::LaunchTemplate"),
    }
    assert guarded <= depends_on
    # The service token is the Provider framework's onEvent function, which hands the event to ours; its
    # is_complete is polled by the waiter state machine for up to 50 minutes, every 30 seconds.
    framework = resources[teardown["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]["Properties"]
    handlers = {
        properties["Handler"]: properties["Timeout"]
        for properties in (r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Function")
        if properties["Handler"] in ("handler.on_event", "handler.is_complete")
    }
    # dev, elastic and prod name a checkpoint hook: on_event runs it on the nodes first, waiting up to three minutes
    # more.
    on_event = {"dev": 300, "elastic": 300, "h100": 120, "prod": 300}[name]
    assert handlers == {"handler.on_event": on_event, "handler.is_complete": 120}
    framework_variables = framework["Environment"]["Variables"]
    assert set(framework_variables) >= {"USER_ON_EVENT_FUNCTION_ARN", "USER_IS_COMPLETE_FUNCTION_ARN"}
    (waiter,) = template.find_resources("AWS::StepFunctions::StateMachine").values()
    definition = json.loads(template_string(waiter["Properties"]["DefinitionString"]))
    (retry,) = definition["States"]["framework-isComplete-task"]["Retry"]
    assert (retry["IntervalSeconds"], retry["MaxAttempts"], retry["BackoffRate"]) == (30, 100, 1)
    statements = [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    terminate = next(s for s in statements if s["Action"] == "ec2:TerminateInstances")
    assert terminate["Condition"] == {"StringEquals": {"aws:ResourceTag/gpufleet:environment": name}}
    cancel = next(s for s in statements if "ec2:CancelSpotFleetRequests" in s["Action"])
    assert cancel["Action"] == ["ec2:CancelSpotFleetRequests", "ec2:DescribeSpotFleetInstances"]
    assert cancel["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":ec2:{SHIPPED[name][0]}:123456789012:spot-fleet-request/",
                {"Ref": fleet},
            ],
        ]
    }
    assert not template.find_resources("AWS::Logs::LogGroup", {"DeletionPolicy": "Retain"})


@pytest.mark.parametrize(
    ("name", "node_group", "other_backend"),
    [
        ("dev", "FleetRequestId", "AutoScalingGroupName"),
        ("elastic", "FleetRequestId", "AutoScalingGroupName"),
        ("h100", "FleetRequestId", "AutoScalingGroupName"),
        ("prod", "FleetRequestId", "AutoScalingGroupName"),
        ("p5-block", "AutoScalingGroupName", "FleetRequestId"),
    ],
)
def test_outputs_name_what_operators_need(assembly, name, node_group, other_backend):
    """gpufleet status and hosts read the node group from these output keys (gpufleet/ops/fleet.py)."""
    outputs = cluster(assembly, name).to_json()["Outputs"]
    assert {node_group, "PlacementGroupName", "SecurityGroupId", "LaunchTemplateId", "SubnetId"} <= set(outputs)
    assert other_backend not in outputs


@pytest.mark.parametrize(("name", "spot"), [("dev", True), ("prod", True), ("h100", False), ("p5-block", False)])
def test_a_cluster_with_spot_nodes_outputs_its_rehearsal_templates_id(assembly, name, spot):
    """gpufleet rehearse starts its experiment from this output (gpufleet/commands/rehearse.py)."""
    template = cluster(assembly, name)
    outputs = template.to_json()["Outputs"]
    rehearsals = list(template.find_resources("AWS::FIS::ExperimentTemplate"))
    if not spot:
        assert (rehearsals, "SpotInterruptionExperimentTemplateId" in outputs) == ([], False)
        return
    assert rehearsals == ["SpotInterruptionRehearsalF110D4DB"]  # pinned: a renamed construct is a deliberate change
    assert outputs["SpotInterruptionExperimentTemplateId"] == {
        "Value": {"Fn::GetAtt": ["SpotInterruptionRehearsalF110D4DB", "Id"]}
    }


def test_the_rehearsal_output_is_the_templates_id_its_schema_reads_back():
    """Fn::GetAtt Id: Id is AWS::FIS::ExperimentTemplate's identifier, which only CloudFormation sets."""
    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::FIS::ExperimentTemplate").schema
    assert schema["primaryIdentifier"] == ["/properties/Id"]
    assert "/properties/Id" in schema["readOnlyProperties"]


def test_p5_block_runs_every_node_in_its_capacity_block_through_an_auto_scaling_group(assembly):
    """environments/p5-block.yaml: an Auto Scaling group of 2 nodes launched with market type capacity-block into the
    block's reservation from the launch template itself (Capacity Blocks support no mixed instances policy), placed
    by EC2 rather than the placement group; it wants no node of its own (MinSize 0, no DesiredCapacity), and its
    BlockCapacity resource schedules the block's nodes at deploy time from the block's dates; the group goes, with
    its nodes, before what they use; the block's expiration warning still runs the checkpoint hook."""
    template = cluster(assembly, "p5-block")
    data = only_resource(template, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert "Placement" not in data
    template.resource_count_is("AWS::EC2::SpotFleet", 0)
    resources = template.to_json()["Resources"]
    ((group_id, group),) = template.find_resources("AWS::AutoScaling::AutoScalingGroup").items()
    properties = group["Properties"]
    assert (properties["MinSize"], properties["MaxSize"], properties.get("DesiredCapacity")) == ("0", "2", None)
    assert "MixedInstancesPolicy" not in properties
    assert properties["LaunchTemplate"] == {
        "LaunchTemplateId": {"Ref": logical_id(template, "AWS::EC2::LaunchTemplate")},
        "Version": {"Fn::GetAtt": [logical_id(template, "AWS::EC2::LaunchTemplate"), "LatestVersionNumber"]},
    }
    assert group["UpdatePolicy"] == {"AutoScalingScheduledAction": {"IgnoreUnmodifiedGroupSizeProperties": True}}
    template.resource_count_is("AWS::AutoScaling::ScheduledAction", 0)
    (block_capacity,) = template.find_resources("Custom::GpufleetBlockCapacity").values()
    assert {key: value for key, value in block_capacity["Properties"].items() if key != "ServiceToken"} == {
        "AutoScalingGroupName": {"Ref": group_id},
        "Target": 2,
        "Start": "2027-01-11T11:30:00Z",
        "End": "2027-01-18T11:30:00Z",
    }
    assert properties["AutoScalingGroupName"] == "gpufleet-p5-block-nodes"
    guarded = {
        logical_id(template, "AWS::EC2::PlacementGroup"),
        logical_id(template, "AWS::EC2::SecurityGroup"),
        logical_id(template, "AWS::EC2::LaunchTemplate"),
    }
    assert guarded <= set(group["DependsOn"])
    # The cluster user's key and the block's schedule are the stack's only custom resources: the group needs no
    # teardown guarantee.
    assert sorted(r["Type"] for r in resources.values() if r["Type"].startswith("Custom::")) == [
        "Custom::GpufleetBlockCapacity",
        "Custom::GpufleetClusterUserKey",
    ]
    (rule,) = template.find_resources("AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"]["detail"] == {"capacity-reservation-id": ["cr-0123456789abcdef0"]}
    assert template.to_json()["Outputs"]["AutoScalingGroupName"] == {"Value": {"Ref": group_id}}


def test_existing_network_is_imported_by_id(assembly):
    environment = ENVIRONMENTS["h100"]
    template = cluster(assembly, "h100")
    interfaces = only_resource(template, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]["NetworkInterfaces"]
    assert {i["SubnetId"] for i in interfaces} == {environment.network.subnet_id}
    template.has_resource_properties("AWS::EC2::SecurityGroup", {"VpcId": environment.network.vpc_id})
    assert template.to_json()["Outputs"]["SubnetId"]["Value"] == environment.network.subnet_id


def test_synthesis_made_no_aws_lookups(assembly):
    """A lookup (AZs, VPCs, AMIs) would appear as missing context: synthesis must need no AWS access."""
    assert "missing" not in assembly.manifest


def test_teardown_outwaits_cloudformations_spot_fleet_delete_and_stays_under_the_custom_resource_limit():
    """The Spot Fleet delete handler may take 40 minutes (its schema's handlers.delete, as cfn-lint bundles it); a
    custom resource gets at most one hour (AWS::CloudFormation::CustomResource ServiceTimeout 1-3600)."""
    spot_fleet = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::EC2::SpotFleet").schema
    assert spot_fleet["handlers"]["delete"]["timeoutInMinutes"] == 40
    assert 40 < TOTAL_TIMEOUT.to_minutes() == 50 < 60


def test_a_p5_block_template_synthesized_before_its_block_deploys_after_the_start(assembly):
    """Issue 31, item 5: `cdk deploy --all` synthesizes once and deploys the stacks in turn, and CI may deploy an
    assembly later. The template synthesized before the block (SYNTHESIS_TIME) holds no scheduled action AWS would
    refuse a day after the block's start ("If you try to schedule the action in the past, Amazon EC2 Auto Scaling
    returns an error message"); its BlockCapacity resource's handler, run then with the template's properties, wants
    the block's nodes at once and schedules only the scale-in (Stubber: the calls it makes, in order)."""
    deployed = dt.datetime(2027, 1, 12, 11, 30, tzinfo=dt.UTC)
    resources = cluster(assembly, "p5-block").to_json()["Resources"]
    refused = [
        logical_id
        for logical_id, resource in resources.items()
        if resource["Type"] == "AWS::AutoScaling::ScheduledAction"
        and dt.datetime.fromisoformat(resource["Properties"]["StartTime"]) <= deployed
    ]
    assert refused == []
    (properties,) = [r["Properties"] for r in resources.values() if r["Type"] == "Custom::GpufleetBlockCapacity"]
    group = "gpufleet-p5-block-nodes"
    request = {
        "RequestType": "Create",
        "ResourceProperties": {**properties, "AutoScalingGroupName": group, "Target": str(properties["Target"])},
    }
    client = boto3.client("autoscaling", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response(
            "describe_auto_scaling_groups",
            {
                "AutoScalingGroups": [
                    {
                        "AutoScalingGroupName": group,
                        "MinSize": 0,
                        "MaxSize": 2,
                        "DesiredCapacity": 0,
                        "DefaultCooldown": 300,
                        "AvailabilityZones": ["us-east-2a"],
                        "HealthCheckType": "EC2",
                        "CreatedTime": deployed,
                    }
                ]
            },
            {"AutoScalingGroupNames": [group]},
        )
        stub.add_response(
            "put_scheduled_update_group_action",
            {},
            {
                "AutoScalingGroupName": group,
                "ScheduledActionName": "gpufleet-block-scale-in",
                "StartTime": dt.datetime(2027, 1, 18, 10, 40, tzinfo=dt.UTC),
                "DesiredCapacity": 0,
            },
        )
        stub.add_response(
            "describe_scheduled_actions",
            {"ScheduledUpdateGroupActions": []},
            {
                "AutoScalingGroupName": group,
                "ScheduledActionNames": ["gpufleet-block-scale-out", "gpufleet-block-scale-in"],
            },
        )
        stub.add_response("set_desired_capacity", {}, {"AutoScalingGroupName": group, "DesiredCapacity": 2})
        with pytest.MonkeyPatch.context() as environment:
            environment.setenv("ENVIRONMENT_NAME", "p5-block")
            block_capacity.on_event(request, None, autoscaling=client, now=deployed)
        stub.assert_no_pending_responses()


def test_p5_block_synthesizes_with_cdk_nag_after_its_block_has_ended(tmp_path):
    """cdk destroy synthesizes first: a block that has ended still synthesizes, cdk-nag included, with nothing
    in its template that depends on the time (the schedule is the deploy's to make)."""
    app = cdk.App(outdir=str(tmp_path), context=CDK_CONTEXT)
    add_compliance_checks(app)
    add_environment_stacks(app, ENVIRONMENTS["p5-block"], dt.datetime(2027, 1, 18, 10, 40, tzinfo=dt.UTC))
    template = app.synth().get_stack_by_name("gpufleet-p5-block-cluster").template
    (group,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"]
    assert (group["Properties"]["MinSize"], group["Properties"].get("DesiredCapacity")) == ("0", None)
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::AutoScaling::ScheduledAction"]
