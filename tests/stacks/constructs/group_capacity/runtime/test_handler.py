"""The group capacity custom resource's two Provider handlers against Auto Scaling groups that a small model in this
file keeps, answering a real botocore client by operation name (tests/answering.py: parameters and answers checked
against botocore's model, any order). A group's nodes come InService only as the test says: capacity is short until
it does.

CloudFormation's protocol is the Provider framework's (aws-cdk-lib), not ours: the handlers return dicts. Property
values arrive as strings, as CloudFormation sends a custom resource's properties (the template's Target is a
number)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from stacks.constructs.group_capacity.runtime import handler
from tests.answering import answering_client, client_error

ENVIRONMENT = "probe"
OLD_GROUP = "gpufleet-probe-nodes-ami-0123456789abcdef0"
NEW_GROUP = "gpufleet-probe-nodes-ami-0fedcba9876543210"
CREATED_OLD = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
CREATED_NEW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 11, 26, 12, 1, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def lambda_environment(monkeypatch):
    """What the construct sets (tests/stacks/constructs/group_capacity/test_infrastructure.py checks it)."""
    monkeypatch.setenv("ENVIRONMENT_NAME", ENVIRONMENT)
    monkeypatch.setenv("WAIT_SECONDS", "2700")


@dataclass
class Group:
    name: str
    created: dt.datetime
    desired: int = 0
    max_size: int = 4
    in_service: int = 0  # of its instances; the others (up to desired) are Pending
    environment: str = ENVIRONMENT
    activities: list[dict] = field(default_factory=list)

    def described(self) -> dict:
        instances = [
            {
                "InstanceId": f"i-{self.name[-4:]}{index:013x}",
                "AvailabilityZone": "us-east-1a",
                "LifecycleState": "InService" if index < self.in_service else "Pending",
                "HealthStatus": "Healthy",
                "ProtectedFromScaleIn": False,
            }
            for index in range(max(self.desired, self.in_service))
        ]
        return {
            "AutoScalingGroupName": self.name,
            "MinSize": 0,
            "MaxSize": self.max_size,
            "DesiredCapacity": self.desired,
            "DefaultCooldown": 300,
            "AvailabilityZones": ["us-east-1a"],
            "HealthCheckType": "EC2",
            "CreatedTime": self.created,
            "Instances": instances,
            "Tags": [
                {
                    "ResourceId": self.name,
                    "ResourceType": "auto-scaling-group",
                    "Key": "gpufleet:environment",
                    "Value": self.environment,
                    "PropagateAtLaunch": False,
                }
            ],
        }


class AutoScaling:
    """The account's groups, and a client whose calls they answer."""

    def __init__(self, *groups: Group) -> None:
        self.groups = {group.name: group for group in groups}
        # What DescribeAutoScalingGroups answers instead of the groups while set: an error (client_error) or an
        # exception botocore raises when no answer comes.
        self.fault: dict | Exception | None = None
        self.client, self.calls = answering_client(
            "autoscaling",
            {
                "DescribeAutoScalingGroups": self.describe_groups,
                "SetDesiredCapacity": self.set_desired_capacity,
                "DescribeScalingActivities": self.describe_activities,
            },
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def describe_groups(self, params: dict) -> dict:
        if isinstance(self.fault, Exception):
            raise self.fault
        if self.fault is not None:
            return self.fault
        groups = list(self.groups.values())
        if "AutoScalingGroupNames" in params:
            groups = [g for g in groups if g.name in params["AutoScalingGroupNames"]]
        for selection in params.get("Filters", []):
            # "tag:<key> - Accepts the key/value combination of the tag" (DescribeAutoScalingGroups Filters); only
            # the environment tag exists here.
            assert selection["Name"] == "tag:gpufleet:environment", selection
            groups = [g for g in groups if g.environment in selection["Values"]]
        return {"AutoScalingGroups": [group.described() for group in groups]}

    def set_desired_capacity(self, params: dict) -> dict:
        group = self.groups.get(params["AutoScalingGroupName"])
        if group is None:
            return client_error("ValidationError", "AutoScalingGroup name not found")
        if params["DesiredCapacity"] > group.max_size:
            return client_error(
                "ValidationError",
                f"New SetDesiredCapacity value {params['DesiredCapacity']} is above max value {group.max_size} for "
                "the AutoScalingGroup.",
            )
        group.desired = params["DesiredCapacity"]
        return {}

    def describe_activities(self, params: dict) -> dict:
        return {"Activities": list(self.groups[params["AutoScalingGroupName"]].activities)}

    def operations(self) -> set[str]:
        return {operation for operation, _ in self.calls}


def event(request_type: str, group: str, target: str, rollout: str = "manual", old: dict | None = None) -> dict:
    """What the Provider framework hands on_event."""
    made = {
        "RequestType": request_type,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-probe-cluster/guid",
        "RequestId": "request-1",
        "LogicalResourceId": "NodeGroupCapacityFB91B065",
        "ResourceType": "Custom::GpufleetGroupCapacity",
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:framework-onEvent",
            "AutoScalingGroupName": group,
            "Target": target,
            "Rollout": rollout,
        },
    }
    if request_type != "Create":
        made["PhysicalResourceId"] = "gpufleet-probe-group-capacity"
    if old is not None:
        made["OldResourceProperties"] = {**made["ResourceProperties"], **old}
    return made


