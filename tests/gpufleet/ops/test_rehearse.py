"""`gpufleet rehearse` (gpufleet/commands/rehearse.py, gpufleet/ops/rehearse.py): the experiment started from the
cluster stack's output, then followed through every state the FIS model names, the noticed node going away and the
replacement booting until it is ready.

moto 5.2.5's FIS moves experiments on by itself and resolves no target chosen by tags, so FIS, CloudFormation and
the Spot Fleet's EC2 calls are botocore-validated stand-ins (tests/answering.py) that answer from a timeline: the
state at each look, one look per poll."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

import botocore.session
import pytest

from gpufleet.ops import rehearse
from tests.answering import client_error
from tests.gpufleet.ops.conftest import REGION

FLEET = "sfr-0123456789abcdef0"
TEMPLATE = "EXT1a2b3c4d5e6f7"
EXPERIMENT = "EXP9z8y7x6w5v4u3"
ON_DEMAND = "i-0aaaaaaaaaaaaaaa1"
SPOT = "i-0bbbbbbbbbbbbbbb2"
NEW = "i-0ccccccccccccccc3"
LAUNCHED = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
ADDRESSES = {ON_DEMAND: "10.40.0.10", SPOT: "10.40.0.11", NEW: "10.40.0.12"}
LIFECYCLES = {ON_DEMAND: None, SPOT: "spot", NEW: "spot"}


class VirtualPace(rehearse.Pace):
    def __init__(self) -> None:
        self.now = 0.0
        self.ticks = 0
        super().__init__(clock=lambda: self.now, sleep=self.sleep_for)

    def sleep_for(self, seconds: float) -> None:
        self.now += seconds
        self.ticks += 1


def at(timeline: list, tick: int) -> Any:
    """The timeline's entry for this look; the last one stays."""
    return timeline[min(tick, len(timeline) - 1)]


@dataclass
class Cluster:
    """What AWS answers at each look: the experiment's state and the fleet's nodes (id -> (state, readiness))."""

    pace: VirtualPace
    experiment: list[dict] = field(default_factory=list)
    nodes: list[dict[str, tuple[str, str]]] = field(default_factory=list)
    resolved: dict[str, str] = field(
        default_factory=lambda: {"arn": f"arn:aws:ec2:{REGION}:123456789012:instance/{SPOT}"}
    )
    outputs: dict[str, str] = field(
        default_factory=lambda: {"FleetRequestId": FLEET, "SpotInterruptionExperimentTemplateId": TEMPLATE}
    )
    stack: bool = True

    def describe_stacks(self, params: dict) -> dict:
        if not self.stack:
            return client_error("ValidationError", f"Stack with id {params['StackName']} does not exist")
        return {
            "Stacks": [
                {
                    "StackName": params["StackName"],
                    "StackStatus": "UPDATE_COMPLETE",
                    "CreationTime": LAUNCHED,
                    "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in self.outputs.items()],
                }
            ]
        }

    def running(self) -> dict[str, tuple[str, str]]:
        return at(self.nodes, self.pace.ticks)

    def describe_spot_fleet_requests(self, params: dict) -> dict:
        return {
            "SpotFleetRequestConfigs": [
                {
                    "SpotFleetRequestId": FLEET,
                    "SpotFleetRequestState": "active",
                    "ActivityStatus": "fulfilled",
                    "SpotFleetRequestConfig": {
                        "IamFleetRole": "arn:aws:iam::123456789012:role/fleet",
                        "TargetCapacity": 2,
                        "OnDemandTargetCapacity": 1,
                    },
                }
            ]
        }

    def describe_spot_fleet_instances(self, params: dict) -> dict:
        return {
            "SpotFleetRequestId": FLEET,
            "ActiveInstances": [{"InstanceId": instance_id} for instance_id in self.running()],
        }

    def describe_instances(self, params: dict) -> dict:
        instances = []
        for instance_id in params["InstanceIds"]:
            state, readiness = self.running()[instance_id]
            instance: dict[str, Any] = {
                "InstanceId": instance_id,
                "Placement": {"AvailabilityZone": "us-east-1a", "GroupName": "gpufleet-dev"},
                "LaunchTime": LAUNCHED,
                "State": {"Name": state},
                "ImageId": "ami-0123456789abcdef0",
            }
            if state == "running":
                instance["PrivateIpAddress"] = ADDRESSES[instance_id]
            if LIFECYCLES[instance_id]:
                instance["InstanceLifecycle"] = LIFECYCLES[instance_id]
            if readiness:
                instance["Tags"] = [{"Key": "gpufleet:readiness", "Value": readiness}]
            instances.append(instance)
        return {"Reservations": [{"Instances": instances}]}

    def start_experiment(self, params: dict) -> dict:
        return {"experiment": {"id": EXPERIMENT, "experimentTemplateId": params["experimentTemplateId"]}}

    def get_experiment(self, params: dict) -> dict:
        assert params == {"id": EXPERIMENT}
        return {"experiment": {"id": EXPERIMENT, "state": at(self.experiment, self.pace.ticks)}}

    def list_experiment_resolved_targets(self, params: dict) -> dict:
        return {
            "resolvedTargets": [
                {"resourceType": "aws:ec2:spot-instance", "targetName": "SpotNode", "targetInformation": self.resolved}
            ]
        }


