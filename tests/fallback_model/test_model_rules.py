"""Each rule of the model (tests/fallback_model/model.py), on its own: the behaviour its docstring cites, through the
botocore clients where it is an API call (so that the model's answers also pass botocore's output shapes)."""

from __future__ import annotations

import botocore.exceptions
import pytest

from tests.fallback_model.model import (
    ON_DEMAND,
    SPOT,
    AutoScalingGroup,
    Availability,
    SpotFleet,
    Unknowns,
    World,
    at,
)
from tests.fallback_model.simulation import endpoint


def world(spot=6, on_demand=20, **unknowns) -> World:
    model = World(Availability(spot=((0, spot),), on_demand=((0, on_demand),)), Unknowns(**unknowns))
    endpoint().world = model
    return model


def minutes(model: World, count: int) -> None:
    for _ in range(count):
        model.minute += 1
        model.advance()
        model.fleet.step()


def clients():
    return endpoint().clients


def spot_fleet(model: World, target=8, on_demand=2) -> SpotFleet:
    fleet = SpotFleet(model, target=target, on_demand=on_demand)
    fleet.step()
    return fleet


def group(model: World, target=8, on_demand=2) -> AutoScalingGroup:
    fleet = AutoScalingGroup(model, target=target, on_demand=on_demand)
    fleet.step()
    return fleet


def markets(fleet) -> tuple[int, int]:
    return len(fleet.live(SPOT)), len(fleet.live(ON_DEMAND))


# The world.


def test_a_launch_needs_room_in_its_market():
    model = world(spot=1, on_demand=0)
    assert model.launch(SPOT) is not None
    assert (model.launch(SPOT), model.launch(ON_DEMAND)) == (None, None)


def test_instances_run_after_their_launch_and_end_through_shutting_down():
    model = world()
    instance = model.launch(SPOT)
    model.minute = 1
    model.advance()
    assert instance.state == "pending"
    model.minute = 2
    model.advance()
    assert instance.state == "running"
    model.end(instance, "test")
    model.advance()
    assert (instance.state, instance.ended_at) == ("shutting-down", 2)
    model.minute = 3
    model.advance()
    assert instance.state == "terminated"


def test_spot_ec2_takes_back_gets_the_two_minute_notice_and_the_hook():
    model = world(spot=2)
    old, new = model.launch(SPOT), None
    model.minute = 1
    new = model.launch(SPOT)
    model.availability = Availability(spot=((0, 1),), on_demand=((0, 0),))
    model.advance()
    assert (new.hook_started_at, new.ending_at, new.cause, old.ending_at) == (1, 3, "ec2", None)


