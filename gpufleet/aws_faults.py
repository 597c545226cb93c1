"""How gpufleet's Lambda functions call AWS, and which failed calls pass: one rule for every runtime asset.

A custom resource's handler must not fail on a fault that passes: aws-cdk-lib 2.275's Provider answers FAILED for
any error a handler raises (custom-resources/lib/provider-framework/runtime/cfn-response.js safeHandler, in the jsii
assembly aws_cdk/_jsii/aws-cdk-lib@2.275.0.jsii.tgz), and a failed resource fails the deploy or the deletion. So
every client retries in botocore's standard mode (client_config), and an is_complete handler that still meets a
passing fault after those retries answers "not yet" (passing), so that the Provider's next poll asks again.

Imports botocore and the standard library only: the Lambda assets carry this file (a link in each
stacks/constructs/*/runtime/gpufleet/), and the Lambda Python runtime has botocore.
"""

from __future__ import annotations

from botocore.config import Config
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

# What botocore's standard retry mode itself retries, as botocore 1.44.5 spells it in botocore/retries/standard.py
# (tests/gpufleet/test_aws_faults.py reads the installed one): ThrottledRetryableChecker._THROTTLED_ERROR_CODES,
# TransientRetryableChecker._TRANSIENT_ERROR_CODES and _TRANSIENT_STATUS_CODES (5xx), ThrottlingStatusCodeChecker's
# 429, and TransientRetryableChecker._TRANSIENT_EXCEPTION_CLS (no answer came: the endpoint cannot be reached, or the
# connection failed or timed out).
THROTTLED_ERROR_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)
TRANSIENT_ERROR_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete"})
PASSING_STATUS_CODES = frozenset({429, 500, 502, 503, 504})
NO_ANSWER = (BotocoreConnectionError, HTTPClientError)


def client_config(attempts: int) -> Config:
    """botocore's standard retry mode (exponential backoff with jitter on throttling and transient errors): ATTEMPTS
    calls in all, the first one included. Spelled total_max_attempts: Config's max_attempts counts the retries only,
    and creating a client rewrites it in the Config's own retries dict to total_max_attempts (botocore/args.py
    _compute_retry_max_attempts), so a shared Config would read differently before and after. The timeouts keep a
    stalled connection from taking the function's whole time."""
    return Config(retries={"mode": "standard", "total_max_attempts": attempts}, connect_timeout=5, read_timeout=20)


def passing(error: Exception) -> bool:
    """A fault the next call may not meet: throttling, a timeout, a server error, or no answer at all."""
    if isinstance(error, NO_ANSWER):
        return True
    if not isinstance(error, ClientError):
        return False
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = error.response.get("Error", {}).get("Code")
    return code in THROTTLED_ERROR_CODES | TRANSIENT_ERROR_CODES or status in PASSING_STATUS_CODES