READY = {ON_DEMAND: ("running", "ready"), SPOT: ("running", "ready")}
REPLACED = [
    READY,
    READY,
    READY,
    {ON_DEMAND: ("running", "ready"), SPOT: ("shutting-down", "ready")},
    {ON_DEMAND: ("running", "ready"), NEW: ("pending", "")},
    {ON_DEMAND: ("running", "ready"), NEW: ("running", "")},
    {ON_DEMAND: ("running", "ready"), NEW: ("running", "booting: step 3/9 efa")},
    {ON_DEMAND: ("running", "ready"), NEW: ("running", "ready")},
]
STATES = [
    {"status": "pending", "reason": "Experiment is pending."},
    {"status": "initiating", "reason": "Experiment is initiating."},
    {"status": "running", "reason": "Experiment is running."},
    {"status": "completed", "reason": "Experiment completed."},
]


@pytest.fixture
def cluster(answered, monkeypatch) -> tuple[Cluster, dict[str, list]]:
    pace = VirtualPace()
    monkeypatch.setattr(rehearse, "PACE", pace)
    cluster = Cluster(pace, experiment=list(STATES), nodes=list(REPLACED))
    calls = {
        "cloudformation": answered("cloudformation", {"DescribeStacks": lambda p: cluster.describe_stacks(p)}),
        "ec2": answered(
            "ec2",
            {
                "DescribeSpotFleetRequests": lambda p: cluster.describe_spot_fleet_requests(p),
                "DescribeSpotFleetInstances": lambda p: cluster.describe_spot_fleet_instances(p),
                "DescribeInstances": lambda p: cluster.describe_instances(p),
            },
        ),
        "fis": answered(
            "fis",
            {
                "StartExperiment": lambda p: cluster.start_experiment(p),
                "GetExperiment": lambda p: cluster.get_experiment(p),
                "ListExperimentResolvedTargets": lambda p: cluster.list_experiment_resolved_targets(p),
            },
        ),
    }
    return cluster, calls


STARTED = (
    f"gpufleet rehearse dev: experiment {EXPERIMENT} from {TEMPLATE}: one of 1 running spot nodes gets an "
    "interruption notice, two minutes ahead (2 of 2 nodes running, 2 ready)"
)


def test_the_rehearsal_follows_the_notice_the_node_going_and_its_replacement_until_ready(cluster, run_cli):
    _, calls = cluster

    code, out, err = run_cli("rehearse", "dev")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        STARTED,
        f"  00:00 experiment {EXPERIMENT}: pending",
        f"  00:10 experiment {EXPERIMENT}: initiating",
        f"  00:20 experiment {EXPERIMENT}: running",
        f"  00:20 {SPOT} (spot 10.40.0.11): got the interruption notice; EC2 interrupts it two minutes later",
        f"  00:30 experiment {EXPERIMENT}: completed",
        f"  00:30 {SPOT} (the interrupted node): no longer running",
        f"  00:50 {NEW} (spot 10.40.0.12): launched, booting the image",
        f"  01:00 {NEW}: booting: step 3/9 efa",
        f"  01:10 {NEW}: ready",
        f"gpufleet rehearse dev: the replacement {NEW} is ready, 00:50 after the notice; 2 of 2 nodes ready: the "
        "rehearsal is over",
    ]
    ((operation, started),) = [call for call in calls["fis"] if call[0] == "StartExperiment"]
    assert started["experimentTemplateId"] == TEMPLATE
    assert uuid.UUID(started["clientToken"]).version == 4
    resolved = [call for call in calls["fis"] if call[0] == "ListExperimentResolvedTargets"]
    assert resolved == [("ListExperimentResolvedTargets", {"experimentId": EXPERIMENT})]


