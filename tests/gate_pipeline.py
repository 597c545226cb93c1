"""The AMI pipeline with its acceptance gate on (ami/pipeline.yaml ships it off), for the tests of the gate's
settings, the stack and the buildspec run: the settings, the file, the pipeline stack synthesized with cdk-nag, and
the gate's environment synthesized as the build's `cdk synth -c env=NAME` writes it."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import yaml

from gpufleet.ami.pipeline import Pipeline, acceptance_environment
from gpufleet.environment import Environment
from gpufleet.loading import environment_files, load_environments, load_pipeline
from stacks.ami_pipeline_stack import add_ami_pipeline_stack
from stacks.environment_stacks import add_compliance_checks, add_environment_stacks
from tests.conftest import CDK_CONTEXT, REPOSITORY, SYNTHESIS_TIME, Assembly

GATE = {
    "instance_type": "p4d.24xlarge",
    "availability_zone": "us-east-1a",
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_id": "subnet-0123456789abcdef0",
    "nodes": 2,
    "timeout_minutes": 60,
    "max_cost_usd": 100,
}


def gate_pipeline_text() -> str:
    """ami/pipeline.yaml as shipped, with the gate turned on and the account of the shipped environments pinned."""
    document = yaml.safe_load((REPOSITORY / "ami" / "pipeline.yaml").read_text())
    return yaml.safe_dump({**document, "account": "123456789012", "acceptance": GATE}, sort_keys=False)


def gate_pipeline(directory: Path) -> Pipeline:
    path = directory / "pipeline.yaml"
    path.write_text(gate_pipeline_text())
    return load_pipeline(path)


def synthesize_gate_pipeline(directory: Path) -> Assembly:
    """The pipeline stack with the gate, synthesized with cdk-nag (synthesis raises on unacknowledged findings)."""
    pipeline = gate_pipeline(directory)
    app = cdk.App(outdir=str(directory / "cdk.out"), context=CDK_CONTEXT)
    add_compliance_checks(app)
    environments = load_environments(environment_files(REPOSITORY / "environments"), pipeline)
    add_ami_pipeline_stack(app, pipeline, environments, "123456789012")
    app.synth()
    return Assembly(directory / "cdk.out")


# The gate's environment of the build whose id starts 5f0c1d2e (scripts/lib/pipeline.sh acceptance_environment_name).
GATE_NAME = "accept-5f0c1d2e"


def synthesize_gate_environment(directory: Path, image: str) -> Assembly:
    """The cloud assembly of the gate's environment GATE_NAME for IMAGE, as `cdk synth -c env=accept-5f0c1d2e`
    writes it in the build (app.py's stacks and cdk-nag for the one environment)."""
    pipeline = gate_pipeline(directory)
    environment = Environment.model_validate(acceptance_environment(pipeline, GATE_NAME, image))
    app = cdk.App(outdir=str(directory / "cdk.out"), context=CDK_CONTEXT)
    add_compliance_checks(app)
    add_environment_stacks(app, environment, SYNTHESIS_TIME)
    app.synth()
    return Assembly(directory / "cdk.out")
