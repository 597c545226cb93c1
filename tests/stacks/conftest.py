"""Syntheses the stack tests share, each once per session like `cdk synth` (cdk.json's context, cdk-nag attached):
- environments with fleet.backend auto-scaling, built here rather than shipped: one in a new VPC that takes new
  images in place (rollout manual) with capacity rebalancing, one in an existing VPC that replaces its nodes on a
  new image (replace-all);
- the AMI pipeline stack of ami/pipeline.yaml, for the shipped environments, as app.py adds it;
- the environment matrix (tests/stacks/matrix.py), loaded and validated once and synthesized once."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml

from gpufleet.environment import Environment
from gpufleet.loading import environment_files, load_environments, load_pipeline
from stacks.ami_pipeline_stack import add_ami_pipeline_stack
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT, REPOSITORY, Assembly, synthesize
from tests.stacks.matrix import load_matrix, write_matrix

AUTO_SCALING_ENVIRONMENTS = {
    "asg": {
        "name": "asg",
        "account": "123456789012",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "network": {"cidr": "10.42.0.0/16"},
        "instance_type": "p4d.24xlarge",
        "capacity": {"target": 4, "on_demand": 1},
        "fleet": {
            "backend": "auto-scaling",
            "allocation_strategy": "capacityOptimized",
            "capacity_rebalance": {"replacement_strategy": "launch"},
        },
        "ami": {"ssm_parameter": "/gpufleet/ami/p4d-ubuntu2204"},
        "tags": {"team": "research"},
        "node": {"checkpoint_hook": "/usr/local/bin/save-checkpoint"},
    },
    "asgp5": {
        "name": "asgp5",
        "account": "123456789012",
        "region": "us-east-1",
        "availability_zone": "us-east-1b",
        "network": {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d"},
        "instance_type": "p5.48xlarge",
        "capacity": {"target": 2, "on_demand": 2},
        "fleet": {"backend": "auto-scaling", "rollout": "replace-all", "on_demand_allocation_strategy": "prioritized"},
        "ami": {"id": "ami-0123456789abcdef0"},
    },
}


@pytest.fixture(scope="session")
def auto_scaling_assembly(tmp_path_factory) -> Assembly:
    environments = tmp_path_factory.mktemp("auto-scaling-environments")
    for name, document in AUTO_SCALING_ENVIRONMENTS.items():
        (environments / f"{name}.yaml").write_text(yaml.safe_dump(document))
    return synthesize(tmp_path_factory.mktemp("cdk.out"), environments)


@pytest.fixture(scope="session")
def ami_pipeline_assembly(tmp_path_factory) -> Assembly:
    directory = tmp_path_factory.mktemp("ami-pipeline.out")
    pipeline = load_pipeline(REPOSITORY / "ami" / "pipeline.yaml")
    app = cdk.App(outdir=str(directory), context=CDK_CONTEXT)
    add_compliance_checks(app)
    # Deployed from the shipped environments' account (CDK_DEFAULT_ACCOUNT; ami/pipeline.yaml names none).
    environments = load_environments(environment_files(REPOSITORY / "environments"), pipeline)
    add_ami_pipeline_stack(app, pipeline, environments, "123456789012")
    app.synth()
    return Assembly(directory)


@pytest.fixture(scope="session")
def matrix_directory(tmp_path_factory) -> Path:
    """The environment matrix (tests/stacks/matrix.py) as environment files."""
    return write_matrix(tmp_path_factory.mktemp("matrix-environments"))


@pytest.fixture(scope="session")
def matrix(matrix_directory) -> dict[str, Environment]:
    """The environment matrix, loaded and validated once."""
    return load_matrix(matrix_directory)


@pytest.fixture(scope="session")
def matrix_assembly(matrix, matrix_directory, tmp_path_factory) -> Assembly:
    """The stacks of every matrix entry, synthesized once like `cdk synth` (cdk-nag attached: an unacknowledged
    finding fails synthesis, so the fixture itself is the cdk-nag check of every configuration)."""
    return synthesize(tmp_path_factory.mktemp("matrix.out"), matrix_directory)
