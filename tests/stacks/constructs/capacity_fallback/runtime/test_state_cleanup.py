"""The custom resource that deletes the capacity fallback's state, SSM from moto: what on_event returns to CDK's
Provider (which answers CloudFormation), what it deletes and logs, and that a failed delete raises (the Provider
then answers FAILED with the error)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from stacks.constructs.capacity_fallback.runtime import state_cleanup

PARAMETER = "/gpufleet/probe/fallback"


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


def request(kind: str) -> dict:
    return {
        "RequestType": kind,
        "RequestId": "req-1",
        "ResourceType": "Custom::GpufleetFallbackState",
        "LogicalResourceId": "CapacityFallbackStateCleanup93A1F96A",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/gpufleet-probe-cluster/guid",
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:...", "ParameterName": PARAMETER},
        **({"PhysicalResourceId": PARAMETER} if kind != "Create" else {}),
    }


def write_state(ssm) -> None:
    ssm.put_parameter(Name=PARAMETER, Type="String", Value='{"node_group": "sfr-1", "on_demand": 3}')


def logged(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["Create", "Update"])
def test_create_and_update_leave_the_state_alone_and_keep_one_physical_id(ssm, capsys, kind):
    write_state(ssm)
    assert state_cleanup.on_event(request(kind), None) == {"PhysicalResourceId": PARAMETER}
    assert ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"] == '{"node_group": "sfr-1", "on_demand": 3}'
    assert logged(capsys) == {"request": kind, "parameter": PARAMETER, "reason": f"{kind}: nothing to do"}


def test_delete_removes_the_state(ssm, capsys):
    write_state(ssm)
    assert state_cleanup.on_event(request("Delete"), None) == {"PhysicalResourceId": PARAMETER}
    assert ssm.describe_parameters()["Parameters"] == []
    assert logged(capsys) == {"request": "Delete", "parameter": PARAMETER, "reason": f"deleted {PARAMETER}"}


def test_delete_without_state_succeeds(ssm, capsys):
    assert state_cleanup.on_event(request("Delete"), None) == {"PhysicalResourceId": PARAMETER}
    assert logged(capsys)["reason"] == (
        f"{PARAMETER} does not exist (the fallback never ran, or it is deleted already)"
    )


def test_a_delete_that_fails_raises_so_the_provider_answers_failed():
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ssm) as stubber:
        stubber.add_client_error(
            "delete_parameter",
            service_error_code="AccessDeniedException",
            service_message="not authorized to perform: ssm:DeleteParameter",
            expected_params={"Name": PARAMETER},
        )
        with pytest.raises(ClientError, match="AccessDeniedException"):
            state_cleanup.on_event(request("Delete"), None, ssm=ssm)


def test_without_a_client_the_delete_makes_one_that_tries_five_times_in_standard_mode(monkeypatch, capsys):
    """In Lambda on_event gets no client: a throttled delete would fail the stack's deletion (the Provider answers
    FAILED for any error), so it retries first."""
    made = []

    class Ssm:
        def delete_parameter(self, Name):
            assert Name == PARAMETER

    monkeypatch.setattr(state_cleanup.boto3, "client", lambda service, config: made.append((service, config)) or Ssm())
    assert state_cleanup.on_event(request("Delete"), None) == {"PhysicalResourceId": PARAMETER}
    assert [(service, config.retries) for service, config in made] == [
        ("ssm", {"mode": "standard", "total_max_attempts": 5})
    ]
    assert [(config.connect_timeout, config.read_timeout) for _, config in made] == [(5, 20)]
