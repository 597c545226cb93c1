"""The outside facts the capacity fallback relies on, checked in the sources it cites: botocore's service models (the
API the Lambda calls) and cfn-lint's bundled CloudFormation schemas."""

from __future__ import annotations

import datetime as dt
import re

import botocore.session
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from gpufleet import fallback, ssm_batches
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
    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::AutoScaling::AutoScalingGroup").schema
    described = " ".join(
        schema["definitions"]["InstancesDistribution"]["properties"]["OnDemandBaseCapacity"]["description"].split()
    )
    assert (
        "An update to this setting means a gradual replacement of instances to adjust the current On-Demand Instance "
        "levels. When replacing instances, Amazon EC2 Auto Scaling launches new instances before terminating the "
        "previous ones."
    ) in described


AUTOSCALING = SESSION.get_service_model("autoscaling")
EC2 = SESSION.get_service_model("ec2")


def test_failed_and_cancelled_launches_are_what_the_activities_api_documents():
    operation = AUTOSCALING.operation_model("DescribeScalingActivities")
    assert "If an attempt to launch instances failed, the StatusCode value is Failed or Cancelled" in text(
        operation.documentation
    )
    assert set(handler.FAILED_ACTIVITIES) == {"Failed", "Cancelled"}
    assert "Scaling activities with a start time earlier than this value are not included in the results." in text(
        operation.input_shape.members["Filters"].documentation
    )
    assert "The default value is 100 and the maximum value is 100." in text(
        operation.input_shape.members["MaxRecords"].documentation
    )


def test_instances_are_described_through_a_filter_because_an_unknown_id_is_an_error():
    assert "If you specify an instance ID that is not valid, an error is returned." in text(
        EC2.operation_model("DescribeInstances").documentation
    )
    assert "The running instances. This list is refreshed periodically and might be out of date." in text(
        EC2.operation_model("DescribeSpotFleetInstances").output_shape.members["ActiveInstances"].documentation
    )


def test_the_group_update_names_only_what_changes():
    assert "Any properties that you don't specify are not changed by this update request." in text(
        AUTOSCALING.operation_model("UpdateAutoScalingGroup").documentation
    )
    pools = AUTOSCALING.shape_for("InstancesDistribution").members["SpotInstancePools"].documentation
    assert "Valid only when the SpotAllocationStrategy is lowest-price." in text(pools)
    assert set(handler.SENT_DISTRIBUTION_FIELDS) < set(AUTOSCALING.shape_for("InstancesDistribution").members)


def test_a_group_being_deleted_and_a_refresh_under_way_are_what_the_api_says():
    assert text(AUTOSCALING.shape_for("AutoScalingGroup").members["Status"].documentation) == (
        "The current state of the Auto Scaling group when the DeleteAutoScalingGroup operation is in progress."
    )
    assert set(handler.ACTIVE_REFRESH) < set(AUTOSCALING.shape_for("InstanceRefreshStatus").enum)
    assert set(ssm_batches.FINISHED_STATUSES) < set(
        SESSION.get_service_model("ssm").shape_for("CommandInvocationStatus").enum
    )
    assert set(handler.LIVE_STATES) < set(EC2.shape_for("InstanceStateName").enum)
    assert set(handler.LIVE_LIFECYCLE_STATES) < set(AUTOSCALING.shape_for("LifecycleState").enum)


def test_no_termination_keeps_the_fleet_and_replaces_nothing_ended_by_hand():
    """gpufleet.fallback's hand-back lowers the total with noTermination after ending the nodes itself."""
    operation = EC2.operation_model("ModifySpotFleetRequest")
    assert set(operation.input_shape.members["ExcessCapacityTerminationPolicy"].enum) == {"noTermination", "default"}
    assert (fallback.KEEP_EXCESS, fallback.TERMINATE_EXCESS) == ("noTermination", "default")
    assert (
        "Alternatively, you can request that the Spot Fleet keep the fleet at its current size, but not replace any "
        "Spot Instances that are interrupted or that you terminate manually."
    ) in text(operation.documentation)


def test_a_history_cut_short_has_no_last_evaluated_time():
    shape = EC2.operation_model("DescribeSpotFleetRequestHistory").output_shape
    assert "If nextToken indicates that there are more items, this value is not present." in text(
        shape.members["LastEvaluatedTime"].documentation
    )


def test_the_hand_back_waits_for_the_hook_as_long_as_a_spot_notice_gives_and_backs_off_to_eight_times():
    assert fallback.HAND_BACK_HOOK_WAIT == dt.timedelta(minutes=2)
    assert fallback.HAND_BACK_BACKOFF_CAP == 8
