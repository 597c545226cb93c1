"""The teardown custom resource's two Provider handlers against moto's EC2 (Stubber where moto lacks EC2's answers).

CloudFormation's protocol is the Provider framework's (aws-cdk-lib), not ours: the handlers return dicts."""

from __future__ import annotations

import boto3
import botocore.exceptions
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from stacks.constructs.fleet_teardown.runtime import handler

REGION = "us-east-1"


@pytest.fixture
def ec2(monkeypatch):
    for variable, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }.items():
        monkeypatch.setenv(variable, value)
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def request_fleet(ec2, target=2, on_demand=1) -> str:
    image_id = ec2.register_image(
        Name="gpufleet-node",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 200}}],
    )["ImageId"]
    template = ec2.create_launch_template(
        LaunchTemplateName="gpufleet-test",
        LaunchTemplateData={
            "ImageId": image_id,
            "InstanceType": "p4d.24xlarge",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [{"Key": "gpufleet:environment", "Value": "test"}]}
            ],
        },
    )["LaunchTemplate"]
    return ec2.request_spot_fleet(
        SpotFleetRequestConfig={
            "IamFleetRole": "arn:aws:iam::123456789012:role/fleet",
            "TargetCapacity": target,
            "OnDemandTargetCapacity": on_demand,
            "Type": "maintain",
            "AllocationStrategy": "lowestPrice",
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {"LaunchTemplateId": template["LaunchTemplateId"], "Version": "1"},
                    "Overrides": [{"InstanceType": "p4d.24xlarge"}],
                }
            ],
        }
    )["SpotFleetRequestId"]


def running(ec2) -> set[str]:
    return {
        instance["InstanceId"]
        for reservation in ec2.describe_instances()["Reservations"]
        for instance in reservation["Instances"]
        if instance["State"]["Name"] != "terminated"
    }


def event(request_type: str, fleet_id: str) -> dict:
    """What the Provider framework hands on_event (and, with the same fields, is_complete)."""
    return {
        "RequestType": request_type,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-test-cluster/guid",
        "RequestId": "request-1",
        "LogicalResourceId": "FleetTeardown",
        "PhysicalResourceId": f"teardown-{fleet_id}",
        "ResourceProperties": {"FleetRequestId": fleet_id},
    }


def test_delete_cancels_the_fleet_terminates_every_node_and_then_reports_done(ec2):
    fleet_id = request_fleet(ec2)
    nodes = running(ec2)
    assert len(nodes) >= 1

    assert handler.on_event(event("Delete", fleet_id), None, ec2=ec2) == {"PhysicalResourceId": f"teardown-{fleet_id}"}
    assert handler.is_complete(event("Delete", fleet_id), None, ec2=ec2) == {"IsComplete": True}

    assert running(ec2) == set()
    requests = ec2.describe_spot_fleet_requests()["SpotFleetRequestConfigs"]
    assert all(
        r["SpotFleetRequestState"].startswith("cancelled") for r in requests if r["SpotFleetRequestId"] == fleet_id
    )


def test_nodes_of_a_fleet_cancelled_without_termination_are_terminated(ec2):
    """CloudFormation (or a person) may have cancelled the fleet and left its nodes running."""
    fleet_id = request_fleet(ec2)
    ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[fleet_id], TerminateInstances=False)
    assert running(ec2)

    handler.on_event(event("Delete", fleet_id), None, ec2=ec2)

    assert running(ec2) == set()
    assert handler.is_complete(event("Delete", fleet_id), None, ec2=ec2) == {"IsComplete": True}


def test_is_complete_never_reports_done_while_a_node_lives_and_terminates_it_again(ec2):
    """A node that outlived on_event (its termination failed, or it was launched meanwhile) keeps the resource
    waiting; each poll terminates it again, and only the poll that finds it terminated reports done."""
    fleet_id = request_fleet(ec2)
    ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[fleet_id], TerminateInstances=False)
    nodes = running(ec2)
    assert nodes

    assert handler.is_complete(event("Delete", fleet_id), None, ec2=ec2) == {"IsComplete": False}
    assert running(ec2) == set()
    assert handler.is_complete(event("Delete", fleet_id), None, ec2=ec2) == {"IsComplete": True}