def test_describe_instances_by_id_fails_on_an_id_it_does_not_know_yet_and_the_filter_leaves_it_out():
    model = world()
    known = model.launch(SPOT)
    model.minute = 1
    fresh = model.launch(ON_DEMAND)
    ec2 = clients()["ec2"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        ec2.describe_instances(InstanceIds=[known.id, fresh.id])
    assert raised.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    found = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": [known.id, fresh.id]}])
    described = [i for r in found["Reservations"] for i in r["Instances"]]
    assert [(i["InstanceId"], i["State"]["Name"], i["InstanceLifecycle"]) for i in described] == [
        (known.id, "pending", "spot")
    ]
    assert described[0]["LaunchTime"] == at(0)


def test_terminate_instances_ends_them_at_once_without_a_hook():
    model = world()
    instance = model.launch(ON_DEMAND)
    answer = clients()["ec2"].terminate_instances(InstanceIds=[instance.id])
    assert answer["TerminatingInstances"][0]["CurrentState"] == {"Name": "shutting-down"}
    assert (instance.state, instance.hook_started_at, instance.cause) == ("shutting-down", None, "fallback")


def test_run_command_starts_the_hook_and_reports_it_over_after_it_ran():
    model = world()
    instance = model.launch(ON_DEMAND)
    ssm = clients()["ssm"]
    command = ssm.send_command(
        InstanceIds=[instance.id], DocumentName="AWS-RunShellScript", Parameters={"commands": ["true"]}
    )["Command"]["CommandId"]
    assert instance.hook_started_at == 0
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        ssm.get_command_invocation(CommandId=command, InstanceId=instance.id)
    assert raised.value.response["Error"]["Code"] == "InvocationDoesNotExist"
    model.minute = 2
    model.advance()
    assert ssm.get_command_invocation(CommandId=command, InstanceId=instance.id)["Status"] == "InProgress"
    model.minute = 3
    model.advance()
    assert ssm.get_command_invocation(CommandId=command, InstanceId=instance.id)["Status"] == "Success"


def test_run_command_fails_on_an_instance_that_is_gone_and_a_command_dies_with_its_instance():
    model = world()
    instance = model.launch(ON_DEMAND)
    ssm = clients()["ssm"]
    command = ssm.send_command(InstanceIds=[instance.id], DocumentName="AWS-RunShellScript")["Command"]["CommandId"]
    model.end(instance, "test")
    model.minute = 1
    model.advance()
    assert ssm.get_command_invocation(CommandId=command, InstanceId=instance.id)["Status"] == "Failed"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        ssm.send_command(InstanceIds=[instance.id], DocumentName="AWS-RunShellScript")
    assert raised.value.response["Error"]["Code"] == "InvalidInstanceId"


def test_parameters_are_kept_and_overwritten_only_when_asked():
    world()
    ssm = clients()["ssm"]
    with pytest.raises(botocore.exceptions.ClientError):
        ssm.get_parameter(Name="/p")
    ssm.put_parameter(Name="/p", Value="1", Type="String")
    with pytest.raises(botocore.exceptions.ClientError):
        ssm.put_parameter(Name="/p", Value="2", Type="String")
    ssm.put_parameter(Name="/p", Value="2", Type="String", Overwrite=True)
    assert ssm.get_parameter(Name="/p")["Parameter"]["Value"] == "2"


# The Spot Fleet.


def test_a_fleet_launches_its_on_demand_part_and_spot_for_the_rest():
    model = world()
    fleet = spot_fleet(model)
    assert markets(fleet) == (6, 2)


def test_a_fleet_short_of_spot_records_a_failure_every_five_minutes_and_launches_no_on_demand_instead():
    model = world(spot=4)
    fleet = spot_fleet(model)
    minutes(model, 6)
    failures = [r for r in fleet.history if r["EventType"] == "error"]
    assert markets(fleet) == (4, 2)
    assert [(r["Timestamp"], r["EventInformation"]["EventSubType"]) for r in failures] == [
        (at(0), "allLaunchSpecsTemporarilyBlacklisted"),
        (at(5), "allLaunchSpecsTemporarilyBlacklisted"),
    ]


def test_a_fleet_replaces_what_ec2_takes_back():
    model = world()
    fleet = spot_fleet(model)
    fleet.live(SPOT)[0].ending_at = model.minute
    minutes(model, 1)
    assert markets(fleet) == (6, 2)


def test_modify_sets_the_request_modifying_and_refuses_a_part_above_the_total():
    model = world()
    fleet = spot_fleet(model)
    ec2 = clients()["ec2"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        ec2.modify_spot_fleet_request(SpotFleetRequestId=fleet.id, TargetCapacity=2, OnDemandTargetCapacity=3)
    assert raised.value.response["Error"]["Message"] == (
        "TargetCapacity (2) cannot be less than OnDemandTargetCapacity (3)."
    )
    ec2.modify_spot_fleet_request(SpotFleetRequestId=fleet.id, TargetCapacity=8, OnDemandTargetCapacity=3)
    request = ec2.describe_spot_fleet_requests(SpotFleetRequestIds=[fleet.id])["SpotFleetRequestConfigs"][0]
    assert (request["SpotFleetRequestState"], request["SpotFleetRequestConfig"]["OnDemandTargetCapacity"]) == (
        "modifying",
        3,
    )
    with pytest.raises(botocore.exceptions.ClientError):
        ec2.modify_spot_fleet_request(SpotFleetRequestId=fleet.id, TargetCapacity=8, OnDemandTargetCapacity=2)
    minutes(model, 1)
    assert fleet.state == "active"


def test_a_higher_on_demand_part_launches_on_demand_instances():
    model = world()
    fleet = spot_fleet(model)
    fleet.ModifySpotFleetRequest({"SpotFleetRequestId": fleet.id, "TargetCapacity": 8, "OnDemandTargetCapacity": 4})
    minutes(model, 1)
    assert markets(fleet) == (6, 4)
    minutes(model, 1)
    # Above its target then: the fleet ends spot instances, each with a notice.
    assert markets(fleet) == (4, 4)


def test_a_higher_total_launches_spot_and_a_lower_one_ends_spot_with_a_notice():
    model = world(spot=8)
    fleet = spot_fleet(model)
    fleet.ModifySpotFleetRequest({"SpotFleetRequestId": fleet.id, "TargetCapacity": 10})
    minutes(model, 1)
    assert markets(fleet) == (8, 2)
    fleet.state = "active"
    fleet.ModifySpotFleetRequest({"SpotFleetRequestId": fleet.id, "TargetCapacity": 8})
    minutes(model, 1)
    ended = [i for i in fleet.instances() if i.ending_at is not None]
    assert markets(fleet) == (6, 2)
    assert [(i.market, i.hook_started_at is not None, i.cause) for i in ended] == [(SPOT, True, "fallback")] * 2


def test_with_no_termination_a_lower_total_keeps_the_fleet_as_it_is():
    model = world(spot=8)
    fleet = spot_fleet(model, target=10)
    fleet.ModifySpotFleetRequest(
        {"SpotFleetRequestId": fleet.id, "TargetCapacity": 8, "ExcessCapacityTerminationPolicy": "noTermination"}
    )
    minutes(model, 1)
    assert markets(fleet) == (8, 2)


@pytest.mark.parametrize(("decrease", "expected"), [("keep", (4, 4)), ("swap", (6, 2))])
def test_a_lower_on_demand_part_alone_is_the_unknown(decrease, expected):
    model = world(spot=8, spot_fleet_on_demand_decrease=decrease)
    fleet = spot_fleet(model, on_demand=4)
    fleet.ModifySpotFleetRequest({"SpotFleetRequestId": fleet.id, "TargetCapacity": 8, "OnDemandTargetCapacity": 2})
    minutes(model, 1)
    assert markets(fleet) == expected
    swapped = [i for i in fleet.instances() if i.market == ON_DEMAND and i.ending_at is not None]
    assert all(i.hook_started_at is None for i in swapped)


def test_the_history_lags_thirty_seconds_and_starts_where_asked():
    model = world(spot=4)
    fleet = spot_fleet(model)
    model.minute = 5
    answer = clients()["ec2"].describe_spot_fleet_request_history(SpotFleetRequestId=fleet.id, StartTime=at(0))
    assert answer["LastEvaluatedTime"] == at(4.5)
    assert answer["NextToken"]  # more than two records: paged
    model.minute = 0
    answer = clients()["ec2"].describe_spot_fleet_request_history(SpotFleetRequestId=fleet.id, StartTime=at(0))
    assert answer["HistoryRecords"] == []


def test_the_fleet_names_a_spot_instances_request():
    model = world()
    fleet = spot_fleet(model)
    ec2 = clients()["ec2"]
    answer = ec2.describe_spot_fleet_instances(SpotFleetRequestId=fleet.id)
    listed = answer["ActiveInstances"]
    while answer.get("NextToken"):
        answer = ec2.describe_spot_fleet_instances(SpotFleetRequestId=fleet.id, NextToken=answer["NextToken"])
        listed += answer["ActiveInstances"]
    assert sorted("SpotInstanceRequestId" in a for a in listed) == [False] * 2 + [True] * 6


# The Auto Scaling group.


def test_a_group_launches_the_base_on_demand_and_the_rest_spot():
    model = world()
    fleet = group(model)
    assert markets(fleet) == (6, 2)
    assert fleet.wanted() == {ON_DEMAND: 2, SPOT: 6}


def test_a_group_short_of_spot_records_failed_activities_and_launches_no_on_demand_instead():
    model = world(spot=4)
    fleet = group(model)
    failed = [a for a in fleet.activities if a["StatusCode"] == "Failed"]
    assert markets(fleet) == (4, 2)
    assert [a["StatusMessage"] for a in failed] == [
        "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that "
        "matches your request. Launching EC2 instance failed."
    ]


@pytest.mark.parametrize(
    ("base", "spot_capacity", "after"),
    [
        pytest.param(4, 6, (4, 4), id="raised-base-launches-on-demand-then-ends-spot"),
        pytest.param(0, 8, (8, 0), id="lowered-base-launches-spot-then-ends-on-demand"),
        pytest.param(0, 6, (6, 2), id="lowered-base-without-spot-keeps-the-on-demand-nodes"),
    ],
)
def test_a_changed_base_replaces_launch_first_through_the_hook(base, spot_capacity, after):
    model = world(spot=spot_capacity)
    fleet = group(model)
    fleet.UpdateAutoScalingGroup(
        {
            "AutoScalingGroupName": fleet.name,
            "MixedInstancesPolicy": {"InstancesDistribution": {"OnDemandBaseCapacity": base}},
        }
    )
    lowest = len(fleet.live())
    for _ in range(10):
        minutes(model, 1)
        lowest = min(lowest, len(fleet.live()))
    assert markets(fleet) == after
    assert lowest >= 8  # never a node short while it replaces
    ended = [i for i in fleet.instances() if i.ended_at is not None]
    assert all(i.hook_started_at is not None and i.ended_at - i.hook_started_at >= 3 for i in ended)


def test_a_group_above_its_desired_capacity_ends_nodes_through_the_hook():
    model = world()
    fleet = group(model)
    fleet.UpdateAutoScalingGroup({"AutoScalingGroupName": fleet.name, "DesiredCapacity": 6})
    minutes(model, 1)
    assert [i.lifecycle for i in fleet.instances() if i.ending_at is not None] == ["Terminating:Wait"] * 2
    minutes(model, 4)
    assert len(fleet.live()) == 6


@pytest.mark.parametrize(("update", "percentage"), [("merge", 0), ("replace", 100)])
def test_an_update_naming_only_the_base_merges_or_resets_the_rest(update, percentage):
    model = world(distribution_update=update)
    fleet = group(model)
    clients()["autoscaling"].update_auto_scaling_group(
        AutoScalingGroupName=fleet.name, MixedInstancesPolicy={"InstancesDistribution": {"OnDemandBaseCapacity": 3}}
    )
    assert fleet.distribution["OnDemandPercentageAboveBaseCapacity"] == percentage


def test_an_update_with_spot_instance_pools_and_another_strategy_is_refused():
    model = world()
    fleet = group(model)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        clients()["autoscaling"].update_auto_scaling_group(
            AutoScalingGroupName=fleet.name,
            MixedInstancesPolicy={"InstancesDistribution": {"SpotInstancePools": 2, "OnDemandBaseCapacity": 3}},
        )
    assert raised.value.response["Error"]["Code"] == "ValidationError"


def test_the_group_describes_spot_instance_pools_when_the_unknown_says_so():
    for shown in (True, False):
        model = world(describes_spot_instance_pools=shown)
        fleet = group(model)
        answer = clients()["autoscaling"].describe_auto_scaling_groups(AutoScalingGroupNames=[fleet.name])
        distribution = answer["AutoScalingGroups"][0]["MixedInstancesPolicy"]["InstancesDistribution"]
        assert ("SpotInstancePools" in distribution) == shown


def test_activities_come_newest_first_from_the_lower_bound_at_most_max_records_a_page():
    model = world(spot=4)
    fleet = group(model)
    minutes(model, 10)
    autoscaling = clients()["autoscaling"]
    answer = autoscaling.describe_scaling_activities(
        AutoScalingGroupName=fleet.name,
        MaxRecords=1,
        Filters=[{"Name": "StartTimeLowerBound", "Values": [at(5).isoformat()]}],
    )
    assert [(a["StatusCode"], a["StartTime"]) for a in answer["Activities"]] == [("Failed", at(10))]
    second = autoscaling.describe_scaling_activities(
        AutoScalingGroupName=fleet.name,
        MaxRecords=1,
        NextToken=answer["NextToken"],
        Filters=[{"Name": "StartTimeLowerBound", "Values": [at(5).isoformat()]}],
    )
    assert [(a["StatusCode"], a["StartTime"]) for a in second["Activities"]] == [("Failed", at(5))]
    assert "NextToken" not in second


def test_a_refresh_terminates_then_launches_one_node_at_a_time_until_all_are_new():
    model = world()
    fleet = group(model)
    minutes(model, 2)
    fleet.start_refresh()
    sizes = []
    for _ in range(80):
        minutes(model, 1)
        sizes.append(len(fleet.live()))
    assert fleet.refreshes[0]["Status"] == "Successful"
    assert min(sizes) == 7 and all(i.launched > 2 for i in fleet.live())
    refreshed = [i for i in fleet.instances() if i.cause == "refresh"]
    assert len(refreshed) == 8 and all(i.hook_started_at is not None for i in refreshed)


def test_a_deletion_ends_every_node_through_the_hook():
    model = world()
    fleet = group(model)
    fleet.delete()
    answer = clients()["autoscaling"].describe_auto_scaling_groups(AutoScalingGroupNames=[fleet.name])
    assert answer["AutoScalingGroups"][0]["Status"] == "Delete in progress"
    assert fleet.live() == []
