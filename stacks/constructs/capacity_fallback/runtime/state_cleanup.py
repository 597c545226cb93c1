"""The capacity fallback's state goes with its stack: a custom resource whose Delete removes /gpufleet/ENV/fallback.

The parameter is written by the scheduled function (handler.py), never declared by the stack, so no deploy can write
an old value back; this resource makes `cdk destroy` (or removing fleet.fallback) delete it all the same. Create and
Update touch nothing and answer with the parameter name as the physical id, the same for every request about the
same parameter: CloudFormation sends Delete to a custom resource only when the stack or the resource goes or when the
physical id changes ("If the value returned is different, CloudFormation recognizes the update as a replacement and
sends a delete request to the old resource", CloudFormation user guide, "Custom resource response objects",
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html), so a redeploy never resets
the state. The construct orders the Delete after the schedule, the function and its role are gone
(../infrastructure.py), so no run writes the parameter again.

CDK's custom_resources.Provider (../infrastructure.py) runs on_event and answers CloudFormation:
the returned PhysicalResourceId, or FAILED with the error of a delete that raised, so the delete retries in botocore's
standard mode first (CLIENT_CONFIG, gpufleet.aws_faults). The standard library and boto3 (the Lambda Python runtime)
and gpufleet/aws_faults.py, which the asset carries (runtime/gpufleet/).
"""

from __future__ import annotations

import json
from typing import Any

import boto3
from botocore.exceptions import ClientError

from gpufleet.aws_faults import client_config

# Five attempts: a throttled delete waits at most 1 + 2 + 4 + 8 = 15 seconds between them (botocore's
# standard mode, botocore/retries/standard.py ExponentialBackoff), a quarter of the function's one-minute timeout.
CLIENT_CONFIG = client_config(5)


def on_event(event: dict[str, Any], context: Any, ssm: Any = None) -> dict[str, str]:
    parameter = event["ResourceProperties"]["ParameterName"]
    reason = f"{event['RequestType']}: nothing to do"
    if event["RequestType"] == "Delete":
        reason = delete_state(ssm or boto3.client("ssm", config=CLIENT_CONFIG), parameter)
    print(json.dumps({"request": event["RequestType"], "parameter": parameter, "reason": reason}))
    return {"PhysicalResourceId": parameter}


def delete_state(ssm: Any, parameter: str) -> str:
    try:
        ssm.delete_parameter(Name=parameter)
    except ClientError as error:
        if error.response["Error"]["Code"] != "ParameterNotFound":
            raise
        return f"{parameter} does not exist (the fallback never ran, or it is deleted already)"
    return f"deleted {parameter}"