def test_is_complete_waits_for_nodes_shutting_down_without_terminating_them_again(monkeypatch):
    terminated = []
    monkeypatch.setattr(handler, "fleet_instances", lambda client, fleet_id: {"i-0abc": "shutting-down"})
    client = type("Ec2", (), {"terminate_instances": lambda self, InstanceIds: terminated.append(InstanceIds)})()
    assert handler.is_complete(event("Delete", "sfr-1"), None, ec2=client) == {"IsComplete": False}
    assert terminated == []


@pytest.mark.parametrize(
    ("describe_error", "cancel_code"),
    [("InvalidSpotFleetRequestId.NotFound", "fleetRequestIdDoesNotExist"), (None, "fleetRequestNotInCancellableState")],
    ids=["never-existed", "already-cancelled"],
)
def test_delete_of_a_fleet_that_is_already_gone_succeeds(monkeypatch, describe_error, cancel_code):
    """moto forgets a fleet cancelled with termination and raises a bare KeyError for unknown ids, so EC2's
    documented answers for a gone fleet are stubbed here."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("ec2", region_name=REGION)
    fleet_id = "sfr-0123abcd-0123-4567-89ab-0123456789ab"

    def describe_gone_fleet(stub):
        if describe_error:
            stub.add_client_error(
                "describe_spot_fleet_instances", describe_error, expected_params={"SpotFleetRequestId": fleet_id}
            )
        else:
            stub.add_response("describe_spot_fleet_instances", {"ActiveInstances": [], "SpotFleetRequestId": fleet_id})
        stub.add_response("describe_instances", {"Reservations": []})

    with Stubber(client) as stub:
        describe_gone_fleet(stub)
        stub.add_response(
            "cancel_spot_fleet_requests",
            {
                "SuccessfulFleetRequests": [],
                "UnsuccessfulFleetRequests": [
                    {"SpotFleetRequestId": fleet_id, "Error": {"Code": cancel_code, "Message": "gone"}}
                ],
            },
            expected_params={"SpotFleetRequestIds": [fleet_id], "TerminateInstances": True},
        )
        describe_gone_fleet(stub)
        assert handler.on_event(event("Delete", fleet_id), None, ec2=client) == {
            "PhysicalResourceId": f"teardown-{fleet_id}"
        }
        assert handler.is_complete(event("Delete", fleet_id), None, ec2=client) == {"IsComplete": True}
        stub.assert_no_pending_responses()


def test_delete_refuses_an_unexpected_cancel_failure(monkeypatch):
    """An error raised by on_event fails the resource (the Provider framework answers FAILED)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("ec2", region_name=REGION)
    with Stubber(client) as stub:
        stub.add_response("describe_spot_fleet_instances", {"ActiveInstances": [], "SpotFleetRequestId": "sfr-1"})
        stub.add_response("describe_instances", {"Reservations": []})
        stub.add_response(
            "cancel_spot_fleet_requests",
            {
                "SuccessfulFleetRequests": [],
                "UnsuccessfulFleetRequests": [
                    {"SpotFleetRequestId": "sfr-1", "Error": {"Code": "unexpectedError", "Message": "try later"}}
                ],
            },
        )
        with pytest.raises(RuntimeError, match="cannot cancel fleet sfr-1: unexpectedError: try later"):
            handler.on_event(event("Delete", "sfr-1"), None, ec2=client)


@pytest.mark.parametrize("request_type", ["Create", "Update"])
def test_create_and_update_name_the_resource_after_the_fleet_and_touch_nothing(ec2, request_type):
    fleet_id = request_fleet(ec2)
    nodes = running(ec2)
    assert handler.on_event(event(request_type, fleet_id), None, ec2=ec2) == {
        "PhysicalResourceId": f"teardown-{fleet_id}"
    }
    assert handler.is_complete(event(request_type, fleet_id), None, ec2=ec2) == {"IsComplete": True}
    assert running(ec2) == nodes


FLEET = "sfr-0123abcd-0123-4567-89ab-0123456789ab"


