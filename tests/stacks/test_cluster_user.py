"""The cluster user in the synthesized cluster stacks: the key secret that only the node role reads, the custom
resource that fills it, the Session Manager document, sshd closed to all but the node security group, and no private
key material in any template, cdk.out file or user data."""

from __future__ import annotations

import re

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.loading import environment_files, load_environments
from gpufleet.user_data import render_user_data

SHIPPED = {env.name: env for env in load_environments(environment_files()) if env.flavour == "fleet"}


def cluster(assembly, name):
    return assembly.template_json(f"gpufleet-{name}-cluster")["Resources"]


def of_type(resources: dict, resource_type: str) -> dict:
    return {logical: resource for logical, resource in resources.items() if resource["Type"] == resource_type}


def only(resources: dict, resource_type: str) -> tuple[str, dict]:
    ((logical, resource),) = of_type(resources, resource_type).items()
    return logical, resource


def node_role(resources: dict) -> str:
    (logical,) = [
        logical
        for logical, role in of_type(resources, "AWS::IAM::Role").items()
        if "ec2.amazonaws.com" in str(role["Properties"]["AssumeRolePolicyDocument"])
    ]
    return logical


def test_the_key_secret_is_made_empty_and_goes_with_the_stack(assembly):
    _, secret = only(cluster(assembly, "dev"), "AWS::SecretsManager::Secret")

    # No SecretString, no GenerateSecretString: the template holds no value; the custom resource writes it.
    assert secret["Properties"] == {
        "Description": "gpufleet dev: the cluster user's private SSH key, for the nodes only",
        "Name": "gpufleet-dev-cluster-user-key",
        "Tags": [
            {"Key": "cost-center", "Value": "research"},
            {"Key": "gpufleet:environment", "Value": "dev"},
            {"Key": "team", "Value": "ml-platform"},
        ],
    }
    assert (secret["DeletionPolicy"], secret["UpdateReplacePolicy"]) == ("Delete", "Delete")


