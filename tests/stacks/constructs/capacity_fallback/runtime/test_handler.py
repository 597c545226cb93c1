"""The capacity fallback Lambda on both backends: SSM (its state) and the instances it counts from moto; the Spot Fleet
and Auto Scaling calls from botocore's Stubber, because moto 5.2 lacks them (no DescribeSpotFleetRequestHistory; its
ModifySpotFleetRequest ignores OnDemandTargetCapacity and its spot fleets launch spot nodes only; its
UpdateAutoScalingGroup fails on a mixed instances policy without LaunchTemplate), and a Stubber states every call
with its exact parameters: an unexpected call fails the test."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from gpufleet.fallback import FallbackState
from stacks.constructs.capacity_fallback.runtime import handler

REGION = "us-east-1"
PARAMETER = "/gpufleet/probe/fallback"
FLEET = "sfr-11111111-2222-3333-4444-555555555555"
GROUP = "gpufleet-probe-nodes"
NOW = dt.datetime(2026, 11, 23, 6, 0, tzinfo=dt.UTC)


def minutes(count: float) -> dt.datetime:
    return NOW + dt.timedelta(minutes=count)


@pytest.fixture
def aws(monkeypatch):
    for variable, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        "FLOOR": "2",
        "AFTER_MINUTES": "15",
        "RESTORE_AFTER_MINUTES": "30",
        "MAX_EXTRA_ON_DEMAND": "2",
    }.items():
        monkeypatch.setenv(variable, value)
    with mock_aws():
        yield


def launch(ec2, spot: int, on_demand: int) -> tuple[list[str], list[str]]:
    """Instances in moto: (spot ids, on-demand ids)."""
    image_id = ec2.register_image(
        Name="gpufleet-node",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 200}}],
    )["ImageId"]

    def run(count: int, **market) -> list[str]:
        if not count:
            return []
        response = ec2.run_instances(
            ImageId=image_id, MinCount=count, MaxCount=count, InstanceType="p4d.24xlarge", **market
        )
        return [instance["InstanceId"] for instance in response["Instances"]]

    return run(spot, InstanceMarketOptions={"MarketType": "spot"}), run(on_demand)


def stored_state(ssm) -> FallbackState:
    return FallbackState.from_json(ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"])


def logged(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# Spot Fleet: every EC2 call stubbed.


def fleet_responses(stubber, *, on_demand: int, spot: int, on_demand_running: int, state="active", history=()):
    """The reads of one run against a fleet of 8 whose on-demand part is `on_demand`."""
    instances = [f"i-{n:017x}" for n in range(spot + on_demand_running)]
    stubber.add_response(
        "describe_spot_fleet_requests",
        {
            "SpotFleetRequestConfigs": [
                {
                    "SpotFleetRequestId": FLEET,
                    "SpotFleetRequestState": state,
                    "CreateTime": NOW,
                    "SpotFleetRequestConfig": {
                        "IamFleetRole": "arn:aws:iam::123456789012:role/fleet",
                        "TargetCapacity": 8,
                        "OnDemandTargetCapacity": on_demand,
                        "Type": "maintain",
                    },
                }
            ]
        },
        {"SpotFleetRequestIds": [FLEET]},
    )
    stubber.add_response(
        "describe_spot_fleet_instances",
        {
            "SpotFleetRequestId": FLEET,
            "ActiveInstances": [{"InstanceId": instance_id} for instance_id in instances],
        },
        {"SpotFleetRequestId": FLEET},
    )
    if instances:
        stubber.add_response(
            "describe_instances",
            {
                "Reservations": [
                    {
                        "Instances": [
                            {
                                "InstanceId": instance_id,
                                "State": {"Name": "running"},
                                **({"InstanceLifecycle": "spot"} if index < spot else {}),
                            }
                            for index, instance_id in enumerate(instances)
                        ]
                    }
                ]
            },
            {"InstanceIds": instances},
        )
    return instances


def history_response(stubber, since: dt.datetime, records=(), read_until: dt.datetime = NOW):
    stubber.add_response(
        "describe_spot_fleet_request_history",
        {
            "SpotFleetRequestId": FLEET,
            "StartTime": since,
            "LastEvaluatedTime": read_until,
            "HistoryRecords": list(records),
        },
        {"SpotFleetRequestId": FLEET, "StartTime": since},
    )


NO_CAPACITY_RECORD = {
    "Timestamp": minutes(-2),
    "EventType": "error",
    "EventInformation": {
        "EventSubType": "allLaunchSpecsTemporarilyBlacklisted",
        "EventDescription": "There is no Spot capacity available that matches your request.",
    },
}
LAUNCHED_RECORD = {
    "Timestamp": minutes(-3),
    "EventType": "instanceChange",
    "EventInformation": {"EventSubType": "launched", "InstanceId": "i-00000000000000001"},
}


@pytest.fixture
def fleet_clients(aws):
    ec2 = boto3.client("ec2", region_name=REGION)
    ssm = boto3.client("ssm", region_name=REGION)
    with Stubber(ec2) as stubber:
        yield {"ec2": ec2, "ssm": ssm, "autoscaling": None}, stubber
        stubber.assert_no_pending_responses()


def test_a_spot_shortfall_waits_then_raises_the_fleets_on_demand_part(fleet_clients, capsys):
    clients, stubber = fleet_clients
    fleet_responses(stubber, on_demand=2, spot=4, on_demand_running=2)
    # EC2 describes events up to 30 seconds late: the next run reads from where this one's reading ended.
    history_response(stubber, minutes(-60), [LAUNCHED_RECORD, NO_CAPACITY_RECORD], read_until=minutes(-0.5))
    first = handler.run("spot-fleet", FLEET, PARAMETER, clients, NOW)
    assert (first["action"], first["on_demand_after"]) == ("hold", 2)
    assert first["failures"] == [
        {
            "at": "2026-11-23T05:58:00+00:00",
            "kind": "no-capacity",
            "description": "allLaunchSpecsTemporarilyBlacklisted: There is no Spot capacity available that matches "
            "your request.",
        }
    ]
    state = stored_state(clients["ssm"])
    assert (state.node_group_id, state.on_demand, state.short_since, state.failures, state.history_read_until) == (
        FLEET,
        2,
        NOW,
        {"no-capacity": 1},
        minutes(-0.5),
    )

    fleet_responses(stubber, on_demand=2, spot=4, on_demand_running=2)
    history_response(stubber, minutes(-0.5), read_until=minutes(14.5))
    stubber.add_response(
        "modify_spot_fleet_request",
        {"Return": True},
        {"SpotFleetRequestId": FLEET, "TargetCapacity": 8, "OnDemandTargetCapacity": 4},
    )
    second = handler.run("spot-fleet", FLEET, PARAMETER, clients, minutes(15))
    assert second["reason"] == (
        "2 of 6 spot nodes missing for 15 min (launch failures: no-capacity x1): on-demand part 2 -> 4"
    )
    assert stored_state(clients["ssm"]).on_demand == 4
    assert [(line["action"], line["on_demand_before"], line["on_demand_after"]) for line in logged(capsys)] == [
        ("hold", 2, 2),
        ("raise", 2, 4),
    ]


def test_a_deploy_that_reset_the_on_demand_part_is_noticed_and_the_raise_applied_again(fleet_clients, capsys):
    clients, stubber = fleet_clients
    raised = FallbackState(
        node_group_id=FLEET,
        on_demand=4,
        changed_at=minutes(-30),
        checked_at=minutes(-5),
        history_read_until=minutes(-5.5),
    )
    handler.write_state(clients["ssm"], PARAMETER, raised)
    # The deploy wrote OnDemandTargetCapacity 2 back; four on-demand and four spot nodes still run.
    fleet_responses(stubber, on_demand=2, spot=4, on_demand_running=4)
    history_response(stubber, minutes(-5.5))
    stubber.add_response(
        "modify_spot_fleet_request",
        {"Return": True},
        {"SpotFleetRequestId": FLEET, "TargetCapacity": 8, "OnDemandTargetCapacity": 4},
    )
    line = handler.run("spot-fleet", FLEET, PARAMETER, clients, NOW)
    assert (line["action"], line["reapplied"], line["on_demand_after"]) == ("raise", True, 4)
    assert line["reason"] == (
        "on-demand part is 2, the template's value, but the fallback had raised it to 4: a deploy reset it; "
        "raising it to 4 again"
    )
    assert logged(capsys)[0]["reapplied"] is True


def test_a_fleet_being_modified_is_left_alone(fleet_clients):
    clients, stubber = fleet_clients
    fleet_responses(stubber, on_demand=2, spot=4, on_demand_running=2, state="modifying")
    history_response(stubber, minutes(-60))
    line = handler.run("spot-fleet", FLEET, PARAMETER, clients, NOW)
    assert (line["action"], line["reason"]) == (
        "hold",
        "fleet request is modifying: nothing changes until it is active",
    )


def test_a_state_about_a_replaced_fleet_starts_afresh(fleet_clients):
    clients, stubber = fleet_clients
    handler.write_state(
        clients["ssm"],
        PARAMETER,
        FallbackState(node_group_id="sfr-old", on_demand=4, checked_at=minutes(-5), history_read_until=minutes(-5)),
    )
    fleet_responses(stubber, on_demand=2, spot=6, on_demand_running=2)
    history_response(stubber, minutes(-60))
    line = handler.run("spot-fleet", FLEET, PARAMETER, clients, NOW)
    assert (line["action"], line["new_node_group"], line["on_demand_after"]) == ("hold", True, 2)
    assert stored_state(clients["ssm"]).node_group_id == FLEET


# Auto Scaling group: its calls stubbed, the instances it names counted in moto.


@pytest.fixture
def group_clients(aws):
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    clients = {
        "ec2": boto3.client("ec2", region_name=REGION),
        "ssm": boto3.client("ssm", region_name=REGION),
        "autoscaling": autoscaling,
    }
    with Stubber(autoscaling) as stubber:
        yield clients, stubber
        stubber.assert_no_pending_responses()


DISTRIBUTION = {
    "OnDemandAllocationStrategy": "lowest-price",
    "OnDemandPercentageAboveBaseCapacity": 0,
    "SpotAllocationStrategy": "price-capacity-optimized",
}


def group_responses(stubber, instance_ids, *, base: int, activities=()):
    stubber.add_response(
        "describe_auto_scaling_groups",
        {
            "AutoScalingGroups": [
                {
                    "AutoScalingGroupName": GROUP,
                    "MinSize": 4,
                    "MaxSize": 4,
                    "DesiredCapacity": 4,
                    "DefaultCooldown": 300,
                    "AvailabilityZones": ["us-east-1a"],
                    "HealthCheckType": "EC2",
                    "CreatedTime": NOW,
                    "MixedInstancesPolicy": {"InstancesDistribution": {**DISTRIBUTION, "OnDemandBaseCapacity": base}},
                    "Instances": [
                        {
                            "InstanceId": instance_id,
                            "AvailabilityZone": "us-east-1a",
                            "LifecycleState": "InService",
                            "HealthStatus": "Healthy",
                            "ProtectedFromScaleIn": False,
                        }
                        for instance_id in instance_ids
                    ],
                }
            ]
        },
        {"AutoScalingGroupNames": [GROUP]},
    )
    stubber.add_response(
        "describe_scaling_activities", {"Activities": list(activities)}, {"AutoScalingGroupName": GROUP}
    )


FAILED_SPOT_LAUNCH = {
    "ActivityId": "a-1",
    "AutoScalingGroupName": GROUP,
    "Cause": "At 2026-11-23T05:59:00Z an instance was started in response to a difference between desired and actual "
    "capacity, increasing the capacity from 3 to 4.",
    "Description": "Launching a new EC2 instance.  Status Reason: Could not launch Spot Instances. "
    "InsufficientInstanceCapacity - There is no Spot capacity available that matches your request.",
    "StatusMessage": "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity "
    "available that matches your request. Launching EC2 instance failed.",
    "StartTime": minutes(-1),
    "StatusCode": "Failed",
    "Progress": 100,
}
SUCCESSFUL_LAUNCH = {**FAILED_SPOT_LAUNCH, "ActivityId": "a-0", "StatusCode": "Successful", "StartTime": minutes(-9)}


def test_a_group_short_of_spot_gets_a_higher_on_demand_base(group_clients):
    clients, stubber = group_clients
    spot, on_demand = launch(clients["ec2"], spot=1, on_demand=2)
    group_responses(stubber, spot + on_demand, base=2, activities=[FAILED_SPOT_LAUNCH, SUCCESSFUL_LAUNCH])
    first = handler.run("auto-scaling", GROUP, PARAMETER, clients, NOW)
    assert (first["action"], first["spot_running"], first["on_demand_running"]) == ("hold", 1, 2)
    assert [failure["kind"] for failure in first["failures"]] == ["no-capacity"]

    group_responses(stubber, spot + on_demand, base=2, activities=[FAILED_SPOT_LAUNCH])
    stubber.add_response(
        "update_auto_scaling_group",
        {},
        {
            "AutoScalingGroupName": GROUP,
            "MixedInstancesPolicy": {"InstancesDistribution": {**DISTRIBUTION, "OnDemandBaseCapacity": 3}},
        },
    )
    second = handler.run("auto-scaling", GROUP, PARAMETER, clients, minutes(15))
    assert (second["action"], second["on_demand_after"]) == ("raise", 3)
    # The activity from before the previous check is not counted twice.
    assert second["failures"] == []
    assert second["reason"] == (
        "1 of 2 spot nodes missing for 15 min (launch failures: no-capacity x1): on-demand part 2 -> 3"
    )


def test_a_group_with_spot_back_gives_one_on_demand_node_back_after_restore_after(group_clients):
    clients, stubber = group_clients
    spot, on_demand = launch(clients["ec2"], spot=1, on_demand=3)
    handler.write_state(
        clients["ssm"],
        PARAMETER,
        FallbackState(node_group_id=GROUP, on_demand=3, healthy_since=minutes(-30), history_read_until=minutes(-5)),
    )
    group_responses(stubber, spot + on_demand, base=3)
    stubber.add_response(
        "update_auto_scaling_group",
        {},
        {
            "AutoScalingGroupName": GROUP,
            "MixedInstancesPolicy": {"InstancesDistribution": {**DISTRIBUTION, "OnDemandBaseCapacity": 2}},
        },
    )
    line = handler.run("auto-scaling", GROUP, PARAMETER, clients, NOW)
    assert (line["action"], line["on_demand_after"]) == ("lower", 2)
    assert stored_state(clients["ssm"]).healthy_since == NOW


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("InsufficientInstanceCapacity - There is no Spot capacity available", "no-capacity"),
        ("Your Spot request price of 0.1 is lower than the minimum required Spot request fulfillment price", "price"),
        ("Access denied when attempting to assume role", "error"),
    ],
)
def test_failure_kinds_from_their_text(text, kind):
    assert handler.failure_kind("error", text) == kind


def test_the_scheduled_entry_point_reads_what_the_construct_sets(fleet_clients, monkeypatch):
    clients, stubber = fleet_clients
    for variable, value in {"BACKEND": "spot-fleet", "NODE_GROUP_ID": FLEET, "PARAMETER_NAME": PARAMETER}.items():
        monkeypatch.setenv(variable, value)
    fleet_responses(stubber, on_demand=2, spot=6, on_demand_running=2)
    stubber.add_response(
        "describe_spot_fleet_request_history",
        {"SpotFleetRequestId": FLEET, "StartTime": NOW, "LastEvaluatedTime": NOW, "HistoryRecords": []},
        {"SpotFleetRequestId": FLEET, "StartTime": ANY},
    )
    line = handler.on_schedule({"source": "aws.events"}, None, clients=clients)
    assert (line["backend"], line["node_group"], line["action"], line["floor"], line["ceiling"]) == (
        "spot-fleet",
        FLEET,
        "hold",
        2,
        4,
    )


def test_an_unreadable_state_is_logged_and_replaced(fleet_clients, capsys):
    clients, stubber = fleet_clients
    clients["ssm"].put_parameter(Name=PARAMETER, Value='{"short_since": 5}', Type="String")
    fleet_responses(stubber, on_demand=2, spot=6, on_demand_running=2)
    history_response(stubber, minutes(-60))
    line = handler.run("spot-fleet", FLEET, PARAMETER, clients, NOW)
    assert line["action"] == "hold"
    assert logged(capsys)[0] == {
        "event": "capacity-fallback",
        "parameter": PARAMETER,
        "unreadable_state": "not a fallback state (fromisoformat: argument must be str)",
    }
    assert stored_state(clients["ssm"]).node_group_id == FLEET
