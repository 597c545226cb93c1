"""The eks flavour's rules (gpufleet/validators/eks.py and the eks branches of the capacity rules) and its section's
one-field rules (gpufleet/environment.py), each with the exact line `gpufleet validate` prints; and the fleet
flavour's own rules, which an eks file does not meet."""

from __future__ import annotations

import datetime as dt

import pytest

from gpufleet.constants import FLAVOUR_EKS
from gpufleet.loading import load_environment, parse_environment
from gpufleet.rules import Problem
from gpufleet.validators import validate_environment
from tests.gpufleet.environment_files import ALL_ON_DEMAND, VALID, VALID_EKS, changed, problems_of, write


def eks_with(changes: dict[str, object]) -> dict:
    return changed(changes, base=VALID_EKS)


def test_the_valid_eks_document_loads(tmp_path):
    env = load_environment(write(tmp_path, VALID_EKS))
    assert env.flavour == FLAVOUR_EKS
    assert env.ami is None
    assert env.eks is not None and env.eks.kubernetes_version == "1.35"


def test_the_flavour_is_fleet_unless_the_file_says_otherwise(tmp_path):
    assert load_environment(write(tmp_path, VALID)).flavour == "fleet"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"flavour": "k8s"}, "flavour: 'k8s' is not a flavour (allowed: fleet, eks)"),
        (
            {"eks": None},
            "eks: required key is missing (the eks flavour needs at least kubernetes_version and admin_principal_arns)",
        ),
        (
            {"eks.kubernetes_version": "1.34"},
            "eks.kubernetes_version: '1.34' is not a Kubernetes version gpufleet pins (allowed: 1.35)",
        ),
        ({"eks.kubernetes_version": None}, "eks.kubernetes_version: required key is missing"),
        (
            {"eks.admin_principal_arns": []},
            "eks.admin_principal_arns: no principal (name at least one IAM role or user ARN: without one no one can "
            "reach the cluster)",
        ),
        (
            {"eks.admin_principal_arns": ["arn:aws:iam::123456789012:role/A", "arn:aws:iam::123456789012:role/A"]},
            "eks.admin_principal_arns: ['arn:aws:iam::123456789012:role/A', 'arn:aws:iam::123456789012:role/A'] "
            "names a principal twice (an access entry per principal: list each once)",
        ),
        (
            {"eks.admin_principal_arns": ["arn:aws:sts::123456789012:assumed-role/Admin/me"]},
            "eks.admin_principal_arns.0: 'arn:aws:sts::123456789012:assumed-role/Admin/me' is not an IAM role or "
            "user ARN (e.g. arn:aws:iam::123456789012:role/Admin)",
        ),
        (
            {"eks.system_nodes.count": 0},
            "eks.system_nodes.count: 0 is out of range (1 to 450: CoreDNS and the operators need a node, and a "
            "managed node group holds at most 450)",
        ),
        (
            {"eks.system_nodes.count": 451},
            "eks.system_nodes.count: 451 is out of range (1 to 450: CoreDNS and the operators need a node, and a "
            "managed node group holds at most 450)",
        ),
        (
            {"eks.system_nodes.instance_type": "large"},
            "eks.system_nodes.instance_type: 'large' is not an EC2 instance type (e.g. m6i.large)",
        ),
        (
            {"eks.add_ons.kueue": True},
            "eks.add_ons.kueue: unknown key (allowed here: efa_device_plugin, nvidia_device_plugin, mpi_operator, "
            "fsx_csi_driver)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["0.0.0.0/0"]},
            "eks.endpoint_public_cidrs.0: '0.0.0.0/0' opens the API to much of the internet (at most /8 wide: name "
            "the networks kubectl runs from, e.g. your offices' or VPN's egress addresses)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["1.2.3.0/24", "2.0.0.0/7"]},
            "eks.endpoint_public_cidrs.1: '2.0.0.0/7' opens the API to much of the internet (at most /8 wide: name "
            "the networks kubectl runs from, e.g. your offices' or VPN's egress addresses)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["1.2.3.4/24"]},
            "eks.endpoint_public_cidrs.0: '1.2.3.4/24' is not an IPv4 network in CIDR notation (1.2.3.4/24 has host "
            "bits set; an address and a prefix length, /32 for one address)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["2001:db8::/32"]},
            "eks.endpoint_public_cidrs.0: '2001:db8::/32' is not an IPv4 network in CIDR notation (Expected 4 octets "
            "in '2001:db8::'; an address and a prefix length, /32 for one address)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["10.0.0.0/8"]},
            "eks.endpoint_public_cidrs.0: '10.0.0.0/8' is a private or reserved range, which EKS refuses on the public "
            "endpoint (the nodes and hosts in the VPC reach the private endpoint anyway: name public egress addresses)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["203.0.113.5/32"]},
            "eks.endpoint_public_cidrs.0: '203.0.113.5/32' is a private or reserved range, which EKS refuses on the "
            "public endpoint (the nodes and hosts in the VPC reach the private endpoint anyway: name public egress "
            "addresses)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["224.0.0.0/24"]},
            "eks.endpoint_public_cidrs.0: '224.0.0.0/24' is a private or reserved range, which EKS refuses on the "
            "public endpoint (the nodes and hosts in the VPC reach the private endpoint anyway: name public egress "
            "addresses)",
        ),
        (
            {"eks.endpoint_public_cidrs": [f"1.2.3.{host}/32" for host in range(41)]},
            "eks.endpoint_public_cidrs: 41 networks, but EKS allows at most 40 on a cluster's public endpoint (a quota "
            "it does not raise: merge neighbouring networks)",
        ),
        (
            {"eks.endpoint_public_cidrs": ["1.2.3.0/24", "1.2.4.8/32", "1.2.3.0/24"]},
            "eks.endpoint_public_cidrs: 1.2.3.0/24 listed twice (list each network once)",
        ),
        (
            {"eks.control_plane_log_retention_days": 31},
            "eks.control_plane_log_retention_days: 31 is not a CloudWatch Logs retention (allowed: 1, 3, 5, 7, 14, "
            "30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)",
        ),
        (
            {"eks.control_plane_subnet_ids": ["subnet-12"]},
            "eks.control_plane_subnet_ids.0: 'subnet-12' is not a subnet id (subnet- followed by 8 or 17 hex digits)",
        ),
    ],
)
def test_the_eks_section_rules(tmp_path, changes, expected):
    assert problems_of(tmp_path, eks_with(changes)) == [expected]