@pytest.fixture
def stubbed(monkeypatch):
    """An EC2 client whose answers the test gives (botocore's Stubber checks every call's parameters)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("ec2", region_name=REGION)
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def instances(**states: str) -> dict:
    return {
        "Reservations": [
            {
                "Instances": [
                    {"InstanceId": instance_id, "State": {"Name": state}} for instance_id, state in states.items()
                ]
            }
        ]
    }


def by_id(*instance_ids: str) -> dict:
    return {"Filters": [{"Name": "instance-id", "Values": list(instance_ids)}]}


def by_tag(fleet_id: str) -> dict:
    return {"Filters": [{"Name": "tag:aws:ec2spot:fleet-request-id", "Values": [fleet_id]}]}


def test_instances_come_from_the_fleet_list_and_the_tag_and_terminated_ones_are_left_out(stubbed):
    """i-1 carries the fleet tag; i-2 is only in the fleet's list (found by id); i-3 is terminated; a page without
    ActiveInstances (EC2 leaves out an empty list) counts as none."""
    client, stub = stubbed
    stub.add_response(
        "describe_spot_fleet_instances",
        {
            "ActiveInstances": [{"InstanceId": "i-1"}, {"InstanceId": "i-2"}],
            "SpotFleetRequestId": FLEET,
            "NextToken": "t",
        },
        expected_params={"SpotFleetRequestId": FLEET},
    )
    stub.add_response(
        "describe_spot_fleet_instances",
        {"SpotFleetRequestId": FLEET},
        expected_params={"SpotFleetRequestId": FLEET, "NextToken": "t"},
    )
    stub.add_response("describe_instances", instances(**{"i-1": "running", "i-3": "terminated"}), by_tag(FLEET))
    stub.add_response("describe_instances", instances(**{"i-2": "pending"}), by_id("i-2"))

    assert handler.fleet_instances(client, FLEET) == {"i-1": "running", "i-2": "pending"}


def test_delete_terminates_what_the_cancellation_left_running_and_logs_it(stubbed, caplog):
    client, stub = stubbed
    stub.add_response(
        "describe_spot_fleet_instances", {"ActiveInstances": [{"InstanceId": "i-1"}], "SpotFleetRequestId": FLEET}
    )
    stub.add_response("describe_instances", instances(**{"i-1": "running", "i-2": "running"}), by_tag(FLEET))
    stub.add_response(
        "cancel_spot_fleet_requests",
        {"SuccessfulFleetRequests": [], "UnsuccessfulFleetRequests": []},
        {"SpotFleetRequestIds": [FLEET], "TerminateInstances": True},
    )
    stub.add_response(
        "describe_instances", instances(**{"i-1": "shutting-down", "i-2": "running"}), by_id("i-1", "i-2")
    )
    stub.add_response("terminate_instances", {}, {"InstanceIds": ["i-2"]})

    with caplog.at_level("INFO"):
        assert handler.on_event(event("Delete", FLEET), None, ec2=client) == {"PhysicalResourceId": f"teardown-{FLEET}"}

    assert caplog.messages == [f"terminating 1 instance(s) of {FLEET}: ['i-2']"]


def test_is_complete_logs_what_it_waits_for_and_when_it_is_done(monkeypatch, caplog):
    answers = iter([{"i-1": "shutting-down", "i-2": "running"}, {}])
    monkeypatch.setattr(handler, "fleet_instances", lambda client, fleet_id: next(answers))
    client = type("Ec2", (), {"terminate_instances": lambda self, InstanceIds: None})()

    with caplog.at_level("INFO"):
        assert handler.is_complete(event("Delete", FLEET), None, ec2=client) == {"IsComplete": False}
        assert handler.is_complete(event("Delete", FLEET), None, ec2=client) == {"IsComplete": True}

    assert caplog.messages == [
        f"instances of {FLEET} not terminated yet: [('i-1', 'shutting-down'), ('i-2', 'running')]",
        f"terminating 1 instance(s) of {FLEET}: ['i-2']",
        f"every instance of {FLEET} is terminated",
    ]


@pytest.mark.parametrize("code", ["InvalidSpotFleetRequestId.NotFound", "InvalidSpotFleetRequestId.Malformed"])
def test_a_cancellation_refused_because_the_fleet_is_gone_is_logged_and_succeeds(stubbed, caplog, code):
    client, stub = stubbed
    stub.add_client_error("cancel_spot_fleet_requests", code)

    with caplog.at_level("INFO"):
        assert handler.cancel_fleet(client, FLEET) is None

    assert caplog.messages == [f"fleet {FLEET} no longer exists"]


def test_any_other_cancellation_error_fails_the_resource(stubbed):
    client, stub = stubbed
    stub.add_client_error("cancel_spot_fleet_requests", "UnauthorizedOperation")

    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        handler.cancel_fleet(client, FLEET)


# botocore's ec2 model, shape CancelBatchErrorCode: all but unexpectedError mean there is no fleet left to cancel.
@pytest.mark.parametrize(
    "code", ["fleetRequestIdDoesNotExist", "fleetRequestIdMalformed", "fleetRequestNotInCancellableState"]
)
def test_a_gone_fleet_in_the_cancellation_answer_is_logged(stubbed, caplog, code):
    client, stub = stubbed
    failure = {"SpotFleetRequestId": FLEET, "Error": {"Code": code, "Message": "gone"}}
    stub.add_response(
        "cancel_spot_fleet_requests", {"SuccessfulFleetRequests": [], "UnsuccessfulFleetRequests": [failure]}
    )

    with caplog.at_level("INFO"):
        handler.cancel_fleet(client, FLEET)

    assert caplog.messages == [f"fleet {FLEET}: {code}"]


def test_a_cancellation_failure_without_a_message_names_the_code(stubbed):
    client, stub = stubbed
    failure = {"SpotFleetRequestId": FLEET, "Error": {"Code": "unexpectedError"}}
    stub.add_response(
        "cancel_spot_fleet_requests", {"SuccessfulFleetRequests": [], "UnsuccessfulFleetRequests": [failure]}
    )

    with pytest.raises(RuntimeError) as raised:
        handler.cancel_fleet(client, FLEET)

    assert str(raised.value) == f"cannot cancel fleet {FLEET}: unexpectedError: "


@pytest.mark.parametrize("handler_function", [handler.on_event, handler.is_complete])
def test_without_a_client_the_handlers_make_an_ec2_one(monkeypatch, handler_function):
    """In Lambda the handlers get no client: they create boto3's EC2 client."""
    services = []
    client = type("Ec2", (), {"terminate_instances": lambda self, InstanceIds: None})()
    monkeypatch.setattr(
        handler.boto3, "client", lambda service, config: services.append((service, config.retries)) or client
    )
    monkeypatch.setattr(handler, "fleet_instances", lambda client, fleet_id: {})
    monkeypatch.setattr(handler, "cancel_fleet", lambda client, fleet_id: None)

    handler_function(event("Delete", FLEET), None)

    assert services == [("ec2", {"mode": "standard", "total_max_attempts": 7})]


