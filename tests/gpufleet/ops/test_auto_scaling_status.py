"""gpufleet status and hosts on an environment with fleet.backend auto-scaling, against an Auto Scaling group in moto
(moto implements CreateAutoScalingGroup with a mixed instances policy, DescribeAutoScalingGroups and
DescribeScalingActivities; the group's launches are not recorded as activities there, so activities are served by
Stubber where a test needs some)."""

from __future__ import annotations

import datetime as dt
import json
import os
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from gpufleet.aws import Aws
from gpufleet.ops.fleet import recent_activities
from tests.gpufleet.ops.conftest import REGION, make_subnet, mark_readiness

GROUP = "gpufleet-lab-nodes"


@pytest.fixture
def group(node_image_id: str, environments) -> str:
    """Environment lab (3 p4d nodes, 1 on demand, fleet.backend auto-scaling) and its group in moto; returns the
    node image."""
    path = Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]) / f"{environments('lab', target=3, on_demand=1)}.yaml"
    path.write_text(path.read_text() + "fleet:\n  backend: auto-scaling\n")
    ec2 = boto3.client("ec2", region_name=REGION)
    subnet_id = make_subnet(ec2)
    template_id = ec2.create_launch_template(
        LaunchTemplateName="gpufleet-lab-nodes",
        LaunchTemplateData={"ImageId": node_image_id, "InstanceType": "p4d.24xlarge"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    boto3.client("autoscaling", region_name=REGION).create_auto_scaling_group(
        AutoScalingGroupName=GROUP,
        MinSize=3,
        MaxSize=3,
        DesiredCapacity=3,
        VPCZoneIdentifier=subnet_id,
        MixedInstancesPolicy={
            "LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template_id, "Version": "$Latest"},
                "Overrides": [{"InstanceType": "p4d.24xlarge"}],
            },
            "InstancesDistribution": {
                "OnDemandBaseCapacity": 1,
                "OnDemandPercentageAboveBaseCapacity": 0,
                "SpotAllocationStrategy": "price-capacity-optimized",
            },
        },
    )
    return node_image_id


def stack_with_output(outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName="gpufleet-lab-cluster", TemplateBody=json.dumps(template)
        )


def test_status_finds_the_group_through_the_stack_output(group, run_json) -> None:
    stack_with_output({"AutoScalingGroupName": GROUP})
    code, document = run_json("status", "lab")
    assert code == 0
    assert (document["backend"], document["auto_scaling_group_name"]) == ("auto-scaling", GROUP)
    assert "fleet_request_id" not in document
    assert (document["state"], document["activity_status"]) == ("active", "fulfilled")
    assert (document["target_capacity"], document["fulfilled_capacity"]) == (3, 3.0)
    assert document["on_demand_target_capacity"] == 1
    assert [i["image_id"] for i in document["instances"]] == [group] * 3
    assert document["events_note"] == ""


def test_status_text_names_the_group(group, run_cli) -> None:
    code, out, _ = run_cli("status", "lab", "--group-name", GROUP)
    assert code == 0
    assert out.splitlines()[0].startswith(f"Group {GROUP} (lab, us-east-1): active, activity fulfilled, fulfilled 3/3")


def test_a_stack_without_the_group_output_says_which_option_to_pass(group, run_cli) -> None:
    stack_with_output({"FleetRequestId": "sfr-1"})
    code, _, err = run_cli("status", "lab")
    assert (code, err) == (
        1,
        "stack gpufleet-lab-cluster (CREATE_COMPLETE) has no AutoScalingGroupName output: wait for the deployment "
        "to finish or pass --group-name\n",
    )


def test_the_spot_fleet_option_is_refused_for_a_group(group, run_cli) -> None:
    code, _, err = run_cli("hosts", "lab", "--fleet-id", "sfr-1")
    assert (code, err) == (1, "--fleet-id: lab uses fleet.backend auto-scaling; pass --group-name instead\n")


def test_an_unknown_group_is_one_line(group, run_cli) -> None:
    code, _, err = run_cli("status", "lab", "--group-name", "gpufleet-gone-nodes")
    assert (code, err) == (
        1,
        "Auto Scaling group gpufleet-gone-nodes not found in us-east-1: check --group-name or the stack\n",
    )


def test_hosts_lists_the_groups_ready_nodes(group, run_cli) -> None:
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    (described,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[GROUP])["AutoScalingGroups"]
    mark_readiness([instance["InstanceId"] for instance in described["Instances"]])
    code, out, _ = run_cli("hosts", "lab", "--group-name", GROUP, "--format", "json")
    assert code == 0
    document = json.loads(out)
    assert document["auto_scaling_group_name"] == GROUP
    assert len(document["hosts"]) == 3 and {h["slots"] for h in document["hosts"]} == {8}


NOW = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)


