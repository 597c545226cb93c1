"""The secrets a run reads on its nodes (`gpufleet run --secret NAME=SECRET_ID`, gpufleet/ops/runs.py secret_steps):
the node role may read the value of the Secrets Manager secrets of its environment's namespace, the names that start
with the environment's stack prefix and a slash (gpufleet-dev/...), and of no other secret but the cluster user's key
(stacks/constructs/cluster_user/).

The resource: GetSecretValue acts on the Secret resource type, arn:${Partition}:secretsmanager:${Region}:${Account}:
secret:${SecretId} (the Service Authorization Reference as parliament 1.6.4 bundles it), and a secret's ARN ends with
"a hyphen and six random characters" Secrets Manager adds after the name (botocore 1.44.5's secretsmanager model,
CreateSecret Name), so a name prefix needs the trailing wildcard: secret:gpufleet-dev/* matches
secret:gpufleet-dev/hf-token-AbCdEf. The slash ends the environment's name (environment names have none): dev's
namespace holds neither gpufleet-dev-2/... nor the key secret gpufleet-dev-cluster-user-key. The namespace starts with
the stack prefix like every other name of the environment, so the AMI acceptance gate's permissions boundary
(stacks/constructs/ami_acceptance_gate.py: secrets gpufleet-accept-*) admits it for the gate's environments.

What it does not protect: every process on a node may use the node role (the instance's metadata), so every workload
of the environment may read every secret of its namespace; the namespace keeps them from other environments' nodes and
the values out of SSM's command history, not from the environment's own jobs (docs/guides/running-jobs.md).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct


def let_nodes_read_run_secrets(scope: Construct, *, role: iam.IRole, stack_prefix: str) -> iam.Policy:
    """A policy on the node role: secretsmanager:GetSecretValue on the secrets named STACK_PREFIX/... of the stack's
    account and region."""
    stack = cdk.Stack.of(scope)
    secrets = stack.format_arn(
        service="secretsmanager",
        resource="secret",
        resource_name=f"{stack_prefix}/*",
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )
    policy = iam.Policy(
        scope,
        "NodesReadRunSecrets",
        statements=[iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[secrets])],
    )
    policy.attach_to_role(role)
    cdk.Validations.of(policy).acknowledge(
        cdk.Acknowledgment(
            id=f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:{stack.region}:{stack.account}:"
            f"secret:{stack_prefix}/*]",
            reason="gpufleet run --secret reads secrets the user makes under the environment's namespace, named "
            "before the run; Secrets Manager ends every secret's ARN with six random characters",
        )
    )
    return policy
