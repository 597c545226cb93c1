"""The network rules (gpufleet/validators/network.py): the availability zone, a new VPC or an existing one, and a
node subnet that holds every address; each with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import pytest

from gpufleet.loading import check_environment, load_environment
from tests.gpufleet.environment_files import changed, problems_of, with_change, write

RULES = [
    (
        "availability_zone",
        "us-west-2a",
        "availability_zone: 'us-west-2a' is not an availability zone of us-east-1 "
        "(the region name followed by one letter, e.g. us-east-1a)",
    ),
    (
        "network.vpc_id",
        "vpc-0a1b2c3d",
        "network: cidr and vpc_id/subnet_id both set (cidr creates a VPC; vpc_id "
        "and subnet_id import one: keep one of the two)",
    ),
]


@pytest.mark.parametrize(("field", "value", "expected"), RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in RULES])
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"network.cidr": None}, "network: no network chosen (set cidr for a new VPC, or both vpc_id and subnet_id)"),
        (
            {
                "network.cidr": None,
                "network.vpc_id": "vpc-0a1b2c3d",
                "network.subnet_id": "subnet-0a1b2c3d",
                "network.nat_gateway": True,
            },
            "network.nat_gateway: only a new VPC gets a NAT gateway (remove it, or use cidr)",
        ),
    ],
)
def test_rules_that_combine_fields(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"instance_type": "p5.48xlarge", "network.cidr": "10.40.0.0/24", "capacity.target": 114},
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 114 nodes (p5.48xlarge, 1 per node) "
            "and 10 VPC endpoints need 124 (use /23 or larger)",
        ),
        (
            {
                "network.cidr": "10.40.0.0/24",
                "capacity.target": 60,
                "capacity.on_demand": 0,
                "fleet.capacity_rebalance": {"replacement_strategy": "launch"},
            },
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 120 nodes (p4d.24xlarge, 1 per node) "
            "and 10 VPC endpoints need 130 (use /23 or larger)",
        ),
        (
            # 241 nodes and 10 endpoints need 251 addresses: exactly what a /24 node subnet holds (256 - 5), so a /23
            # VPC
            {"network.cidr": "10.40.0.0/24", "capacity.target": 241, "capacity.on_demand": 241},
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 241 nodes (p4d.24xlarge, 1 per node) "
            "and 10 VPC endpoints need 251 (use /23 or larger)",
        ),
        (
            # A /16 VPC, the largest allowed, has a /17 node subnet: 32768 - 5 = 32763 addresses, 32753 nodes and 10
            # endpoints.
            {"network.cidr": "10.40.0.0/24", "capacity.target": 32753, "capacity.on_demand": 32753},
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 32753 nodes (p4d.24xlarge, 1 per node) "
            "and 10 VPC endpoints need 32763 (use /16 or larger)",
        ),
        (
            {"network.cidr": "10.40.0.0/24", "capacity.target": 32754, "capacity.on_demand": 32754},
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 32754 nodes (p4d.24xlarge, 1 per node) "
            "and 10 VPC endpoints need 32764 (more than a /16, the largest VPC allowed, holds: lower capacity.target, "
            "or use an existing VPC (vpc_id, subnet_id))",
        ),
        (
            # Found by the fuzz suite: a number no VPC holds stopped `gpufleet validate` with StopIteration.
            {"network.cidr": "10.40.0.0/16", "capacity.target": 99999999999999999999, "capacity.on_demand": 0},
            "network.cidr: /16 leaves 32763 addresses in the node subnet, but 99999999999999999999 nodes "
            "(p4d.24xlarge, 1 per node) and 10 VPC endpoints need 100000000000000000009 (more than a /16, the largest "
            "VPC allowed, holds: lower capacity.target, or use an existing VPC (vpc_id, subnet_id))",
        ),
    ],
    ids=[
        "one-past-the-limit",
        "rebalance-doubles-spot",
        "suggestion-fits-exactly",
        "largest-vpc-fits-exactly",
        "one-past-the-largest-vpc",
        "a-number-no-vpc-holds",
    ],
)
def test_node_subnet_must_hold_every_address(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


def test_node_subnet_capacity_fits_at_the_limit(tmp_path):
    document = changed({"instance_type": "p5.48xlarge", "network.cidr": "10.40.0.0/24", "capacity.target": 113})
    assert load_environment(write(tmp_path, document)).capacity.target == 113


def test_efa_only_interfaces_take_no_address(tmp_path, monkeypatch):
    """A p5 node takes one address (its card-0 efa interface); without efa-only it would take 32."""
    from gpufleet import catalog

    document = changed({"instance_type": "p5.48xlarge", "network.cidr": "10.40.0.0/24", "capacity.target": 4})
    assert load_environment(write(tmp_path, document)).capacity.target == 4
    without_efa_only = catalog.load_catalog()["p5.48xlarge"].model_copy(update={"efa_only_interfaces": False})
    monkeypatch.setattr("gpufleet.validators.network.load_catalog", lambda: {"p5.48xlarge": without_efa_only})
    assert problems_of(tmp_path, document) == [
        "network.cidr: /24 leaves 123 addresses in the node subnet, but 4 nodes (p5.48xlarge, 32 per node) and 10 "
        "VPC endpoints need 138 (use /23 or larger)"
    ]


def test_without_efa_a_node_takes_one_address(tmp_path):
    document = changed({"efa": False, "network.cidr": "10.40.0.0/24", "capacity.target": 115})
    assert problems_of(tmp_path, document) == [
        "network.cidr: /24 leaves 123 addresses in the node subnet, but 115 nodes (p4d.24xlarge, 1 per node) and 10 "
        "VPC endpoints need 125 (use /23 or larger)"
    ]


def test_an_auto_scaling_groups_vpc_counts_the_auto_scaling_endpoint_too(tmp_path):
    """Its nodes complete the group's lifecycle actions (gpufleet.node_calls): one interface endpoint more."""
    asg = {"fleet.backend": "auto-scaling", "efa": False, "network.cidr": "10.40.0.0/24"}
    assert load_environment(write(tmp_path, changed({**asg, "capacity.target": 112}))).capacity.target == 112
    assert problems_of(tmp_path, changed({**asg, "capacity.target": 113})) == [
        "network.cidr: /24 leaves 123 addresses in the node subnet, but 113 nodes (p4d.24xlarge, 1 per node) and 11 "
        "VPC endpoints need 124 (use /23 or larger)"
    ]


