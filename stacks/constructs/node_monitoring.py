"""What the nodes' CloudWatch agent writes to (gpufleet/monitoring.py names it): the environment's log group, with the
environment's retention, a metric of the kernel's GPU Xid lines in it, the node role's permission to write there and
to its metric namespace only, and the environment's dashboard."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpufleet.monitoring import (
    MARKET_DIMENSION,
    NODE_COUNT_MEASUREMENT,
    XID_LOG_TEXT,
    XID_METRIC,
    metric_namespace,
    node_log_group_name,
)
from gpufleet.rules import LOG_RETENTION_DAYS

PERIOD = cdk.Duration.minutes(1)
WIDGET_WIDTH = 12
WIDGET_HEIGHT = 6


class NodeMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        node_role: iam.IRole,
        log_retention_days: int,
        efa: bool,
    ) -> None:
        """efa: the nodes have EFA devices, whose traffic the dashboard shows."""
        super().__init__(scope, construct_id)
        namespace = metric_namespace(environment_name)
        # Deleted with the stack, like the Lambda functions' log groups: a retained group of the same name would make
        # the next deploy of the environment fail.
        self.log_group = logs.LogGroup(
            self,
            "NodeLogGroup",
            log_group_name=node_log_group_name(environment_name),
            retention=logs.RetentionDays[LOG_RETENTION_DAYS[log_retention_days]],
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        logs.MetricFilter(
            self,
            "XidMetricFilter",
            log_group=self.log_group,
            filter_pattern=logs.FilterPattern.literal(f'"{XID_LOG_TEXT}"'),
            metric_namespace=namespace,
            metric_name=XID_METRIC,
            metric_value="1",
        )
        self._grant_agent(node_role, namespace)
        self.dashboard = self._dashboard(environment_name, namespace, efa)

    def _grant_agent(self, node_role: iam.IRole, namespace: str) -> None:
        """What the agent calls with a log group that exists and no retention in its configuration (pusher/target.go
        of aws/amazon-cloudwatch-agent: CreateLogStream, then PutLogEvents; CreateLogGroup and PutRetentionPolicy
        only for a missing group or a configured retention), and PutMetricData, which takes no resource (Service
        Authorization Reference, Amazon CloudWatch: resource "*", condition key cloudwatch:namespace)."""
        policy = iam.Policy(
            self,
            "AgentPolicy",
            statements=[
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[self.log_group.log_group_arn],
                ),
                iam.PolicyStatement(
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": namespace}},
                ),
            ],
        )
        policy.attach_to_role(node_role)
        cdk.Validations.of(policy).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="cloudwatch:PutMetricData takes no resource; the statement is limited to the environment's "
                "metric namespace by the cloudwatch:namespace condition",
            )
        )

    def _dashboard(self, environment_name: str, namespace: str, efa: bool) -> cloudwatch.Dashboard:
        """One graph per quantity, each line a search over the namespace: the agent's GPU metrics carry the GPU's
        index, name, uuid and pstate as dimensions, so no dimension list is fixed here."""

        def search(metric_name: str, statistic: str, label: str) -> cloudwatch.MathExpression:
            return cloudwatch.MathExpression(
                expression=f"SEARCH('Namespace=\"{namespace}\" MetricName=\"{metric_name}\"', '{statistic}', 60)",
                label=label,
                period=PERIOD,
            )

        def graph(title: str, *metrics: cloudwatch.IMetric) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(title=title, left=list(metrics), width=WIDGET_WIDTH, height=WIDGET_HEIGHT)

        widgets = [
            graph("GPU utilisation (%)", search("nvidia_smi_utilization_gpu", "Average", "GPU")),
            graph("GPU memory used (MiB)", search("nvidia_smi_memory_used", "Average", "GPU")),
            graph("GPU temperature (C)", search("nvidia_smi_temperature_gpu", "Maximum", "GPU")),
            graph("GPU power (W)", search("nvidia_smi_power_draw", "Average", "GPU")),
            graph(
                "GPU Xid errors",
                cloudwatch.Metric(namespace=namespace, metric_name=XID_METRIC, statistic="Sum", period=PERIOD),
            ),
            graph(
                "Nodes by market",
                cloudwatch.MathExpression(
                    # Exactly the Market dimension: the series the agent aggregates over the node's own dimensions.
                    expression=f"SEARCH('{{{namespace},{MARKET_DIMENSION}}} MetricName=\"{NODE_COUNT_MEASUREMENT}\"', "
                    "'SampleCount', 60)",
                    label="nodes",
                    period=PERIOD,
                ),
            ),
        ]
        if efa:
            widgets += [
                graph(
                    "EFA traffic (bytes)",
                    search("efa_rx_bytes", "Sum", "received"),
                    search("efa_tx_bytes", "Sum", "sent"),
                ),
                graph(
                    "EFA RDMA (bytes)",
                    search("efa_rdma_read_bytes", "Sum", "read"),
                    search("efa_rdma_write_bytes", "Sum", "written"),
                ),
            ]
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"gpufleet-{environment_name}")
        for row in range(0, len(widgets), 2):
            dashboard.add_widgets(*widgets[row : row + 2])
        return dashboard
