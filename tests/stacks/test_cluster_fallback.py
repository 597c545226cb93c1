"""Clusters with fleet.fallback (environments of the test's own, the shipped ones have none), one per backend: the
fallback is wired to the stack's Spot Fleet or Auto Scaling group, and the templates pass cfn-lint, cdk-nag (with
reasoned acknowledgements) and the Service Authorization Reference check; without fleet.fallback there is no
fallback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from aws_cdk.assertions import Match

from gpufleet.loading import environment_files, load_environments
from tests.conftest import REPOSITORY, synthesize
from tests.stacks.test_iam_resources import StackContext, policy_statements, unmatched_pairs, unmatched_resources

CFN_LINT = Path(sys.executable).with_name("cfn-lint")
# prod's settings with a fallback, on each backend (prod's capacity rebalance is launch-before-terminate, which an
# Auto Scaling group does not take: the group's copy rebalances with launch).
NAMES = {"spot-fleet": "spotfirst", "auto-scaling": "spotfirst-asg"}
NODE_GROUPS = {"spot-fleet": "AWS::EC2::SpotFleet", "auto-scaling": "AWS::AutoScaling::AutoScalingGroup"}


@pytest.fixture(scope="module")
def fallback_assembly(tmp_path_factory):
    environments = tmp_path_factory.mktemp("environments")
    for backend, name in NAMES.items():
        document = yaml.safe_load((REPOSITORY / "environments/prod.yaml").read_text())
        document["name"] = name
        document["fleet"]["fallback"] = {"after_minutes": 20, "restore_after_minutes": 45, "max_extra_on_demand": 3}
        if backend == "auto-scaling":
            document["fleet"]["backend"] = backend
            document["fleet"]["capacity_rebalance"] = {"replacement_strategy": "launch"}
        (environments / f"{name}.yaml").write_text(yaml.safe_dump(document))
    return synthesize(tmp_path_factory.mktemp("cdk.out"), environments)


@pytest.mark.parametrize("backend", NAMES)
def test_the_fallback_runs_on_the_stacks_node_group_with_the_environments_settings(fallback_assembly, backend):
    name = NAMES[backend]
    template = fallback_assembly.template(f"gpufleet-{name}-cluster")
    (node_group,) = template.find_resources(NODE_GROUPS[backend])
    functions = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "handler.on_schedule"}}
    ).values()
    (function,) = functions
    assert function["Properties"]["Environment"]["Variables"] == {
        "BACKEND": backend,
        "NODE_GROUP_ID": {"Ref": node_group},
        "PARAMETER_NAME": f"/gpufleet/{name}/fallback",
        "TARGET": "8",
        "FLOOR": "2",
        "AFTER_MINUTES": "20",
        "RESTORE_AFTER_MINUTES": "45",
        "MAX_EXTRA_ON_DEMAND": "3",
        # prod has a node.checkpoint_hook: a Spot Fleet hand-back runs it before it ends a node.
        **(
            {
                "CHECKPOINT_COMMAND": ". /etc/gpufleet/node.env && GPUFLEET_NOTICE_PATH=capacity-fallback "
                'GPUFLEET_NOTICE=hand-back bash -c "$GPUFLEET_CHECKPOINT_HOOK"'
            }
            if backend == "spot-fleet"
            else {}
        ),
    }
    # One schedule: the fallback's (the other rule is the interruption fan-out's, on events).
    template.resource_properties_count_is("AWS::Events::Rule", {"ScheduleExpression": Match.any_value()}, 1)
    template.has_resource_properties("Custom::GpufleetFallbackState", {"ParameterName": f"/gpufleet/{name}/fallback"})


def test_on_the_auto_scaling_backend_the_fallback_may_update_the_stacks_group_only(fallback_assembly):
    template = fallback_assembly.template_json("gpufleet-spotfirst-asg-cluster")
    statements = [
        statement
        for logical_id, policy in template["Resources"].items()
        if logical_id.startswith("CapacityFallbackRole") and policy["Type"] == "AWS::IAM::Policy"
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    (update,) = [s for s in statements if s["Action"] == "autoscaling:UpdateAutoScalingGroup"]
    # The group's name is a reference to the stack's group; the group id AWS assigns is the one wildcard.
    (group,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"]
    assert update["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/",
                {"Ref": group},
            ],
        ]
    }
    assert not [s for s in statements if "ec2:ModifySpotFleetRequest" in json.dumps(s)]
    # What Auto Scaling may check of the update's caller: the stack's launch template and node role only
    # (gpufleet.fallback.GROUP_LAUNCH_PERMISSIONS).
    (template_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    (run_instances,) = [s for s in statements if s["Action"] == "ec2:RunInstances"]
    assert run_instances["Condition"]["ArnEquals"]["ec2:LaunchTemplate"]["Fn::Join"][1][-1] == {"Ref": template_id}
    (pass_role,) = [s for s in statements if s["Action"] == "iam:PassRole"]
    role_id = pass_role["Resource"]["Fn::GetAtt"][0]
    assert template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"
    }


def test_shipped_environments_without_fallback_have_none(assembly):
    for environment in load_environments(environment_files()):
        if environment.flavour == "fleet" and environment.fleet.fallback is None:
            template = assembly.template_json(f"{environment.stack_prefix}-cluster")
            assert not [logical_id for logical_id in template["Resources"] if logical_id.startswith("CapacityFallback")]


def test_cfn_lint_passes(fallback_assembly):
    templates = [str(fallback_assembly.template_file(name)) for name in fallback_assembly.stack_names]
    result = subprocess.run(
        [CFN_LINT, "--config-file", str(REPOSITORY / ".cfnlintrc.yaml"), "--", *templates],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("backend", NAMES)
def test_every_policy_resource_matches_the_service_authorization_reference(fallback_assembly, backend):
    name = f"gpufleet-{NAMES[backend]}-cluster"
    template = fallback_assembly.template_json(name)
    account, region = fallback_assembly.manifest["artifacts"][name]["environment"].removeprefix("aws://").split("/")
    context = StackContext(
        name, region, account, {logical_id: resource["Type"] for logical_id, resource in template["Resources"].items()}
    )
    problems = [
        problem
        for statement in policy_statements(template, context)
        for problem in unmatched_resources(statement, context) + unmatched_pairs(statement, context)
    ]
    assert problems == []


def test_cdk_nag_acknowledgements_of_the_fallback_give_reasons(fallback_assembly):
    # Synthesis ran cdk-nag and would have failed on an unacknowledged finding.
    template = fallback_assembly.template_json(f"gpufleet-{NAMES['spot-fleet']}-cluster")
    reasons = [
        rule["reason"]
        for logical_id, resource in template["Resources"].items()
        if logical_id.startswith("CapacityFallback")
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    # Written on the roles and on their default policies, where cdk-nag reports the findings.
    assert set(reasons) == {
        "ec2:DescribeSpotFleetRequests, ec2:DescribeInstances, ssm:GetCommandInvocation support no resource-level "
        "permissions (Service Authorization Reference); the capacity fallback only reads the fleet's nodes, history "
        "and checkpoint commands with them",
        "the capacity fallback ends (and runs the checkpoint hook on) the fleet's on-demand nodes it hands back to "
        "spot, whose ids it learns at run time; the condition on gpufleet:environment limits it to this "
        "environment's nodes",
        # The state cleanup's Provider framework function (stacks/constructs/provider_findings.py).
        "the Provider framework function of the capacity fallback's state cleanup writes its logs with the managed "
        "Lambda basic execution policy; aws-cdk-lib creates this role and offers no other",
        "lambda:InvokeFunction on the handler of the capacity fallback's state cleanup and its versions (ARN:*), as "
        "aws-cdk-lib's grantInvoke writes it; one function, no other",
    }
