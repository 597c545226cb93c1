"""scripts/node/cloudwatch-agent.sh on a fake node: the user data's configuration with the node's market from IMDSv2,
handed to amazon-cloudwatch-agent-ctl; the same again at the next boot; a clear failure without the agent, the
configuration or IMDS."""

from __future__ import annotations

import json

import pytest

CTL = "opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
CONFIG = {"metrics": {"metrics_collected": {"mem": {"append_dimensions": {"Market": "@MARKET@"}}}}}
IMDS = {"GPUFLEET_IMDS_URL": "http://imds.test"}


@pytest.fixture
def agent_node(node):
    """A node with the agent installed (a ctl that logs its arguments and the file it is given) and the user data's
    configuration; IMDS says the node is a spot instance."""
    ctl = node.root / CTL
    ctl.parent.mkdir(parents=True)
    ctl.write_text(
        f'#!/bin/sh\necho "$*" >> "{node.root}/ctl.log"\ncat "{node.root}${{6#file:}}" > "{node.root}/ctl.config"\n'
    )
    ctl.chmod(0o755)
    config = node.root / "etc/gpufleet/cloudwatch-agent.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(CONFIG))
    node.set_state(imds={"instance-life-cycle": [[200, "spot"]]})
    return node


def test_the_agent_gets_the_configuration_with_the_nodes_market_and_again_at_the_next_boot(agent_node):
    for _ in range(2):
        done = agent_node.run("cloudwatch-agent.sh", **IMDS)
        assert done.stdout.splitlines()[-1] == (
            "cloudwatch-agent: agent started with /opt/aws/amazon-cloudwatch-agent/etc/gpufleet.json (market spot)"
        )
    assert (agent_node.root / "ctl.log").read_text().splitlines() == [
        "-a fetch-config -m ec2 -c file:/opt/aws/amazon-cloudwatch-agent/etc/gpufleet.json -s"
    ] * 2
    handed = json.loads((agent_node.root / "ctl.config").read_text())
    assert handed["metrics"]["metrics_collected"]["mem"]["append_dimensions"] == {"Market": "spot"}


def test_an_on_demand_node_is_counted_as_one(agent_node):
    agent_node.set_state(imds={"instance-life-cycle": [[200, "on-demand"]]})
    agent_node.run("cloudwatch-agent.sh", **IMDS)
    handed = json.loads((agent_node.root / "ctl.config").read_text())
    assert handed["metrics"]["metrics_collected"]["mem"]["append_dimensions"] == {"Market": "on-demand"}


@pytest.mark.parametrize(
    ("breakage", "error"),
    [
        (
            "no agent",
            "cloudwatch-agent: error: no CloudWatch agent on this image "
            "(/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl): use an image of a gpufleet AMI "
            "profile, which installs it",
        ),
        (
            "no configuration",
            "cloudwatch-agent: error: no agent configuration at /etc/gpufleet/cloudwatch-agent.json (the user data "
            "writes it): run the user data again",
        ),
        (
            "no market",
            "cloudwatch-agent: error: IMDS answered meta-data/instance-life-cycle with HTTP 404",
        ),
        (
            "odd market",
            "cloudwatch-agent: error: meta-data/instance-life-cycle is 'spot/../x', not a market name",
        ),
    ],
)
def test_it_fails_saying_why_before_the_agent_is_touched(agent_node, breakage, error):
    if breakage == "no agent":
        (agent_node.root / CTL).unlink()
    elif breakage == "no configuration":
        (agent_node.root / "etc/gpufleet/cloudwatch-agent.json").unlink()
    elif breakage == "no market":
        agent_node.set_state(imds={})
    else:
        agent_node.set_state(imds={"instance-life-cycle": [[200, "spot/../x"]]})
    done = agent_node.run("cloudwatch-agent.sh", check=False, **IMDS)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [error]
    assert not (agent_node.root / "ctl.log").exists()


def test_a_failing_ctl_fails_the_step(agent_node):
    (agent_node.root / CTL).write_text("#!/bin/sh\necho 'E! invalid configuration' >&2\nexit 1\n")
    done = agent_node.run("cloudwatch-agent.sh", check=False, **IMDS)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "E! invalid configuration",
        "cloudwatch-agent: error: amazon-cloudwatch-agent-ctl could not start the agent with "
        "/opt/aws/amazon-cloudwatch-agent/etc/gpufleet.json (its output is above)",
    ]
