"""What a fleet node calls: the table holds every AWS call of the node scripts and of a run's body, by the endpoint
each goes to, and each environment's nodes declare the calls of the steps they run."""

from __future__ import annotations

from pathlib import Path

import botocore.session
import pytest

from gpufleet.catalog import load_catalog
from gpufleet.loading import environment_files, load_environments
from gpufleet.node_calls import (
    CLOUDWATCH_AGENT,
    RUN_BODY,
    RUN_BODY_CALLS,
    SCRIPT_CALLS,
    SSM_AGENT,
    interface_endpoint_services,
    node_calls,
)
from gpufleet.ops.runs import RunSecret, WorkdirArchive, plan_run, unit_body
from gpufleet.reachability.destinations import destination_problem
from tests.gpufleet.ops.test_runs import node
from tests.scripts.test_aws_calls_name_a_region import aws_calls, logical_lines

SESSION = botocore.session.get_session()
ENVIRONMENTS = {env.name: env for env in load_environments(environment_files())}


def endpoints_called(text: str) -> set[str]:
    """The endpoint service names of TEXT's AWS CLI calls: an AWS CLI command is a botocore service, whose model names
    the endpoint it calls (metadata endpointPrefix: "cloudwatch" calls "monitoring")."""
    return {
        SESSION.get_service_model(call["service"]).metadata["endpointPrefix"]
        for _, line in logical_lines(text)
        for call in aws_calls(line)
    }


def test_the_table_holds_every_node_script_that_calls_aws_with_what_it_calls():
    called = {
        path.stem: endpoints_called(path.read_text())
        for path in sorted(Path("scripts/node").glob("*.sh"))
        if endpoints_called(path.read_text())
    }
    assert called == {script: set(services) for script, services in SCRIPT_CALLS.items()}


def test_the_operator_scripts_call_no_aws_service():
    """They run on the nodes too (gpufleet.user_data OPS_SCRIPTS), with nothing declared for them."""
    assert {path.name: endpoints_called(path.read_text()) for path in Path("scripts/ops").glob("*.sh")} == {
        path.name: set() for path in Path("scripts/ops").glob("*.sh")
    }


def test_a_runs_body_calls_what_the_table_says():
    plan = plan_run(
        "20261126-210500-3fa2",
        "dev",
        [node("i-0000000000000000a", "10.40.0.4")],
        8,
        ["true"],
        workdir="/var/tmp/gpufleet-run-x",
        workdir_archive=WorkdirArchive("s3://b/k", "eu-west-1"),
        secrets=(RunSecret("HF_TOKEN", "gpufleet-dev/hf-token", "eu-west-1"),),
    )
    assert endpoints_called(unit_body(plan)) == set(RUN_BODY_CALLS)


def test_the_nodes_of_a_spot_fleet_call_no_auto_scaling():
    env = ENVIRONMENTS["dev"]
    assert node_calls(env, load_catalog()[env.instance_type]) == {
        SSM_AGENT: ("ssm", "ssmmessages", "ec2messages"),
        CLOUDWATCH_AGENT: ("logs", "monitoring"),
        "scripts/node/cluster-user.sh": ("secretsmanager",),
        "scripts/node/operator-scripts.sh": ("s3",),
        "scripts/node/node-ready.sh": ("ec2",),
        RUN_BODY: ("secretsmanager", "s3"),
    }


def test_the_nodes_of_an_auto_scaling_group_complete_its_lifecycle_actions():
    env = ENVIRONMENTS["p5-block"]
    assert env.fleet.backend == "auto-scaling"
    calls = node_calls(env, load_catalog()[env.instance_type])
    assert calls["scripts/node/spot-watcher.sh"] == ("autoscaling",)


@pytest.mark.parametrize("name", sorted(ENVIRONMENTS))
def test_every_call_is_a_destination_of_the_vocabulary(name):
    env = ENVIRONMENTS[name]
    for destinations in node_calls(env, load_catalog()[env.instance_type]).values():
        assert [d for d in destinations if destination_problem(d)] == []


@pytest.mark.parametrize(
    ("name", "auto_scaling"),
    [("dev", False), ("elastic", False), ("p5-block", True), ("p5-eks", False), ("prod", False)],
)
def test_a_new_vpc_gets_auto_scalings_endpoint_for_an_auto_scaling_group_only(name, auto_scaling):
    services = interface_endpoint_services(ENVIRONMENTS[name])
    assert ("autoscaling" in services.values()) is auto_scaling
    assert services["Ssm"] == "ssm"