NO_NAT = (
    "network.nat_gateway: warning: no NAT gateway: the nodes reach AWS through the VPC's endpoints only, so a run's "
    "--setup that installs from PyPI (as the guides do) or downloads anything else from the internet fails; set "
    "nat_gateway: true, or bring packages in through S3 (docs/guides/environments.md, What needs a NAT gateway)"
)


@pytest.mark.parametrize(
    ("changes", "warnings"),
    [
        ({"network.nat_gateway": None}, [NO_NAT]),
        ({"network.nat_gateway": False}, [NO_NAT]),
        ({"network.nat_gateway": True}, []),
        # An existing VPC's routes are preflight's to check: validate cannot see them.
        (
            {
                "network.cidr": None,
                "network.nat_gateway": None,
                "network.vpc_id": "vpc-0a1b2c3d",
                "network.subnet_id": "subnet-0a1b2c3d",
            },
            [],
        ),
    ],
    ids=["new-vpc", "nat-off", "nat-on", "existing-vpc"],
)
def test_a_new_vpc_without_a_nat_gateway_warns_that_setup_installs_need_one(tmp_path, changes, warnings):
    path = write(tmp_path, changed(changes))
    environment, lines = check_environment(path)
    assert [line.removeprefix(f"{path}: ") for line in lines] == warnings
    assert environment.name == "lab"
