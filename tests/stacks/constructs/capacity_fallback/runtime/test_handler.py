"""The capacity fallback Lambda on both backends, against the model of tests/fallback_model/ (real boto3 clients whose
calls the model answers through botocore): every state each API documents for the things the handler reads (botocore's
enums), every bound hit exactly, and no call order pinned where the handler's order does not matter. The expected
values are written out; each enum is the service model's own list, so a value AWS adds fails here until it is placed.
"""

from __future__ import annotations

import json
import re

import botocore.session
import pytest

from gpufleet.fallback import FallbackState
from stacks.constructs.capacity_fallback.runtime import handler
from tests.fallback_model.model import SPOT, Availability, ModelError, at
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


def test_history_and_activities_are_read_at_most_ten_pages_a_run():
    assert handler.MAX_PAGES == 10
    sim = settled("spot-fleet")
    sim.world.page_size = 1
    sim.world.minute = 14
    for _ in range(11):
        sim.fleet.event("error", "allLaunchSpecsTemporarilyBlacklisted", "There is no Spot capacity available")
    sim.world.minute = 15
    assert len(sim.check_now()["failures"]) == 10


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
    """Spot short from minute 5 to 60: raised at 25, probe at 60, whose hooks run from then."""
    sim = Simulation("spot-fleet", Availability(spot=((0, 6), (5, 4), (60, 6)), on_demand=PLENTY)).run(60)
    assert sim.at_minute(60).run["action"] == "probe"
    return sim


@pytest.mark.parametrize(("status", "seen"), COMMAND_STATES.items())
def test_a_hand_back_waits_for_every_checkpoint_command_to_be_over(status, seen):
    assert set(COMMAND_STATES) == set(SSM.shape_for("CommandInvocationStatus").enum)
    sim = probing_fleet()
    for command in sim.world.commands.values():
        command.status = "Success"
    floor_node = sorted(sim.world.commands.values(), key=lambda c: c.instance_id)[0]
    floor_node.status = status
    for minute in (61, 62, 63):
        sim.world.minute = minute
        sim.world.advance()
        sim.fleet.step()
    for command in sim.world.commands.values():
        command.status = status if command is floor_node else "Success"
    line = sim.check_now()
    assert line["action"] == ("lower" if seen == "done" else "hold")


def test_a_command_ssm_does_not_know_yet_is_running():
    sim = probing_fleet()
    sim.fleet.state = "active"  # the probe's modification done, in the minute the commands were sent
    calls = len(sim.world.operations)
    line = sim.check_now()
    looked_up = [op for _, op in sim.world.operations[calls:] if op == "ssm:GetCommandInvocation"]
    assert (len(looked_up), line["action"]) == (4, "hold")
    assert line["reason"].endswith("; waiting up to 15 min for them")


def test_the_checkpoint_command_runs_the_hook_through_run_command():
    sim = probing_fleet()
    sent = [params for _, caller, op, params in sim.world.calls if op == "SendCommand"]
    assert len(sent) == 4
    assert all(
        params
        == {
            "InstanceIds": params["InstanceIds"],
            "DocumentName": "AWS-RunShellScript",
            "Comment": "gpufleet capacity fallback: checkpoint before nodes go back to spot",
            "Parameters": {"commands": ['. /etc/gpufleet/node.env && bash -c "$GPUFLEET_CHECKPOINT_HOOK"']},
        }
        for params in sent
    )
    assert sorted(p["InstanceIds"][0] for p in sent) == sorted(i.id for i in sim.fleet.live() if i.market != SPOT)


def test_a_hand_back_whose_hook_cannot_start_everywhere_does_not_start():
    sim = Simulation("spot-fleet", Availability(spot=((0, 6), (5, 4), (60, 6)), on_demand=PLENTY)).run(55)
    node = next(i for i in sim.fleet.live() if i.market != SPOT)
    original = sim.world.SendCommand

    def unmanaged(params):
        if params["InstanceIds"] == [node.id]:
            raise ModelError("InvalidInstanceId", "Instances not in a valid state for account")
        return original(params)

    sim.world.SendCommand = unmanaged
    sim.world.minute = 60
    line = sim.check_now()
    assert line["action"] == "hold"
    assert line["reason"].endswith(
        f"not started: no checkpoint command reached {node.id} (InvalidInstanceId), and a node EC2 may end must have "
        "had its hook"
    )
    assert [op for _, caller, op, _ in sim.world.calls if caller == "fallback" and op != "SendCommand"] == [
        "ModifySpotFleetRequest"
    ]
    assert stored(sim).probe_total is None


def test_without_a_checkpoint_hook_a_hand_back_sends_no_command():
    sim = Simulation(
        "spot-fleet", Availability(spot=((0, 6), (5, 4), (60, 6)), on_demand=PLENTY), checkpoint_command=""
    ).run(80)
    assert [change[1] for change in sim.changes()] == ["raise", "probe", "lower", "hand-back"]
    assert not [call for call in sim.world.calls if call[2] == "SendCommand"]


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
