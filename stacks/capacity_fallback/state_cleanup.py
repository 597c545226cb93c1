"""The capacity fallback's state goes with its stack: a custom resource whose Delete removes /gpufleet/ENV/fallback.

The parameter is written by the scheduled function (handler.py), never declared by the stack, so no deploy can write
an old value back; this resource makes `cdk destroy` (or removing fleet.fallback) delete it all the same. Create and
Update touch nothing and answer with the parameter name as the physical id, the same for every request about the
same parameter: CloudFormation sends Delete to a custom resource only when the stack or the resource goes or when the
physical id changes ("If the value returned is different, CloudFormation recognizes the update as a replacement and
sends a delete request to the old resource", CloudFormation user guide, "Custom resource response objects",
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html), so a redeploy never resets
the state. The construct orders the Delete after the schedule, the function and its role are gone
(stacks/constructs/capacity_fallback.py), so no run writes the parameter again.

The answer goes to the request's presigned ResponseURL as a PUT of the JSON response object (Status, Reason,
PhysicalResourceId, StackId, RequestId, LogicalResourceId: the same page), with an empty Content-Type as the copies of
AWS's cfn-response module in public repositories send it (headers {'content-type': ''}; the module's page,
cfn-lambda-function-code-cfnresponsemodule.html, was not read in full here: unconfirmed); every request is answered,
a failed delete with FAILED and the reason, so a stack never waits out the custom resource's timeout. Standard
library and boto3 only (the Lambda Python runtime).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

RESPONSE_TIMEOUT_SECONDS = 30


def on_event(event: dict[str, Any], context: Any, ssm: Any = None) -> dict[str, str]:
    parameter = event["ResourceProperties"]["ParameterName"]
    status, reason = "SUCCESS", f"{event['RequestType']}: nothing to do"
    if event["RequestType"] == "Delete":
        try:
            reason = delete_state(ssm or boto3.client("ssm"), parameter)
        except (ClientError, BotoCoreError) as error:
            status, reason = "FAILED", f"could not delete {parameter}: {error}"
    response = {
        "Status": status,
        "Reason": reason,
        "PhysicalResourceId": parameter,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
    }
    print(json.dumps({"request": event["RequestType"], "parameter": parameter, "status": status, "reason": reason}))
    answer(event["ResponseURL"], response)
    return response


def delete_state(ssm: Any, parameter: str) -> str:
    try:
        ssm.delete_parameter(Name=parameter)
    except ClientError as error:
        if error.response["Error"]["Code"] != "ParameterNotFound":
            raise
        return f"{parameter} does not exist (the fallback never ran, or it is deleted already)"
    return f"deleted {parameter}"


def answer(url: str, response: dict[str, str]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(response).encode(), method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=RESPONSE_TIMEOUT_SECONDS):
        pass