@pytest.mark.parametrize(
    ("state", "said"),
    [
        (
            {"status": "failed", "reason": "Target resolution failed.", "error": {"code": "TargetResolutionFailed"}},
            "failed: Target resolution failed.; TargetResolutionFailed",
        ),
        (
            {
                "status": "failed",
                "reason": "Action failed.",
                "error": {"code": "InternalFailure", "location": "actions.InterruptSpotNode"},
            },
            "failed: Action failed.; InternalFailure actions.InterruptSpotNode",
        ),
        ({"status": "stopped", "reason": "Experiment stopped by user."}, "stopped: Experiment stopped by user."),
        ({"status": "cancelled", "reason": "Experiment was cancelled."}, "cancelled: Experiment was cancelled."),
    ],
    ids=["failed-resolution", "failed-action", "stopped", "cancelled"],
)
def test_an_experiment_that_ends_before_a_notice_says_why(cluster, run_cli, state, said):
    fake, _ = cluster
    fake.experiment = [STATES[0], state]
    fake.nodes = [READY]
    fake.resolved = {"note": "none"}

    code, out, err = run_cli("rehearse", "dev")

    assert code == 1
    assert out.splitlines()[1:] == [
        f"  00:00 experiment {EXPERIMENT}: pending",
        f"  00:10 experiment {EXPERIMENT}: {said}",
    ]
    assert err == (
        f"gpufleet rehearse dev: experiment {EXPERIMENT} ended {state['status']} before any spot node got a notice: "
        "see the line above\n"
    )


def test_a_node_fis_names_in_an_unknown_way_is_the_spot_node_that_goes(cluster, run_cli):
    fake, _ = cluster
    fake.resolved = {"resourceId": "something-else"}

    code, out, _ = run_cli("rehearse", "dev")

    assert code == 0
    assert f"  00:30 {SPOT} (the interrupted node): no longer running" in out.splitlines()
    assert not any("got the interruption notice" in line for line in out.splitlines())
    assert out.splitlines()[-1].endswith("is ready, 00:40 after the notice; 2 of 2 nodes ready: the rehearsal is over")


def test_a_rehearsal_not_over_in_time_says_where_it_stands(cluster, run_cli):
    fake, _ = cluster
    fake.nodes = [READY]

    code, _, err = run_cli("rehearse", "dev", "--wait-minutes", "1")

    assert code == 1
    assert err == (
        f"gpufleet rehearse dev: not over after 1 min: {SPOT} got the notice and is still running (experiment "
        "completed); `gpufleet status` shows the node group (--wait-minutes waits longer)\n"
    )


def test_a_replacement_that_does_not_come_up_in_time_is_named_with_its_state(cluster, run_cli):
    fake, _ = cluster
    fake.nodes = REPLACED[:7]

    code, _, err = run_cli("rehearse", "dev", "--wait-minutes", "2")

    assert code == 1
    assert err == (
        f"gpufleet rehearse dev: not over after 2 min: {SPOT} is gone; its replacement is not ready ({NEW} booting: "
        "step 3/9 efa); `gpufleet status` shows the node group (--wait-minutes waits longer)\n"
    )


def test_a_request_fleet_launches_no_replacement_and_the_rehearsal_ends_when_the_node_is_gone(
    cluster, run_cli, tmp_path
):
    fake, _ = cluster
    path = tmp_path / "environments" / "dev.yaml"  # the environments fixture's
    path.write_text(path.read_text() + "fleet:\n  type: request\n")
    fake.nodes = REPLACED[:4] + [{ON_DEMAND: ("running", "ready")}]

    code, out, _ = run_cli("rehearse", "dev")

    assert code == 0
    assert out.splitlines()[-1] == (
        f"gpufleet rehearse dev: {SPOT} is gone and fleet.type request launches no replacement; 1 of 2 nodes ready: "
        "the rehearsal is over"
    )


