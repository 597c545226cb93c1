"""The cluster user's SSH trust, as far as AWS holds it: a secret with the user's private key, readable by the
environment's node role only; the custom resource that makes the key at deploy time and puts it there (runtime/
handler.py); and the Session Manager document that opens a shell as the user. scripts/node/cluster-user.sh does the
rest on every node at boot: the account, the key, authorized_keys and the SSH client configuration.

Why Secrets Manager: a secret has a resource policy, which can keep every principal but the node role from reading
it. AWS::EC2::KeyPair keeps a new private key in an SSM parameter, /ec2/keypair/{key_pair_id} (CloudFormation template
reference, AWS::EC2::KeyPair), which every node role of the account could read: AmazonSSMManagedInstanceCore, which
every gpufleet node role has, allows ssm:GetParameter and ssm:GetParameters (AWS managed policy reference,
AmazonSSMManagedInstanceCore, version v2), and a standard parameter has no resource policy. The custom resource with
the key in Secrets Manager is also what the cdk-ec2-key-pair construct library does (udondan/cdk-ec2-key-pair).

The secret is encrypted with Secrets Manager's AWS managed key (aws/secretsmanager). A customer managed key would add a
key policy to the resource policy below, which already refuses GetSecretValue, the only way to read the value
(BatchGetSecretValue also needs "secretsmanager:GetSecretValue for each secret", botocore's secretsmanager model), to
every principal but the node role; and it would cost a key per environment. The secret goes with the stack: the key
is worth nothing without the cluster, and a redeploy makes a new one. CloudFormation deletes a secret without a
recovery window ("the default deletionpolicy for an AWS::SecretsManager::Secret resource is
force-delete-without-recovery", cloudformation-coverage-roadmap #1999, citing the user guide's DeletionPolicy page,
which was not read here: unconfirmed), so a redeploy after `cdk destroy` can take the same name again. No rotation: the
key never leaves the account's nodes, and a new key would have to reach every node of a running job at once.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from gpufleet.constants import CLUSTER_USER_KEY_RESOURCE_TYPE
from stacks.constructs.lambda_functions import lambda_base, provider, runtime_code

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
HANDLER_TIMEOUT = cdk.Duration.minutes(1)  # three EC2 and Secrets Manager calls
# The shell of a session as the cluster user: a login shell in its home, so that /etc/profile.d (the EFA environment,
# efa-env.sh) applies. Session Manager runs shellProfile.linux "when a session is started" (Session document schema,
# Systems Manager user guide, session-manager-schema.md).
SESSION_SHELL = "cd ~ && exec bash -l"


class ClusterUser(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        user_name: str,
        secret_name: str,
        key_pair_prefix: str,
        document_name: str,
        node_role: iam.IRole,
        tags: dict[str, str],
        log_retention: logs.RetentionDays,
    ) -> None:
        """secret_name: where the nodes look for the key (gpufleet.environment.Environment
        .cluster_user_key_secret_name); key_pair_prefix: the names of the short-lived EC2 key pairs the handler makes
        start with it; document_name: the Session Manager document's."""
        super().__init__(scope, construct_id)
        cfn_tags = [cdk.CfnTag(key=key, value=value) for key, value in sorted(tags.items())]
        # Neither SecretString nor GenerateSecretString: "If you omit both GenerateSecretString and SecretString, you
        # create an empty secret" (AWS::SecretsManager::Secret schema, as cfn-lint 1.58 bundles it). The handler
        # gives it its one value.
        self.secret = secretsmanager.CfnSecret(
            self,
            "KeySecret",
            name=secret_name,
            description=f"gpufleet {environment_name}: the cluster user's private SSH key, for the nodes only",
            tags=cfn_tags,
        )
        self.secret.apply_removal_policy(cdk.RemovalPolicy.DESTROY)
        cdk.Validations.of(self.secret).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-SMG4",
                reason="the cluster user's SSH key is made once per deploy of the environment and used only between "
                "its nodes; a rotated key would have to reach every node of a running job at once",
            )
        )
        # aws:PrincipalArn of a role session is the role's ARN (IAM user guide, condition keys,
        # aws:PrincipalArn); the node role's sessions are the nodes.
        secretsmanager.CfnResourcePolicy(
            self,
            "KeySecretPolicy",
            secret_id=self.secret.ref,
            block_public_policy=True,
            resource_policy=iam.PolicyDocument(
                statements=[
                    iam.PolicyStatement(
                        sid="OnlyTheNodesReadTheKey",
                        effect=iam.Effect.DENY,
                        principals=[iam.AnyPrincipal()],
                        actions=["secretsmanager:GetSecretValue"],
                        resources=["*"],
                        conditions={"StringNotEquals": {"aws:PrincipalArn": node_role.role_arn}},
                    )
                ]
            ),
        )
        # GetSecretValue acts on the Secret resource type, which a Ref names (Service Authorization Reference as
        # parliament 1.6.4 bundles it; a Ref to AWS::SecretsManager::Secret returns its ARN).
        # A policy of its own on the node role, so the role's other grants stay apart from this one.
        iam.Policy(
            self,
            "NodesReadTheKey",
            roles=[node_role],
            statements=[iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[self.secret.ref])],
        )
        self._key(environment_name, key_pair_prefix, log_retention)
        self.document = ssm.CfnDocument(
            self,
            "ShellDocument",
            name=document_name,
            document_type="Session",
            # A new version under the same name: Name is create-only (the AWS::SSM::Document schema cfn-lint bundles),
            # so "Replace", the default, could not replace a named document. That the new version becomes the
            # default one that sessions use is (unconfirmed).
            update_method="NewVersion",
            content={
                "schemaVersion": "1.0",
                "description": f"gpufleet {environment_name}: a shell as the cluster user {user_name}",
                "sessionType": "Standard_Stream",
                # runAsEnabled and runAsDefaultUser: the OS user the session runs as (Session document schema,
                # Systems Manager user guide, session-manager-schema; the user must exist on the node, which
                # cluster-user.sh sees to). The schema marks s3EncryptionEnabled required ("Required: Yes"), and
                # cloudWatchEncryptionEnabled with it; no session log is written anywhere.
                "inputs": {
                    "s3EncryptionEnabled": True,
                    "cloudWatchEncryptionEnabled": True,
                    "runAsEnabled": True,
                    "runAsDefaultUser": user_name,
                    "shellProfile": {"linux": SESSION_SHELL},
                },
            },
            tags=cfn_tags,
        )

    def _key(self, environment_name: str, key_pair_prefix: str, log_retention: logs.RetentionDays) -> None:
        base = lambda_base(
            self,
            log_group_id="KeyHandlerLogs",
            role_id="KeyHandlerRole",
            role_description=f"gpufleet {environment_name}: make the cluster user's SSH key and store it",
            code=runtime_code(RUNTIME_DIR),
            log_retention=log_retention,
        )
        stack = cdk.Stack.of(self)
        # CreateKeyPair and DeleteKeyPair act on the key-pair resource type, named by the key pair's name:
        # arn:${Partition}:ec2:${Region}:${Account}:key-pair/${KeyPairName} (Service Authorization Reference as
        # parliament 1.6.4 bundles it). PutSecretValue: the Secret resource type.
        key_pairs = stack.format_arn(service="ec2", resource="key-pair", resource_name=f"{key_pair_prefix}-*")
        base.role.add_to_policy(
            iam.PolicyStatement(actions=["ec2:CreateKeyPair", "ec2:DeleteKeyPair"], resources=[key_pairs])
        )
        base.role.add_to_policy(
            iam.PolicyStatement(actions=["secretsmanager:PutSecretValue"], resources=[self.secret.ref])
        )
        cdk.Validations.of(base.role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{stack.region}:{stack.account}:key-pair/"
                f"{key_pair_prefix}-*]",
                reason="each deploy's key pair gets a new name (EC2 refuses a name twice) under the environment's "
                "prefix; the handler deletes it as soon as its private key is in the secret",
            )
        )
        on_event = base.function(
            "KeyHandler",
            handler="handler.on_event",
            timeout=HANDLER_TIMEOUT,
            description="Makes the gpufleet cluster user's SSH key and puts its private half into the secret",
        )
        key_provider = provider(
            self, "KeyProvider", on_event=on_event, log_retention=log_retention, purpose="the nodes' cluster user key"
        )
        self.key = cdk.CustomResource(
            self,
            "Key",
            service_token=key_provider.service_token,
            resource_type=CLUSTER_USER_KEY_RESOURCE_TYPE,
            properties={"SecretId": self.secret.ref, "KeyPairPrefix": key_pair_prefix},
        )
