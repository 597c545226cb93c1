"""NodeMonitoring on its own: the environment's node log group and retention, the Xid metric filter, the node role's
CloudWatch agent permissions (that log group, that namespace) and the dashboard."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from stacks.constructs.node_monitoring import NodeMonitoring


def add_monitoring(stack: cdk.Stack, *, retention: int = 30, efa: bool = True) -> dict:
    role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    NodeMonitoring(
        stack, "NodeMonitoring", environment_name="probe", node_role=role, log_retention_days=retention, efa=efa
    )
    return Template.from_stack(stack).to_json()["Resources"]


def only(resources: dict, kind: str) -> dict:
    (found,) = [resource for resource in resources.values() if resource["Type"] == kind]
    return found


@pytest.mark.parametrize("days", [7, 30, 365])
def test_the_log_group_is_the_environments_with_its_retention(stack, days):
    log_group = only(add_monitoring(stack, retention=days), "AWS::Logs::LogGroup")
    assert log_group["Properties"] == {"LogGroupName": "/gpufleet/probe/nodes", "RetentionInDays": days}
    assert (log_group["DeletionPolicy"], log_group["UpdateReplacePolicy"]) == ("Delete", "Delete")


def test_the_node_role_may_write_to_its_log_group_and_namespace_only(stack):
    policy = only(add_monitoring(stack), "AWS::IAM::Policy")
    assert policy["Properties"]["Roles"] == [{"Ref": "NodeRoleB5643E21"}]
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": ["NodeMonitoringNodeLogGroup4B2FF2FF", "Arn"]},
        },
        {
            "Action": "cloudwatch:PutMetricData",
            "Condition": {"StringEquals": {"cloudwatch:namespace": "gpufleet/probe"}},
            "Effect": "Allow",
            "Resource": "*",
        },
    ]
    # The wildcard's cdk-nag acknowledgment: tests/stacks/test_compliance.py fails on any finding left over.


def test_each_xid_line_of_the_kernel_counts_one_in_the_namespace(stack):
    metric_filter = only(add_monitoring(stack), "AWS::Logs::MetricFilter")
    assert metric_filter["Properties"] == {
        "FilterPattern": '"NVRM: Xid"',
        "LogGroupName": {"Ref": "NodeMonitoringNodeLogGroup4B2FF2FF"},
        "MetricTransformations": [
            {"MetricName": "gpu_xid_errors", "MetricNamespace": "gpufleet/probe", "MetricValue": "1"}
        ],
    }


def dashboard_widgets(resources: dict) -> list[dict]:
    dashboard = only(resources, "AWS::CloudWatch::Dashboard")["Properties"]
    assert dashboard["DashboardName"] == "gpufleet-probe"
    body = "".join(part if isinstance(part, str) else "REGION" for part in dashboard["DashboardBody"]["Fn::Join"][1])
    return json.loads(body)["widgets"]


def test_the_dashboard_shows_gpu_xid_node_and_efa_graphs(stack):
    widgets = dashboard_widgets(add_monitoring(stack))
    assert [(widget["properties"]["title"], widget["x"], widget["y"]) for widget in widgets] == [
        ("GPU utilisation (%)", 0, 0),
        ("GPU memory used (MiB)", 12, 0),
        ("GPU temperature (C)", 0, 6),
        ("GPU power (W)", 12, 6),
        ("GPU Xid errors", 0, 12),
        ("Nodes by market", 12, 12),
        ("EFA traffic (bytes)", 0, 18),
        ("EFA RDMA (bytes)", 12, 18),
    ]
    lines = {widget["properties"]["title"]: widget["properties"]["metrics"] for widget in widgets}
    assert lines["GPU utilisation (%)"] == [
        [
            {
                "label": "GPU",
                "expression": 'SEARCH(\'Namespace="gpufleet/probe" MetricName="nvidia_smi_utilization_gpu"\', '
                "'Average', 60)",
                "period": 60,
            }
        ]
    ]
    assert lines["GPU Xid errors"] == [["gpufleet/probe", "gpu_xid_errors", {"period": 60, "stat": "Sum"}]]
    assert lines["Nodes by market"] == [
        [
            {
                "label": "nodes",
                "expression": "SEARCH('{gpufleet/probe,Market} MetricName=\"mem_used_percent\"', 'SampleCount', 60)",
                "period": 60,
            }
        ]
    ]
    assert [line[0]["expression"] for line in lines["EFA traffic (bytes)"]] == [
        "SEARCH('Namespace=\"gpufleet/probe\" MetricName=\"efa_rx_bytes\"', 'Sum', 60)",
        "SEARCH('Namespace=\"gpufleet/probe\" MetricName=\"efa_tx_bytes\"', 'Sum', 60)",
    ]


def test_without_efa_the_dashboard_has_no_efa_graphs(stack):
    titles = [widget["properties"]["title"] for widget in dashboard_widgets(add_monitoring(stack, efa=False))]
    assert not [title for title in titles if title.startswith("EFA")]
    assert len(titles) == 6
