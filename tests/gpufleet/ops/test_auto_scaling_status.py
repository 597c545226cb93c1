"""gpufleet status and hosts on an environment with fleet.backend auto-scaling, against an Auto Scaling group in moto
(moto implements CreateAutoScalingGroup with a mixed instances policy, DescribeAutoScalingGroups and
DescribeScalingActivities; the group's launches are not recorded as activities there, so activities are served by
Stubber where a test needs some)."""

from __future__ import annotations

import datetime as dt
import json
import os
import warnings
from pathlib import Path

import boto3
import pytest

from gpufleet.ops.fleet import recent_activities
from tests.gpufleet.ops.conftest import REGION, make_subnet

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


def test_hosts_lists_the_groups_running_nodes(group, run_cli) -> None:
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
