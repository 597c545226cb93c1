"""gpufleet.aws: retry configuration and the translation of AWS failures into one-line errors, end to end."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from gpufleet.aws import Aws, describe_failure, is_unavailable


def client_error(code: str, operation: str = "DescribeInstances") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} happened"}}, operation)


def test_clients_retry_in_standard_mode() -> None:
    retries = Aws("us-east-1").client("ec2").meta.config.retries
    assert retries == {"mode": "standard", "total_max_attempts": 8}


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (NoCredentialsError(), "AWS credentials not found: set AWS_PROFILE"),
        (client_error("ExpiredToken"), "AWS credentials expired (ExpiredToken on DescribeInstances)"),
        (client_error("ExpiredTokenException"), "AWS credentials expired"),
        (client_error("RequestExpired"), "AWS credentials expired"),
        (client_error("Throttling"), "AWS throttled DescribeInstances in us-east-1 (Throttling) after 8 attempts"),
        (client_error("RequestLimitExceeded"), "AWS throttled DescribeInstances"),
        (client_error("UnauthorizedOperation"), "access denied to DescribeInstances in us-east-1"),
        (client_error("AccessDeniedException"), "access denied to DescribeInstances"),
        (client_error("AuthFailure"), "AWS rejected the credentials"),
        (EndpointConnectionError(endpoint_url="https://ec2.xx-nowhere-1.amazonaws.com"), "cannot reach https://ec2.xx"),
        (client_error("InvalidParameterValue"), "DescribeInstances failed in us-east-1: InvalidParameterValue"),
    ],
)
def test_failures_become_one_line_with_a_fix(error: Exception, expected: str) -> None:
    message = describe_failure(error, "us-east-1")
    assert message.startswith(expected)
    assert "\n" not in message


@pytest.mark.parametrize(
    ("code", "unavailable"),
    [
        ("AccessDenied", True),
        ("NoSuchResourceException", True),
        ("UnsupportedOperation", True),
        ("Throttling", False),
        ("ExpiredToken", False),
        ("InvalidParameterValue", False),
    ],
)
def test_unavailable_means_the_caller_can_do_without(code: str, unavailable: bool) -> None:
    assert is_unavailable(client_error(code)) is unavailable


def test_missing_credentials_is_one_line(monkeypatch: pytest.MonkeyPatch, run_cli) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code, out, err = run_cli("status", "dev", "--fleet-id", "sfr-00000000-0000-0000-0000-000000000000")
    assert code == 1
    assert err.startswith("AWS credentials not found") and err.count("\n") == 1
    assert out == ""


def test_throttling_after_retries_is_one_line(stubbed, run_cli) -> None:
    """Stubber answers Throttling (Stubber bypasses botocore's retry loop, so this is the error after retries)."""
    stubbed("ec2").add_client_error(
        "describe_spot_fleet_requests", service_error_code="Throttling", http_status_code=400
    )
    code, _, err = run_cli("hosts", "dev", "--fleet-id", "sfr-1")
    assert code == 1
    assert (
        err == "AWS throttled DescribeSpotFleetRequests in us-east-1 (Throttling) after 8 attempts: "
        "wait a minute and retry, or stop other tools calling the same API\n"
    )


def test_expired_token_is_one_line(stubbed, run_cli) -> None:
    stubbed("cloudformation").add_client_error(
        "describe_stacks", service_error_code="ExpiredToken", http_status_code=400
    )
    code, _, err = run_cli("status", "dev")
    assert code == 1
    assert err.startswith("AWS credentials expired (ExpiredToken on DescribeStacks)") and err.count("\n") == 1


@pytest.mark.parametrize("command", [["status", "nope"], ["hosts", "nope"], ["preflight", "nope"]])
def test_unknown_environment(run_cli, command: list[str]) -> None:
    code, _, err = run_cli(*command)
    assert code == 1
    assert "unknown environment 'nope' (known: dev)" in err
