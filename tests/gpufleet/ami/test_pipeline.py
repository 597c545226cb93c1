"""ami/pipeline.yaml: the shipped file loads, and every rule checked while parsing answers with its exact one-line
message (the rules beyond one field: tests/gpufleet/validators/test_pipeline.py)."""

from __future__ import annotations

import pytest
import yaml

from gpufleet.ami import published_profile
from gpufleet.ami.pipeline import account_mismatch, pipeline_account, publish_regions
from gpufleet.environment import Environment
from gpufleet.loading import PIPELINE_FILE_VARIABLE, environment_files, load_environments, load_pipeline, pipeline_file
from tests.gpufleet.ami.pipeline_files import SHIPPED, problems, write


def test_shipped_pipeline_loads():
    pipeline = load_pipeline(SHIPPED)
    assert pipeline.profiles == (
        "p4d-ubuntu1804-cuda11",
        "p4d-al2-cuda11",
        "ubuntu2204-cuda12",
        "ubuntu2404-cuda13",
        "al2023-cuda13",
    )
    # No account to edit: the pipeline goes to the account that deploys it.
    assert pipeline.account is None
    assert pipeline.packer.version == "1.11.2"
    assert pipeline.packer.signing_key_fingerprint == "C874011F0AB405110D02105534365D9472D7468F"


def test_pipeline_file_can_be_redirected(monkeypatch, tmp_path):
    monkeypatch.setenv(PIPELINE_FILE_VARIABLE, str(tmp_path / "other.yaml"))
    assert pipeline_file() == tmp_path / "other.yaml"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"account": "12345"}, "account: '12345' is not an AWS account id (exactly 12 digits, quoted)"),
        ({"account": 123456789012}, "account: input should be a valid string, got 123456789012 (put it in quotes)"),
        ({"region": "mars-1"}, "region: 'mars-1' is not a region name (for example us-east-1, eu-west-2)"),
        (
            {"region": "eu-west-4"},
            "region: 'eu-west-4' is not a region of partition aws (allowed, as the pinned botocore lists them: "
            "af-south-1, ap-east-1, ap-east-2, ap-northeast-1, ap-northeast-2, ap-northeast-3, ap-south-1, ap-south-2, "
            "ap-southeast-1, ap-southeast-2, ap-southeast-3, ap-southeast-4, ap-southeast-5, ap-southeast-6, "
            "ap-southeast-7, ca-central-1, ca-west-1, eu-central-1, eu-central-2, eu-north-1, eu-south-1, eu-south-2, "
            "eu-west-1, eu-west-2, eu-west-3, il-central-1, me-central-1, me-south-1, me-west-1, mx-central-1, "
            "sa-east-1, sa-west-1, us-east-1, us-east-2, us-west-1, us-west-2; a region opened since needs newer "
            "boto3 and botocore pins)",
        ),
        (
            {"schedule": "rate(7 days)"},
            "schedule: 'rate(7 days)' is not an EventBridge cron expression (six fields: cron(minutes hours "
            "day-of-month "
            "month day-of-week year), e.g. cron(0 6 ? * SUN *); or null for manual builds only)",
        ),
        (
            {"schedule": "cron(0 6 * * SUN *)"},
            "schedule: 'cron(0 6 * * SUN *)' needs '?' in exactly one of day-of-month and day-of-week "
            "(e.g. cron(0 6 ? * SUN *) or cron(0 6 1 * ? *))",
        ),
        (
            {"log_retention_days": 10},
            "log_retention_days: 10 is not a CloudWatch Logs retention (allowed: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, "
            "180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)",
        ),
        (
            {"subnet_id": "subnet-xyz"},
            "subnet_id: 'subnet-xyz' is not a subnet id (subnet- followed by 8 or 17 hex digits; "
            "or null for the default VPC)",
        ),
        (
            {"packer__version": "latest"},
            "packer.version: 'latest' is not an exact Packer release (MAJOR.MINOR.PATCH, e.g. 1.11.2)",
        ),
        (
            {"packer__version": "1.6.6"},
            "packer.version: 1.6.6 is too old: the rendered templates need Packer 1.7 or newer "
            "(packer init, required_plugins)",
        ),
        (
            {"packer__signing_key_fingerprint": "C874 011F"},
            "packer.signing_key_fingerprint: 'C874 011F' is not an OpenPGP fingerprint (40 upper-case hex "
            "digits, no spaces; "
            "HashiCorp's is listed on https://www.hashicorp.com/security)",
        ),
        (
            {"session_manager_plugin__version": "latest"},
            "session_manager_plugin.version: 'latest' is not an exact session-manager-plugin release (four numbers, "
            "e.g. 1.2.764.0)",
        ),
        (
            {"session_manager_plugin__version": "1.2.553.0"},
            "session_manager_plugin.version: 1.2.553.0 is older than 1.2.764.0, the oldest release Session "
            "Manager supports "
            "(use 1.2.764.0 or newer; releases: https://docs.aws.amazon.com/systems-manager/latest/userguide/"
            "plugin-version-history.html)",
        ),
        (
            {"packer__checksum": "x"},
            "packer.checksum: unknown key (allowed here: version, sha256, signing_key_fingerprint)",
        ),
    ],
)
def test_each_rule_reports_its_exact_message(tmp_path, changes, expected):
    assert problems(write(tmp_path, **changes)) == [expected]


