"""The capacity fallback Lambda on both backends, against the model of tests/fallback_model/ (real boto3 clients whose
calls the model answers through botocore): every state each API documents for the things the handler reads (botocore's
enums), every bound hit exactly, and no call order pinned where the handler's order does not matter. The expected
values are written out; each enum is the service model's own list, so a value AWS adds fails here until it is placed.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import botocore.session
import pytest

from gpufleet.fallback import FallbackState
from stacks.constructs.capacity_fallback.runtime import handler
from tests.fallback_model.model import SPOT, Availability, at
from tests.fallback_model.simulation import PARAMETER, Simulation, endpoint

SERVICES = botocore.session.get_session()
EC2 = SERVICES.get_service_model("ec2")
AUTOSCALING = SERVICES.get_service_model("autoscaling")
SSM = SERVICES.get_service_model("ssm")
PLENTY = ((0, 20),)


def settled(backend: str, minutes: int = 10, **availability) -> Simulation:
    """A fleet of 8 (2 on-demand) run for `minutes` with the fallback in the loop."""
    spot = availability.get("spot", ((0, 6),))
    return Simulation(backend, Availability(spot=spot, on_demand=PLENTY)).run(minutes)


def stored(sim: Simulation) -> FallbackState:
    return FallbackState.from_json(sim.world.parameters[PARAMETER])


@pytest.mark.parametrize(
    ("state", "counted"),
    [
        ("pending", True),
        ("running", True),
        ("shutting-down", False),
        ("terminated", False),
        ("stopping", False),
        ("stopped", False),
    ],
)
def test_a_spot_fleet_counts_the_nodes_ec2_describes_pending_or_running(state, counted):
    assert {"pending", "running", "shutting-down", "terminated", "stopping", "stopped"} == set(
        EC2.shape_for("InstanceStateName").enum
    )
    sim = settled("spot-fleet")
    spot_node = next(i for i in sim.fleet.instances() if i.market == SPOT)
    spot_node.state = state
    sim.fleet.listed_anyway.add(spot_node.id)
    line = sim.check_now()
    assert (line["spot_running"], line["on_demand_running"]) == (6 if counted else 5, 2)


LIFECYCLE_STATES = {
    "Pending": True,
    "Pending:Wait": True,
    "Pending:Proceed": True,
    "InService": True,
    "Quarantined": False,
    "Terminating": False,
    "Terminating:Wait": False,
    "Terminating:Proceed": False,
    "Terminating:Retained": False,
    "Terminated": False,
    "Detaching": False,
    "Detached": False,
    "EnteringStandby": False,
    "Standby": False,
    "ReplacingRootVolume": False,
    "ReplacingRootVolume:Wait": False,
    "ReplacingRootVolume:Proceed": False,
    "RootVolumeReplaced": False,
    "Warmed:Pending": False,
    "Warmed:Pending:Wait": False,
    "Warmed:Pending:Proceed": False,
    "Warmed:Pending:Retained": False,
    "Warmed:Terminating": False,
    "Warmed:Terminating:Wait": False,
    "Warmed:Terminating:Proceed": False,
    "Warmed:Terminating:Retained": False,
    "Warmed:Terminated": False,
    "Warmed:Stopped": False,
    "Warmed:Running": False,
    "Warmed:Hibernated": False,
}


def test_every_lifecycle_state_is_placed():
    assert set(LIFECYCLE_STATES) == set(AUTOSCALING.shape_for("LifecycleState").enum)


@pytest.mark.parametrize(("lifecycle", "counted"), LIFECYCLE_STATES.items())
def test_a_group_counts_its_launching_and_in_service_nodes(lifecycle, counted):
    sim = settled("auto-scaling")
    spot_node = next(i for i in sim.fleet.instances() if i.market == SPOT)
    spot_node.lifecycle = lifecycle
    line = sim.check_now()
    assert (line["spot_running"], line["on_demand_running"]) == (6 if counted else 5, 2)


ACTIVITY_CODES = {
    "PendingSpotBidPlacement": False,
    "WaitingForSpotInstanceRequestId": False,
    "WaitingForSpotInstanceId": False,
    "WaitingForInstanceId": False,
    "PreInService": False,
    "InProgress": False,
    "WaitingForELBConnectionDraining": False,
    "MidLifecycleAction": False,
    "WaitingForInstanceWarmup": False,
    "Successful": False,
    "Failed": True,
    "Cancelled": True,
    "WaitingForConnectionDraining": False,
    "WaitingForInPlaceUpdateToStart": False,
    "WaitingForInPlaceUpdateToFinalize": False,
    "InPlaceUpdateInProgress": False,
}


def test_every_scaling_activity_status_is_placed():
    assert set(ACTIVITY_CODES) == set(AUTOSCALING.shape_for("ScalingActivityStatusCode").enum)


def activity(sim: Simulation, code: str, started: float, ended: float | None) -> dict:
    record = {
        **sim.fleet.activities[0],
        "ActivityId": f"probe-{code}-{started}",
        "StatusCode": code,
        "StatusMessage": "Could not launch Spot Instances. InsufficientInstanceCapacity - no Spot capacity",
        "StartTime": at(started),
    }
    record.pop("EndTime", None)
    if ended is not None:
        record["EndTime"] = at(ended)
    return record


@pytest.mark.parametrize(("code", "counted"), ACTIVITY_CODES.items())
def test_failed_and_cancelled_launches_count(code, counted):
    sim = settled("auto-scaling")
    sim.fleet.activities.append(activity(sim, code, 11, 12))
    sim.world.minute = 15
    kinds = [failure["kind"] for failure in sim.check_now()["failures"]]
    assert kinds == (["no-capacity"] if counted else [])


@pytest.mark.parametrize(
    ("started", "ended", "counted"),
    [
        pytest.param(1, 10.5, True, id="started-in-the-slack-ended-after-the-last-run"),
        pytest.param(-1, 10.5, False, id="started-before-the-slack"),
        pytest.param(1, 10, False, id="ended-at-the-last-run-counted-then"),
        pytest.param(1, None, False, id="still-going"),
        pytest.param(15, 15, True, id="ended-now"),
        pytest.param(15, 15.5, False, id="ends-after-now-next-run"),
    ],
)
def test_a_failure_counts_once_by_the_time_it_ended(started, ended, counted):
    sim = settled("auto-scaling")
    sim.fleet.activities.append(activity(sim, "Failed", started, ended))
    sim.world.minute = 15
    assert len(sim.check_now()["failures"]) == (1 if counted else 0)


HISTORY_EVENTS = {
    ("error", "iamFleetRoleInvalid"): "error",
    ("error", "allLaunchSpecsTemporarilyBlacklisted"): "error",
    ("error", "spotInstanceCountLimitExceeded"): "error",
    ("error", "spotFleetRequestConfigurationInvalid"): "error",
    ("information", "launchSpecTemporarilyBlacklisted"): "error",
    ("information", "launchSpecUnusable"): "price",
    ("information", "fleetProgressHalted"): "price",
    ("information", "registerWithLoadBalancersFailed"): None,
    ("fleetRequestChange", "active"): None,
    ("fleetRequestChange", "cancelled"): None,
    ("fleetRequestChange", "cancelled_running"): None,
    ("fleetRequestChange", "cancelled_terminating"): None,
    ("fleetRequestChange", "expired"): None,
    ("fleetRequestChange", "modify_in_progress"): None,
    ("fleetRequestChange", "modify_succeeded"): None,
    ("fleetRequestChange", "submitted"): None,
    ("fleetRequestChange", "progress"): None,
    ("instanceChange", "launched"): None,
    ("instanceChange", "terminated"): None,
    ("instanceChange", "termination_notified"): None,
}


def test_every_history_event_the_api_documents_is_placed():
    documented = " ".join(
        re.sub(r"<[^>]+>", "", EC2.shape_for("EventInformation").members["EventSubType"].documentation).split()
    )
    for _, subtype in HISTORY_EVENTS:
        assert f"{subtype} -" in documented or f"/ {subtype} (Spot Fleet) -" in documented, subtype
    assert {event_type for event_type, _ in HISTORY_EVENTS} <= set(EC2.shape_for("EventType").enum)


@pytest.mark.parametrize(("event", "kind"), HISTORY_EVENTS.items())
def test_a_spot_fleet_counts_the_failure_events_of_its_history(event, kind):
    sim = settled("spot-fleet")
    sim.world.minute = 15
    sim.fleet.event(*event, "a description without the two words")
    sim.world.minute = 20
    kinds = [failure["kind"] for failure in sim.check_now()["failures"]]
    assert kinds == ([kind] if kind else [])


def test_a_fleet_history_longer_than_ten_pages_is_read_on_by_the_next_run_and_keeps_spot_from_counting_as_back():
    assert handler.MAX_PAGES == 10
    sim = settled("spot-fleet")
    sim.world.page_size = 1
    for minute in range(1, 12):
        sim.fleet.history.append(
            {
                "Timestamp": at(10 + minute / 10),
                "EventType": "error",
                "EventInformation": {
                    "EventSubType": "allLaunchSpecsTemporarilyBlacklisted",
                    "EventDescription": f"There is no Spot capacity available ({minute})",
                },
            }
        )
    sim.world.minute = 15
    first = sim.check_now()
    assert [failure["description"][-3:] for failure in first["failures"]] == [f"({n})" for n in range(1, 10)] + ["10)"]
    # Spot counts as back from now, not from the last failure read (minute 11).
    assert (stored(sim).healthy_since, stored(sim).history_read_until) == (at(15), at(11))
    sim.world.minute = 20
    second = sim.check_now()
    # On from the latest record read (read again: records of one time may straddle the cut), to the history's end.
    assert [failure["description"][-4:] for failure in second["failures"]] == ["(10)", "(11)"]
    assert stored(sim).history_read_until == at(20) - dt.timedelta(seconds=30)


def test_a_group_history_longer_than_ten_pages_counts_as_a_failure_now():
    sim = settled("auto-scaling")
    sim.world.page_size = 1
    sim.world.minute = 15
    for minute in range(11, 15):
        sim.fleet.activities.append(activity(sim, "Successful", minute, minute))
    for _ in range(10):
        sim.fleet.activities.append(activity(sim, "Successful", 14, 14))
    line = sim.check_now()
    state = stored(sim)
    assert (line["failures"], state.healthy_since) == ([], at(15))


def test_start_time_lower_bound_is_sent_as_the_api_reference_writes_it():
    """DescribeScalingActivities, Filters: "StartTimeLowerBound and StartTimeUpperBound accept ISO 8601 formatted
    timestamps ... 2000-01-18T08:15:00Z": whole seconds and Z, never the fraction datetime.isoformat() adds."""
    documented = " ".join(
        re.sub(
            r"<[^>]+>",
            "",
            AUTOSCALING.operation_model("DescribeScalingActivities").input_shape.members["Filters"].documentation,
        ).split()
    )
    assert "StartTimeLowerBound and StartTimeUpperBound accept ISO 8601 formatted timestamps." in documented
    assert "2000-01-18T08:15:00Z" in documented
    assert handler.ACTIVITY_TIME_FORMAT == "%Y-%m-%dT%H:%M:%SZ"
    sim = settled("auto-scaling")
    sim.world.parameters[PARAMETER] = FallbackState(
        node_group_id=sim.node_group_id, history_read_until=at(10) + dt.timedelta(microseconds=123456)
    ).to_json()
    asked = []
    described = sim.fleet.DescribeScalingActivities

    def keep(params):
        asked.append(params["Filters"])
        return described(params)

    sim.fleet.DescribeScalingActivities = keep
    sim.world.minute = 15
    sim.check_now()
    assert asked[0] == [{"Name": "StartTimeLowerBound", "Values": ["2026-11-23T06:00:00Z"]}]


