"""Every AWS CLI call a node, an image build or the pipeline makes names its region (issue 30).

Without --region (and with no AWS_REGION or configured region) the AWS CLI's S3 commands go to S3's global endpoint,
s3.amazonaws.com, which lies in us-east-1: an S3 gateway endpoint of a VPC in another region does not serve it, so a
node of a VPC with no NAT gateway cannot reach it (gpufleet/reachability, "s3-global"). The other services have no
global endpoint to fall back on and fail outright. The instance's own region does not stand in: botocore takes only
credentials from the instance metadata ("We only use IMDS for credentials, not for configuration", boto/boto3#375; in
botocore 1.x's session.py the IMDSRegionProvider serves the smart defaults mode alone, not a client's region). The check
reads the scripts as bash would join them (a backslash at the end of a line continues the command) and the run bodies
gpufleet.ops.runs writes; its own test plants each form.
"""

from __future__ import annotations

import re
from pathlib import Path

import botocore.session
import pytest

from gpufleet.ops.runs import RunSecret, WorkdirArchive, plan_run, unit_body
from tests.gpufleet.ops.test_runs import node

# An AWS CLI call: `aws` as a command word (at the start, or after a separator, an assignment or a `$(`), then a
# service name. `aws --version` and `command -v aws` are not calls, nor is "aws is not on PATH" in a message: the
# service must be one botocore knows (the AWS CLI's commands are botocore's services; its `s3` is botocore's too).
CALL = re.compile(r"(?:^|[\s;|&(`])aws\s+(?P<service>[a-z0-9][a-z0-9-]*)\b")
SERVICES = frozenset(botocore.session.get_session().get_available_services())
# Where one command of a line ends: a list or pipeline operator, or the end of a command substitution.
COMMAND_END = re.compile(r";|\|\||&&|\||\)")
NODE_SIDE = ("scripts/node", "scripts/ops", "scripts/lib", "scripts/ami", "scripts/pipeline")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """TEXT's commands as bash reads them: continued lines joined, comments dropped; with each one's first line."""
    joined: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append((start, pending + line))
        pending = ""
    return joined


def aws_calls(line: str) -> list[re.Match[str]]:
    return [call for call in CALL.finditer(line) if call["service"] in SERVICES]


def calls_without_a_region(text: str) -> list[str]:
    """`LINE: aws SERVICE` for each call in TEXT whose command does not name --region."""
    found = []
    for number, line in logical_lines(text):
        for call in aws_calls(line):
            rest = line[call.end() :]
            end = COMMAND_END.search(rest)
            command = rest[: end.start()] if end else rest
            if not re.search(r"--region[\s=]", command):
                found.append(f"{number}: aws {call['service']}")
    return found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("aws s3 cp s3://b/k -\n", ["1: aws s3"]),
        ('aws s3 cp --region "$region" s3://b/k -\n', []),
        ("aws s3 cp --region=eu-west-1 s3://b/k -\n", []),
        ("x=$(aws secretsmanager get-secret-value --secret-id s)\n", ["1: aws secretsmanager"]),
        ('x=$(aws secretsmanager get-secret-value --region "$r" --secret-id s)\n', []),
        ("aws ec2 create-tags \\\n  --region r --resources i\n", []),
        ("aws ec2 create-tags \\\n  --resources i\n", ["1: aws ec2"]),
        # The region of another command on the line does not count.
        ("aws s3 cp s3://b/k - | aws s3 cp --region r - s3://b/j\n", ["1: aws s3"]),
        ("AWS_MAX_ATTEMPTS=6 aws autoscaling complete-lifecycle-action --x\n", ["1: aws autoscaling"]),
        ("true\n# aws s3 cp s3://b/k -\n", []),
        ("command -v aws >/dev/null || die 'no aws'\n", []),
        ('die "no AWS CLI on this node (aws is not on PATH)"\n', []),
        ('state="$(aws ec2 describe-images --image-ids i)"\n', ["1: aws ec2"]),
        ("aws --version\n", []),
    ],
)
def test_the_check_finds_each_call_without_a_region(text, found):
    assert calls_without_a_region(text) == found


@pytest.mark.parametrize(
    "script", sorted(str(path) for folder in NODE_SIDE for path in Path(folder).rglob("*.sh")), ids=str
)
def test_every_aws_call_of_the_scripts_names_its_region(script):
    assert calls_without_a_region(Path(script).read_text()) == []


def test_the_scripts_do_call_aws():
    """The check above would pass on a tree with no calls at all: these are the calls it reads today."""
    calls = sorted(
        {
            call["service"]
            for folder in NODE_SIDE
            for path in Path(folder).rglob("*.sh")
            for _, line in logical_lines(path.read_text())
            for call in aws_calls(line)
        }
    )
    assert calls == ["autoscaling", "cloudformation", "ec2", "pricing", "s3", "secretsmanager", "ssm"]


def test_every_aws_call_of_a_runs_body_names_its_region():
    """The run body with every step that calls AWS: a secret read and a workdir download."""
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
    body = unit_body(plan)
    assert [call["service"] for _, line in logical_lines(body) for call in aws_calls(line)] == [
        "secretsmanager",
        "s3",
    ]
    assert calls_without_a_region(body) == []
