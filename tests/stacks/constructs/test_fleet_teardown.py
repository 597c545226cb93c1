"""The fleet teardown on its own: a custom resource on the fleet that depends on what the nodes use."""

from __future__ import annotations

import json

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from stacks.constructs.fleet_teardown import FleetTeardown


def synthesize(stack):
    fleet = ec2.CfnSpotFleet(
        stack,
        "Fleet",
        spot_fleet_request_config_data=ec2.CfnSpotFleet.SpotFleetRequestConfigDataProperty(
            iam_fleet_role="arn:aws:iam::123456789012:role/fleet", target_capacity=1
        ),
    )
    placement_group = ec2.CfnPlacementGroup(stack, "Placement", strategy="cluster")
    FleetTeardown(
        stack,
        "Teardown",
        fleet=fleet,
        environment_tag=("gpufleet:environment", "probe"),
        guarded=[placement_group],
        log_retention=logs.RetentionDays.ONE_MONTH,
    )
    return Template.from_stack(stack)


def test_the_teardown_names_the_fleet_and_is_deleted_before_what_the_nodes_use(stack):
    template = synthesize(stack)
    (teardown,) = template.find_resources("Custom::GpufleetFleetTeardown").values()
    assert teardown["Properties"]["FleetRequestId"] == {"Ref": "Fleet"}
    # CloudFormation deletes a resource before those it depends on: the nodes are gone before the placement group.
    assert teardown["DependsOn"] == ["Placement"]


def test_the_handler_may_terminate_only_instances_tagged_with_its_environment(stack):
    template = synthesize(stack)
    statements = [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "ec2:TerminateInstances"
    ]
    assert statements == [
        {
            "Action": "ec2:TerminateInstances",
            "Condition": {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "probe"}},
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:instance/*"]]
            },
        }
    ]


def test_the_provider_polls_every_30_seconds_for_at_most_50_minutes(stack):
    template = synthesize(stack)
    (waiter,) = template.find_resources("AWS::StepFunctions::StateMachine").values()
    parts = waiter["Properties"]["DefinitionString"]["Fn::Join"][1]
    definition = json.loads("".join(part for part in parts if isinstance(part, str)))
    # aws-cdk-lib's Provider retries is_complete total_timeout / query_interval times: 50 min / 30 s.
    assert definition["States"]["framework-isComplete-task"]["Retry"] == [
        {"ErrorEquals": ["States.ALL"], "IntervalSeconds": 30, "MaxAttempts": 100, "BackoffRate": 1}
    ]
