"""Environment files for the tests of the environment model, its rules and loading: a valid document, that document
with changes, and the problems loading a file reports (without the file name each line starts with)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gpufleet.errors import GpufleetError
from gpufleet.loading import load_environment

VALID = {
    "name": "lab",
    "account": "123456789012",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "network": {"cidr": "10.40.0.0/16", "nat_gateway": True},
    "instance_type": "p4d.24xlarge",
    "capacity": {"target": 2, "on_demand": 1},
    "ami": {"ssm_parameter": "/gpufleet/ami/p4d-ubuntu1804-cuda11"},
}


# The lab environment on the eks flavour: a new VPC with its NAT gateway, control-plane subnets in two AZs, no image.
VALID_EKS = {
    **{key: value for key, value in VALID.items() if key != "ami"},
    "flavour": "eks",
    "network": {"cidr": "10.40.0.0/16", "nat_gateway": True},
    "eks": {
        "kubernetes_version": "1.35",
        "admin_principal_arns": ["arn:aws:iam::123456789012:role/Admin"],
        "control_plane_availability_zones": ["us-east-1a", "us-east-1b"],
    },
}


def changed(changes: dict[str, object], base: dict | None = None) -> dict:
    """VALID (or base) with dotted keys set (a value of None removes the key)."""
    document = copy.deepcopy(VALID if base is None else base)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = document
        for parent in parents:
            node = node.setdefault(parent, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return document


def with_change(path: str, value: object) -> dict:
    return changed({path: value})


def write(tmp_path: Path, document: object, name: str = "lab") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    return path


def problems_of(tmp_path: Path, document: object, name: str = "lab") -> list[str]:
    path = write(tmp_path, document, name)
    with pytest.raises(GpufleetError) as raised:
        load_environment(path)
    return [line.removeprefix(f"{path}: ") for line in raised.value.problems]


# Every node on demand: a reservation or Capacity Block with no spot part.
ALL_ON_DEMAND = {"capacity.target": 2, "capacity.on_demand": 2}
FALLBACK = {"after_minutes": 15, "restore_after_minutes": 30, "max_extra_on_demand": 2}


def with_fallback(**changes) -> dict:
    """The valid lab environment with four nodes, one on demand, and a fallback; dotted keys changed."""
    return changed({"capacity.target": 4, "capacity.on_demand": 1, "fleet.fallback": dict(FALLBACK), **changes})