@pytest.mark.parametrize(
    "changes",
    [
        {"eks.system_nodes.count": 1},
        {"eks.system_nodes.count": 450},
        {"eks.admin_principal_arns": ["arn:aws:iam::123456789012:user/ops", "arn:aws-cn:iam::123456789012:role/a/b"]},
        {"eks.control_plane_availability_zones": ["us-east-1a", "us-east-1b", "us-east-1c"]},
        {"eks.endpoint_public_cidrs": []},
        {"eks.endpoint_public_cidrs": ["11.0.0.0/8"]},
        {"eks.endpoint_public_cidrs": [f"1.2.3.{host}/32" for host in range(40)]},
    ],
)
def test_values_at_and_inside_the_bounds_load(tmp_path, changes):
    load_environment(write(tmp_path, eks_with(changes)))


def test_an_eks_section_on_the_fleet_flavour_is_refused(tmp_path):
    document = changed({"eks": VALID_EKS["eks"]})
    assert problems_of(tmp_path, document) == ["eks: set, but flavour is fleet (set flavour: eks, or remove eks)"]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"eks.control_plane_availability_zones": None},
            [
                "eks.control_plane_availability_zones: required key is missing with network.cidr (EKS needs "
                "control-plane subnets in 2 availability zones: name them, e.g. [us-east-1a, us-east-1b])"
            ],
        ),
        (
            {"eks.control_plane_availability_zones": ["us-east-1a", "us-east-1a"]},
            [
                "eks.control_plane_availability_zones: 1 distinct availability zones, but EKS needs control-plane "
                "subnets in at least 2 (e.g. [us-east-1a, us-east-1b])"
            ],
        ),
        (
            {"eks.control_plane_availability_zones": ["us-east-1a", "us-west-2b"]},
            [
                "eks.control_plane_availability_zones: 'us-west-2b' is not an availability zone of us-east-1 (the "
                "region name followed by one letter, e.g. us-east-1a)"
            ],
        ),
        (
            {"eks.control_plane_subnet_ids": ["subnet-0a1b2c3d", "subnet-0a1b2c3e"]},
            [
                "eks.control_plane_subnet_ids: only an existing VPC takes subnet ids (network.cidr creates the VPC and "
                "its subnets: name control_plane_availability_zones instead)"
            ],
        ),
    ],
)
def test_a_new_vpc_gets_control_plane_subnets_in_two_zones(tmp_path, changes, expected):
    assert problems_of(tmp_path, eks_with(changes)) == expected


