"""Each construct of stacks/constructs/ in a bare cdk.Stack of its own: what it writes, apart from the stacks."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2

from gpufleet.environment import Environment
from tests.conftest import CDK_CONTEXT

ACCOUNT, REGION, ZONE = "123456789012", "us-east-1", "us-east-1a"
# A small environment of our own (not the shipped ones, which may change): p4d, two nodes, one on demand.
ENVIRONMENT = """
name: probe
account: "123456789012"
region: us-east-1
availability_zone: us-east-1a
network: {cidr: 10.40.0.0/16}
instance_type: p4d.24xlarge
capacity: {target: 2, on_demand: 1}
fleet: {type: maintain, allocation_strategy: priceCapacityOptimized}
ami: {id: ami-0123456789abcdef0}
root_volume_gib: 200
"""


def environment(**changes) -> Environment:
    """The probe environment with top-level keys replaced (e.g. efa=False, fleet={...})."""
    return Environment.model_validate({**yaml.safe_load(ENVIRONMENT), **changes})


def bare_stack(region: str = REGION) -> cdk.Stack:
    """A cdk.Stack of its own app, for one construct alone (region: the environment's, where ARNs name it)."""
    return cdk.Stack(cdk.App(context=CDK_CONTEXT), "Probe", env=cdk.Environment(account=ACCOUNT, region=region))


@pytest.fixture
def stack() -> cdk.Stack:
    return bare_stack()


def imported_vpc(stack: cdk.Stack) -> ec2.IVpc:
    """A VPC by id, no lookup: the constructs only need its id."""
    return ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=[ZONE], isolated_subnet_ids=["subnet-1"]
    )


def asset_files(asset: Path) -> list[str]:
    """The asset's paths, less the files mutmut keeps next to a source it mutates (make mutate runs these tests on
    such a copy of the sources)."""
    return sorted(str(path.relative_to(asset)) for path in asset.rglob("*") if path.suffix not in (".meta", ".spans"))