FLEET_STATES = {
    "submitted": "replacing",
    "active": "",
    "cancelled": "replacing",
    "failed": "replacing",
    "cancelled_running": "replacing",
    "cancelled_terminating": "replacing",
    "modifying": "busy",
}


@pytest.mark.parametrize(("fleet_state", "held"), FLEET_STATES.items())
def test_only_an_active_fleet_is_changed_and_a_modification_keeps_the_clocks(fleet_state, held):
    assert set(FLEET_STATES) == set(EC2.shape_for("BatchState").enum)
    sim = settled("spot-fleet", 20, spot=((0, 6), (5, 4)))
    assert stored(sim).short_since == at(10)
    sim.fleet.state = fleet_state
    sim.world.minute = 25
    line = sim.check_now()
    if not held:
        assert (line["action"], line["on_demand_after"]) == ("raise", 4)
        return
    assert (line["action"], line["reason"]) == (
        "hold",
        f"fleet request is {fleet_state}: nothing changes until it is over",
    )
    assert stored(sim).short_since == (at(10) if held == "busy" else None)


REFRESH_STATES = {
    "Pending": True,
    "InProgress": True,
    "Successful": False,
    "Failed": False,
    "Cancelling": True,
    "Cancelled": False,
    "RollbackInProgress": True,
    "RollbackFailed": False,
    "RollbackSuccessful": False,
    "Baking": True,
}


