"""The node role's read of the run secrets on its own (cdk-nag attached, as `cdk synth` runs it):
secretsmanager:GetSecretValue on the environment's namespace only, an ARN the Service Authorization Reference's
Secret resource type matches whatever random suffix Secrets Manager gave the secret."""

from __future__ import annotations

import json
import warnings

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from stacks.constructs.run_secrets import let_nodes_read_run_secrets
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, REGION

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # parliament 1.6.4 reads its data through pkg_resources
    from parliament import iam_definition, is_arn_match
    from parliament.statement import get_arn_format


@pytest.fixture(scope="module")
def resources(tmp_path_factory) -> dict:
    outdir = tmp_path_factory.mktemp("run-secrets")
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    let_nodes_read_run_secrets(stack, role=role, stack_prefix="gpufleet-probe")
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


def the_policy(resources: dict) -> dict:
    (policy,) = [resource for resource in resources.values() if resource["Type"] == "AWS::IAM::Policy"]
    return policy["Properties"]


def test_the_node_role_may_read_the_secrets_of_its_environments_namespace_only(resources):
    policy = the_policy(resources)

    assert policy["Roles"] == [{"Ref": "NodeRoleB5643E21"}]
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Action": "secretsmanager:GetSecretValue",
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":secretsmanager:us-east-1:123456789012:secret:gpufleet-probe/*",
                    ],
                ]
            },
        }
    ]


# The Secret resource type's ARN in parliament's reference, arn:${Partition}:secretsmanager:${Region}:${Account}:secret:
# ${SecretId}, its variables wildcards (parliament's get_arn_format).
(SECRETS_MANAGER,) = [service for service in iam_definition if service["prefix"] == "secretsmanager"]
SECRET_FORM = get_arn_format("Secret", SECRETS_MANAGER["resources"])


@pytest.mark.parametrize(
    ("secret", "readable"),
    [
        ("gpufleet-probe/hf-token-AbCdEf", True),
        ("gpufleet-probe/team/wandb-key-123456", True),
        ("gpufleet-probe-2/hf-token-AbCdEf", False),  # another environment whose name starts the same
        ("gpufleet-probe-cluster-user-key-AbCdEf", False),  # the cluster user's key: its own grant
        ("gpufleet/probe/hf-token-AbCdEf", False),
        ("other/hf-token-AbCdEf", False),
    ],
)
def test_the_grant_matches_a_secrets_arn_in_the_namespace_and_no_other(resources, secret, readable):
    """The resource, made concrete, against full secret ARNs (name, hyphen, six random characters): the reference's
    Secret type matches it, and the namespace's slash keeps out every name that merely starts like it."""
    (statement,) = the_policy(resources)["PolicyDocument"]["Statement"]
    resource = "".join(part if isinstance(part, str) else "aws" for part in statement["Resource"]["Fn::Join"][1])
    arn = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{secret}"

    assert SECRET_FORM == "arn:*:secretsmanager:*:*:secret:*"
    assert is_arn_match("Secret", SECRET_FORM, resource)
    assert is_arn_match("Secret", resource, arn) is readable
