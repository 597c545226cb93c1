"""CodeBuild's build state change events and what EventBridge does with them, for the acceptance gate's backstop
rule (stacks/constructs/ami_acceptance_gate.py): the event, the rule's pattern match, the target's input transformer.

The event is the documented sample, "Build notifications input format reference"
(https://docs.aws.amazon.com/codebuild/latest/userguide/sample-build-notifications.html), with the build's status,
project and ARN put in. The pattern match covers what the rule uses (source, detail-type, exact values,
anything-but; https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns-content-based-filtering.html):
each pattern field names a list of allowed values, or holds a nested pattern. The input transformer reads each
InputPathsMap path and puts its JSON value where the template has <name> outside quotes
(https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html)."""

from __future__ import annotations

import json

# The project name CloudFormation gives the AMI build project in these tests (the project of the BUILD_ID used by
# test_buildspec_run.py); the rule's pattern holds a Ref to the project that stands for it.
BUILD_PROJECT_NAME = "gpufleet-ami-build"


def build_state_change(build_arn: str, status: str) -> dict:
    return {
        "version": "0",
        "id": "c030038d-8c4d-6141-9545-00ff7b7153EX",
        "detail-type": "CodeBuild Build State Change",
        "source": "aws.codebuild",
        "account": "123456789012",
        "time": "2017-09-01T16:14:28Z",
        "region": "us-east-1",
        "resources": [build_arn],
        "detail": {
            "build-status": status,
            "project-name": BUILD_PROJECT_NAME,
            "build-id": build_arn,
            "additional-information": {
                "timeout-in-minutes": 60,
                "build-complete": status != "IN_PROGRESS",
                "initiator": "MyCodeBuildDemoUser",
                "build-start-time": "Sep 1, 2017 4:12:29 PM",
            },
            "current-phase": "COMPLETED",
            "current-phase-context": "[]",
            "version": "1",
        },
    }


def backstop(template: dict) -> tuple[dict, dict]:
    """The rule whose target is a CodeBuild project, and that project (the teardown)."""
    resources = template["Resources"]
    ((rule, target),) = [
        (resource["Properties"], target)
        for resource in resources.values()
        if resource["Type"] == "AWS::Events::Rule" and "EventPattern" in resource["Properties"]
        for target in resource["Properties"]["Targets"]
    ]
    project_id = target["Arn"]["Fn::GetAtt"][0]
    assert resources[project_id]["Type"] == "AWS::CodeBuild::Project"
    return rule, resources[project_id]


def build_project_id(template: dict) -> str:
    """The AMI build project: the CodeBuild project whose buildspec runs build-image.sh."""
    (project_id,) = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::CodeBuild::Project"
        and "build-image.sh" in resource["Properties"]["Source"]["BuildSpec"]
    ]
    return project_id


def matches(pattern: dict, event: dict, template: dict) -> bool:
    def resolve(value):
        if isinstance(value, dict) and value.get("Ref") == build_project_id(template):
            return BUILD_PROJECT_NAME
        return value

    def field_matches(allowed: list, value) -> bool:
        for option in map(resolve, allowed):
            if isinstance(option, dict) and "anything-but" in option:
                if value not in option["anything-but"]:
                    return True
            elif option == value:
                return True
        return False

    for key, wanted in pattern.items():
        if key not in event:
            return False
        if isinstance(wanted, dict):
            if not isinstance(event[key], dict) or not matches(wanted, event[key], template):
                return False
        elif not field_matches(wanted, event[key]):
            return False
    return True


def transform(transformer: dict, event: dict) -> dict:
    text = transformer["InputTemplate"]
    for name, path in transformer["InputPathsMap"].items():
        value = event
        for part in path.removeprefix("$.").split("."):
            value = value[part]
        text = text.replace(f"<{name}>", json.dumps(value))
    return json.loads(text)
