"""AWS access for the operator commands: one place that creates clients and turns AWS failures into one-line errors.

Every client retries with botocore's standard mode (exponential backoff with jitter on throttling and transient
errors). What still fails after the retries reaches ``aws_errors``, which raises a GpufleetError saying what to do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    SSOTokenLoadError,
    TokenRetrievalError,
    UnauthorizedSSOTokenError,
)

from gpufleet.errors import GpufleetError

# botocore counts max_attempts as retries after the first call: 7 retries = 8 calls.
MAX_RETRIES = 7
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": MAX_RETRIES},
    connect_timeout=10,
    read_timeout=60,
)

EXPIRED_CODES = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired", "TokenRefreshRequired"})
INVALID_CREDENTIAL_CODES = frozenset({"AuthFailure", "InvalidClientTokenId", "UnrecognizedClientException"})
THROTTLING_CODES = frozenset(
    {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException", "SlowDown"}
)
DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
# The call cannot run here (an API missing in the partition or region, or a quota the service does not know):
# callers that can do without the answer report it instead of failing.
UNAVAILABLE_CODES = DENIED_CODES | frozenset(
    {"NoSuchResourceException", "InvalidAction", "UnsupportedOperation", "OptInRequired", "ServiceException"}
)


@dataclass(frozen=True)
class Aws:
    """The clients of one command, all in one region, from one credentials lookup."""

    region: str
    session: Any = field(default_factory=boto3.session.Session)

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=self.region, config=CLIENT_CONFIG)


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def error_message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", "")) or error_code(error)


def is_unavailable(error: Exception) -> bool:
    """True when the call cannot run for this caller (denied, or not offered here) rather than failing outright."""
    return isinstance(error, ClientError) and error_code(error) in UNAVAILABLE_CODES


def describe_failure(error: Exception, region: str) -> str:
    """One line naming what failed and what to do about it."""
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return (
            "AWS credentials not found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), "
            "or run `aws configure` / `aws sso login`"
        )
    if isinstance(error, SSOTokenLoadError | UnauthorizedSSOTokenError | TokenRetrievalError):
        return f"AWS SSO session expired or missing ({error}): run `aws sso login` and retry"
    if isinstance(error, EndpointConnectionError):
        endpoint = error.kwargs.get("endpoint_url", "the AWS endpoint")
        return f"cannot reach {endpoint}: check the network and that {region} is a valid region"
    if isinstance(error, NoRegionError):
        return "no AWS region: set region in the environment file or pass --region"
    if not isinstance(error, ClientError):
        return f"AWS call failed in {region}: {error}"
    code, operation = error_code(error), error.operation_name
    if code in EXPIRED_CODES:
        return f"AWS credentials expired ({code} on {operation}): refresh them (e.g. `aws sso login`) and retry"
    if code in INVALID_CREDENTIAL_CODES:
        return f"AWS rejected the credentials ({code} on {operation}): check AWS_PROFILE or the access keys"
    if code in THROTTLING_CODES:
        return (
            f"AWS throttled {operation} in {region} ({code}) after {MAX_RETRIES + 1} attempts: "
            "wait a minute and retry, or stop other tools calling the same API"
        )
    if code in DENIED_CODES:
        return f"access denied to {operation} in {region} ({code}): grant that action to your IAM role or user"
    return f"{operation} failed in {region}: {code}: {error_message(error)}"


@contextlib.contextmanager
def aws_errors(region: str) -> Iterator[None]:
    """Turn any AWS or botocore failure inside the block into a one-line GpufleetError."""
    try:
        yield
    except (ClientError, BotoCoreError) as error:
        raise GpufleetError(describe_failure(error, region)) from None
