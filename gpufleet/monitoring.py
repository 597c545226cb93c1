"""What the nodes send to CloudWatch, named once: the environment's log group and metric namespace, and the CloudWatch
agent configuration the user data writes to the node (scripts/node/cloudwatch-agent.sh starts the agent with it).

Sources (aws/amazon-cloudwatch-agent at ab55b8d, 2026-08-07; the pinned agent is 1.300071.0, ami/profiles):
- translator/config/schema.json: logs.logs_collected.journald.collect_list entries (log_group_name, log_stream_name,
  units, matches, filters) and metrics.metrics_collected.efa; journald came in 1.300070.0, EFA metrics in 1.300068.0
  (RELEASE_NOTES; the AMI gate's CWAGENT-FEATURES rule checks the pinned agent has both).
- translator/translate/metrics/metrics_collect/gpu/nvidiaSmi.go: the "nvidia_gpu" section, collected by the nvidia_smi
  plugin, whose fields (plugins/inputs/nvidia_smi/schema_v12/parser.go) reach CloudWatch as nvidia_smi_<field>
  (translator/tocwconfig/sampleConfig/drop_origin_linux.yaml), with the GPU's index, name, uuid and pstate among the
  dimensions.
- translator/translate/otel/receiver/awsefa/testdata/config.yaml: the EFA measurements (efa_rx_bytes, ...).
- basicMetricDefinition in the schema: a telegraf plugin's section may append dimensions of its own (the metrics
  section's append_dimensions takes only the ${aws:...} keys).
- internal/util/user/userutil.go: without agent.run_as_user the agent runs as root, which may read the whole journal.
Not confirmed by a run: that the EFA receiver's metrics (an OpenTelemetry pipeline) take metrics.namespace like the
telegraf plugins' (unconfirmed), that a journald include filter matches the MESSAGE text (unconfirmed), and that the
SampleCount of the Market series is one a minute per node (unconfirmed: the agent may send statistic sets).
"""

from __future__ import annotations

from gpufleet.catalog import InstanceType
from gpufleet.environment import Environment

# IMDS instance-life-cycle of the node ("spot", "on-demand", ...), put in place of this by cloudwatch-agent.sh.
MARKET_PLACEHOLDER = "@MARKET@"
METRICS_INTERVAL_SECONDS = 60
GPU_MEASUREMENTS = (
    "utilization_gpu",
    "utilization_memory",
    "memory_used",
    "memory_total",
    "temperature_gpu",
    "power_draw",
)
EFA_MEASUREMENTS = ("efa_rx_bytes", "efa_tx_bytes", "efa_rdma_read_bytes", "efa_rdma_write_bytes")
# The node count by market: every node reports this once a minute with its market as a dimension, so the SampleCount
# of the series aggregated on Market counts the nodes of each market reporting in that minute.
NODE_COUNT_MEASUREMENT = "mem_used_percent"
MARKET_DIMENSION = "Market"
# The kernel's report of a GPU error: "NVRM: Xid (PCI:0000:10:1c): 79, pid=..." (scripts/ops/node-health-check.sh).
XID_LOG_TEXT = "NVRM: Xid"
XID_METRIC = "gpu_xid_errors"


def node_log_group_name(environment_name: str) -> str:
    return f"/gpufleet/{environment_name}/nodes"


def metric_namespace(environment_name: str) -> str:
    """One namespace per environment: the EFA metrics take no dimension of the configuration's, so the namespace is
    what tells the environments apart (and what the node role's PutMetricData is limited to)."""
    return f"gpufleet/{environment_name}"


def agent_configuration(env: Environment, instance: InstanceType, units: list[str]) -> dict:
    """The agent configuration of the nodes of ``env``: the journals of ``units`` and the kernel's Xid lines to the
    environment's log group, one stream each per instance; GPU metrics, EFA metrics where the node has EFA, and the
    node-count series."""
    log_group = node_log_group_name(env.name)
    metrics: dict = {
        "nvidia_gpu": {"measurement": list(GPU_MEASUREMENTS)},
        "mem": {
            "measurement": [NODE_COUNT_MEASUREMENT],
            "append_dimensions": {MARKET_DIMENSION: MARKET_PLACEHOLDER},
        },
    }
    if env.efa and instance.efa_supported:
        metrics["efa"] = {"measurement": list(EFA_MEASUREMENTS)}
    return {
        "agent": {"metrics_collection_interval": METRICS_INTERVAL_SECONDS},
        "logs": {
            "logs_collected": {
                "journald": {
                    "collect_list": [
                        {"log_group_name": log_group, "log_stream_name": "{instance_id}/gpufleet", "units": units},
                        {
                            "log_group_name": log_group,
                            "log_stream_name": "{instance_id}/kernel-xid",
                            "matches": [{"_TRANSPORT": "kernel"}],
                            "filters": [{"type": "include", "expression": XID_LOG_TEXT}],
                        },
                    ]
                }
            }
        },
        "metrics": {
            "namespace": metric_namespace(env.name),
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [[MARKET_DIMENSION]],
            "metrics_collected": metrics,
        },
    }
