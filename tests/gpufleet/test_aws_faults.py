"""The Lambda functions' rule for AWS calls (gpufleet/aws_faults.py): the client configuration, which failed calls
pass, and that both are botocore's own."""

from __future__ import annotations

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from botocore.retries import standard

from gpufleet import aws_faults

ENDPOINT = "https://autoscaling.us-east-1.amazonaws.com"


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "DescribeAutoScalingGroups",
    )


class _Raw:
    """The raw HTTP body botocore reads an answer from."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_):
        yield self.body


def test_the_config_retries_in_standard_mode_with_short_timeouts():
    config = aws_faults.client_config(5)
    assert config.retries == {"mode": "standard", "total_max_attempts": 5}
    assert (config.connect_timeout, config.read_timeout) == (5, 20)


def test_the_attempts_count_the_first_call_and_a_client_leaves_the_config_as_it_was(monkeypatch):
    """client_config(5): a call that is throttled every time is sent 5 times, then raises; the waits between them are
    botocore's (not slept here)."""
    sent = []
    config = aws_faults.client_config(5)
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda seconds: None)
    client = boto3.client(
        "autoscaling",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )

    def throttled(request, **_):
        sent.append(request.url)
        body = b"<ErrorResponse><Error><Code>Throttling</Code><Message>Rate exceeded</Message></Error></ErrorResponse>"
        return AWSResponse(request.url, 400, {}, _Raw(body))

    client.meta.events.register("before-send.autoscaling.DescribeAutoScalingGroups", throttled)
    with pytest.raises(ClientError) as raised:
        client.describe_auto_scaling_groups()
    assert len(sent) == 5
    assert str(raised.value) == (
        "An error occurred (Throttling) when calling the DescribeAutoScalingGroups operation (reached max retries: 4): "
        "Rate exceeded"
    )
    assert aws_faults.passing(raised.value)
    assert config.retries == {"mode": "standard", "total_max_attempts": 5}


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("Throttling", 400),
        ("ThrottlingException", 400),
        ("RequestLimitExceeded", 503),
        ("EC2ThrottledException", 400),
        ("TooManyRequestsException", 400),
        ("SlowDown", 503),
        ("RequestTimeout", 400),
        ("RequestTimeoutException", 408),
        ("PriorRequestNotComplete", 400),
        ("InternalFailure", 500),
        ("InternalError", 500),
        ("BadGateway", 502),
        ("ServiceUnavailable", 503),
        ("Unavailable", 503),
        ("GatewayTimeout", 504),
        ("", 429),
    ],
)
def test_throttling_timeouts_and_server_errors_pass(code, status):
    assert aws_faults.passing(client_error(code, status))


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AccessDenied", 403),
        ("AccessDeniedException", 400),
        ("UnauthorizedOperation", 403),
        ("ValidationError", 400),
        ("InvalidSpotFleetRequestId.NotFound", 400),
        ("NotImplemented", 501),
    ],
)
def test_a_denied_or_wrong_call_does_not_pass(code, status):
    assert not aws_faults.passing(client_error(code, status))


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url=ENDPOINT),
        ConnectTimeoutError(endpoint_url=ENDPOINT),
        ReadTimeoutError(endpoint_url=ENDPOINT),
        ConnectionClosedError(endpoint_url=ENDPOINT),
    ],
)
def test_no_answer_at_all_passes(error):
    assert aws_faults.passing(error)


@pytest.mark.parametrize(
    "error", [NoCredentialsError(), ParamValidationError(report="Missing required parameter"), ValueError("x")]
)
def test_an_error_of_this_side_does_not_pass(error):
    assert not aws_faults.passing(error)


def test_the_passing_faults_are_those_botocores_standard_mode_retries():
    """botocore/retries/standard.py of the installed botocore (1.44.5): the lists the module doc names."""
    assert set(standard.ThrottledRetryableChecker._THROTTLED_ERROR_CODES) == aws_faults.THROTTLED_ERROR_CODES
    assert set(standard.TransientRetryableChecker._TRANSIENT_ERROR_CODES) == aws_faults.TRANSIENT_ERROR_CODES
    assert set(standard.TransientRetryableChecker._TRANSIENT_STATUS_CODES) | set(
        standard.ThrottlingStatusCodeChecker._THROTTLING_STATUS_CODES
    ) == set(aws_faults.PASSING_STATUS_CODES)
    assert standard.TransientRetryableChecker._TRANSIENT_EXCEPTION_CLS == aws_faults.NO_ANSWER