@pytest.mark.parametrize("name", ["dev", "p5-block"])
def test_only_the_environments_node_role_may_read_the_key(assembly, name):
    resources = cluster(assembly, name)
    secret, _ = only(resources, "AWS::SecretsManager::Secret")
    _, policy = only(resources, "AWS::SecretsManager::ResourcePolicy")

    assert policy["Properties"] == {
        "BlockPublicPolicy": True,
        "SecretId": {"Ref": secret},
        "ResourcePolicy": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "OnlyTheNodesReadTheKey",
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Action": "secretsmanager:GetSecretValue",
                    "Resource": "*",
                    "Condition": {
                        "StringNotEquals": {"aws:PrincipalArn": {"Fn::GetAtt": [node_role(resources), "Arn"]}}
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize("name", ["dev", "p5-block"])
def test_the_node_role_reads_the_key_and_no_other_role_does(assembly, name):
    resources = cluster(assembly, name)
    secret, _ = only(resources, "AWS::SecretsManager::Secret")

    readers = [
        (policy["Properties"]["Roles"], statement)
        for policy in of_type(resources, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in str(statement["Action"])
    ]

    # Besides the key: the secrets of the environment's own namespace, gpufleet-NAME/..., which the key's name is not
    # in (`gpufleet run --secret`, tests/stacks/constructs/test_run_secrets.py).
    region, account = SHIPPED[name].region, SHIPPED[name].account
    namespace = f":secretsmanager:{region}:{account}:secret:gpufleet-{name}/*"
    assert readers == [
        (
            [{"Ref": node_role(resources)}],
            {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": {"Ref": secret}},
        ),
        (
            [{"Ref": node_role(resources)}],
            {
                "Action": "secretsmanager:GetSecretValue",
                "Effect": "Allow",
                "Resource": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, namespace]]},
            },
        ),
    ]


def test_the_key_handler_makes_and_deletes_its_own_key_pairs_and_writes_the_secret_only(assembly):
    resources = cluster(assembly, "dev")
    secret, _ = only(resources, "AWS::SecretsManager::Secret")
    logical, key = only(resources, "Custom::GpufleetClusterUserKey")
    (handler_policy,) = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for name, policy in of_type(resources, "AWS::IAM::Policy").items()
        if name.startswith("ClusterUserKeyHandlerRole")
    ]

    assert key["Properties"]["SecretId"] == {"Ref": secret}
    assert key["Properties"]["KeyPairPrefix"] == "gpufleet-dev-cluster-user"
    assert handler_policy[1:] == [
        {
            "Action": ["ec2:CreateKeyPair", "ec2:DeleteKeyPair"],
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":ec2:us-east-1:123456789012:key-pair/gpufleet-dev-cluster-user-*",
                    ],
                ]
            },
        },
        {"Action": "secretsmanager:PutSecretValue", "Effect": "Allow", "Resource": {"Ref": secret}},
    ]
    assert handler_policy[0]["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]


@pytest.mark.parametrize(
    ("name", "node_group_type"), [("dev", "AWS::EC2::SpotFleet"), ("p5-block", "AWS::AutoScaling::AutoScalingGroup")]
)
def test_no_node_launches_before_the_key_is_in_its_secret(assembly, name, node_group_type):
    resources = cluster(assembly, name)
    key, _ = only(resources, "Custom::GpufleetClusterUserKey")
    secret, _ = only(resources, "AWS::SecretsManager::Secret")
    _, group = only(resources, node_group_type)

    assert {key, secret, "ClusterUserNodesReadTheKey9B7D92B9"} <= set(group["DependsOn"])


def test_the_session_document_opens_a_login_shell_as_the_cluster_user(assembly):
    template = assembly.template_json("gpufleet-dev-cluster")
    document, resource = only(template["Resources"], "AWS::SSM::Document")

    assert resource["Properties"] == {
        "Name": "gpufleet-dev-cluster-shell",
        "DocumentType": "Session",
        "UpdateMethod": "NewVersion",
        "Content": {
            "schemaVersion": "1.0",
            "description": "gpufleet dev: a shell as the cluster user gpufleet",
            "sessionType": "Standard_Stream",
            "inputs": {
                "s3EncryptionEnabled": True,
                "cloudWatchEncryptionEnabled": True,
                "runAsEnabled": True,
                "runAsDefaultUser": "gpufleet",
                "shellProfile": {"linux": "cd ~ && exec bash -l"},
            },
        },
        "Tags": [
            {"Key": "cost-center", "Value": "research"},
            {"Key": "gpufleet:environment", "Value": "dev"},
            {"Key": "team", "Value": "ml-platform"},
        ],
    }
    assert template["Outputs"]["ClusterShellDocument"] == {"Value": {"Ref": document}}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_sshd_and_everything_else_on_the_nodes_is_reachable_from_the_node_security_group_only(assembly, name):
    resources = cluster(assembly, name)
    group, security_group = only(resources, "AWS::EC2::SecurityGroup")
    ingress = [resource["Properties"] for resource in of_type(resources, "AWS::EC2::SecurityGroupIngress").values()]

    into_nodes = [rule for rule in ingress if rule["GroupId"] == {"Fn::GetAtt": [group, "GroupId"]}]
    # A shared file system's servers also reach the nodes, on the Lustre ports only
    # (tests/stacks/test_storage_stack.py).
    reaching_ssh = [
        rule for rule in into_nodes if rule["IpProtocol"] == "-1" or rule["FromPort"] <= 22 <= rule["ToPort"]
    ]

    assert "SecurityGroupIngress" not in security_group["Properties"]
    assert [rule.get("SourceSecurityGroupId") for rule in reaching_ssh] == [{"Fn::GetAtt": [group, "GroupId"]}]


# Private key material: a PEM or OpenSSH block with its base64 body (the line break raw, or escaped in JSON), or the
# base64 of an OpenSSH private key's magic "openssh-key-v1" (openssh-portable PROTOCOL.key), which starts every such
# key's body. The handler's source names the header alone, which is not material.
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(\s|\\n)+[A-Za-z0-9+/=]{16}|b3BlbnNzaC1rZXktdjE")


def holds_private_key(text: str) -> bool:
    return PRIVATE_KEY.search(text) is not None


def test_the_check_finds_a_private_key_as_it_would_appear(cluster_key):
    private_key = cluster_key[0]

    assert holds_private_key(private_key)
    assert holds_private_key('{"SecretString": "' + private_key.replace("\n", "\\n") + '"}')
    assert holds_private_key("key body only: " + private_key.splitlines()[1])
    assert not holds_private_key('OPENSSH_KEY_HEADER = "-----BEGIN OPENSSH PRIVATE KEY-----"')


def test_no_template_or_other_cdk_out_file_holds_private_key_material(assembly, auto_scaling_assembly):
    files = [path for out in (assembly, auto_scaling_assembly) for path in out.directory.rglob("*") if path.is_file()]

    assert len(files) > 20
    assert [str(path) for path in files if holds_private_key(path.read_bytes().decode(errors="replace"))] == []


def test_no_user_data_holds_private_key_material():
    catalog = load_catalog()
    user_data = {name: render_user_data(env, catalog[env.instance_type]) for name, env in SHIPPED.items()}

    assert [name for name, text in user_data.items() if holds_private_key(text)] == []
    assert all("GPUFLEET_CLUSTER_KEY_SECRET=" in text for text in user_data.values())
