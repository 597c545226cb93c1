"""What `cdk destroy --all` does to an environment's stacks, read from the synthesized cloud assembly: which stacks
it deletes, which it stops at and leaves, and which resources a deleted stack leaves in the account.

- The CDK CLI deletes the stacks in the reverse of their dependency order and ends the run at the first stack it
  fails to delete (aws-cdk CLI 2.1148.1, the pinned one: node_modules/aws-cdk/lib/index.js, CdkToolkit.destroy:
  buildDestroyWorkGraph, and a failed stack is thrown on). So a stack stays when it cannot be deleted, and so does
  every stack it depends on.
- A stack with termination protection cannot be deleted: "If a user attempts to delete a stack with termination
  protection enabled, the deletion fails and the stack, including its status, remains unchanged" (CloudFormation user
  guide, using-cfn-protect-stacks.html). The manifest holds it as the stack artifact's terminationProtection.
- A resource with DeletionPolicy Retain (or RetainExceptOnCreate) outlives its stack: CloudFormation "keeps the
  resource without deleting the resource or its contents when its stack is deleted" (CloudFormation user guide,
  aws-attribute-deletionpolicy.html).
- What an AWS service makes for a stack's resource, outside CloudFormation, outlives the stack too. An EKS cluster with
  control-plane logging writes to the log group /aws/eks/NAME/cluster, which EKS creates when the stack did not
  (EKS user guide, control-plane-logs: "The log group name format is /aws/eks/my-cluster/cluster"; terraform-aws-eks
  README, create_cloudwatch_log_group: "If not, AWS will automatically create one if logging is enabled"); that EKS
  does not delete it with the cluster is (unconfirmed: said by terraform-aws-eks users, not in AWS's docs read).
  gpufleet's eks stack makes that group itself, and deletes it with the stack, through aws-cdk-lib's AwsCustomResource
  (stacks/constructs/eks_control_plane_logs.py: a Custom::AWS resource whose Delete call is CloudWatch Logs'
  deleteLogGroup), so only a template with neither that nor an AWS::Logs::LogGroup of the name leaves one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

KEEPING_POLICIES = frozenset({"Retain", "RetainExceptOnCreate"})


@dataclass(frozen=True)
class DestroyedStack:
    """A stack of the environment as the cloud assembly describes it."""

    name: str
    template: dict
    termination_protection: bool = False
    # The stacks it depends on (the manifest's dependencies), by name.
    dependencies: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackOutcome:
    name: str
    deleted: bool
    why: str
    # Resources a deletion of the stack leaves in the account, as "LogicalId (Type)".
    kept_resources: tuple[str, ...]
    # What AWS services made for the stack's resources outside CloudFormation and its deletion leaves, one line each.
    service_leftovers: tuple[str, ...] = ()

    def line(self) -> str:
        kept = f"; deleting it leaves {', '.join(self.kept_resources)} (DeletionPolicy Retain)"
        made = f"; and {'; '.join(self.service_leftovers)}"
        return f"  {self.name}: {self.why}{kept if self.kept_resources else ''}{made if self.service_leftovers else ''}"

    def as_dict(self) -> dict:
        return {
            "stack": self.name,
            "deleted": self.deleted,
            "why": self.why,
            "kept_resources": list(self.kept_resources),
            "service_leftovers": list(self.service_leftovers),
        }


def destroy_outcome(stacks: list[DestroyedStack]) -> list[StackOutcome]:
    """Per stack, in the order cdk destroy reaches them (the reverse of the manifest's, which lists a stack after
    those it depends on, so its dependents come first here): whether `cdk destroy --all` deletes it, and what its
    deletion keeps."""
    staying: set[str] = set()
    outcomes = []
    for stack in reversed(stacks):
        kept_dependents = [other.name for other in stacks if other.name in staying and stack.name in other.dependencies]
        if stack.termination_protection:
            why = "kept: termination protection stops cdk destroy here"
        elif kept_dependents:
            why = f"kept: {', '.join(kept_dependents)} stays and depends on it"
        else:
            why = "deleted"
        if why != "deleted":
            staying.add(stack.name)
        outcomes.append(
            StackOutcome(
                stack.name, why == "deleted", why, kept_resources(stack.template), service_leftovers(stack.template)
            )
        )
    return outcomes


def kept_resources(template: dict) -> tuple[str, ...]:
    return tuple(
        f"{logical_id} ({resource['Type']})"
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("DeletionPolicy") in KEEPING_POLICIES
    )


EKS_CLUSTER_TYPE = "AWS::EKS::Cluster"
LOG_GROUP_TYPE = "AWS::Logs::LogGroup"
# aws-cdk-lib's AwsCustomResource: its Delete property is the SDK call it makes when CloudFormation deletes it, as JSON
# (custom-resources/lib/aws-custom-resource/aws-custom-resource.js).
AWS_CUSTOM_RESOURCE_TYPE = "Custom::AWS"
DELETE_LOG_GROUP = ("CloudWatchLogs", "deleteLogGroup")


def service_leftovers(template: dict) -> tuple[str, ...]:
    """What AWS services made outside the template for its resources, which deleting the stack leaves (module doc)."""
    resources = template.get("Resources", {})
    own_log_groups = {
        resource.get("Properties", {}).get("LogGroupName")
        for resource in resources.values()
        if resource.get("Type") == LOG_GROUP_TYPE
    } | {name for resource in resources.values() if (name := _deleted_log_group(resource))}
    leftovers = []
    for logical_id, resource in resources.items():
        if resource.get("Type") != EKS_CLUSTER_TYPE:
            continue
        properties = resource.get("Properties", {})
        if not properties.get("Logging", {}).get("ClusterLogging", {}).get("EnabledTypes"):
            continue
        # Without a Name CloudFormation names the cluster: the name is known once deployed.
        name = properties.get("Name") if isinstance(properties.get("Name"), str) else f"<cluster {logical_id}>"
        log_group = f"/aws/eks/{name}/cluster"
        if log_group in own_log_groups:
            continue
        leftovers.append(
            f"EKS's control-plane log group {log_group} (delete it: aws logs delete-log-group --log-group-name "
            f"{log_group})"
        )
    return tuple(leftovers)


def _deleted_log_group(resource: dict) -> str | None:
    """The log group an AwsCustomResource deletes when its stack is deleted, or None."""
    if resource.get("Type") != AWS_CUSTOM_RESOURCE_TYPE:
        return None
    delete = resource.get("Properties", {}).get("Delete")
    if not isinstance(delete, str):
        return None
    call = json.loads(delete)
    if (call.get("service"), call.get("action")) != DELETE_LOG_GROUP:
        return None
    name = call.get("parameters", {}).get("logGroupName")
    return name if isinstance(name, str) else None