EXISTING_VPC = {
    "network": {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d"},
    "eks.control_plane_availability_zones": None,
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {},
            "eks.control_plane_subnet_ids: 0 distinct subnets, but EKS needs subnets in at least 2 availability zones "
            "(name two or more subnets of vpc-0a1b2c3d in different availability zones)",
        ),
        (
            {"eks.control_plane_subnet_ids": ["subnet-0a1b2c3d", "subnet-0a1b2c3d"]},
            "eks.control_plane_subnet_ids: 1 distinct subnets, but EKS needs subnets in at least 2 availability zones "
            "(name two or more subnets of vpc-0a1b2c3d in different availability zones)",
        ),
        (
            {
                "eks.control_plane_subnet_ids": ["subnet-0a1b2c3d", "subnet-0a1b2c3e"],
                "eks.control_plane_availability_zones": ["us-east-1a", "us-east-1b"],
            },
            "eks.control_plane_availability_zones: only a new VPC (network.cidr) gets control-plane subnets from "
            "gpufleet (in an existing VPC name control_plane_subnet_ids instead)",
        ),
    ],
)
def test_an_existing_vpc_names_its_control_plane_subnets(tmp_path, changes, expected):
    assert problems_of(tmp_path, eks_with({**EXISTING_VPC, **changes})) == [expected]


def test_an_existing_vpc_with_two_control_plane_subnets_loads(tmp_path):
    document = eks_with({**EXISTING_VPC, "eks.control_plane_subnet_ids": ["subnet-0a1b2c3d", "subnet-0a1b2c3e"]})
    load_environment(write(tmp_path, document))


def test_a_new_vpc_needs_its_nat_gateway(tmp_path):
    assert problems_of(tmp_path, eks_with({"network.nat_gateway": False})) == [
        "network.nat_gateway: the eks flavour pulls images from registries outside AWS (nvcr.io, Docker Hub) and "
        "charts from their repositories; the VPC endpoints reach AWS services only (set nat_gateway: true)"
    ]


def test_fleet_options_written_in_an_eks_file_are_refused_one_line_each(tmp_path):
    document = eks_with(
        {
            "ami": {"id": "ami-0123456789abcdef0"},
            "fleet": {"type": "maintain"},
            "monitoring": {"log_retention_days": 30},
            "node.max_clocks": True,
            "node.scratch_mount": "/data",
            "node.raid0_nvme": False,
        }
    )
    node_reason = "not an eks option: gpufleet's node scripts do it, and the eks nodes do not run them (remove it)"
    assert problems_of(tmp_path, document) == [
        "ami: not an eks option: the GPU nodes boot EKS's AL2023 NVIDIA image (a custom image in a managed node "
        "group's launch template gets no EKS bootstrap: EKS user guide, launch-templates) (remove it)",
        "fleet: not an eks option: EKS managed node groups keep the nodes running (no Spot Fleet or gpufleet Auto "
        "Scaling group) (remove it)",
        "monitoring: not an eks option: its CloudWatch agent configuration travels in gpufleet's node scripts, "
        "which the eks nodes do not run (remove it)",
        f"node.max_clocks: {node_reason}",
        f"node.scratch_mount: {node_reason}",
    ]