def test_scaling_activities_of_the_last_day_become_events(stubbed) -> None:
    stub = stubbed("autoscaling")
    activity = {"ActivityId": "a", "AutoScalingGroupName": GROUP, "Cause": "c", "Progress": 100}
    stub.add_response(
        "describe_scaling_activities",
        {
            "Activities": [
                {
                    **activity,
                    "StartTime": NOW - dt.timedelta(minutes=5),
                    "StatusCode": "Failed",
                    "Description": "Launching a new EC2 instance.  Status Reason: We currently do not have "
                    "sufficient p4d.24xlarge capacity",
                    "StatusMessage": "InsufficientInstanceCapacity",
                },
                {
                    **activity,
                    "ActivityId": "b",
                    "StartTime": NOW - dt.timedelta(minutes=30),
                    "StatusCode": "Successful",
                    "Description": "Terminating EC2 instance: i-0abc123",
                },
                {
                    **activity,
                    "ActivityId": "c",
                    "StartTime": NOW - dt.timedelta(days=2),
                    "StatusCode": "Successful",
                    "Description": "Launching a new EC2 instance: i-0old",
                },
            ]
        },
        {"AutoScalingGroupName": GROUP},
    )
    client = stub.client
    events = recent_activities(client, GROUP, NOW)
    assert [(e.sub_type, e.instance_id) for e in events] == [("Successful", "i-0abc123"), ("Failed", "-")]
    assert events[1].description.endswith("capacity InsufficientInstanceCapacity")


BLOCK_ID = "cr-0123456789abcdef0"
BLOCK_GROUP = "gpufleet-blocklab-nodes"
BLOCK_START = dt.datetime(2027, 1, 11, 11, 30, tzinfo=dt.UTC)
BLOCK_END = dt.datetime(2027, 1, 18, 11, 30, tzinfo=dt.UTC)


def capacity_block(**changes: Any) -> dict[str, Any]:
    """The block as DescribeCapacityReservations describes it (botocore's CapacityReservation shape)."""
    return {
        "CapacityReservationId": BLOCK_ID,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "State": "scheduled",
        "StartDate": BLOCK_START,
        "EndDate": BLOCK_END,
        "EndDateType": "limited",
        "ReservationType": "capacity-block",
        **changes,
    }


