"""The outside facts the capacity fallback relies on, checked in the sources it cites: botocore's service models (the
API the Lambda calls) and cfn-lint's bundled CloudFormation schemas."""

from __future__ import annotations

import re

import botocore.session
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from stacks.constructs.capacity_fallback.runtime import handler

SESSION = botocore.session.get_session()


def text(documentation: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", "", documentation).split())


def test_every_fleet_failure_subtype_is_one_ec2_documents():
    ec2 = SESSION.get_service_model("ec2")
    documented = text(ec2.shape_for("EventInformation").members["EventSubType"].documentation)
    for subtype in handler.FLEET_FAILURE_KINDS:
        assert f"{subtype} -" in documented, subtype
    assert "launchSpecUnusable - The price specified in a launch specification is not valid" in documented
    assert set(ec2.shape_for("EventType").enum) >= {"error", "information"}


def test_the_fleet_history_is_read_from_its_last_evaluated_time():
    operation = SESSION.get_service_model("ec2").operation_model("DescribeSpotFleetRequestHistory")
    assert "you can query by the last evaluated time and not miss a recorded event" in text(operation.documentation)
    assert "LastEvaluatedTime" in operation.output_shape.members


def test_only_a_maintain_fleet_changes_its_on_demand_part_in_place():
    operation = SESSION.get_service_model("ec2").operation_model("ModifySpotFleetRequest")
    assert "You can only modify a Spot Fleet request of type maintain." in text(operation.documentation)
    assert {"OnDemandTargetCapacity", "TargetCapacity"} <= set(operation.input_shape.members)


def test_a_group_replaces_instances_launch_first_when_its_on_demand_base_changes():
    autoscaling = SESSION.get_service_model("autoscaling")
    assert handler.FAILED_ACTIVITY in autoscaling.shape_for("ScalingActivityStatusCode").enum
    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::AutoScaling::AutoScalingGroup").schema
    described = " ".join(
        schema["definitions"]["InstancesDistribution"]["properties"]["OnDemandBaseCapacity"]["description"].split()
    )
    assert (
        "An update to this setting means a gradual replacement of instances to adjust the current On-Demand Instance "
        "levels. When replacing instances, Amazon EC2 Auto Scaling launches new instances before terminating the "
        "previous ones."
    ) in described
