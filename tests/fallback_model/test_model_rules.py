"""Each rule of the model (tests/fallback_model/model.py), on its own: the behaviour its docstring cites, through the
botocore clients where it is an API call (so that the model's answers also pass botocore's output shapes)."""

from __future__ import annotations

import botocore.exceptions
import pytest

from tests.fallback_model.model import (
    CAPACITY_BLOCK,
    COMMAND_VISIBLE_SECONDS,
    HOOK_MINUTES,
    HOOK_SECONDS,
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
    model.sleep(COMMAND_VISIBLE_SECONDS)
    assert ssm.get_command_invocation(CommandId=command, InstanceId=instance.id)["Status"] == "InProgress"
    model.sleep(HOOK_SECONDS - COMMAND_VISIBLE_SECONDS)
    assert ssm.get_command_invocation(CommandId=command, InstanceId=instance.id)["Status"] == "Success"


def test_run_command_to_several_nodes_is_refused_whole_for_one_ssm_cannot_reach():
    model = world()
    managed, unmanaged = model.launch(ON_DEMAND), model.launch(ON_DEMAND)
    model.unmanaged.add(unmanaged.id)
    ssm = clients()["ssm"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        ssm.send_command(InstanceIds=[managed.id, unmanaged.id], DocumentName="AWS-RunShellScript")
    assert raised.value.response["Error"]["Code"] == "InvalidInstanceId"
    assert (managed.hook_started_at, unmanaged.hook_started_at) == (None, None)
    ssm.send_command(InstanceIds=[managed.id], DocumentName="AWS-RunShellScript")
    assert managed.hook_started_at == 0


def test_a_call_the_model_makes_fail_fails_once_for_the_fallback_only():
    model = world()
    model.failing["PutParameter"] = [False, True]
    ssm = clients()["ssm"]
    model.caller = "deploy"
    ssm.put_parameter(Name="/deploy", Value="1", Type="String")
    model.caller = "fallback"
    ssm.put_parameter(Name="/p", Value="1", Type="String")
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        ssm.put_parameter(Name="/p", Value="2", Type="String", Overwrite=True)
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    ssm.put_parameter(Name="/p", Value="3", Type="String", Overwrite=True)
    assert model.parameters == {"/deploy": "1", "/p": "3"}


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
    ec2 = clients()["ec2"]
    answer = ec2.describe_spot_fleet_request_history(SpotFleetRequestId=fleet.id, StartTime=at(0))
    # More than two records: paged, and "If nextToken indicates that there are more items, this value is not present".
    assert answer["NextToken"] and "LastEvaluatedTime" not in answer
    while answer.get("NextToken"):
        answer = ec2.describe_spot_fleet_request_history(
            SpotFleetRequestId=fleet.id, StartTime=at(0), NextToken=answer["NextToken"]
        )
    assert answer["LastEvaluatedTime"] == at(4.5)
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
    assert fleet.wanted() == {ON_DEMAND: 2, SPOT: 6, CAPACITY_BLOCK: 0}


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
    assert all(i.hook_started_at is not None and i.ended_at - i.hook_started_at >= HOOK_MINUTES for i in ended)


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


# Issue 31: the unknowns added, capacity rebalancing, Capacity Blocks, the stale instance list.


@pytest.mark.parametrize(("unknown", "refused"), [("refused", True), ("accepted", False)])
def test_a_modification_while_one_is_in_progress_is_the_unknown(unknown, refused):
    model = world(modify_while_modifying=unknown)
    fleet = spot_fleet(model)
    ec2 = clients()["ec2"]
    ec2.modify_spot_fleet_request(SpotFleetRequestId=fleet.id, TargetCapacity=8, OnDemandTargetCapacity=3)
    if refused:
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            ec2.modify_spot_fleet_request(SpotFleetRequestId=fleet.id, TargetCapacity=8, OnDemandTargetCapacity=4)
        assert raised.value.response["Error"]["Code"] == "IncorrectState"
    else:
        ec2.modify_spot_fleet_request(SpotFleetRequestId=fleet.id, TargetCapacity=8, OnDemandTargetCapacity=4)
    assert (fleet.on_demand, fleet.refused) == ((3, [(0, "fallback")]) if refused else (4, []))


def listed(fleet: SpotFleet) -> list[str]:
    ec2 = clients()["ec2"]
    answer = ec2.describe_spot_fleet_instances(SpotFleetRequestId=fleet.id)
    found = [a["InstanceId"] for a in answer["ActiveInstances"]]
    while answer.get("NextToken"):
        answer = ec2.describe_spot_fleet_instances(SpotFleetRequestId=fleet.id, NextToken=answer["NextToken"])
        found += [a["InstanceId"] for a in answer["ActiveInstances"]]
    return found


def test_the_instance_list_lags_by_the_unknown_both_ways():
    model = world(instance_list_lag=2)
    fleet = spot_fleet(model)
    assert listed(fleet) == []  # launched this minute: not listed yet
    minutes(model, 2)
    assert len(listed(fleet)) == 8
    gone = fleet.live(ON_DEMAND)[0]
    clients()["ec2"].terminate_instances(InstanceIds=[gone.id])
    minutes(model, 1)
    assert gone.id in listed(fleet)  # ended a minute ago: still listed
    minutes(model, 2)
    assert gone.id not in listed(fleet)


def test_a_fleet_with_capacity_rebalancing_replaces_a_recommended_node_and_ends_it_after_the_delay():
    model = World(Availability(spot=((0, 8), (10, 4)), on_demand=((0, 20),)), Unknowns())
    endpoint().world = model
    fleet = SpotFleet(model, target=8, on_demand=2, rebalance="launch-before-terminate", rebalance_delay=2)
    fleet.step()
    minutes(model, 5)
    # Minute 5: the drop at 10 is REBALANCE_LEAD_MINUTES away: the two newest spot nodes get the recommendation and
    # the hook; the fleet launches their replacements while spot still has room.
    recommended = [i for i in fleet.instances() if i.rebalance_at == 5]
    assert len(recommended) == 2 and all(i.hook_started_at == 5 for i in recommended)
    assert len(fleet.live(SPOT)) == 8 and len(fleet.counted(SPOT)) == 6
    minutes(model, 2)
    assert all(i.cause == "rebalance" and i.ending_at == 9 for i in recommended)


def test_a_group_with_capacity_rebalancing_replaces_launch_first_through_the_hook():
    model = World(Availability(spot=((0, 8), (10, 4)), on_demand=((0, 20),)), Unknowns())
    endpoint().world = model
    fleet = AutoScalingGroup(model, target=8, on_demand=2, rebalance=True)
    fleet.step()
    minutes(model, 9)
    recommended = [i for i in fleet.instances() if i.rebalance_at == 5]
    assert len(recommended) == 2
    assert all(i.cause == "rebalance" and i.hook_started_at is not None for i in recommended)


@pytest.mark.parametrize(("unknown", "lowest"), [("launch-first", 8), ("terminate-first", 7)])
def test_a_group_at_max_size_replaces_as_the_unknown_says_and_room_above_it_makes_it_launch_first(unknown, lowest):
    for max_size, expected_lowest in ((8, lowest), (9, 8)):
        model = world(spot=8, replacement_at_max_size=unknown)
        fleet = group(model)
        fleet.UpdateAutoScalingGroup(
            {
                "AutoScalingGroupName": fleet.name,
                "MaxSize": max_size,
                "MixedInstancesPolicy": {"InstancesDistribution": {"OnDemandBaseCapacity": 0}},
            }
        )
        seen = []
        for _ in range(12):
            minutes(model, 1)
            seen.append(len(fleet.live()))
        assert (min(seen), markets(fleet)) == (expected_lowest, (8, 0)), max_size


@pytest.mark.parametrize("checks", [False, True])
def test_an_update_may_check_the_launch_template_permissions_of_its_caller(checks):
    model = world(update_checks_launch_template=checks)
    fleet = group(model)
    update = {"AutoScalingGroupName": fleet.name, "MaxSize": 9}
    if checks:
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            clients()["autoscaling"].update_auto_scaling_group(**update)
        assert raised.value.response["Error"]["Message"] == (
            "You are not authorized to use launch template: lt-0123456789abcdef0"
        )
    model.granted = {"ec2:RunInstances", "iam:PassRole"}
    clients()["autoscaling"].update_auto_scaling_group(**update)
    assert fleet.max_size == 9


def test_start_time_lower_bound_takes_the_documented_forms_only():
    model = world()
    fleet = group(model)
    autoscaling = clients()["autoscaling"]
    for value in ("2026-11-23T06:00:00Z", "2026-11-23T14:00:00+08:00"):
        autoscaling.describe_scaling_activities(
            AutoScalingGroupName=fleet.name, Filters=[{"Name": "StartTimeLowerBound", "Values": [value]}]
        )
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        autoscaling.describe_scaling_activities(
            AutoScalingGroupName=fleet.name,
            Filters=[{"Name": "StartTimeLowerBound", "Values": ["2026-11-23T06:00:00.123456+00:00"]}],
        )
    assert raised.value.response["Error"]["Code"] == "ValidationError"


def test_a_capacity_block_group_runs_its_nodes_from_the_start_and_scales_in_before_ec2_ends_them():
    """[capacity-blocks] with gpufleet.block_schedule: the block from minute 30 to 200; the scale-out at 30, the
    scale-in 50 minutes before the end (150), EC2's warning at 160 and its terminations from 170."""
    model = World(Availability(spot=((0, 0),), on_demand=((0, 0),), block=2), Unknowns())
    endpoint().world = model
    fleet = AutoScalingGroup(model, target=2, on_demand=2, block=(30, 200))
    assert (fleet.desired, fleet.scheduled) == (0, [(30, 2), (150, 0)])
    minutes(model, 29)
    assert fleet.live() == []
    minutes(model, 3)
    assert [i.market for i in fleet.live()] == [CAPACITY_BLOCK] * 2
    answer = clients()["ec2"].describe_instances(
        Filters=[{"Name": "instance-id", "Values": [i.id for i in fleet.live()]}]
    )
    assert {i["InstanceLifecycle"] for r in answer["Reservations"] for i in r["Instances"]} == {CAPACITY_BLOCK}
    minutes(model, 150 - 32)
    ending = fleet.instances()
    assert all(i.cause == "group" and i.hook_started_at == 150 for i in ending)
    minutes(model, 60)
    assert fleet.live() == [] and all(i.ended_at == 150 + HOOK_MINUTES for i in ending)


def test_ec2_ends_what_still_runs_in_a_block_ten_minutes_after_its_warning_ran_the_hook():
    model = World(Availability(spot=((0, 0),), on_demand=((0, 0),), block=2), Unknowns())
    endpoint().world = model
    fleet = AutoScalingGroup(model, target=2, on_demand=2, block=(30, 200))
    fleet.scheduled = [(30, 2)]  # a scale-in that did not run (an end copied wrong)
    minutes(model, 175)
    assert all(i.hook_started_at == 160 and i.ended_at == 170 and i.cause == "ec2" for i in fleet.instances())