def test_an_instance_ec2_does_not_know_yet_is_not_an_error(stubbed):
    """EC2's describe calls are eventually consistent: an id the fleet lists may be unknown to DescribeInstances for
    a moment. Found by filter, it is just not there (by id it would fail with InvalidInstanceID.NotFound)."""
    client, stub = stubbed
    stub.add_response(
        "describe_spot_fleet_instances", {"ActiveInstances": [{"InstanceId": "i-new"}], "SpotFleetRequestId": FLEET}
    )
    stub.add_response("describe_instances", {"Reservations": []}, by_tag(FLEET))
    stub.add_response("describe_instances", {"Reservations": []}, by_id("i-new"))

    assert handler.fleet_instances(client, FLEET) == {}


@pytest.mark.parametrize(
    ("code", "status"),
    [("RequestLimitExceeded", 503), ("Throttling", 400), ("InternalError", 500), ("Unavailable", 503)],
)
def test_a_passing_fault_makes_is_complete_ask_again_instead_of_failing_the_deletion(stubbed, caplog, code, status):
    """The Provider fails the resource on any error is_complete raises (aws-cdk-lib 2.275 framework.js safeHandler), so
    a throttled EC2 would fail a stack's deletion and leave its placement group and security group behind."""
    client, stub = stubbed
    stub.add_client_error(
        "describe_spot_fleet_instances", service_error_code=code, service_message="slow down", http_status_code=status
    )

    with caplog.at_level("WARNING"):
        assert handler.is_complete(event("Delete", FLEET), None, ec2=client) == {"IsComplete": False}

    assert caplog.messages == [
        f"An error occurred ({code}) when calling the DescribeSpotFleetInstances operation: slow down; asking again at "
        "the next poll"
    ]


def test_an_unreachable_ec2_makes_is_complete_ask_again(monkeypatch, caplog):
    def unreachable(client, fleet_id):
        raise botocore.exceptions.EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

    monkeypatch.setattr(handler, "fleet_instances", unreachable)
    with caplog.at_level("WARNING"):
        assert handler.is_complete(event("Delete", FLEET), None, ec2=object()) == {"IsComplete": False}

    assert caplog.messages == [
        'Could not connect to the endpoint URL: "https://ec2.us-east-1.amazonaws.com"; asking again at the next poll'
    ]


