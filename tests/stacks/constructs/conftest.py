"""Each construct of stacks/constructs/ in a bare cdk.Stack of its own: what it writes, apart from the stacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import botocore
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2

from gpufleet.environment import Environment
from tests.conftest import CDK_CONTEXT

ROOT = Path(__file__).resolve().parents[3]
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


def copied_from_gpufleet(asset: Path) -> dict[str, bool]:
    """Each file of the asset's gpufleet/ but its package marker: whether it is a plain file (not a link) equal to
    gpufleet's own file of that name."""
    return {
        path.name: not path.is_symlink() and path.read_bytes() == (ROOT / "gpufleet" / path.name).read_bytes()
        for path in sorted((asset / "gpufleet").iterdir())
        if path.name != "__init__.py" and path.suffix not in (".meta", ".spans")
    }


def imported_in_lambda(asset: Path, handlers: list[str]) -> list[str]:
    """Imports the HANDLERS modules as Lambda does and returns the asset's files that were imported (relative to it).

    A fresh interpreter, started in another folder, whose path is the asset first, then the standard library and
    the site-packages that hold boto3 (the Lambda Python runtime has boto3): -I leaves out the current folder and
    PYTHONPATH, -S the .pth files, among them the editable install's finder, which would find any gpufleet module the
    asset lacks in this checkout; -B writes no bytecode into the asset."""
    site_packages = Path(botocore.__file__).parent.parent
    probe = (
        "import importlib, sys\n"
        f"sys.path[:0] = [{str(asset)!r}]\n"
        f"sys.path.append({str(site_packages)!r})\n"
        f"for name in {handlers!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(m.__file__ for m in list(sys.modules.values()) if getattr(m, '__file__', None))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", probe], cwd=asset.parent, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    files = [Path(line) for line in result.stdout.splitlines()]
    from_checkout = [
        file for file in files if file.is_relative_to(ROOT / "gpufleet") or file.is_relative_to(ROOT / "stacks")
    ]
    assert from_checkout == []
    return sorted(str(file.relative_to(asset)) for file in files if file.is_relative_to(asset))
