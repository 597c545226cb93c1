"""What the code on a node of the fleet flavour calls, by the code that calls it: the agents the images run, the setup
steps of the user data (gpufleet.user_data) that call AWS, and the steps `gpufleet run` sends the nodes. The cluster
stack declares these calls on the launch template (stacks/constructs/calls.py) for the reachability check, and
`gpufleet preflight` asks the same of an existing VPC's node subnet; the names are those of
gpufleet/reachability/destinations.py.

Every AWS CLI call of the node scripts and of a run's body names its region (tests/scripts/
test_aws_calls_name_a_region.py), so each calls the service's regional endpoint; tests/gpufleet/test_node_calls.py
reads each script's calls against SCRIPT_CALLS.
"""

from __future__ import annotations

from gpufleet.catalog import InstanceType
from gpufleet.constants import BACKEND_AUTO_SCALING, FLAVOUR_EKS, INTERFACE_ENDPOINT_SERVICES
from gpufleet.environment import Environment
from gpufleet.user_data import setup_scripts, watches_spot

# The SSM agent of every gpufleet image: Run Command (gpufleet run, stop, logs, acceptance) and Session Manager (the
# cluster shell). "The managed node you connect to must also allow HTTPS (port 443) outbound traffic to the following
# endpoints: ec2messages.region.amazonaws.com, ssm.region.amazonaws.com, ssmmessages.region.amazonaws.com"
# (https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-prerequisites.html). Newer agents
# (3.3.40.0 on) are said to do without ec2messages (unconfirmed: a third-party reading of that page); older ones need
# it, so it stays.
SSM_AGENT = "the SSM agent (Run Command: gpufleet run, stop, logs; Session Manager)"
SSM_AGENT_CALLS = ("ssm", "ssmmessages", "ec2messages")
# The CloudWatch agent scripts/node/cloudwatch-agent.sh starts: the gpufleet units' journals to CloudWatch Logs, GPU
# and EFA metrics to CloudWatch (gpufleet/monitoring.py), in the node's region (its mode "ec2" reads the region from
# the instance metadata: amazon-cloudwatch-agent-ctl -m ec2).
CLOUDWATCH_AGENT = "the CloudWatch agent (scripts/node/cloudwatch-agent.sh)"
CLOUDWATCH_AGENT_CALLS = ("logs", "monitoring")
# The node scripts that call AWS, by script (scripts/node/NAME.sh), with the services they call.
SCRIPT_CALLS: dict[str, tuple[str, ...]] = {
    "cluster-user": ("secretsmanager",),
    "node-ready": ("ec2",),
    "operator-scripts": ("s3",),
    "spot-watcher": ("autoscaling",),
}
# What a run's body calls on every node (gpufleet.ops.runs unit_body): the secrets of --secret, the archive of
# --workdir.
RUN_BODY = "gpufleet run's body (gpufleet/ops/runs.py: --secret, --workdir)"
RUN_BODY_CALLS = ("secretsmanager", "s3")


def node_calls(env: Environment, instance: InstanceType) -> dict[str, tuple[str, ...]]:
    """What the nodes of ENV call, by the code that calls it."""
    calls: dict[str, tuple[str, ...]] = {SSM_AGENT: SSM_AGENT_CALLS}
    steps = setup_scripts(env, instance)
    if "cloudwatch-agent" in steps:
        calls[CLOUDWATCH_AGENT] = CLOUDWATCH_AGENT_CALLS
    for step in steps:
        if step in SCRIPT_CALLS:
            calls[f"scripts/node/{step}.sh"] = SCRIPT_CALLS[step]
    # The watcher completes the group's termination lifecycle action, which only an Auto Scaling group has
    # (gpufleet.user_data.auto_scaling_settings).
    if watches_spot(env) and env.fleet.backend == BACKEND_AUTO_SCALING:
        calls["scripts/node/spot-watcher.sh"] = SCRIPT_CALLS["spot-watcher"]
    calls[RUN_BODY] = RUN_BODY_CALLS
    return calls


# The interface endpoint a new VPC gets for the nodes of an Auto Scaling group, by construct id and service name (as
# INTERFACE_ENDPOINT_SERVICES): their spot watcher completes the group's termination lifecycle action
# (scripts/node/spot-watcher.sh), and without a NAT gateway only an endpoint takes it there.
AUTO_SCALING_ENDPOINT_SERVICES = {"AutoScaling": "autoscaling"}


def interface_endpoint_services(env: Environment) -> dict[str, str]:
    """The interface endpoints of ENV's new VPC (stacks/network_stack.py), by construct id: the services every node
    calls, and Auto Scaling's for the nodes of an Auto Scaling group."""
    if env.flavour != FLAVOUR_EKS and env.fleet.backend == BACKEND_AUTO_SCALING:
        return {**INTERFACE_ENDPOINT_SERVICES, **AUTO_SCALING_ENDPOINT_SERVICES}
    return dict(INTERFACE_ENDPOINT_SERVICES)