def test_valid_alternatives_pass(tmp_path):
    path = write(
        tmp_path, schedule=None, subnet_id="subnet-0123456789abcdef0", packer__sha256="a" * 64, log_retention_days=30
    )
    assert load_pipeline(path).schedule is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"packer__version": "1.7.0"}, None),
        (
            {"packer__version": "1.6.99"},
            "packer.version: 1.6.99 is too old: the rendered templates need Packer 1.7 or newer "
            "(packer init, required_plugins)",
        ),
        ({"session_manager_plugin__version": "1.2.764.0"}, None),
        (
            {"session_manager_plugin__version": "1.2.763.99"},
            "session_manager_plugin.version: 1.2.763.99 is older than 1.2.764.0, the oldest release Session Manager "
            "supports (use 1.2.764.0 or newer; releases: https://docs.aws.amazon.com/systems-manager/latest/userguide/"
            "plugin-version-history.html)",
        ),
        ({"schedule": "cron(0 6 1 * ? *)"}, None),
        (
            {"schedule": "cron(0 6 ? * ? *)"},
            "schedule: 'cron(0 6 ? * ? *)' needs '?' in exactly one of day-of-month and day-of-week "
            "(e.g. cron(0 6 ? * SUN *) or cron(0 6 1 * ? *))",
        ),
    ],
)
def test_version_and_schedule_rules_on_both_sides_of_their_bounds(tmp_path, changes, expected):
    path = write(tmp_path, **changes)
    if expected is None:
        load_pipeline(path)
    else:
        assert problems(path) == [expected]


def test_every_problem_is_reported_at_once(tmp_path):
    path = write(tmp_path, account="1", region="x", log_retention_days=2)
    assert [line.split(":")[0] for line in problems(path)] == ["account", "region", "log_retention_days"]
    # Rules about one field alone are checked while parsing; the profiles rule (it reads ami/profiles) waits.
    path = write(tmp_path, profiles=["p4d-al2-cuda11", "p4d-al2-cuda11"], packer__sha256="ABC")
    assert problems(path) == [
        "profiles.1: 'p4d-al2-cuda11' is listed twice (list each profile once)",
        "packer.sha256: 'ABC' is not a SHA-256 digest (64 lower-case hex digits, from packer_1.11.2_SHA256SUMS; "
        "or null)",
    ]


def test_missing_key_and_bad_yaml(tmp_path):
    document = yaml.safe_load(SHIPPED.read_text())
    del document["schedule"]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document))
    assert problems(path) == ["schedule: required key is missing"]
    path.write_text("profiles: [a\n")
    assert len(problems(path)) == 1 and "not valid YAML" in problems(path)[0]