def run(request: dict, aws: AutoScaling, now: dt.datetime = NOW) -> dict:
    """on_event's answer merged into the request, as the framework hands it to is_complete."""
    return {**request, **handler.on_event(request, None, autoscaling=aws.client, now=now)}


def test_create_sets_the_desired_capacity_and_under_manual_the_deploy_goes_on_at_once():
    aws = AutoScaling(Group(OLD_GROUP, CREATED_OLD))
    waiting = run(event("Create", OLD_GROUP, "4"), aws)
    assert aws.groups[OLD_GROUP].desired == 4
    assert waiting["PhysicalResourceId"] == "gpufleet-probe-group-capacity"
    assert handler.is_complete(waiting, None, autoscaling=aws.client, now=NOW) == {"IsComplete": True}
    assert aws.groups[OLD_GROUP].in_service == 0  # no node yet, and CloudFormation hears done


def test_a_first_deploy_under_replace_all_waits_for_nothing():
    """No older group of the environment: there are no nodes to keep, so a stack created while capacity is short
    completes."""
    aws = AutoScaling(Group(NEW_GROUP, CREATED_NEW), Group("gpufleet-other-nodes", CREATED_OLD, 2, 2, 2, "other"))
    waiting = run(event("Create", NEW_GROUP, "4", "replace-all"), aws)
    assert aws.groups[NEW_GROUP].desired == 4
    assert "WaitUntil" not in waiting
    assert handler.is_complete(waiting, None, autoscaling=aws.client) == {"IsComplete": True}


def test_an_update_with_a_new_target_sets_it():
    aws = AutoScaling(Group(OLD_GROUP, CREATED_OLD, desired=2, in_service=2))
    run(event("Update", OLD_GROUP, "4", old={"Target": "2"}), aws)
    assert aws.groups[OLD_GROUP].desired == 4


def test_a_lower_target_that_the_maximum_already_brought_is_not_set_again():
    """CloudFormation updates the group (MaxSize 4 -> 2) before this resource, which references it, and a MaxSize
    below the desired capacity lowers it (UpdateAutoScalingGroup): nothing is left to set."""
    aws = AutoScaling(Group(OLD_GROUP, CREATED_OLD, desired=2, max_size=2, in_service=2))
    run(event("Update", OLD_GROUP, "2", old={"Target": "4"}), aws)
    assert (aws.groups[OLD_GROUP].desired, aws.operations()) == (2, {"DescribeAutoScalingGroups"})


def test_an_update_that_keeps_group_and_target_leaves_the_desired_capacity_alone():
    """An operator (or anything else) set the group to 1 node; an update of the resource that changes neither its group
    nor its target does not put it back."""
    aws = AutoScaling(Group(OLD_GROUP, CREATED_OLD, desired=1, in_service=1))
    answer = handler.on_event(event("Update", OLD_GROUP, "4", old={"Rollout": "replace-all"}), None, aws.client)
    assert answer == {"PhysicalResourceId": "gpufleet-probe-group-capacity"}
    assert (aws.groups[OLD_GROUP].desired, aws.calls) == (1, [])


def test_delete_does_nothing():
    """Deleting the group terminates its nodes; the resource makes no call (an unexpected one fails the test)."""
    aws = AutoScaling(Group(OLD_GROUP, CREATED_OLD, desired=4, in_service=4))
    request = event("Delete", OLD_GROUP, "4")
    answer = handler.on_event(request, None, autoscaling=aws.client)
    assert answer == {"PhysicalResourceId": "gpufleet-probe-group-capacity"}
    assert handler.is_complete({**request, **answer}, None, autoscaling=aws.client) == {"IsComplete": True}
    assert (aws.groups[OLD_GROUP].desired, aws.calls) == (4, [])


def swap() -> AutoScaling:
    """A replace-all deploy with a new image: CloudFormation has created the new group (no DesiredCapacity: 0 nodes)
    next to the old one and its 4 nodes."""
    return AutoScaling(Group(OLD_GROUP, CREATED_OLD, desired=4, in_service=4), Group(NEW_GROUP, CREATED_NEW))


