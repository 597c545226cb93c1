"""The block capacity custom resource's handler against botocore's Stubber: every call it makes is expected with its
parameters (the scheduled actions' times among them), answered with the shapes of botocore's autoscaling model, and
each documented error of each call is answered once. The Stubber answers before botocore's retries, so an error here is
one still standing after them.

CloudFormation's protocol is the Provider framework's (aws-cdk-lib): on_event returns a dict. Property values arrive as
strings, as CloudFormation sends a custom resource's properties."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from stacks.constructs.block_capacity.runtime import handler

GROUP = "gpufleet-block-p5-nodes"
START = "2027-01-11T11:30:00Z"
END = "2027-01-18T11:30:00Z"
SCALE_OUT, SCALE_IN = "gpufleet-block-scale-out", "gpufleet-block-scale-in"
STARTS = dt.datetime(2027, 1, 11, 11, 30, tzinfo=dt.UTC)
# 50 minutes before the end (gpufleet.block_schedule.SCALE_IN_LEAD).
SCALES_IN = dt.datetime(2027, 1, 18, 10, 40, tzinfo=dt.UTC)
PHYSICAL_ID = "gpufleet-block-p5-block-capacity"


@pytest.fixture(autouse=True)
def lambda_environment(monkeypatch):
    """What the construct sets (tests/stacks/constructs/block_capacity/test_infrastructure.py checks it)."""
    monkeypatch.setenv("ENVIRONMENT_NAME", "block-p5")


@pytest.fixture
def autoscaling():
    client = boto3.client(
        "autoscaling", region_name="us-east-2", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


def event(request_type: str, target: str = "2", start: str = START, end: str = END, old: dict | None = None) -> dict:
    """What the Provider framework hands on_event."""
    made = {
        "RequestType": request_type,
        "StackId": "arn:aws:cloudformation:us-east-2:123456789012:stack/gpufleet-block-p5-cluster/guid",
        "RequestId": "request-1",
        "LogicalResourceId": "NodeGroupBlockCapacity5D2E1478",
        "ResourceType": "Custom::GpufleetBlockCapacity",
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:us-east-2:123456789012:function:framework-onEvent",
            "AutoScalingGroupName": GROUP,
            "Target": target,
            "Start": start,
            "End": end,
        },
    }
    if request_type != "Create":
        made["PhysicalResourceId"] = PHYSICAL_ID
    if old is not None:
        made["OldResourceProperties"] = {**made["ResourceProperties"], **old}
    return made


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def group(desired: int) -> dict:
    """DescribeAutoScalingGroups' answer for the block group (botocore's AutoScalingGroup, required members and the
    instances of DESIRED nodes)."""
    return {
        "AutoScalingGroups": [
            {
                "AutoScalingGroupName": GROUP,
                "MinSize": 0,
                "MaxSize": 2,
                "DesiredCapacity": desired,
                "DefaultCooldown": 300,
                "AvailabilityZones": ["us-east-2a"],
                "HealthCheckType": "EC2",
                "CreatedTime": at("2026-11-26 12:00"),
                "Instances": [
                    {
                        "InstanceId": f"i-0123456789abcdef{index}",
                        "AvailabilityZone": "us-east-2a",
                        "LifecycleState": "InService",
                        "HealthStatus": "Healthy",
                        "ProtectedFromScaleIn": False,
                    }
                    for index in range(desired)
                ],
            }
        ]
    }


def expect_group(stub: Stubber, answer: dict) -> None:
    stub.add_response("describe_auto_scaling_groups", answer, {"AutoScalingGroupNames": [GROUP]})


def expect_put(stub: Stubber, name: str, when: dt.datetime, desired: int) -> None:
    stub.add_response(
        "put_scheduled_update_group_action",
        {},
        {"AutoScalingGroupName": GROUP, "ScheduledActionName": name, "StartTime": when, "DesiredCapacity": desired},
    )


def expect_own_actions(stub: Stubber, *listed: tuple[str, dt.datetime, int]) -> None:
    """DescribeScheduledActions asked for the handler's two names; it lists those that exist and have not run."""
    stub.add_response(
        "describe_scheduled_actions",
        {
            "ScheduledUpdateGroupActions": [
                {"AutoScalingGroupName": GROUP, "ScheduledActionName": name, "StartTime": when, "DesiredCapacity": n}
                for name, when, n in listed
            ]
        },
        {"AutoScalingGroupName": GROUP, "ScheduledActionNames": [SCALE_OUT, SCALE_IN]},
    )


