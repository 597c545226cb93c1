"""The cluster user key's custom-resource handler against real botocore clients answered by operation name
(tests/answering.py: parameters and answers checked against botocore's model). EC2's CreateKeyPair answers with a real
ed25519 key made by the real ssh-keygen (tests/scripts/node/conftest.py cluster_key).

The key must reach the secret and nothing else: not the answer to CloudFormation, not a log line, not an error."""

from __future__ import annotations

import logging

import pytest

from stacks.constructs.cluster_user.runtime import handler
from tests.answering import answering_client, client_error

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpufleet-probe-cluster-user-key-AbCdEf"
PREFIX = "gpufleet-probe-cluster-user"
VERSION_ID = "EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE"  # 32 characters at least (botocore's model)


class Aws:
    """EC2 and Secrets Manager as far as the handler uses them: key pairs EC2 holds, values the secret got."""

    def __init__(self, key_material: str, put_error: dict | None = None) -> None:
        self.key_material = key_material
        self.put_error = put_error
        self.key_pairs: set[str] = set()
        self.secret_values: list[str] = []
        self.ec2, self.ec2_calls = answering_client(
            "ec2",
            {"CreateKeyPair": self.create_key_pair, "DeleteKeyPair": self.delete_key_pair},
            region_name="us-east-1",
        )
        self.secretsmanager, self.secret_calls = answering_client(
            "secretsmanager", {"PutSecretValue": self.put_secret_value}, region_name="us-east-1"
        )

    def create_key_pair(self, params: dict) -> dict:
        self.key_pairs.add(params["KeyName"])
        return {"KeyName": params["KeyName"], "KeyPairId": "key-0123456789abcdef0", "KeyMaterial": self.key_material}

    def delete_key_pair(self, params: dict) -> dict:
        self.key_pairs.discard(params["KeyName"])
        return {}

    def put_secret_value(self, params: dict) -> dict:
        if self.put_error:
            return self.put_error
        self.secret_values.append(params["SecretString"])
        return {"ARN": params["SecretId"], "Name": "gpufleet-probe-cluster-user-key", "VersionId": VERSION_ID}

    def on_event(self, event: dict) -> dict:
        return handler.on_event(event, None, ec2=self.ec2, secretsmanager=self.secretsmanager)


def create_event(secret: str = SECRET_ARN) -> dict:
    return {
        "RequestType": "Create",
        "ResourceProperties": {"ServiceToken": "arn:token", "SecretId": secret, "KeyPairPrefix": PREFIX},
    }


def test_create_stores_the_private_key_in_the_secret_and_deletes_the_ec2_key_pair(cluster_key, caplog):
    caplog.set_level(logging.DEBUG)
    aws = Aws(cluster_key[0])

    answer = aws.on_event(create_event())

    assert aws.secret_values == [cluster_key[0]]
    assert aws.key_pairs == set()
    (created,) = [params for operation, params in aws.ec2_calls if operation == "CreateKeyPair"]
    assert created == {"KeyName": answer["PhysicalResourceId"], "KeyType": "ed25519", "KeyFormat": "pem"}
    assert answer["PhysicalResourceId"].startswith("gpufleet-probe-cluster-user-")
    assert len(answer["PhysicalResourceId"]) == len("gpufleet-probe-cluster-user-") + 12
    # The answer to CloudFormation is the key pair's name only: no Data, which the stack would keep readable.
    assert list(answer) == ["PhysicalResourceId"]
    assert "PRIVATE KEY" not in caplog.text and cluster_key[0].splitlines()[1] not in caplog.text


def test_each_create_names_a_new_key_pair(cluster_key):
    aws = Aws(cluster_key[0])

    names = {aws.on_event(create_event())["PhysicalResourceId"] for _ in range(3)}

    assert len(names) == 3


def test_a_key_in_another_format_is_refused_without_being_stored_or_shown(caplog):
    caplog.set_level(logging.DEBUG)
    aws = Aws("-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0\n-----END RSA PRIVATE KEY-----")

    with pytest.raises(RuntimeError) as raised:
        aws.on_event(create_event())

    assert "in a format other than OpenSSH's" in str(raised.value)
    assert "c2VjcmV0" not in str(raised.value) + caplog.text
    assert aws.secret_values == []
    assert aws.key_pairs == set()


def test_a_failed_write_still_deletes_the_key_pair_and_the_error_holds_no_key(cluster_key, caplog):
    caplog.set_level(logging.DEBUG)
    aws = Aws(cluster_key[0], put_error=client_error("AccessDeniedException", "not allowed"))

    with pytest.raises(Exception) as raised:
        aws.on_event(create_event())

    assert "AccessDeniedException" in str(raised.value)
    assert "PRIVATE KEY" not in str(raised.value) + caplog.text
    assert aws.key_pairs == set()


def test_a_key_pair_that_is_not_deleted_is_logged_with_the_command_to_delete_it(cluster_key, caplog):
    aws = Aws(cluster_key[0])
    aws.delete_key_pair = lambda params: client_error("UnauthorizedOperation", "no")  # type: ignore[method-assign]
    aws.ec2, aws.ec2_calls = answering_client(
        "ec2", {"CreateKeyPair": aws.create_key_pair, "DeleteKeyPair": aws.delete_key_pair}, region_name="us-east-1"
    )

    name = aws.on_event(create_event())["PhysicalResourceId"]

    assert aws.secret_values == [cluster_key[0]]
    assert f"`aws ec2 delete-key-pair --key-name {name}`" in caplog.text


def test_an_update_of_the_same_secret_keeps_the_key(cluster_key):
    aws = Aws(cluster_key[0])
    event = {
        **create_event(),
        "RequestType": "Update",
        "PhysicalResourceId": "gpufleet-probe-cluster-user-0123456789ab",
        "OldResourceProperties": {"ServiceToken": "arn:token", "SecretId": SECRET_ARN, "KeyPairPrefix": PREFIX},
    }

    assert aws.on_event(event) == {"PhysicalResourceId": "gpufleet-probe-cluster-user-0123456789ab"}
    assert aws.ec2_calls == [] and aws.secret_calls == []


def test_an_update_to_another_secret_fills_it_with_a_new_key(cluster_key):
    aws = Aws(cluster_key[0])
    event = {
        **create_event(SECRET_ARN + "2"),
        "RequestType": "Update",
        "PhysicalResourceId": "gpufleet-probe-cluster-user-0123456789ab",
        "OldResourceProperties": {"ServiceToken": "arn:token", "SecretId": SECRET_ARN, "KeyPairPrefix": PREFIX},
    }

    answer = aws.on_event(event)

    assert answer["PhysicalResourceId"] != "gpufleet-probe-cluster-user-0123456789ab"
    assert [params["SecretId"] for operation, params in aws.secret_calls] == [SECRET_ARN + "2"]


def test_delete_does_nothing_the_secret_goes_with_the_stack(cluster_key):
    aws = Aws(cluster_key[0])
    event = {**create_event(), "RequestType": "Delete", "PhysicalResourceId": "gpufleet-probe-cluster-user-0123"}

    assert aws.on_event(event) == {"PhysicalResourceId": "gpufleet-probe-cluster-user-0123"}
    assert aws.ec2_calls == [] and aws.secret_calls == []