def swap_event() -> dict:
    return event("Update", NEW_GROUP, "4", "replace-all", old={"AutoScalingGroupName": OLD_GROUP})


def test_a_replace_all_swap_waits_until_the_new_group_has_its_nodes_in_service():
    aws = swap()
    waiting = run(swap_event(), aws)
    assert aws.groups[NEW_GROUP].desired == 4
    assert (waiting["WaitUntil"], waiting["OlderGroup"]) == ("2026-11-26T12:46:00+00:00", OLD_GROUP)
    aws.groups[NEW_GROUP].in_service = 3
    later = NOW + dt.timedelta(minutes=44, seconds=59)
    assert handler.is_complete(waiting, None, autoscaling=aws.client, now=later) == {"IsComplete": False}
    aws.groups[NEW_GROUP].in_service = 4
    assert handler.is_complete(waiting, None, autoscaling=aws.client, now=later) == {"IsComplete": True}
    assert aws.groups[OLD_GROUP].desired == 4  # untouched: CloudFormation deletes it after the update


def test_a_swap_whose_nodes_do_not_come_fails_with_the_reason_so_that_the_old_group_stays():
    aws = swap()
    waiting = run(swap_event(), aws)
    aws.groups[NEW_GROUP].in_service = 1
    aws.groups[NEW_GROUP].activities = [
        {
            "ActivityId": "a-1",
            "AutoScalingGroupName": NEW_GROUP,
            "Cause": "At 2026-11-26T12:01:00Z a user request update of AutoScalingGroup constraints ...",
            "StartTime": dt.datetime(2026, 11, 26, 12, 1, 5, tzinfo=dt.UTC),
            "StatusCode": "Successful",
            "Description": "Launching a new EC2 instance: i-0123456789abcdef0",
        },
        {
            "ActivityId": "a-2",
            "AutoScalingGroupName": NEW_GROUP,
            "Cause": "At 2026-11-26T12:20:00Z an instance was started in response to a difference ...",
            "StartTime": dt.datetime(2026, 11, 26, 12, 20, tzinfo=dt.UTC),
            "StatusCode": "Cancelled",
            "StatusMessage": "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot "
            "capacity available that matches your request. Launching EC2 instance failed.",
        },
        {
            "ActivityId": "a-3",
            "AutoScalingGroupName": NEW_GROUP,
            "Cause": "At 2026-11-26T12:10:00Z an instance was started in response to a difference ...",
            "StartTime": dt.datetime(2026, 11, 26, 12, 10, tzinfo=dt.UTC),
            "StatusCode": "Failed",
            "StatusMessage": "We currently do not have sufficient g5.48xlarge capacity in the Availability Zone "
            "you requested (us-east-1a).",
        },
    ]
    with pytest.raises(RuntimeError) as raised:
        handler.is_complete(waiting, None, autoscaling=aws.client, now=NOW + dt.timedelta(minutes=45))
    assert str(raised.value) == (
        f"{NEW_GROUP} has 1 of 4 nodes InService after 45 minutes; last launch failure at 2026-11-26 12:20 UTC: "
        "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that "
        "matches your request. Launching EC2 instance failed. The deploy fails so that CloudFormation rolls back: "
        f"it deletes {NEW_GROUP} with its nodes, and {OLD_GROUP} keeps its nodes. Deploy again when capacity is back, "
        "or take the image in place with fleet.rollout manual."
    )
    assert aws.groups[OLD_GROUP].desired == 4


def test_a_timeout_without_a_failed_launch_says_so():
    aws = swap()
    waiting = run(swap_event(), aws)
    with pytest.raises(RuntimeError, match="has 0 of 4 nodes InService after 45 minutes; no launch has failed yet"):
        handler.is_complete(waiting, None, autoscaling=aws.client, now=NOW + dt.timedelta(hours=1))


def test_the_rollback_of_a_swap_returns_to_the_old_group_without_waiting():
    """CloudFormation rolls a failed update back with "an additional Update with the previous properties": the older
    group is the one named now, so nothing older holds nodes, and its desired capacity is already the target."""
    aws = swap()
    aws.groups[NEW_GROUP].desired, aws.groups[NEW_GROUP].in_service = 4, 1
    rollback = event("Update", OLD_GROUP, "4", "replace-all", old={"AutoScalingGroupName": NEW_GROUP})
    waiting = run(rollback, aws)
    assert "WaitUntil" not in waiting
    assert "SetDesiredCapacity" not in aws.operations()
    assert handler.is_complete(waiting, None, autoscaling=aws.client) == {"IsComplete": True}