def expect_delete(stub: Stubber, name: str) -> None:
    stub.add_response("delete_scheduled_action", {}, {"AutoScalingGroupName": GROUP, "ScheduledActionName": name})


def expect_desired(stub: Stubber, desired: int) -> None:
    stub.add_response("set_desired_capacity", {}, {"AutoScalingGroupName": GROUP, "DesiredCapacity": desired})


def on_event(request: dict, stub: Stubber, now: str) -> dict:
    return handler.on_event(request, None, autoscaling=stub.client, now=at(now))


def test_a_deploy_before_the_block_schedules_both_actions_and_wants_no_node(autoscaling):
    """The group was just created at MinSize 0: nothing to set, nothing stale to look for."""
    expect_group(autoscaling, group(0))
    expect_put(autoscaling, SCALE_OUT, STARTS, 2)
    expect_put(autoscaling, SCALE_IN, SCALES_IN, 0)
    assert on_event(event("Create"), autoscaling, "2026-11-26 12:00") == {"PhysicalResourceId": PHYSICAL_ID}


def test_a_deploy_that_comes_after_the_start_wants_the_nodes_at_once(autoscaling):
    """A template synthesized before the block, deployed a day after its start: no scale-out is put (AWS would refuse
    it); the one an earlier deploy put and that has not run is deleted; the group wants its 2 nodes."""
    expect_group(autoscaling, group(0))
    expect_put(autoscaling, SCALE_IN, SCALES_IN, 0)
    expect_own_actions(autoscaling, (SCALE_OUT, at("2027-01-12 09:00"), 2), (SCALE_IN, SCALES_IN, 0))
    expect_delete(autoscaling, SCALE_OUT)
    expect_desired(autoscaling, 2)
    on_event(event("Create"), autoscaling, "2027-01-12 00:00")


def test_a_deploy_just_before_the_start_schedules_the_scale_out_five_minutes_on(autoscaling):
    expect_group(autoscaling, group(0))
    expect_put(autoscaling, SCALE_OUT, at("2027-01-11 11:33:00"), 2)
    expect_put(autoscaling, SCALE_IN, SCALES_IN, 0)
    on_event(event("Create"), autoscaling, "2027-01-11 11:28")


def test_a_deploy_after_the_scale_in_wants_no_node_and_leaves_no_action(autoscaling):
    """Its nodes still run (a scale-in that did not happen): the group is set to 0, what is left of its actions goes."""
    expect_group(autoscaling, group(2))
    expect_own_actions(autoscaling, (SCALE_IN, SCALES_IN, 0))
    expect_delete(autoscaling, SCALE_IN)
    expect_desired(autoscaling, 0)
    on_event(event("Create"), autoscaling, "2027-01-18 10:36")


def test_an_extended_block_moves_the_scale_in_and_keeps_the_running_nodes(autoscaling):
    """Inside the window, End a week later: the scale-in is put at its new time (Put updates an action of the same
    name); the scale-out has run (DescribeScheduledActions does not list it) and the nodes run: nothing else."""
    expect_group(autoscaling, group(2))
    expect_put(autoscaling, SCALE_IN, at("2027-01-25 10:40"), 0)
    expect_own_actions(autoscaling, (SCALE_IN, SCALES_IN, 0))
    on_event(event("Update", end="2027-01-25T11:30:00Z", old={"End": END}), autoscaling, "2027-01-14 00:00")


def test_a_higher_target_inside_the_window_launches_the_new_nodes(autoscaling):
    expect_group(autoscaling, group(2))
    expect_put(autoscaling, SCALE_IN, SCALES_IN, 0)
    expect_own_actions(autoscaling)
    expect_desired(autoscaling, 4)
    on_event(event("Update", target="4", old={"Target": "2"}), autoscaling, "2027-01-14 00:00")


def test_an_update_that_changes_no_date_target_or_group_sends_nothing(autoscaling):
    """A new ServiceToken (the Provider's function replaced): what an operator set stays (the Stubber has nothing
    queued, so any call would fail the test)."""
    answer = on_event(
        event("Update", old={"ServiceToken": "arn:aws:lambda:us-east-2:1:function:old"}),
        autoscaling,
        "2027-01-14 00:00",
    )
    assert answer == {"PhysicalResourceId": PHYSICAL_ID}