# -- refused before anything starts -----------------------------------------------------------------------------------


def test_an_environment_without_spot_nodes_is_refused_in_one_line(environments, run_cli, monkeypatch):
    environments("solo", on_demand=2)
    monkeypatch.setattr("gpufleet.aws.Aws.client", lambda self, service: pytest.fail(f"asked for {service}"))

    assert run_cli("rehearse", "solo") == (
        2,
        "",
        "gpufleet rehearse solo: solo has no spot nodes (capacity.on_demand = capacity.target = 2), so nothing can get "
        "a spot interruption: there is nothing to rehearse\n",
    )


@pytest.mark.parametrize("minutes", ["0", "1441"])
def test_wait_minutes_outside_1_to_1440_is_refused(run_cli, minutes):
    assert run_cli("rehearse", "dev", "--wait-minutes", minutes) == (
        2,
        "",
        f"--wait-minutes {minutes}: must be 1 to 1440\n",
    )


def test_a_cluster_deployed_before_the_output_is_told_to_deploy_again(cluster, run_cli):
    fake, calls = cluster
    fake.outputs = {"FleetRequestId": FLEET}

    assert run_cli("rehearse", "dev") == (
        1,
        "",
        "gpufleet rehearse dev: gpufleet-dev-cluster (UPDATE_COMPLETE) has no SpotInterruptionExperimentTemplateId "
        "output: deploy it again (gpufleet up dev) to add it\n",
    )
    assert calls["fis"] == []


def test_a_cluster_that_is_not_there_is_refused(cluster, run_cli):
    fake, calls = cluster
    fake.stack = False

    assert run_cli("rehearse", "dev") == (
        1,
        "",
        "gpufleet rehearse dev: gpufleet-dev-cluster not found in us-east-1: run gpufleet up\n",
    )
    assert calls["fis"] == []


def test_a_cluster_without_a_running_spot_node_is_refused(cluster, run_cli):
    fake, calls = cluster
    fake.nodes = [{ON_DEMAND: ("running", "ready"), SPOT: ("pending", "")}]

    assert run_cli("rehearse", "dev") == (
        1,
        "",
        f"gpufleet rehearse dev: no spot node is running (1 running in fleet {FLEET}): wait for them (gpufleet "
        "status dev), then rehearse\n",
    )
    assert calls["fis"] == []


def test_start_experiment_refused_by_fis_is_one_line(cluster, run_cli, answered):
    fake, _ = cluster
    answered(
        "fis",
        {
            "StartExperiment": lambda p: client_error(
                "ServiceQuotaExceededException", "You have reached the maximum number of running experiments.", 402
            )
        },
    )

    assert run_cli("rehearse", "dev") == (
        1,
        "",
        "StartExperiment failed in us-east-1: ServiceQuotaExceededException: You have reached the maximum number of "
        "running experiments.\n",
    )


# -- what the FIS model says ------------------------------------------------------------------------------------------


def test_every_experiment_status_of_the_fis_model_is_unresolved_going_or_ended():
    statuses = botocore.session.get_session().get_service_model("fis").shape_for("ExperimentStatus").enum
    assert sorted([*rehearse.UNRESOLVED, "running", "stopping", *rehearse.ENDED]) == sorted(statuses)
    assert set(rehearse.ENDED_BADLY) == set(rehearse.ENDED) - {"completed"}


@pytest.mark.parametrize(
    ("value", "instance"),
    [
        (f"arn:aws:ec2:{REGION}:123456789012:instance/{SPOT}", SPOT),
        (SPOT, SPOT),
        ("i-0bbbbbbbbbbbbbbb2x", None),
        (f"arn:aws:ec2:{REGION}:123456789012:volume/vol-0bbbbbbbbbbbbbbb2", None),
        ("i-0bbb", None),
    ],
)
def test_an_instance_is_read_from_an_id_or_an_instance_arn_only(value, instance):
    match = rehearse.INSTANCE.search(value)
    assert (match.group(1) if match else None) == instance