@pytest.fixture
def describe_block(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Answers DescribeCapacityReservations, which moto lacks for Capacity Blocks, on the EC2 client the command gets
    (an event handler in place of the HTTP call: the other EC2 calls still go to moto, in any order)."""
    real_client = Aws.client

    def answer(reservation: dict[str, Any] | None = None, error: str = "") -> None:
        def respond(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
            assert params["body"]["CapacityReservationId.1"] == BLOCK_ID
            if error:
                return SimpleNamespace(status_code=400), {"Error": {"Code": error, "Message": error}}
            return SimpleNamespace(status_code=200), {"CapacityReservations": [reservation]}

        def client(self: Aws, service: str) -> Any:
            made = real_client(self, service)
            if service == "ec2":
                made.meta.events.register("before-call.ec2.DescribeCapacityReservations", respond)
            return made

        monkeypatch.setattr(Aws, "client", client)

    return answer


@pytest.fixture
def block_group(node_image_id: str) -> None:
    """Environment blocklab (2 p5 nodes in a Capacity Block, fleet.backend auto-scaling) and its group in moto, with
    the two scheduled actions a deploy before the block creates (put in reverse order)."""
    path = Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]) / "blocklab.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: blocklab
            account: "123456789012"
            region: us-east-1
            availability_zone: us-east-1a
            network: {{cidr: 10.40.0.0/16}}
            instance_type: p5.48xlarge
            capacity:
              target: 2
              on_demand: 2
              capacity_block: {{reservation_id: {BLOCK_ID}, start: 2027-01-11T11:30:00Z, end: 2027-01-18T11:30:00Z}}
            fleet: {{backend: auto-scaling}}
            ami: {{id: {node_image_id}}}
            """
        )
    )
    ec2 = boto3.client("ec2", region_name=REGION)
    template_id = ec2.create_launch_template(
        LaunchTemplateName="gpufleet-blocklab-nodes",
        LaunchTemplateData={"ImageId": node_image_id, "InstanceType": "p5.48xlarge"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=BLOCK_GROUP,
        MinSize=0,
        MaxSize=2,
        DesiredCapacity=0,
        VPCZoneIdentifier=make_subnet(ec2),
        LaunchTemplate={"LaunchTemplateId": template_id, "Version": "1"},
    )
    for name, start, desired in (
        ("gpufleet-block-scale-in", dt.datetime(2027, 1, 18, 10, 40, tzinfo=dt.UTC), 0),
        ("gpufleet-block-scale-out", BLOCK_START, 2),
    ):
        autoscaling.put_scheduled_update_group_action(
            AutoScalingGroupName=BLOCK_GROUP, ScheduledActionName=name, StartTime=start, DesiredCapacity=desired
        )


def test_status_shows_the_blocks_dates_and_the_groups_schedule(block_group, describe_block, run_cli) -> None:
    describe_block(capacity_block())
    code, out, _ = run_cli("status", "blocklab", "--group-name", BLOCK_GROUP)
    assert code == 0
    assert out.splitlines()[:3] == [
        f"Group {BLOCK_GROUP} (blocklab, us-east-1): active, activity fulfilled, fulfilled 0/0 (on-demand 0/0)",
        f"Capacity Block {BLOCK_ID}: scheduled, 2027-01-11 11:30 UTC to 2027-01-18 11:30 UTC (EC2 terminates its "
        "instances from 2027-01-18 11:00 UTC)",
        "Scheduled: 2027-01-11 11:30 UTC desired 2; 2027-01-18 10:40 UTC desired 0",
    ]


def test_status_json_carries_the_schedule(block_group, describe_block, run_json) -> None:
    describe_block(capacity_block(State="active"))
    code, document = run_json("status", "blocklab", "--group-name", BLOCK_GROUP)
    assert code == 0
    assert document["capacity_block"] == {
        "reservation_id": BLOCK_ID,
        "state": "active",
        "start": "2027-01-11T11:30:00+00:00",
        "end": "2027-01-18T11:30:00+00:00",
        "scheduled_actions": [
            {"start_time": "2027-01-11T11:30:00+00:00", "desired_capacity": 2},
            {"start_time": "2027-01-18T10:40:00+00:00", "desired_capacity": 0},
        ],
        "notes": [],
    }


def test_an_extended_block_says_which_date_to_set(block_group, describe_block, run_cli) -> None:
    """An extension moves the block's end; the group still scales in before the old one until the file says so."""
    describe_block(capacity_block(State="active", EndDate=dt.datetime(2027, 1, 25, 11, 30, tzinfo=dt.UTC)))
    code, out, _ = run_cli("status", "blocklab", "--group-name", BLOCK_GROUP)
    assert code == 0
    assert out.splitlines()[3] == (
        "the block's end is 2027-01-25 11:30 UTC, but capacity.capacity_block.end says 2027-01-18 11:30 UTC: set it "
        "to the block's and deploy, or the group scales at the wrong time"
    )


def test_a_block_that_cannot_be_read_still_shows_the_schedule(block_group, describe_block, run_cli) -> None:
    describe_block(error="UnauthorizedOperation")
    code, out, _ = run_cli("status", "blocklab", "--group-name", BLOCK_GROUP)
    assert code == 0
    assert out.splitlines()[1:4] == [
        f"Capacity Block {BLOCK_ID}",
        "Scheduled: 2027-01-11 11:30 UTC desired 2; 2027-01-18 10:40 UTC desired 0",
        "block unavailable: access denied to DescribeCapacityReservations in us-east-1 (UnauthorizedOperation): "
        "grant that action to your IAM role or user",
    ]


def test_a_group_without_a_block_has_no_schedule(group, run_json) -> None:
    stack_with_output({"AutoScalingGroupName": GROUP})
    assert run_json("status", "lab")[1]["capacity_block"] is None