def test_the_fleet_flavours_own_rules_are_not_checked_on_eks(tmp_path):
    """A fleet file with these values fails the request-fleet rollout rule and the MIG-on-EFA rule; on eks the
    options are refused as fleet options, and those rules say nothing."""
    fleet_problems = problems_of(
        tmp_path, changed({"fleet.type": "request", "fleet.rollout": "manual", "node.mig_profile": "3g.20gb"})
    )
    assert any(line.startswith("fleet.rollout:") for line in fleet_problems)
    assert any(line.startswith("node.mig_profile: MIG on an EFA cluster") for line in fleet_problems)
    eks_problems = problems_of(
        tmp_path, eks_with({"fleet.type": "request", "fleet.rollout": "manual", "node.mig_profile": "3g.20gb"})
    )
    assert [line.split(":")[0] for line in eks_problems] == ["fleet", "node.mig_profile"]


def test_the_fleet_flavour_needs_an_image(tmp_path):
    assert problems_of(tmp_path, changed({"ami": None})) == [
        "ami: required key is missing (the fleet flavour's nodes boot the image it names: set ssm_parameter, id or "
        "deep_learning_ami)"
    ]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {
                **{"capacity.target": 2, "capacity.on_demand": 2},
                "capacity.reservation": {"ids": ["cr-0123456789abcdef0", "cr-0123456789abcdef1"]},
            },
            "capacity.reservation.ids: 2 reservations, but an EKS managed node group's launch template targets one "
            "(list one id, or put the reservations in a resource group and set resource_group_arn)",
        ),
        (
            {"capacity.reservation": {"ids": ["cr-0123456789abcdef0"], "preference": "first"}},
            "capacity.reservation.preference: first needs an Auto Scaling group of gpufleet's own: an EKS managed "
            "node group launches from a launch template, which cannot launch into reservations first and then into "
            "plain on-demand capacity (set preference: only)",
        ),
    ],
)
def test_a_managed_node_groups_launch_template_targets_one_reservation(tmp_path, changes, expected):
    assert problems_of(tmp_path, eks_with(changes)) == [expected]


BLOCK = {"reservation_id": "cr-0123456789abcdef0", "start": "2099-01-05T11:30:00Z", "end": "2099-01-12T11:30:00Z"}


def test_a_capacity_block_loads_on_eks(tmp_path):
    """No fleet.backend to set: the fleet rule that asks for auto-scaling says nothing on eks."""
    document = eks_with({**ALL_ON_DEMAND, "capacity.capacity_block": BLOCK})
    assert load_environment(write(tmp_path, document)).capacity.capacity_block.reservation_id == "cr-0123456789abcdef0"


def test_every_node_of_an_eks_capacity_block_is_in_the_block(tmp_path):
    document = eks_with({**ALL_ON_DEMAND, "capacity.on_demand": 1, "capacity.capacity_block": BLOCK})
    assert problems_of(tmp_path, document) == [
        "capacity.capacity_block: 1 of the 2 nodes are spot, but every node in a Capacity Block is a capacity-block "
        "instance (set capacity.on_demand to 2)"
    ]


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        pytest.param(
            "2099-01-05T12:10:00Z",
            [
                "capacity.capacity_block.end: 2099-01-05 12:10 UTC leaves no time after the start, 2099-01-05 11:30 "
                "UTC: the nodes are scaled in 40 minutes before the end (copy StartDate and EndDate from "
                "DescribeCapacityReservations, with their time zone)"
            ],
            id="eks-scale-in-at-the-start",
        ),
        # 40 minutes and one second: EKS's lead, not the fleet flavour's 50 minutes.
        pytest.param("2099-01-05T12:10:01Z", [], id="one-second-of-nodes"),
    ],
)
def test_an_eks_block_leaves_its_nodes_time_before_ekss_scale_in(tmp_path, end, expected):
    document = eks_with({**ALL_ON_DEMAND, "capacity.capacity_block": {**BLOCK, "end": end}})
    if expected:
        assert problems_of(tmp_path, document) == expected
    else:
        assert load_environment(write(tmp_path, document)).capacity.capacity_block.end.second == 1


