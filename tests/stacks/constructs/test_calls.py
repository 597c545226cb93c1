"""declare_calls: what it writes into the template, how declarations add up, and what it refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from stacks.constructs.calls import declare_calls
from tests.stacks.constructs.conftest import ROOT, bare_stack


def function(stack) -> lambda_.Function:
    return lambda_.Function(
        stack,
        "Handler",
        runtime=lambda_.Runtime.PYTHON_3_14,
        handler="h.on_event",
        code=lambda_.Code.from_inline("def on_event(event, context): pass"),
    )


def template_resources(stack) -> dict:
    return Template.from_stack(stack).to_json()["Resources"]


def test_declarations_add_up_on_the_functions_resource_each_destination_with_its_sources():
    stack = bare_stack()
    handler = function(stack)
    declare_calls(handler, "s3", "sts", source="handler.py: boto3 s3, sts")
    declare_calls(handler, "s3", "https://pypi.org", source="pip install")
    declare_calls(handler, "s3", source="pip install")

    (resource,) = [r for r in template_resources(stack).values() if r["Type"] == "AWS::Lambda::Function"]
    assert resource["Metadata"] == {
        "gpufleet:calls": {
            "https://pypi.org": ["pip install"],
            "s3": ["handler.py: boto3 s3, sts", "pip install"],
            "sts": ["handler.py: boto3 s3, sts"],
        }
    }


def test_a_resource_that_calls_nothing_outside_the_vpc_is_declared_with_no_destination():
    stack = bare_stack()
    template = ec2.CfnLaunchTemplate(stack, "Template", launch_template_data={})
    declare_calls(template, source="nothing: the nodes only talk to each other")

    assert template_resources(stack)["Template"]["Metadata"] == {"gpufleet:calls": {}}


@pytest.mark.parametrize(
    ("destinations", "problem"),
    [
        (("S3",), "'S3' is no destination: name an AWS service as its PrivateLink service name"),
        (("com.amazonaws.us-east-1.s3",), "'com.amazonaws.us-east-1.s3' is no destination"),
        (("https://pypi.org/simple",), "'https://pypi.org/simple' is no outside host"),
        (("https://localhost",), "'https://localhost' is no outside host"),
        (("http://pypi.org",), "'http://pypi.org' is no destination"),
    ],
)
def test_a_name_outside_the_vocabulary_fails_naming_the_construct(destinations, problem):
    stack = bare_stack()
    with pytest.raises(ValueError, match="^Probe/Handler: ") as raised:
        declare_calls(function(stack), *destinations, source="handler.py")
    assert problem in str(raised.value)


def test_a_declaration_without_a_source_fails():
    stack = bare_stack()
    with pytest.raises(ValueError, match="^Probe/Handler: say which code makes the calls"):
        declare_calls(function(stack), "s3", source=" ")


def test_a_construct_without_a_cloudformation_resource_of_its_own_fails():
    stack = bare_stack()
    queue = sqs.Queue(stack, "Queue")
    declare_calls(queue, "sqs", source="a queue is a CfnResource's L2, so this one passes")
    with pytest.raises(TypeError, match="^Probe: neither a CfnResource"):
        declare_calls(stack, "s3", source="the stack")


def test_cfn_lint_accepts_the_metadata(tmp_path):
    """CloudFormation takes any JSON under a resource's Metadata (template-anatomy: "Metadata"); cfn-lint, which
    make synth runs, agrees."""
    stack = bare_stack()
    declare_calls(function(stack), "s3", "https://pypi.org", source="handler.py")
    path = tmp_path / "Probe.template.json"
    path.write_text(json.dumps(Template.from_stack(stack).to_json()))
    result = subprocess.run(
        [Path(sys.executable).with_name("cfn-lint"), "--config-file", str(ROOT / ".cfnlintrc.yaml"), "--", str(path)],
        capture_output=True,
        text=True,
    )
    assert (result.returncode, result.stdout) == (0, "")
