"""SSM Run Command (SendCommand, GetCommandInvocation) as botocore's ssm model describes it, answering a real botocore
client in place of the HTTP exchange (the `before-send` event, inside botocore's retry loop), so that botocore's own
parameter validation, retries of throttling and server errors, and error parsing run as they do against AWS.

Each node is what SSM would know of it: its EC2 state (InstanceStateName) and whether its SSM Agent runs and is
registered. SendCommand refuses a node with InvalidInstanceId for the causes its documentation lists: the agent not
running or not registered, or an invalid state ("Valid states are: Running, Pending, Stopped, and Stopping. Invalid
states are: Shutting-down and Terminated"). Whether one such node among many refuses the whole call or fails its own
invocation alone is documented nowhere (gpufleet/ssm_batches.py): WHOLE_CALL and EACH_NODE are the two answers, and
the tests run under both. Under both a call none of whose nodes SSM can reach is refused, as users report for calls
naming one instance. A command taken for a node runs there when the node is running (Success, or Failed where the
node's command fails), waits while it is pending, stopping or stopped (Delayed), and an invocation SSM cannot deliver
ends Failed with StatusDetails Undeliverable (the pairing with Failed is (unconfirmed); callers read only whether
Status is final).

Whole-call answers: the SendCommand requests THROTTLED counts (1 the first, retries included) answered
ThrottlingException (one of botocore's throttling codes, retried by its standard mode), or every call from the
REFUSED_FROM-th request on answered REFUSAL, an error code. The documented SendCommand errors are the ssm model's error
shapes; their HTTP status is not in the model, so 400, and 500 for InternalServerError (a server error, which botocore
retries) (unconfirmed).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
from botocore.awsrequest import AWSResponse
from botocore.validate import validate_parameters

REGION = "us-east-1"
WHOLE_CALL = "one node refuses the call"
EACH_NODE = "one node fails alone"
UNKNOWN = (WHOLE_CALL, EACH_NODE)
SSM_MODEL = botocore.session.get_session().get_service_model("ssm")
SEND_COMMAND_ERRORS = tuple(shape.name for shape in SSM_MODEL.operation_model("SendCommand").error_shapes)
VALID_STATES = ("running", "pending", "stopped", "stopping")  # InvalidInstanceId's documentation


@dataclass
class Node:
    state: str = "running"
    registered: bool = True  # its SSM Agent runs and is registered with the SSM endpoint
    fails: bool = False  # its command exits non-zero

    @property
    def reachable(self) -> bool:
        return self.registered and self.state in VALID_STATES


class _Body:
    """The raw HTTP body botocore reads an answer from."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any):
        yield self.body


class RunCommand:
    def __init__(
        self,
        nodes: dict[str, Node],
        unknown: str = WHOLE_CALL,
        throttled: Collection[int] = (),
        refusal: str = "",
        refused_from: int = 1,
    ) -> None:
        self.nodes, self.unknown, self.throttled = nodes, unknown, set(throttled)
        self.refusal, self.refused_from = refusal, refused_from
        self.requests: list[list[str]] = []  # each SendCommand request's InstanceIds, retries included
        self.commands: dict[str, dict[str, Any]] = {}  # command id -> its parameters, as taken
        self._ids = itertools.count(1)

    def client(self, config: Any = None) -> Any:
        client = boto3.client(
            "ssm",
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=config,
        )
        client.meta.events.register("before-send.ssm", self._answer)
        return client

    def received(self, node: str) -> list[str]:
        """The ids of the commands SSM took for NODE."""
        return [command_id for command_id, params in self.commands.items() if node in params["InstanceIds"]]

    def _answer(self, request: Any, **_: Any) -> AWSResponse:
        target = request.headers["X-Amz-Target"]
        operation = (target.decode() if isinstance(target, bytes) else target).split(".")[-1]
        params = json.loads(request.body)
        answer = getattr(self, operation)(params)
        status = answer.pop("status", 200)
        if status == 200:
            validate_parameters(answer, SSM_MODEL.operation_model(operation).output_shape)
        return AWSResponse(request.url, status, {}, _Body(json.dumps(answer).encode()))

    @staticmethod
    def _error(code: str, message: str, status: int = 400) -> dict[str, Any]:
        return {"__type": code, "message": message, "status": status}

    def SendCommand(self, params: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(list(params["InstanceIds"]))
        if len(self.requests) in self.throttled:
            return self._error("ThrottlingException", "Rate exceeded")
        if self.refusal and len(self.requests) >= self.refused_from:
            return self._error(self.refusal, self.refusal, 500 if self.refusal == "InternalServerError" else 400)
        unreachable = [node for node in params["InstanceIds"] if not self.nodes[node].reachable]
        if unreachable and (self.unknown == WHOLE_CALL or len(unreachable) == len(params["InstanceIds"])):
            return self._error(
                "InvalidInstanceId", f"Instances [[{', '.join(unreachable)}]] not in a valid state for account 1"
            )
        command_id = f"{next(self._ids):08x}-0000-4000-8000-000000000000"
        self.commands[command_id] = params
        return {"Command": {"CommandId": command_id, "InstanceIds": params["InstanceIds"], "Status": "Pending"}}

    def GetCommandInvocation(self, params: dict[str, Any]) -> dict[str, Any]:
        command = self.commands.get(params["CommandId"])
        if command is None or params["InstanceId"] not in command["InstanceIds"]:
            return self._error("InvocationDoesNotExist", "no such invocation")
        node = self.nodes[params["InstanceId"]]
        if not node.reachable:
            status, details = "Failed", "Undeliverable"
        elif node.state != "running":
            status = details = "Delayed"
        else:
            status = details = "Failed" if node.fails else "Success"
        return {
            "CommandId": params["CommandId"],
            "InstanceId": params["InstanceId"],
            "Status": status,
            "StatusDetails": details,
        }