@pytest.mark.parametrize(("status", "active"), REFRESH_STATES.items())
def test_a_refresh_under_way_is_stood_aside_from(status, active):
    assert set(REFRESH_STATES) == set(AUTOSCALING.shape_for("InstanceRefreshStatus").enum)
    sim = settled("auto-scaling")
    sim.fleet.start_refresh()
    sim.fleet.refreshes[-1]["Status"] = status
    next(i for i in sim.fleet.instances() if i.market == SPOT).lifecycle = "Terminating:Wait"
    reason = sim.check_now()["reason"]
    stood_aside = re.fullmatch(
        rf"instance refresh refresh-[0-9a-f]{{17}} is {status}: the nodes it replaces are not a spot shortage; .*",
        reason,
    )
    assert bool(stood_aside) == active


def test_a_group_being_deleted_is_left_alone():
    sim = settled("auto-scaling")
    sim.fleet.delete()
    line = sim.check_now()
    assert (line["action"], line["reason"]) == ("hold", "group is Delete in progress: nothing changes until it is over")


@pytest.mark.parametrize(("backend", "busy"), [("spot-fleet", "fleet request"), ("auto-scaling", "group")])
def test_a_fleet_or_group_that_is_gone_is_left_alone(backend, busy):
    sim = settled(backend)
    sim.node_group_id = "gone"
    line = sim.check_now()
    assert (line["action"], line["reason"]) == ("hold", f"{busy} not found: nothing changes until it is over")


