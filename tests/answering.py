"""Real botocore clients whose calls are answered by operation name, in whatever order and as often as they come: the
code's order of independent reads is not part of what a test checks (botocore's Stubber answers in the order queued).

How (botocore's own Stubber, botocore/stub.py, uses the same two events): `before-parameter-build.<service>.<Operation>`
carries the call's parameters before botocore builds the request, `before-call.<service>.<Operation>` may answer
instead of the HTTP request, and a status of 300 or more makes botocore raise the ClientError of the answer's
Error.Code. Parameters and answers are checked against botocore's service model, as Stubber checks them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.validate import validate_parameters

Answer = Callable[[dict[str, Any]], dict[str, Any]]


def client_error(code: str, message: str, status: int = 400) -> dict[str, Any]:
    """What an answer returns for the call to fail with a ClientError of this code and HTTP status."""
    return {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


def answering_client(service: str, answers: dict[str, Answer], **client_arguments: Any) -> tuple[Any, list]:
    """A client of SERVICE (boto3.client's arguments) whose calls ANSWERS answers: each gets the call's parameters
    and returns the response, or client_error(...). Returns the client and the list of calls it makes,
    (operation, parameters), for the test to read; a call without an answer fails the test."""
    made = boto3.client(service, **client_arguments)
    calls: list[tuple[str, dict]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        validate_parameters(params, model.input_shape)
        calls.append((model.name, dict(params)))

    def respond(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        operation, params = calls[-1]
        if operation not in answers:
            raise AssertionError(f"unexpected {service} call {operation}({params})")
        response = answers[operation](params)
        if "Error" in response:
            return AWSResponse(None, response["ResponseMetadata"]["HTTPStatusCode"], {}, None), response
        if model.output_shape is not None:  # an operation without output (SetDesiredCapacity) answers {}
            validate_parameters(response, model.output_shape)
        return AWSResponse(None, 200, {}, None), {**response, "ResponseMetadata": {"HTTPStatusCode": 200}}

    made.meta.events.register_first("before-parameter-build.*.*", record)
    made.meta.events.register_first("before-call.*.*", respond)
    return made, calls
