"""What `cdk destroy --all` deletes and what it keeps (gpufleet/ops/destroy.py), on small hand-made stacks; what
gpufleet plan prints of it for the shipped environments is in tests/gpufleet/ops/test_plan.py."""

from __future__ import annotations

import json

import pytest

from gpufleet.ops.destroy import DestroyedStack, destroy_outcome


def test_an_unprotected_storage_stack_is_deleted_and_leaves_its_retained_bucket():
    """storage.on_destroy delete: no termination protection; a bucket gpufleet created is still kept."""
    storage = DestroyedStack(
        "gpufleet-x-storage",
        {
            "Resources": {
                "FileSystem": {"Type": "AWS::FSx::FileSystem", "DeletionPolicy": "Delete"},
                "Bucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"},
                "Other": {"Type": "AWS::S3::BucketPolicy", "DeletionPolicy": "RetainExceptOnCreate"},
            }
        },
        dependencies=("gpufleet-x-network",),
    )
    stacks = [
        DestroyedStack("gpufleet-x-network", {"Resources": {}}),
        storage,
        DestroyedStack("gpufleet-x-cluster", {}, dependencies=("gpufleet-x-network", "gpufleet-x-storage")),
    ]

    assert [outcome.line() for outcome in destroy_outcome(stacks)] == [
        "  gpufleet-x-cluster: deleted",
        "  gpufleet-x-storage: deleted; deleting it leaves Bucket (AWS::S3::Bucket), Other (AWS::S3::BucketPolicy) "
        "(DeletionPolicy Retain)",
        "  gpufleet-x-network: deleted",
    ]


def test_a_stack_only_its_kept_dependents_hold_stays_and_an_unrelated_one_goes():
    stacks = [
        DestroyedStack("a-base", {}),
        DestroyedStack("a-other", {}),
        DestroyedStack("a-middle", {}, dependencies=("a-base",)),
        DestroyedStack("a-top", {}, termination_protection=True, dependencies=("a-middle",)),
    ]

    assert [(outcome.name, outcome.deleted, outcome.why) for outcome in destroy_outcome(stacks)] == [
        ("a-top", False, "kept: termination protection stops cdk destroy here"),
        ("a-middle", False, "kept: a-top stays and depends on it"),
        ("a-other", True, "deleted"),
        ("a-base", False, "kept: a-middle stays and depends on it"),
    ]


def test_an_eks_cluster_with_control_plane_logs_leaves_its_log_group():
    """EKS makes /aws/eks/NAME/cluster outside the template; aws_eks_v2 leaves the name to CloudFormation."""
    logging = {"ClusterLogging": {"EnabledTypes": [{"Type": "api"}, {"Type": "audit"}]}}
    eks = DestroyedStack(
        "gpufleet-x-eks",
        {
            "Resources": {
                "ClusterEB0386A7": {"Type": "AWS::EKS::Cluster", "Properties": {"Logging": logging}},
                "Named": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "lab", "Logging": logging}},
                "Quiet": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "quiet"}},
            }
        },
    )
    (outcome,) = destroy_outcome([eks])
    assert outcome.line() == (
        "  gpufleet-x-eks: deleted; and EKS's control-plane log group /aws/eks/<cluster ClusterEB0386A7>/cluster "
        "(delete it: aws logs delete-log-group --log-group-name /aws/eks/<cluster ClusterEB0386A7>/cluster); EKS's "
        "control-plane log group /aws/eks/lab/cluster (delete it: aws logs delete-log-group --log-group-name "
        "/aws/eks/lab/cluster)"
    )
    assert outcome.as_dict()["service_leftovers"] == [
        "EKS's control-plane log group /aws/eks/<cluster ClusterEB0386A7>/cluster (delete it: aws logs "
        "delete-log-group --log-group-name /aws/eks/<cluster ClusterEB0386A7>/cluster)",
        "EKS's control-plane log group /aws/eks/lab/cluster (delete it: aws logs delete-log-group --log-group-name "
        "/aws/eks/lab/cluster)",
    ]


@pytest.mark.parametrize(
    ("service", "action", "name", "leaves"),
    [
        ("CloudWatchLogs", "deleteLogGroup", "/aws/eks/gpufleet-x/cluster", False),
        ("CloudWatchLogs", "deleteLogGroup", "/aws/eks/other/cluster", True),
        ("CloudWatchLogs", "putRetentionPolicy", "/aws/eks/gpufleet-x/cluster", True),
        ("S3", "deleteLogGroup", "/aws/eks/gpufleet-x/cluster", True),
    ],
)
def test_an_eks_cluster_whose_log_group_an_aws_custom_resource_deletes_leaves_nothing(service, action, name, leaves):
    """gpufleet's eks stack makes the group with CreateLogGroup and deletes it with DeleteLogGroup, through
    aws-cdk-lib's AwsCustomResource (stacks/constructs/eks_control_plane_logs.py); another call or group does not."""
    logging = {"ClusterLogging": {"EnabledTypes": [{"Type": "api"}]}}
    delete = {"service": service, "action": action, "parameters": {"logGroupName": name}}
    eks = DestroyedStack(
        "gpufleet-x-eks",
        {
            "Resources": {
                "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "gpufleet-x", "Logging": logging}},
                "ControlPlaneLogsCreate": {"Type": "Custom::AWS", "Properties": {"Delete": json.dumps(delete)}},
            }
        },
    )
    (outcome,) = destroy_outcome([eks])
    assert bool(outcome.service_leftovers) is leaves


def test_an_eks_cluster_whose_log_group_is_in_its_template_leaves_nothing():
    """gpufleet's eks stack makes /aws/eks/NAME/cluster itself, so the stack's deletion takes it along."""
    logging = {"ClusterLogging": {"EnabledTypes": [{"Type": "api"}]}}
    eks = DestroyedStack(
        "gpufleet-x-eks",
        {
            "Resources": {
                "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "gpufleet-x", "Logging": logging}},
                "ControlPlaneLogs": {
                    "Type": "AWS::Logs::LogGroup",
                    "Properties": {"LogGroupName": "/aws/eks/gpufleet-x/cluster"},
                    "DeletionPolicy": "Delete",
                },
            }
        },
    )
    (outcome,) = destroy_outcome([eks])
    assert outcome.line() == "  gpufleet-x-eks: deleted"
    assert outcome.service_leftovers == ()