COMMAND_STATES = {
    "Pending": "running",
    "InProgress": "running",
    "Delayed": "running",
    "Success": "done",
    "Cancelled": "done",
    "TimedOut": "done",
    "Failed": "done",
    "Cancelling": "running",
}


def probing_fleet() -> Simulation:
    """Spot short from minute 5 to 60: raised at 25, probe at 60, whose two spot nodes are there at 65 (the hand-back's
    check, not run yet)."""
    sim = Simulation("spot-fleet", Availability(spot=((0, 6), (5, 4), (60, 6)), on_demand=PLENTY)).run(64)
    assert sim.at_minute(60).run["action"] == "probe"
    for minute in (65,):
        sim.world.minute = minute
        sim.world.advance()
        sim.fleet.step()
    return sim


def hand_back_ends(sim: Simulation) -> dict[str, tuple[float, float]]:
    """The nodes the fallback ended: instance id -> (when its hook started, when it ended), in minutes."""
    return {
        i.id: (i.hook_started_at, i.ended_at)
        for i in sim.world.instances.values()
        if i.cause == "fallback" and i.ended_at is not None
    }


@pytest.mark.parametrize(("status", "seen"), COMMAND_STATES.items())
def test_a_hand_back_ends_each_node_once_its_hook_is_over_or_two_minutes_after_it_started(status, seen):
    assert set(COMMAND_STATES) == set(SSM.shape_for("CommandInvocationStatus").enum)
    sim = probing_fleet()
    sim.world.GetCommandInvocation = lambda params: {
        "CommandId": params["CommandId"],
        "InstanceId": params["InstanceId"],
        "Status": status,
    }
    line = sim.check_now()
    assert line["action"] == "hand-back"
    lead = 0.0 if seen == "done" else 2.0
    assert sorted(hand_back_ends(sim).values()) == [(65.0, 65.0 + lead), (65.0, 65.0 + lead)]


def test_a_command_ssm_does_not_know_yet_is_running():
    """GetCommandInvocation answers InvocationDoesNotExist for a command just sent (the model: 10 seconds); the hook
    (the model: 90 seconds) is then awaited like any other."""
    sim = probing_fleet()
    sim.check_now()
    assert sorted(hand_back_ends(sim).values()) == [(65.0, 66.5), (65.0, 66.5)]