def test_any_other_error_fails_the_deletion_with_its_message(stubbed):
    """A denied call does not pass: failing at once names it, where asking again would end in "Operation timed out"
    fifty minutes later."""
    client, stub = stubbed
    stub.add_client_error(
        "describe_spot_fleet_instances",
        service_error_code="UnauthorizedOperation",
        service_message="You are not authorized to perform this operation.",
        http_status_code=403,
    )

    with pytest.raises(ClientError) as raised:
        handler.is_complete(event("Delete", FLEET), None, ec2=client)

    assert raised.value.response["Error"]["Code"] == "UnauthorizedOperation"


class RecordingSsm:
    """SendCommand and GetCommandInvocation as the checkpoint hook uses them; `running` is told, at each command,
    which nodes still run (the hook runs before any node ends)."""

    def __init__(self, ec2, status: str = "Success", refuse: str = "") -> None:
        self.ec2, self.status, self.refuse = ec2, status, refuse
        self.sent: list[tuple[str, str, set[str]]] = []

    def send_command(self, InstanceIds, DocumentName, Comment, Parameters):
        (node,) = InstanceIds
        self.sent.append((node, Parameters["commands"][0], running(self.ec2)))
        return {"Command": {"CommandId": f"command-{node}"}}

    def get_command_invocation(self, CommandId, InstanceId):
        if self.refuse:
            raise ClientError({"Error": {"Code": self.refuse, "Message": "no"}}, "GetCommandInvocation")
        return {"Status": self.status}


HOOK = '. /etc/gpufleet/node.env && GPUFLEET_NOTICE_PATH=fleet-teardown GPUFLEET_NOTICE=sfr bash -c "$HOOK"'


def test_with_a_checkpoint_hook_every_running_node_runs_it_before_the_fleet_ends(ec2, monkeypatch):
    monkeypatch.setenv("CHECKPOINT_COMMAND", HOOK)
    fleet_id = request_fleet(ec2)
    nodes = running(ec2)
    ssm = RecordingSsm(ec2)

    handler.on_event(event("Delete", fleet_id), None, ec2=ec2, ssm=ssm)

    assert sorted(node for node, _, _ in ssm.sent) == sorted(nodes)
    assert all(command == HOOK and alive == nodes for _, command, alive in ssm.sent)
    assert running(ec2) == set()


@pytest.mark.parametrize(("status", "refuse"), [("InProgress", ""), ("Success", "AccessDeniedException")])
def test_a_hook_that_does_not_end_or_cannot_be_read_delays_the_teardown_a_bounded_time_only(
    ec2, monkeypatch, status, refuse
):
    monkeypatch.setenv("CHECKPOINT_COMMAND", HOOK)
    fleet_id = request_fleet(ec2)
    ssm = RecordingSsm(ec2, status=status, refuse=refuse)
    now = [0.0]

    handler.on_event(
        event("Delete", fleet_id),
        None,
        ec2=ec2,
        ssm=ssm,
        clock=lambda: now[0],
        sleep=lambda seconds: now.__setitem__(0, now[0] + seconds),
    )

    assert ssm.sent
    assert now[0] <= 185  # gpufleet.checkpoint_hook.REMOVAL_WAIT_SECONDS and one poll
    assert running(ec2) == set()


def test_without_a_checkpoint_hook_no_command_is_sent(ec2, monkeypatch):
    monkeypatch.delenv("CHECKPOINT_COMMAND", raising=False)
    fleet_id = request_fleet(ec2)
    ssm = RecordingSsm(ec2)

    handler.on_event(event("Delete", fleet_id), None, ec2=ec2, ssm=ssm)

    assert ssm.sent == []
    assert running(ec2) == set()


def test_a_node_that_is_not_running_gets_no_hook_and_is_named(ec2, monkeypatch, caplog):
    """The nodes a command goes to are gpufleet.ssm_batches.command_targets': a stopped node would run the hook only
    when started again."""
    monkeypatch.setenv("CHECKPOINT_COMMAND", HOOK)
    fleet_id = request_fleet(ec2)
    stopped, kept = sorted(running(ec2))
    ec2.stop_instances(InstanceIds=[stopped])
    ssm = RecordingSsm(ec2)

    with caplog.at_level("INFO"):
        handler.on_event(event("Delete", fleet_id), None, ec2=ec2, ssm=ssm)

    assert [node for node, _, _ in ssm.sent] == [kept]
    assert f"{fleet_id}: {stopped}: no command (stopped: a command would wait for its next start)" in caplog.messages
