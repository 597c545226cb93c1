"""app.py as the CDK CLI runs it: context from CDK_CONTEXT_JSON, output to CDK_OUTDIR."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.gpufleet.validators.test_network import NO_NAT

ROOT = Path(__file__).resolve().parent.parent


def run_app(
    tmp_path: Path, context: dict, environments_dir: Path | None = None, deploying_account: str | None = None
) -> subprocess.CompletedProcess:
    """DEPLOYING_ACCOUNT: what the CDK CLI sets as CDK_DEFAULT_ACCOUNT from the caller's credentials (none here)."""
    env = {
        key: value for key, value in os.environ.items() if not key.startswith("AWS_") and key != "CDK_DEFAULT_ACCOUNT"
    } | {
        "CDK_CONTEXT_JSON": json.dumps(context),
        "CDK_OUTDIR": str(tmp_path / "cdk.out"),
        # No credentials anywhere: synthesis must not need them.
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_CONFIG_FILE": os.devnull,
    }
    if environments_dir:
        env["GPUFLEET_ENVIRONMENTS_DIR"] = str(environments_dir)
    if deploying_account:
        env["CDK_DEFAULT_ACCOUNT"] = deploying_account
    return subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True)


def test_unknown_environment_stops_synthesis_with_one_line(tmp_path):
    result = run_app(tmp_path, {"env": "staging"})
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        "unknown environment 'staging' (known: dev, elastic, h100, p5-block, p5-eks, prod)"
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cdk.out/manifest.json").exists()


def test_invalid_environment_stops_synthesis_with_the_validate_messages(tmp_path):
    environments = tmp_path / "environments"
    environments.mkdir()
    document = yaml.safe_load((ROOT / "environments/dev.yaml").read_text())
    document["capacity"]["on_demand"] = 5
    document["fleet"]["tpye"] = "maintain"
    (environments / "dev.yaml").write_text(yaml.safe_dump(document))
    result = run_app(tmp_path, {}, environments)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{environments / 'dev.yaml'}: fleet.tpye: unknown key (allowed here: backend, type, allocation_strategy, "
        "on_demand_allocation_strategy, capacity_rebalance, valid_until, replace_unhealthy_instances, rollout, "
        "fallback)",
    ]
    assert not (tmp_path / "cdk.out/manifest.json").exists()


def test_user_data_over_ec2s_limit_stops_synthesis_at_validation_with_one_line(tmp_path):
    environments = tmp_path / "environments"
    environments.mkdir()
    document = yaml.safe_load((ROOT / "environments/dev.yaml").read_text())
    # Random text: gzip cannot shrink it, so the compressed user data goes over EC2's 16 KiB. An image of the user's
    # own, which may carry this hook: the one problem is the size.
    document["ami"] = {"id": "ami-0123456789abcdef0"}
    document["node"]["checkpoint_hook"] = "/opt/train/save " + "".join(
        random.Random(7).choices("abcdefghijklmnop0123456789", k=20000)
    )
    (environments / "dev.yaml").write_text(yaml.safe_dump(document))
    result = run_app(tmp_path, {}, environments)
    assert result.returncode == 1
    # dev's one warning (no NAT gateway) comes with the one error.
    warning, line = result.stderr.splitlines()
    assert warning == f"{environments}/dev.yaml: {NO_NAT}"
    assert re.fullmatch(
        rf"{re.escape(str(environments))}/dev.yaml: node: the user data is \d+ bytes compressed, "
        r"over EC2's limit of 16384; turn off a node feature or shorten node.checkpoint_hook",
        line,
    )


