"""Custom-resource handler that makes the cluster user's SSH key at deploy time and puts its private half into the
environment's secret, for CDK's custom_resources.Provider (stacks/constructs/cluster_user/infrastructure.py).

Where the key comes from: EC2's CreateKeyPair with KeyType ed25519. "Amazon EC2 stores the public key and displays
the private key for you to save to a file" (CreateKeyPair, botocore's ec2 model): the private half exists only in that
one answer. The handler writes it into the secret (PutSecretValue) and deletes the EC2 key pair straight away (also
when the write fails), so no instance can be launched with it and nothing keeps a copy. The Lambda Python runtime
cannot make the key itself: the standard library has no ed25519, the runtime carries boto3 and botocore but not the
`cryptography` package, and there is no ssh-keygen.

The private key never goes where it would be kept in the open: not into the answer to CloudFormation (a custom
resource's Data is stored with the stack and readable with Fn::GetAtt), not into a log line and not into an error
message (the Provider framework logs the event and the answer it passes on, and CloudFormation shows the error as the
resource's status reason). It travels only in the CreateKeyPair answer and the PutSecretValue request, where the
PutSecretValue documentation allows it ("Do not include sensitive information in request parameters except
SecretBinary, SecretString, or RotationToken because it might be logged", botocore's secretsmanager model).

EC2 answers an ed25519 key in OpenSSH's own format, whose first line is OPENSSH_KEY_HEADER: (unconfirmed) against a
primary source, whose wording is only "An unencrypted PEM encoded RSA or ED25519 private key" (CreateKeyPairResult
KeyMaterial, botocore's ec2 model); moto 5.2.5, which models EC2, answers in that format
(moto/ec2/utils.py random_ed25519_key_pair). So the handler refuses any other first line: a different format fails
the deploy, with a reason, instead of every node's boot.

Create makes a key. Update makes a new key only for another secret (a new secret is empty) and otherwise does nothing,
so a redeploy keeps the key the nodes hold. Delete does nothing: the secret is deleted with the stack.

Runs in AWS Lambda with boto3 (in the Lambda Python runtime) and gpufleet/aws_faults.py, which the asset carries
(runtime/gpufleet/).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from gpufleet.aws_faults import client_config

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

# Five attempts with botocore's standard backoff, inside the handler's one-minute timeout (as for the group capacity).
CLIENT_CONFIG = client_config(5)
OPENSSH_KEY_HEADER = "-----BEGIN OPENSSH PRIVATE KEY-----"


def key_pair_name(prefix: str) -> str:
    """A name no earlier call used ("If a key with the specified name already exists, Amazon EC2 returns an error",
    CreateKeyPair), under the prefix the handler's role may create and delete."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def store_new_key(secret_id: str, prefix: str, ec2: Any, secretsmanager: Any) -> str:
    """Makes an ed25519 key pair, puts its private key into SECRET_ID and deletes the EC2 key pair; returns the key
    pair's name."""
    name = key_pair_name(prefix)
    created = ec2.create_key_pair(KeyName=name, KeyType="ed25519", KeyFormat="pem")
    try:
        material = created["KeyMaterial"]
        if not material.startswith(OPENSSH_KEY_HEADER + "\n"):
            raise RuntimeError(
                f"EC2 answered key pair {name} in a format other than OpenSSH's ({OPENSSH_KEY_HEADER} is not its first "
                "line): the nodes' ssh could not read it, so it was not stored"
            )
        secretsmanager.put_secret_value(SecretId=secret_id, SecretString=material)
    finally:
        delete_key_pair(ec2, name)
    LOGGER.info("stored the private key of %s in %s and deleted the EC2 key pair", name, secret_id)
    return name


def delete_key_pair(ec2: Any, name: str) -> None:
    """Deletes the EC2 key pair; a failure is logged, not raised: EC2 keeps only the public key, and raising would
    hide why the key was not stored, if it was not."""
    try:
        ec2.delete_key_pair(KeyName=name)
    except (BotoCoreError, ClientError) as error:
        LOGGER.warning(
            "EC2 key pair %s was not deleted (%s); it holds the public key only: delete it with "
            "`aws ec2 delete-key-pair --key-name %s`",
            name,
            error,
            name,
        )


def on_event(event: dict, context: Any, ec2: Any = None, secretsmanager: Any = None) -> dict:
    properties = event["ResourceProperties"]
    secret_id = properties["SecretId"]
    request = event["RequestType"]
    unchanged = request == "Update" and event.get("OldResourceProperties", {}).get("SecretId") == secret_id
    if request == "Delete" or unchanged:
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    ec2 = ec2 or boto3.client("ec2", config=CLIENT_CONFIG)
    secretsmanager = secretsmanager or boto3.client("secretsmanager", config=CLIENT_CONFIG)
    # The key pair's name identifies this key in CloudTrail (CreateKeyPair, DeleteKeyPair); it names nothing secret.
    return {"PhysicalResourceId": store_new_key(secret_id, properties["KeyPairPrefix"], ec2, secretsmanager)}