EKS_ENDED = (
    "the block's nodes were scaled in at 2099-01-12 10:50 UTC, 40 minutes before it ends (2099-01-12 11:30 UTC): a "
    "deploy launches no node (set the reservation_id, start and end of a new block, or tear the cluster down)"
)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param(dt.datetime(2099, 1, 12, 10, 49, 59, tzinfo=dt.UTC), [], id="just-before-ekss-scale-in"),
        pytest.param(
            dt.datetime(2099, 1, 12, 10, 50, tzinfo=dt.UTC),
            [Problem("capacity.capacity_block.end", EKS_ENDED, "warning")],
            id="at-ekss-scale-in",
        ),
    ],
)
def test_an_eks_block_past_ekss_scale_in_warns(tmp_path, now, expected):
    path = write(tmp_path, eks_with({**ALL_ON_DEMAND, "capacity.capacity_block": BLOCK}))
    assert validate_environment(parse_environment(path), path, now=now) == expected


# Every row of the EKS user guide's add-ons-images table (and mx-central-1 from amazon-eks-ami's get-ecr-uri.sh),
# written out again: gpufleet/constants.py says where each comes from.
ADD_ON_REGISTRY_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-northeast-1": "602401143452",
    "ap-northeast-2": "602401143452",
    "ap-northeast-3": "602401143452",
    "ap-south-1": "602401143452",
    "ap-south-2": "900889452093",
    "ap-southeast-1": "602401143452",
    "ap-southeast-2": "602401143452",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-central-1": "602401143452",
    "ca-west-1": "761377655185",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "eu-central-1": "602401143452",
    "eu-central-2": "900612956339",
    "eu-north-1": "602401143452",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "eu-west-1": "602401143452",
    "eu-west-2": "602401143452",
    "eu-west-3": "602401143452",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "sa-east-1": "602401143452",
    "us-east-1": "602401143452",
    "us-east-2": "602401143452",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
    "us-west-1": "602401143452",
    "us-west-2": "602401143452",
}


def test_the_add_on_registry_table_is_the_user_guides_row_for_row():
    from gpufleet.constants import EKS_ADD_ON_REGISTRY_ACCOUNTS

    assert EKS_ADD_ON_REGISTRY_ACCOUNTS == ADD_ON_REGISTRY_ACCOUNTS


@pytest.mark.parametrize(
    ("region", "account"),
    [
        # The regions issue 30 found served from the wrong account: none of them is 602401143452.
        ("ca-west-1", "761377655185"),
        ("cn-northwest-1", "961992271922"),
        ("eu-central-2", "900612956339"),
        ("eu-south-1", "590381155156"),
        ("eu-south-2", "455263428931"),
        ("il-central-1", "066635153087"),
        ("me-south-1", "558608220178"),
        ("me-central-1", "759879836304"),
        ("us-gov-east-1", "151742754352"),
        ("us-gov-west-1", "013241004608"),
    ],
)
def test_the_regions_that_the_old_fallback_got_wrong(region, account):
    from gpufleet.constants import EKS_ADD_ON_REGISTRY_ACCOUNTS

    assert EKS_ADD_ON_REGISTRY_ACCOUNTS[region] == account


def in_region(region: str) -> dict:
    return eks_with(
        {
            "region": region,
            "availability_zone": f"{region}a",
            "eks.control_plane_availability_zones": [f"{region}a", f"{region}b"],
        }
    )


@pytest.mark.parametrize("region", ["me-west-1", "sa-west-1", "us-iso-east-1"])
def test_an_eks_environment_in_a_region_without_a_known_registry_is_refused(tmp_path, region):
    """Regions the pinned botocore knows and the table does not: the EFA plugin's image would have no registry."""
    assert problems_of(tmp_path, in_region(region)) == [
        f"region: '{region}' has no EKS add-on image registry in gpufleet's table (gpufleet/constants.py "
        "EKS_ADD_ON_REGISTRY_ACCOUNTS, from the EKS user guide's add-ons-images page): choose a region listed there, "
        "or add the region's row from that page"
    ]


@pytest.mark.parametrize("region", ["mx-central-1", "eu-south-2", "us-gov-west-1"])
def test_an_eks_environment_in_a_listed_region_loads(tmp_path, region):
    assert load_environment(write(tmp_path, in_region(region))).region == region


def test_a_fleet_environment_needs_no_add_on_registry(tmp_path):
    document = changed({"region": "me-west-1", "availability_zone": "me-west-1a"}, base=VALID)
    assert load_environment(write(tmp_path, document)).region == "me-west-1"