def environment(name: str, region: str, ami: dict, account: str = "123456789012") -> Environment:
    return Environment.model_validate(
        {
            "name": name,
            "account": account,
            "region": region,
            "availability_zone": f"{region}a",
            "network": {"cidr": "10.40.0.0/16"},
            "instance_type": "p5.48xlarge",
            "capacity": {"target": 1, "on_demand": 1},
            "ami": ami,
        }
    )


def test_shipped_profiles_are_published_where_the_shipped_environments_read_them():
    pipeline = load_pipeline(SHIPPED)
    environments = load_environments(environment_files(SHIPPED.parents[1] / "environments"), pipeline)
    # Deployed from the account of the shipped environments.
    assert publish_regions(pipeline, environments, "123456789012") == {
        "p4d-ubuntu1804-cuda11": ("us-east-1",),
        "p4d-al2-cuda11": ("us-east-1",),
        # h100 deploys in us-west-2, p5-block in us-east-2.
        "ubuntu2204-cuda12": ("us-east-1", "us-east-2", "us-west-2"),
        "ubuntu2404-cuda13": ("us-east-1",),
        "al2023-cuda13": ("us-east-1",),
    }
    # Deployed from another account: its own environments (none here) get the images, these do not.
    assert set(publish_regions(pipeline, environments, "210987654321").values()) == {("us-east-1",)}


def test_the_pipelines_account_is_the_files_or_else_the_deploying_one():
    shipped = load_pipeline(SHIPPED)
    pinned = shipped.model_copy(update={"account": "123456789012"})
    assert pipeline_account(shipped, "210987654321") == "210987654321"
    assert pipeline_account(shipped, None) is None
    assert pipeline_account(pinned, "210987654321") == "123456789012"
    assert pipeline_account(pinned, None) == "123456789012"
    assert account_mismatch(shipped, "210987654321") is None
    assert account_mismatch(pinned, "123456789012") is None
    assert account_mismatch(pinned, None) is None
    assert account_mismatch(pinned, "210987654321") == (
        "ami/pipeline.yaml: account: 123456789012 is not the account you deploy from (210987654321, "
        "CDK_DEFAULT_ACCOUNT): gpufleet-ami-pipeline deploys only with credentials of 123456789012 (remove account to "
        "build the images in the account you deploy from)"
    )


def test_publish_regions_follow_the_environments_of_the_pipelines_account_that_read_a_built_profile():
    pipeline = load_pipeline(SHIPPED).model_copy(update={"account": "123456789012"})
    parameter = {"ssm_parameter": "/gpufleet/ami/ubuntu2204-cuda12"}
    environments = [
        environment("tokyo", "ap-northeast-1", parameter),
        environment("frankfurt", "eu-central-1", parameter),
        environment("frankfurt2", "eu-central-1", parameter),
        environment("home", "us-east-1", parameter),
        environment("other-account", "sa-east-1", parameter, account="210987654321"),
        environment("fixed-image", "eu-west-3", {"id": "ami-0123456789abcdef0"}),
        environment("own-parameter", "eu-west-2", {"ssm_parameter": "/team/ami/ubuntu2204-cuda12"}),
        environment("unbuilt", "ca-central-1", {"ssm_parameter": "/gpufleet/ami/p5-cuda13"}),
    ]
    assert publish_regions(pipeline, environments)["ubuntu2204-cuda12"] == (
        "us-east-1",
        "ap-northeast-1",
        "eu-central-1",
    )
    assert publish_regions(pipeline, environments)["p4d-al2-cuda11"] == ("us-east-1",)
    assert "p5-cuda13" not in publish_regions(pipeline, environments)


@pytest.mark.parametrize(
    ("parameter", "profile"),
    [
        ("/gpufleet/ami/ubuntu2204-cuda12", "ubuntu2204-cuda12"),
        ("/gpufleet/amis/ubuntu2204-cuda12", None),
        ("/team/gpufleet/ami/x", None),
        (None, None),
    ],
)
def test_published_profile_reads_the_pipelines_parameter_names(parameter, profile):
    assert published_profile(parameter) == profile