def stack_names(tmp_path: Path) -> list[str]:
    manifest = json.loads((tmp_path / "cdk.out/manifest.json").read_text())
    return sorted(n for n, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack")


@pytest.mark.parametrize(
    ("context", "others", "expected"),
    [
        # -c env=dev among several environments synthesizes dev alone (without credentials, as every run here).
        ({"env": "dev"}, ["prod.yaml"], ["gpufleet-dev-cluster", "gpufleet-dev-network"]),
        # Without credentials there is no deploying account, and ami/pipeline.yaml names none: no pipeline stack.
        ({}, [], ["gpufleet-dev-cluster", "gpufleet-dev-network"]),
    ],
    ids=["cdk-destroy-c-env-dev", "every-environment"],
)
def test_a_valid_until_that_has_passed_does_not_stop_synthesis(tmp_path, context, others, expected):
    """`cdk destroy` synthesizes first (every environment without -c env): an expired cluster must stay possible to
    tear down. Synthesis is all `cdk destroy` needs offline; the deletion itself is CloudFormation's."""
    environments = tmp_path / "environments"
    environments.mkdir()
    expired = yaml.safe_load((ROOT / "environments/dev.yaml").read_text())
    expired["fleet"]["valid_until"] = "2020-01-01T00:00:00Z"
    (environments / "dev.yaml").write_text(yaml.safe_dump(expired))
    for name in others:
        shutil.copy(ROOT / "environments" / name, environments / name)
    result = run_app(tmp_path, context, environments)
    assert result.returncode == 0, result.stderr
    assert stack_names(tmp_path) == expected
    fleet = json.loads((tmp_path / "cdk.out/gpufleet-dev-cluster.template.json").read_text())
    (spot_fleet,) = [r for r in fleet["Resources"].values() if r["Type"] == "AWS::EC2::SpotFleet"]
    assert spot_fleet["Properties"]["SpotFleetRequestConfigData"]["ValidUntil"] == "2020-01-01T00:00:00Z"


def pipeline_stack_account(tmp_path: Path) -> str | None:
    manifest = json.loads((tmp_path / "cdk.out/manifest.json").read_text())
    artifact = manifest["artifacts"].get("gpufleet-ami-pipeline")
    return None if artifact is None else artifact["environment"].split("/")[2]


def test_the_pipeline_goes_to_the_deploying_account_whatever_the_environments_name(tmp_path):
    """ami/pipeline.yaml names no account: the pipeline stack takes the one the CDK CLI deploys with, and the shipped
    environments of another account (h100, p5-block and prod among them) do not stop it."""
    result = run_app(tmp_path, {}, deploying_account="210987654321")
    assert result.returncode == 0, result.stderr
    assert pipeline_stack_account(tmp_path) == "210987654321"


def test_without_a_deploying_account_the_pipeline_is_left_out_with_one_line(tmp_path):
    result = run_app(tmp_path, {})
    assert result.returncode == 0, result.stderr
    assert pipeline_stack_account(tmp_path) is None
    assert (
        "note: gpufleet-ami-pipeline left out: ami/pipeline.yaml names no account and the CDK CLI found none (no "
        "credentials: CDK_DEFAULT_ACCOUNT unset); run cdk with the credentials of the account to build the images in"
    ) in result.stderr.splitlines()


def test_a_pinned_account_wins_and_another_deploying_one_is_named(tmp_path, monkeypatch):
    pinned = yaml.safe_load((ROOT / "ami/pipeline.yaml").read_text()) | {"account": "123456789012"}
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pinned))
    monkeypatch.setenv("GPUFLEET_AMI_PIPELINE_FILE", str(tmp_path / "pipeline.yaml"))
    result = run_app(tmp_path, {}, deploying_account="210987654321")
    assert result.returncode == 0, result.stderr
    assert pipeline_stack_account(tmp_path) == "123456789012"
    assert (
        "warning: ami/pipeline.yaml: account: 123456789012 is not the account you deploy from (210987654321, "
        "CDK_DEFAULT_ACCOUNT): gpufleet-ami-pipeline deploys only with credentials of 123456789012 (remove account to "
        "build the images in the account you deploy from)"
    ) in result.stderr.splitlines()


def test_synthesis_imports_no_aws_sdk():
    """boto3 and botocore are the operator commands' (importing them costs every synthesis about 0.1 s); the app
    needs neither, not even for botocore's bundled data (gpufleet.rules.botocore_data_file)."""
    probe = "import sys, app; print(sorted({name.split('.')[0] for name in sys.modules} & {'boto3', 'botocore'}))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout == "[]\n"
