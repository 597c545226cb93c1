"""gpufleet status shows the capacity fallback's state, read from its SSM parameter in moto."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import boto3
import pytest

from gpufleet.fallback import FallbackState
from gpufleet.ops import fleet as fleet_module
from tests.gpufleet.ops.conftest import AMI_PARAMETER, ENVIRONMENT_TEMPLATE, REGION

PARAMETER = "/gpufleet/spotfirst/fallback"


@pytest.fixture(autouse=True)
def no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # moto lacks DescribeSpotFleetRequestHistory.
    monkeypatch.setattr(fleet_module, "recent_events", lambda ec2, request_id, now: [])


@pytest.fixture
def spotfirst(environments) -> str:
    """An environment with fleet.fallback: 4 nodes, 1 on demand, up to 2 extra."""
    text = ENVIRONMENT_TEMPLATE.format(
        name="spotfirst",
        zone="us-east-1a",
        instance_type="p4d.24xlarge",
        target=4,
        on_demand=1,
        parameter=AMI_PARAMETER,
    )
    text += "fleet:\n  fallback:\n    max_extra_on_demand: 2\n"
    (Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]) / "spotfirst.yaml").write_text(text)
    return "spotfirst"


def store(state: FallbackState) -> None:
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=PARAMETER, Value=state.to_json(), Type="String", Overwrite=True
    )


def test_without_fallback_status_says_nothing_of_it(spot_fleet, run_json, run_cli) -> None:
    fleet_id = spot_fleet(2)
    code, document = run_json("status", "dev", "--fleet-id", fleet_id)
    assert (code, document["fallback"]) == (0, None)
    code, out, err = run_cli("status", "dev", "--fleet-id", fleet_id)
    assert "Fallback" not in out


def test_a_fallback_that_has_not_run_yet(spot_fleet, spotfirst, run_cli) -> None:
    fleet_id = spot_fleet(4)
    code, out, err = run_cli("status", spotfirst, "--fleet-id", fleet_id)
    assert code == 0
    assert out.splitlines()[1] == (
        "Fallback (/gpufleet/spotfirst/fallback): not run yet (the function writes its state on its first run; it "
        "runs every 5 minutes)"
    )


def test_a_raised_fallback_shows_its_on_demand_part_and_last_decision(spot_fleet, spotfirst, run_cli, run_json) -> None:
    fleet_id = spot_fleet(4)
    checked = dt.datetime(2026, 11, 23, 6, 15, tzinfo=dt.UTC)
    store(
        FallbackState(
            node_group_id=fleet_id,
            on_demand=3,
            changed_at=checked,
            checked_at=checked,
            action="raise",
            reason="2 of 3 spot nodes missing for 15 min (launch failures: no-capacity x2): on-demand part 1 -> 3",
        )
    )
    code, out, err = run_cli("status", spotfirst, "--fleet-id", fleet_id)
    assert out.splitlines()[1] == (
        "Fallback (/gpufleet/spotfirst/fallback): on-demand part 3 (capacity.on_demand 1 + 2 extra, at most 2); "
        "2026-11-23 06:15:00Z raise: 2 of 3 spot nodes missing for 15 min (launch failures: no-capacity x2): "
        "on-demand part 1 -> 3"
    )
    code, document = run_json("status", spotfirst, "--fleet-id", fleet_id)
    fallback = document["fallback"]
    assert (fallback["parameter"], fallback["floor"], fallback["run"], fallback["about_another_fleet"]) == (
        PARAMETER,
        1,
        True,
        False,
    )
    assert (fallback["state"]["on_demand"], fallback["state"]["changed_at"]) == (3, "2026-11-23T06:15:00+00:00")


def test_a_state_about_a_replaced_fleet_is_flagged(spot_fleet, spotfirst, run_cli) -> None:
    fleet_id = spot_fleet(4)
    store(FallbackState(node_group_id="sfr-old", on_demand=3, action="raise", reason="old"))
    code, out, err = run_cli("status", spotfirst, "--fleet-id", fleet_id)
    assert out.splitlines()[1] == (
        "Fallback (/gpufleet/spotfirst/fallback): state about sfr-old, not this fleet: the fallback starts afresh at "
        "its next run"
    )


def test_an_unreadable_state_is_one_line_not_a_traceback(spot_fleet, spotfirst, run_cli) -> None:
    fleet_id = spot_fleet(4)
    boto3.client("ssm", region_name=REGION).put_parameter(Name=PARAMETER, Value="raised by hand", Type="String")
    code, out, err = run_cli("status", spotfirst, "--fleet-id", fleet_id)
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == (
        "Fallback (/gpufleet/spotfirst/fallback): not a fallback state (Expecting value: line 1 column 1 (char 0)): "
        "the fallback replaces it at its next run"
    )


@pytest.mark.parametrize(
    ("under_way", "shown"),
    [
        (
            {"probe_total": 6, "probe_extra": 2, "probe_started": dt.datetime(2026, 11, 23, 7, 20, tzinfo=dt.UTC)},
            "; probe since 07:20:00Z: total 6 (2 spot node(s) beyond the target), the on-demand nodes they replace "
            "end after their checkpoint hook once they are there",
        ),
        (
            {"hand_back_misses": 2, "next_hand_back": dt.datetime(2026, 11, 23, 9, 35, tzinfo=dt.UTC)},
            "; 2 hand-back(s) in a row found spot short: the next one not before 2026-11-23 09:35:00Z",
        ),
    ],
)
def test_a_hand_back_under_way_or_backing_off_says_so(spot_fleet, spotfirst, run_cli, under_way, shown) -> None:
    fleet_id = spot_fleet(4)
    checked = dt.datetime(2026, 11, 23, 7, 20, tzinfo=dt.UTC)
    store(
        FallbackState(
            node_group_id=fleet_id,
            on_demand=3,
            checked_at=checked,
            action="probe",
            reason="spot back for 30 min",
            **under_way,
        )
    )
    code, out, err = run_cli("status", spotfirst, "--fleet-id", fleet_id)
    assert out.splitlines()[1] == (
        "Fallback (/gpufleet/spotfirst/fallback): on-demand part 3 (capacity.on_demand 1 + 2 extra, at most 2); "
        f"2026-11-23 07:20:00Z probe: spot back for 30 min{shown}"
    )