@pytest.mark.parametrize(
    ("key", "old"), [("AutoScalingGroupName", "gpufleet-other-nodes"), ("Start", "2027-01-10T11:30:00Z")]
)
def test_an_update_of_the_group_or_the_start_schedules_again(autoscaling, key, old):
    expect_group(autoscaling, group(2))
    expect_put(autoscaling, SCALE_IN, SCALES_IN, 0)
    expect_own_actions(autoscaling)
    on_event(event("Update", old={key: old}), autoscaling, "2027-01-14 00:00")


def test_delete_removes_the_handlers_own_actions_only(autoscaling):
    """The block removed from the file: the group stays, its two actions go; an operator's action of another name is
    not asked for (ScheduledActionNames) and stays."""
    expect_group(autoscaling, group(0))
    expect_own_actions(autoscaling, (SCALE_OUT, STARTS, 2), (SCALE_IN, SCALES_IN, 0))
    expect_delete(autoscaling, SCALE_IN)
    expect_delete(autoscaling, SCALE_OUT)
    assert on_event(event("Delete"), autoscaling, "2026-11-26 12:00") == {"PhysicalResourceId": PHYSICAL_ID}


def test_delete_of_a_group_already_gone_does_nothing_more(autoscaling):
    """DescribeAutoScalingGroups lists only the groups it finds."""
    expect_group(autoscaling, {"AutoScalingGroups": []})
    on_event(event("Delete"), autoscaling, "2026-11-26 12:00")


def test_a_create_whose_group_is_missing_fails_with_its_name(autoscaling):
    expect_group(autoscaling, {"AutoScalingGroups": []})
    with pytest.raises(RuntimeError, match=f"Auto Scaling group {GROUP} not found"):
        on_event(event("Create"), autoscaling, "2026-11-26 12:00")


# Each call of the fullest run (a deploy after the start that finds a stale scale-out), in order; the errors botocore's
# autoscaling model documents for each (code, HTTP status), and ValidationError, which Auto Scaling answers to a
# request it refuses, a StartTime in the past among them (message unconfirmed).
CALLS = [
    ("describe_auto_scaling_groups", [("InvalidNextToken", 400), ("ResourceContention", 500)]),
    (
        "put_scheduled_update_group_action",
        [("AlreadyExists", 400), ("LimitExceeded", 400), ("ResourceContention", 500), ("ValidationError", 400)],
    ),
    ("describe_scheduled_actions", [("InvalidNextToken", 400), ("ResourceContention", 500)]),
    ("delete_scheduled_action", [("ResourceContention", 500)]),
    ("set_desired_capacity", [("ScalingActivityInProgress", 400), ("ResourceContention", 500)]),
]
FAULTS = [
    pytest.param(index, operation, code, status, id=f"{operation}-{code}")
    for index, (operation, errors) in enumerate(CALLS)
    for code, status in errors
]


def test_the_fault_table_names_every_error_botocore_documents_for_each_call():
    model = boto3.client("autoscaling", region_name="us-east-2").meta.service_model
    for operation, errors in CALLS:
        documented = {
            shape.metadata["error"]["code"]
            for shape in model.operation_model("".join(part.title() for part in operation.split("_"))).error_shapes
        }
        assert documented == {code for code, _ in errors} - {"ValidationError"}, operation


@pytest.mark.parametrize(("index", "operation", "code", "status"), FAULTS)
def test_an_error_of_any_call_fails_the_resource_with_awss_message_and_stops(
    autoscaling, index, operation, code, status
):
    """The error reaches the Provider, which hands CloudFormation its message; no call comes after it."""
    answers = [
        lambda: expect_group(autoscaling, group(0)),
        lambda: expect_put(autoscaling, SCALE_IN, SCALES_IN, 0),
        lambda: expect_own_actions(autoscaling, (SCALE_OUT, at("2027-01-12 09:00"), 2)),
        lambda: expect_delete(autoscaling, SCALE_OUT),
        lambda: expect_desired(autoscaling, 2),
    ]
    for answer in answers[:index]:
        answer()
    autoscaling.add_client_error(
        operation, service_error_code=code, service_message=f"{code} here", http_status_code=status
    )
    with pytest.raises(ClientError) as raised:
        on_event(event("Create"), autoscaling, "2027-01-12 00:00")
    assert raised.value.response["Error"] == {"Code": code, "Message": f"{code} here"}
