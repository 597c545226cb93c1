"""The model answers real boto3 clients: botocore builds and validates each request as it would for AWS, then the
model reads the request's parameters and answers, and botocore checks the answer against the operation's output
shape and parses errors as it parses AWS's.

How (botocore 1.44.5, botocore/client.py `_make_api_call`): the parameters pass the event
`before-parameter-build.<service>.<Operation>` before botocore validates and serializes them; then
`before-call.<service>.<Operation>` is emitted with the serialized request, and "if event_response is not None:
http, parsed_response = event_response" replaces the HTTP request; a status of 300 or more raises the error class
of parsed["Error"]["Code"]. botocore's own Stubber (botocore/stub.py) uses the same two events. Here the first event
keeps the parameters in the request context, the second hands them to the model.
"""

from __future__ import annotations

import copy
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.validate import validate_parameters

from tests.fallback_model.model import ModelError, World

REGION = "us-east-1"
_CONTEXT_KEY = "fallback_model_parameters"


class ModelEndpoint:
    """boto3 clients whose every call the current world answers."""

    def __init__(self) -> None:
        self.world: World | None = None
        self.clients = {
            service: boto3.client(
                service,
                region_name=REGION,
                aws_access_key_id="model",
                aws_secret_access_key="model",
                # One attempt: an error the model answers is the call's outcome (a fault the model injects stands for
                # one that outlasted every retry), and no test sleeps through botocore's back-off.
                config=Config(retries={"total_max_attempts": 1}),
            )
            for service in ("ec2", "autoscaling", "ssm")
        }
        for client in self.clients.values():
            events = client.meta.events
            service_id = client.meta.service_model.service_id.hyphenize()
            events.register_first(f"before-parameter-build.{service_id}.*", self._keep_parameters)
            events.register_first(f"before-call.{service_id}.*", self._answer)

    @staticmethod
    def _keep_parameters(params: dict[str, Any], context: dict[str, Any], **kwargs: Any) -> None:
        context[_CONTEXT_KEY] = copy.deepcopy(params)

    def _answer(self, model: Any, context: dict[str, Any], **kwargs: Any) -> tuple[AWSResponse, dict[str, Any]]:
        assert self.world is not None, "no world to answer"
        try:
            service = model.service_model.signing_name
            parsed = self.world.answer(service, model.name, context[_CONTEXT_KEY])
        except ModelError as error:
            return AWSResponse(None, 400, {}, None), {
                "Error": {"Code": error.code, "Message": error.message},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        if model.output_shape is not None:
            validate_parameters(parsed, model.output_shape)
        return AWSResponse(None, 200, {}, None), {**parsed, "ResponseMetadata": {"HTTPStatusCode": 200}}
