"""The teardown custom resource's logic against moto's EC2, and its CloudFormation response over real HTTP."""

from __future__ import annotations

import http.server
import json
import threading

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from stacks.fleet_teardown import handler

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


def test_teardown_cancels_the_fleet_and_terminates_every_node(ec2):
    fleet_id = request_fleet(ec2)
    nodes = running(ec2)
    assert len(nodes) >= 1

    terminated = handler.teardown_fleet(ec2, fleet_id, seconds_left=lambda: 600, sleep=lambda _: None)

    assert terminated == nodes
    assert running(ec2) == set()
    requests = ec2.describe_spot_fleet_requests()["SpotFleetRequestConfigs"]
    assert all(
        r["SpotFleetRequestState"].startswith("cancelled") for r in requests if r["SpotFleetRequestId"] == fleet_id
    )


def test_nodes_of_a_fleet_cancelled_without_termination_are_terminated(ec2):
    """CloudFormation (or a person) may have cancelled the fleet and left its nodes running."""
    fleet_id = request_fleet(ec2)
    ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[fleet_id], TerminateInstances=False)
    nodes = running(ec2)
    assert nodes

    assert handler.teardown_fleet(ec2, fleet_id, seconds_left=lambda: 600, sleep=lambda _: None) == nodes
    assert running(ec2) == set()


@pytest.mark.parametrize(
    ("describe_error", "cancel_code"),
    [("InvalidSpotFleetRequestId.NotFound", "fleetRequestIdDoesNotExist"), (None, "fleetRequestNotInCancellableState")],
    ids=["never-existed", "already-cancelled"],
)
def test_teardown_of_a_fleet_that_is_already_gone_succeeds(monkeypatch, describe_error, cancel_code):
    """moto forgets a fleet cancelled with termination and raises a bare KeyError for unknown ids, so EC2's
    documented answers for a gone fleet are stubbed here."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("ec2", region_name=REGION)
    fleet_id = "sfr-0123abcd-0123-4567-89ab-0123456789ab"
    with Stubber(client) as stub:
        if describe_error:
            stub.add_client_error(
                "describe_spot_fleet_instances", describe_error, expected_params={"SpotFleetRequestId": fleet_id}
            )
        else:
            stub.add_response("describe_spot_fleet_instances", {"ActiveInstances": [], "SpotFleetRequestId": fleet_id})
        stub.add_response("describe_instances", {"Reservations": []})
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
        assert handler.teardown_fleet(client, fleet_id, seconds_left=lambda: 600, sleep=lambda _: None) == set()
        stub.assert_no_pending_responses()


def test_teardown_refuses_an_unexpected_cancel_failure(monkeypatch):
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
            handler.teardown_fleet(client, "sfr-1", seconds_left=lambda: 600, sleep=lambda _: None)


def test_teardown_fails_loudly_when_nodes_outlive_the_deadline(monkeypatch):
    terminated, sleeps = [], []
    monkeypatch.setattr(handler, "fleet_instance_ids", lambda client, fleet_id: {"i-0abc"})
    monkeypatch.setattr(handler, "cancel_fleet", lambda client, fleet_id: None)
    monkeypatch.setattr(handler, "alive_instances", lambda client, ids: set(ids))
    client = type("Ec2", (), {"terminate_instances": lambda self, InstanceIds: terminated.append(InstanceIds)})()
    clock = iter([600, 300, 30])
    with pytest.raises(handler.TeardownIncomplete, match="instances of sfr-1 still shutting down: i-0abc"):
        handler.teardown_fleet(client, "sfr-1", seconds_left=lambda: next(clock), sleep=sleeps.append)
    assert terminated == [["i-0abc"]]
    assert sleeps == [handler.POLL_SECONDS, handler.POLL_SECONDS]


class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_PUT(self):  # noqa: N802 (http.server's naming)
        length = int(self.headers["Content-Length"])
        _Recorder.received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def response_url():
    _Recorder.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/presigned"
    thread.join(timeout=10)
    server.server_close()


class _Context:
    @staticmethod
    def get_remaining_time_in_millis():
        return 600_000


def event(request_type: str, fleet_id: str, url: str) -> dict:
    return {
        "RequestType": request_type,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-test-cluster/guid",
        "RequestId": "request-1",
        "LogicalResourceId": "FleetTeardown",
        "PhysicalResourceId": f"teardown-{fleet_id}",
        "ResourceProperties": {"FleetRequestId": fleet_id},
    }


def test_delete_event_answers_cloudformation_success(ec2, response_url):
    fleet_id = request_fleet(ec2)
    handler.handle(event("Delete", fleet_id, response_url), _Context(), ec2=ec2, sleep=lambda _: None)
    (answer,) = _Recorder.received
    assert answer["Status"] == "SUCCESS"
    assert answer["PhysicalResourceId"] == f"teardown-{fleet_id}"
    assert answer["Reason"].startswith(f"fleet {fleet_id} cancelled; ")
    assert running(ec2) == set()


def test_create_event_names_the_resource_after_the_fleet_and_touches_nothing(ec2, response_url):
    fleet_id = request_fleet(ec2)
    nodes = running(ec2)
    handler.handle(event("Create", fleet_id, response_url), _Context(), ec2=ec2)
    assert _Recorder.received[0]["Status"] == "SUCCESS"
    assert _Recorder.received[0]["PhysicalResourceId"] == f"teardown-{fleet_id}"
    assert running(ec2) == nodes


def test_a_failure_is_reported_to_cloudformation_instead_of_hanging(ec2, response_url, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("cannot cancel fleet sfr-1: UnauthorizedOperation")

    monkeypatch.setattr(handler, "teardown_fleet", refuse)
    handler.handle(event("Delete", "sfr-1", response_url), _Context(), ec2=ec2)
    (answer,) = _Recorder.received
    assert answer["Status"] == "FAILED"
    assert answer["Reason"] == "RuntimeError: cannot cancel fleet sfr-1: UnauthorizedOperation"