def test_the_first_deploy_of_this_resource_during_a_swap_waits_too():
    """A stack deployed before the resource existed gets it by a Create; if that deploy also swaps groups (a new image
    at the same time), the older group's nodes are kept the same way."""
    aws = swap()
    waiting = run(event("Create", NEW_GROUP, "4", "replace-all"), aws)
    assert (aws.groups[NEW_GROUP].desired, waiting["OlderGroup"]) == (4, OLD_GROUP)


def test_an_older_group_without_nodes_in_service_is_nothing_to_wait_for():
    aws = AutoScaling(Group(OLD_GROUP, CREATED_OLD, desired=4, in_service=0), Group(NEW_GROUP, CREATED_NEW))
    assert "WaitUntil" not in run(swap_event(), aws)


def test_a_group_that_is_not_there_fails_the_resource_naming_it():
    aws = AutoScaling()
    with pytest.raises(RuntimeError, match=f"^Auto Scaling group {NEW_GROUP} not found$"):
        handler.on_event(event("Create", NEW_GROUP, "4"), None, autoscaling=aws.client)


def test_a_refused_desired_capacity_fails_the_resource_with_auto_scalings_message():
    """A target above the group's maximum (which CloudFormation sets before this resource runs) is refused."""
    aws = AutoScaling(Group(OLD_GROUP, CREATED_OLD, max_size=2))
    with pytest.raises(Exception, match="New SetDesiredCapacity value 4 is above max value 2"):
        handler.on_event(event("Create", OLD_GROUP, "4"), None, autoscaling=aws.client)


@pytest.mark.parametrize(
    ("code", "message", "status"),
    [
        ("Throttling", "Rate exceeded", 400),
        ("InternalFailure", "An internal error occurred", 500),
        ("ServiceUnavailable", "Service is unavailable", 503),
    ],
)
def test_a_passing_fault_while_waiting_asks_again_at_the_next_poll(caplog, code, message, status):
    """The Provider answers FAILED for any error is_complete raises (aws-cdk-lib 2.275 cfn-response.js safeHandler):
    a throttled or failing Auto Scaling still standing after botocore's retries would fail the deploy and roll the
    swap back while the new group's nodes were coming."""
    aws = swap()
    waiting = run(swap_event(), aws)
    aws.fault = client_error(code, message, status)
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert handler.is_complete(waiting, None, autoscaling=aws.client, now=NOW) == {"IsComplete": False}
    assert caplog.messages == [
        f"An error occurred ({code}) when calling the DescribeAutoScalingGroups operation: {message}; asking again "
        "at the next poll"
    ]
    aws.fault = None
    aws.groups[NEW_GROUP].in_service = 4
    assert handler.is_complete(waiting, None, autoscaling=aws.client, now=NOW) == {"IsComplete": True}


def test_an_unreachable_auto_scaling_while_waiting_asks_again_at_the_next_poll(caplog):
    aws = swap()
    waiting = run(swap_event(), aws)
    aws.fault = EndpointConnectionError(endpoint_url="https://autoscaling.us-east-1.amazonaws.com")
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert handler.is_complete(waiting, None, autoscaling=aws.client, now=NOW) == {"IsComplete": False}
    assert caplog.messages == [
        'Could not connect to the endpoint URL: "https://autoscaling.us-east-1.amazonaws.com"; asking again at the '
        "next poll"
    ]


def test_a_denied_call_while_waiting_fails_the_deploy_with_its_message():
    """A fault that does not pass: failing at once names it, where asking again would end in the deadline's error
    45 minutes later."""
    aws = swap()
    waiting = run(swap_event(), aws)
    aws.fault = client_error("AccessDenied", "User is not authorized to perform: autoscaling:Describe*", 403)
    with pytest.raises(ClientError) as raised:
        handler.is_complete(waiting, None, autoscaling=aws.client, now=NOW)
    assert str(raised.value) == (
        "An error occurred (AccessDenied) when calling the DescribeAutoScalingGroups operation: User is not "
        "authorized to perform: autoscaling:Describe*"
    )


@pytest.mark.parametrize("handler_function", [handler.on_event, handler.is_complete])
def test_without_a_client_the_handlers_make_one_that_tries_five_times_in_standard_mode(monkeypatch, handler_function):
    """In Lambda the handlers get no client: they create boto3's Auto Scaling client."""
    made = []
    aws = swap()
    aws.groups[NEW_GROUP].in_service = 4
    monkeypatch.setattr(handler.boto3, "client", lambda service, config: made.append((service, config)) or aws.client)
    handler_function({**swap_event(), "WaitUntil": "2026-11-26T12:46:00+00:00", "OlderGroup": OLD_GROUP}, None)
    assert [(service, config.retries) for service, config in made] == [
        ("autoscaling", {"mode": "standard", "total_max_attempts": 5})
    ]
    assert [(config.connect_timeout, config.read_timeout) for _, config in made] == [(5, 20)]