def test_the_checkpoint_command_runs_the_hook_through_run_command_on_the_nodes_that_end_only():
    sim = probing_fleet()
    line = sim.check_now()
    sent = [params for _, caller, op, params in sim.world.calls if op == "SendCommand"]
    assert all(
        params
        == {
            "InstanceIds": params["InstanceIds"],
            "DocumentName": "AWS-RunShellScript",
            "Comment": "gpufleet capacity fallback: checkpoint before the node goes back to spot",
            "Parameters": {"commands": ['. /etc/gpufleet/node.env && bash -c "$GPUFLEET_CHECKPOINT_HOOK"']},
        }
        for params in sent
    )
    hooked = sorted(node for params in sent for node in params["InstanceIds"])
    assert hooked == sorted(line["ended"]) == sorted(hand_back_ends(sim))
    assert len(hooked) == 2
    # The order of the calls: the hook, then the end, then the lower part and total (gpufleet.fallback).
    calls = [(op, params) for _, caller, op, params in sim.world.calls if caller == "fallback"]
    assert [op for op, _ in calls][-2:] == ["TerminateInstances", "ModifySpotFleetRequest"]
    assert calls[-1][1] == {
        "SpotFleetRequestId": sim.node_group_id,
        "TargetCapacity": 8,
        "OnDemandTargetCapacity": 2,
        "ExcessCapacityTerminationPolicy": "noTermination",
    }


def test_a_node_whose_hook_cannot_start_is_not_ended_and_the_part_drops_by_those_ended():
    sim = probing_fleet()
    newest = max((i for i in sim.fleet.live() if i.market != SPOT), key=lambda i: (i.launched, i.id))
    sim.world.unmanaged.add(newest.id)
    line = sim.check_now()
    assert newest.id not in line["ended"] and len(line["ended"]) == 1
    assert line["on_demand_after"] == 3
    assert line["reason"].endswith(f"; {newest.id} kept: no checkpoint hook could start there")
    assert sim.fleet.on_demand == 3 and stored(sim).on_demand == 3
    assert stored(sim).intent["on_demand"] == 3


def test_without_a_checkpoint_hook_a_hand_back_sends_no_command():
    sim = Simulation(
        "spot-fleet", Availability(spot=((0, 6), (5, 4), (60, 6)), on_demand=PLENTY), checkpoint_command=""
    ).run(80)
    assert [change[1] for change in sim.changes()] == ["raise", "probe", "hand-back", "settle"]
    assert not [call for call in sim.world.calls if call[2] == "SendCommand"]
    assert len(hand_back_ends(sim)) == 2


def test_an_unreadable_state_is_logged_and_replaced(capsys):
    sim = settled("spot-fleet")
    sim.world.parameters[PARAMETER] = '{"short_since": 5}'
    line = sim.check_now()
    assert line["action"] == "hold"
    assert stored(sim).node_group_id == sim.node_group_id


def test_the_unreadable_state_line_names_the_parameter_and_the_error(capsys):
    sim = settled("spot-fleet")
    sim.world.parameters[PARAMETER] = "not json"
    endpoint().world = sim.world
    state = handler.read_state(endpoint().clients["ssm"], PARAMETER)
    assert state == FallbackState()
    assert json.loads(capsys.readouterr().out) == {
        "event": "capacity-fallback",
        "parameter": PARAMETER,
        "unreadable_state": "not a fallback state (Expecting value: line 1 column 1 (char 0))",
    }


def test_a_state_about_a_replaced_fleet_starts_afresh():
    sim = settled("spot-fleet")
    sim.world.parameters[PARAMETER] = FallbackState(node_group_id="sfr-old", on_demand=4).to_json()
    line = sim.check_now()
    assert (line["new_node_group"], line["on_demand_after"], stored(sim).node_group_id) == (True, 2, sim.node_group_id)


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="BACKEND is 'ec2-fleet': spot-fleet or auto-scaling"):
        handler.node_group("ec2-fleet", "x", {})


def test_the_scheduled_entry_point_reads_what_the_construct_sets_and_retries_in_standard_mode(monkeypatch):
    made = []

    def client(service, config):
        made.append((service, config))
        return object()

    monkeypatch.setattr(handler.boto3, "client", client)
    monkeypatch.setattr(handler, "run", lambda *arguments: arguments[:3])
    for variable, value in {"BACKEND": "spot-fleet", "NODE_GROUP_ID": "sfr-1", "PARAMETER_NAME": PARAMETER}.items():
        monkeypatch.setenv(variable, value)
    assert handler.on_schedule({"source": "aws.events"}, None) == ("spot-fleet", "sfr-1", PARAMETER)
    assert sorted(service for service, _ in made) == ["autoscaling", "ec2", "ssm"]
    assert all(config is handler.CLIENT_CONFIG for _, config in made)
