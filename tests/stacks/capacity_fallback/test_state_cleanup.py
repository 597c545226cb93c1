"""The custom resource that deletes the capacity fallback's state: SSM from moto, CloudFormation's presigned response
URL played by a local HTTP server that records each PUT."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from stacks.capacity_fallback import state_cleanup

PARAMETER = "/gpufleet/probe/fallback"


class ResponseBucket(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_PUT(self) -> None:  # the name http.server calls for a PUT
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append({"content_type": self.headers["Content-Type"], "body": json.loads(body)})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def response_url():
    ResponseBucket.received = []
    server = HTTPServer(("127.0.0.1", 0), ResponseBucket)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/response?signed"
    server.shutdown()
    server.server_close()


@pytest.fixture
def ssm(monkeypatch):
    for variable, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(variable, value)
    with mock_aws():
        yield boto3.client("ssm")


def request(kind: str, url: str) -> dict:
    return {
        "RequestType": kind,
        "RequestId": "req-1",
        "ResponseURL": url,
        "ResourceType": "Custom::GpufleetFallbackState",
        "LogicalResourceId": "CapacityFallbackStateCleanup93A1F96A",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-probe-cluster/guid",
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:...", "ParameterName": PARAMETER},
        **({"PhysicalResourceId": PARAMETER} if kind != "Create" else {}),
    }


def answer(status: str, reason: str) -> dict:
    return {
        "content_type": "",
        "body": {
            "Status": status,
            "Reason": reason,
            "PhysicalResourceId": PARAMETER,
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-probe-cluster/guid",
            "RequestId": "req-1",
            "LogicalResourceId": "CapacityFallbackStateCleanup93A1F96A",
        },
    }


def write_state(ssm) -> None:
    ssm.put_parameter(Name=PARAMETER, Type="String", Value='{"node_group": "sfr-1", "on_demand": 3}')


@pytest.mark.parametrize("kind", ["Create", "Update"])
def test_create_and_update_leave_the_state_alone_and_keep_one_physical_id(ssm, response_url, kind):
    write_state(ssm)
    state_cleanup.on_event(request(kind, response_url), None)
    assert ResponseBucket.received == [answer("SUCCESS", f"{kind}: nothing to do")]
    assert ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"] == '{"node_group": "sfr-1", "on_demand": 3}'


def test_delete_removes_the_state(ssm, response_url):
    write_state(ssm)
    state_cleanup.on_event(request("Delete", response_url), None)
    assert ResponseBucket.received == [answer("SUCCESS", f"deleted {PARAMETER}")]
    assert ssm.describe_parameters()["Parameters"] == []


def test_delete_without_state_succeeds(ssm, response_url):
    state_cleanup.on_event(request("Delete", response_url), None)
    assert ResponseBucket.received == [
        answer("SUCCESS", f"{PARAMETER} does not exist (the fallback never ran, or it is deleted already)")
    ]


def test_a_delete_that_fails_answers_failed_with_the_reason(response_url, capsys):
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ssm) as stubber:
        stubber.add_client_error(
            "delete_parameter",
            service_error_code="AccessDeniedException",
            service_message="not authorized to perform: ssm:DeleteParameter",
            expected_params={"Name": PARAMETER},
        )
        state_cleanup.on_event(request("Delete", response_url), None, ssm=ssm)
    reason = (
        f"could not delete {PARAMETER}: An error occurred (AccessDeniedException) when calling the DeleteParameter "
        "operation: not authorized to perform: ssm:DeleteParameter"
    )
    assert ResponseBucket.received == [answer("FAILED", reason)]
    assert json.loads(capsys.readouterr().out) == {
        "request": "Delete",
        "parameter": PARAMETER,
        "status": "FAILED",
        "reason": reason,
    }
