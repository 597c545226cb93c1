"""Every validation rule: a failing example and the exact line `gpufleet validate` prints for it."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.errors import GpufleetError
from gpufleet.loading import check_environment, load_environment, load_pipeline, parse_environment
from gpufleet.rules import Problem
from gpufleet.validators import validate_environment
from tests.gpufleet.environment_files import VALID, changed, problems_of, with_change, write


def test_the_valid_example_has_no_problems(tmp_path):
    assert load_environment(write(tmp_path, VALID)).capacity.spot == 1


RULES = [
    ("name", "other", "name: 'other' differs from the file name (name it 'lab' or rename the file to other.yaml)"),
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
    (
        "instance_type",
        "p3.16xlarge",
        "instance_type: 'p3.16xlarge' is not in the instance catalog (allowed: "
        "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, g5.48xlarge, g5.8xlarge; add it to gpufleet/instance_types.yaml)",
    ),
    (
        "fleet.capacity_rebalance",
        {"termination_delay_seconds": 300},
        "fleet.capacity_rebalance."
        "termination_delay_seconds: only applies to replacement_strategy: launch-before-terminate (remove it)",
    ),
    ("ami", {}, "ami: set exactly one of ssm_parameter and id (e.g. ssm_parameter: /gpufleet/ami/p4d-ubuntu2204)"),
    (
        "ami.id",
        "ami-0123456789abcdef0",
        "ami: set exactly one of ssm_parameter and id (e.g. ssm_parameter: /gpufleet/ami/p4d-ubuntu2204)",
    ),
    (
        "node.mig_profile",
        "1g.10gb",
        "node.mig_profile: '1g.10gb' is not a MIG profile of the A100 40 GB "
        "(allowed: 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb)",
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
        (
            {"instance_type": "g5.48xlarge", "node.mig_profile": "1g.5gb"},
            "node.mig_profile: A10G GPUs of g5.48xlarge do not support MIG (remove mig_profile)",
        ),
        (
            {"fleet.type": "request", "fleet.capacity_rebalance": {"replacement_strategy": "launch"}},
            "fleet.capacity_rebalance: capacity rebalance needs a fleet that maintains capacity (set fleet.type: "
            "maintain or remove capacity_rebalance)",
        ),
        (
            {"fleet.type": "request", "fleet.rollout": "manual"},
            "fleet.rollout: a request fleet cannot be modified, so every change replaces it, a new image included "
            "(remove rollout, or set it to replace-all)",
        ),
    ],
)
def test_rules_that_combine_fields(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"instance_type": "p5.48xlarge", "network.cidr": "10.40.0.0/24", "capacity.target": 115},
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 115 nodes (p5.48xlarge, 1 per node) "
            "and 9 VPC endpoints need 124 (use /23 or larger)",
        ),
        (
            {
                "network.cidr": "10.40.0.0/24",
                "capacity.target": 60,
                "capacity.on_demand": 0,
                "fleet.capacity_rebalance": {"replacement_strategy": "launch"},
            },
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 120 nodes (p4d.24xlarge, 1 per node) "
            "and 9 VPC endpoints need 129 (use /23 or larger)",
        ),
        (
            # 242 nodes and 9 endpoints need 251 addresses: exactly what a /24 node subnet holds (256 - 5), so a /23 VPC
            {"network.cidr": "10.40.0.0/24", "capacity.target": 242, "capacity.on_demand": 242},
            "network.cidr: /24 leaves 123 addresses in the node subnet, but 242 nodes (p4d.24xlarge, 1 per node) "
            "and 9 VPC endpoints need 251 (use /23 or larger)",
        ),
    ],
    ids=["one-past-the-limit", "rebalance-doubles-spot", "suggestion-fits-exactly"],
)
def test_node_subnet_must_hold_every_address(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


# NCCL is not supported with MIG (MIG user guide, Deployment Considerations): MIG on an EFA cluster is a choice.
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"node.mig_profile": "3g.20gb"},
            "node.mig_profile: MIG on an EFA cluster: NCCL, what EFA clusters are for, is not supported with MIG "
            "(remove mig_profile, set efa: false, or state that each MIG instance works alone: "
            "node.mig_purpose: single-node-inference or independent-jobs)",
        ),
        (
            {"node.mig_profile": "3g.20gb", "node.mig_purpose": "training"},
            "node.mig_purpose: 'training' is not a MIG purpose (allowed: single-node-inference, independent-jobs)",
        ),
        (
            {"node.mig_purpose": "single-node-inference"},
            "node.mig_purpose: only applies with node.mig_profile (remove it, or set mig_profile)",
        ),
    ],
    ids=["efa-without-purpose", "unknown-purpose", "purpose-without-profile"],
)
def test_mig_on_an_efa_cluster_needs_a_stated_purpose(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


@pytest.mark.parametrize(
    "changes",
    [
        {"node.mig_profile": "3g.20gb", "node.mig_purpose": "single-node-inference"},
        {"node.mig_profile": "1g.5gb", "node.mig_purpose": "independent-jobs"},
        {"node.mig_profile": "3g.20gb", "efa": False},
    ],
    ids=["inference", "independent-jobs", "no-efa"],
)
def test_mig_with_a_purpose_or_without_efa_is_valid(tmp_path, changes):
    assert load_environment(write(tmp_path, changed(changes))).node.mig_profile == changes["node.mig_profile"]


def test_node_subnet_capacity_fits_at_the_limit(tmp_path):
    document = changed({"instance_type": "p5.48xlarge", "network.cidr": "10.40.0.0/24", "capacity.target": 114})
    assert load_environment(write(tmp_path, document)).capacity.target == 114


def test_efa_only_interfaces_take_no_address(tmp_path, monkeypatch):
    """A p5 node takes one address (its card-0 efa interface); without efa-only it would take 32."""
    from gpufleet import catalog

    document = changed({"instance_type": "p5.48xlarge", "network.cidr": "10.40.0.0/24", "capacity.target": 4})
    assert load_environment(write(tmp_path, document)).capacity.target == 4
    without_efa_only = catalog.load_catalog()["p5.48xlarge"].model_copy(update={"efa_only_interfaces": False})
    monkeypatch.setattr("gpufleet.validators.network.load_catalog", lambda: {"p5.48xlarge": without_efa_only})
    assert problems_of(tmp_path, document) == [
        "network.cidr: /24 leaves 123 addresses in the node subnet, but 4 nodes (p5.48xlarge, 32 per node) and 9 "
        "VPC endpoints need 137 (use /23 or larger)"
    ]


def test_without_efa_a_node_takes_one_address(tmp_path):
    document = changed({"efa": False, "network.cidr": "10.40.0.0/24", "capacity.target": 115})
    assert problems_of(tmp_path, document) == [
        "network.cidr: /24 leaves 123 addresses in the node subnet, but 115 nodes (p4d.24xlarge, 1 per node) and 9 "
        "VPC endpoints need 124 (use /23 or larger)"
    ]


def test_efa_requested_on_a_type_without_efa(tmp_path, monkeypatch):
    from gpufleet import catalog

    without_efa = catalog.load_catalog()["g5.8xlarge"].model_copy(update={"max_efa_interfaces": 0})
    monkeypatch.setattr(catalog, "load_catalog", lambda: {"g5.8xlarge": without_efa})
    monkeypatch.setattr("gpufleet.validators.node.load_catalog", lambda: {"g5.8xlarge": without_efa})
    assert problems_of(tmp_path, with_change("instance_type", "g5.8xlarge")) == [
        "efa: EFA requested but g5.8xlarge has no EFA (set efa: false or choose an EFA instance type)"
    ]


def test_every_rule_problem_is_reported_at_once(tmp_path):
    document = changed({"availability_zone": "us-west-2a", "capacity.on_demand": 3})
    assert problems_of(tmp_path, document) == [
        "availability_zone: 'us-west-2a' is not an availability zone of us-east-1 "
        "(the region name followed by one letter, e.g. us-east-1a)",
        "capacity.on_demand: 3 is outside the target capacity (0 to capacity.target, which is 2)",
    ]


def test_every_one_field_problem_is_reported_at_once_while_parsing(tmp_path):
    # Rules about one field alone are checked while parsing, so the rules that combine fields (here: on_demand
    # within target) wait until the file parses.
    document = changed(
        {
            "capacity.target": 0,
            "fleet.type": "once",
            "fleet.on_demand_allocation_strategy": "cheapest",
            "root_volume_gib": 20,
        }
    )
    assert problems_of(tmp_path, document) == [
        "capacity.target: 0 nodes is too few (at least 1)",
        "fleet.type: 'once' is not a fleet type (allowed: maintain, request)",
        "fleet.on_demand_allocation_strategy: 'cheapest' is not an on-demand allocation strategy "
        "(allowed: lowestPrice, prioritized)",
        "root_volume_gib: 20 GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)",
    ]


VALID_UNTIL = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
PASSED = Problem(
    "fleet.valid_until",
    "2027-01-01T00:00:00+00:00 has passed (set a future UTC time, or remove it, before launching nodes)",
    "warning",
)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (VALID_UNTIL - dt.timedelta(seconds=1), []),
        (VALID_UNTIL, [PASSED]),
        (VALID_UNTIL + dt.timedelta(days=31), [PASSED]),
    ],
    ids=["a-second-before", "the-moment-itself", "a-month-after"],
)
def test_valid_until_warns_from_the_moment_it_comes(tmp_path, now, expected):
    environment = parse_environment(write(tmp_path, with_change("fleet.valid_until", "2027-01-01T00:00:00Z")))
    assert validate_environment(environment, tmp_path / "lab.yaml", now=now) == expected


def test_a_time_without_zone_is_utc(tmp_path):
    environment = parse_environment(write(tmp_path, with_change("fleet.valid_until", "2027-01-01T00:00:00")))
    assert validate_environment(environment, tmp_path / "lab.yaml", now=VALID_UNTIL) == [PASSED]


def test_a_warning_line_says_so_and_an_error_line_does_not():
    path = Path("environments/lab.yaml")
    assert PASSED.line(path) == (
        "environments/lab.yaml: fleet.valid_until: warning: 2027-01-01T00:00:00+00:00 has passed (set a future UTC "
        "time, or remove it, before launching nodes)"
    )
    assert Problem("capacity.target", "0 nodes is too few (at least 1)").line(path) == (
        "environments/lab.yaml: capacity.target: 0 nodes is too few (at least 1)"
    )


EXPIRED = with_change("fleet.valid_until", "2020-01-01T00:00:00Z")
EXPIRED_WARNING = (
    "fleet.valid_until: warning: 2020-01-01T00:00:00+00:00 has passed (set a future UTC time, or remove it, "
    "before launching nodes)"
)


def test_a_date_that_has_passed_does_not_stop_loading_the_environment(tmp_path):
    """Synthesis (and so `cdk destroy`) loads environments this way."""
    path = write(tmp_path, EXPIRED)
    assert load_environment(path).fleet.valid_until == dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    environment, warnings = check_environment(path)
    assert (environment.name, warnings) == ("lab", [f"{path}: {EXPIRED_WARNING}"])


def test_cli_validate_prints_a_warning_and_exits_0(tmp_path, capsys):
    expired = write(tmp_path, EXPIRED)
    assert main(["validate", str(expired)]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"{expired}: {EXPIRED_WARNING}"]
    assert captured.out.splitlines() == [f"{expired}: ok (lab: 2 x p4d.24xlarge in us-east-1a)"]


def test_cli_validate_with_errors_elsewhere_exits_1_and_lists_the_warning_too(tmp_path, capsys):
    bad = write(tmp_path, changed({"name": "bad", "capacity.on_demand": 3}), name="bad")
    expired = write(tmp_path, EXPIRED)
    assert main(["validate", str(bad), str(expired)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{bad}: capacity.on_demand: 3 is outside the target capacity (0 to capacity.target, which is 2)",
        f"{expired}: {EXPIRED_WARNING}",
    ]


def test_cli_validate_exits_1_with_one_line_per_problem_and_no_traceback(tmp_path, capsys):
    bad = write(tmp_path, changed({"capacity.target": 0, "root_volume_gib": 20}))
    good = write(tmp_path, with_change("name", "good"), name="good")
    assert main(["validate", str(bad), str(good)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"{bad}: capacity.target: 0 nodes is too few (at least 1)",
        f"{bad}: root_volume_gib: 20 GiB is out of range (50 to 16384: the CUDA stack alone needs tens of GiB)",
    ]
    assert "Traceback" not in captured.err + captured.out


def test_cli_validate_defaults_to_every_shipped_environment(capsys):
    assert main(["validate"]) == 0
    shipped = sorted(Path("environments").glob("*.yaml"))
    assert len(shipped) >= 3
    assert len(capsys.readouterr().out.splitlines()) == len(shipped)


def test_cli_validate_missing_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 1
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'nope.yaml'}: cannot read file (No such file or directory)"


PIPELINE = load_pipeline(Path(__file__).resolve().parents[2] / "ami" / "pipeline.yaml")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"ami.ssm_parameter": "/gpufleet/ami/p5-cuda13"},
            "ami.ssm_parameter: /gpufleet/ami/p5-cuda13 is not published in us-east-1: the AMI pipeline builds "
            "p4d-ubuntu1804-cuda11, p4d-al2-cuda11, ubuntu2204-cuda12 (add p5-cuda13 to profiles in ami/pipeline.yaml)",
        ),
        (
            {"account": "210987654321"},
            "ami.ssm_parameter: /gpufleet/ami/p4d-ubuntu1804-cuda11 is published in account 123456789012, not in "
            "210987654321 (deploy in 123456789012, or set ami.id to an image shared with 210987654321)",
        ),
    ],
)
def test_an_environment_needs_its_image_published_where_it_deploys(tmp_path, changes, expected):
    path = write(tmp_path, changed(changes))
    with pytest.raises(GpufleetError) as raised:
        load_environment(path, ami_pipeline=PIPELINE)
    assert raised.value.problems == (f"{path}: {expected}",)
    # Without the pipeline (parsing alone, unit tests of other rules) the rule has nothing to compare with.
    assert load_environment(path).ami.ssm_parameter == changed(changes)["ami"]["ssm_parameter"]


@pytest.mark.parametrize(
    "changes",
    [
        {"region": "eu-central-1", "availability_zone": "eu-central-1a"},
        {"ami.ssm_parameter": "/team/images/ubuntu", "account": "210987654321"},
        {"ami.ssm_parameter": None, "ami.id": "ami-0123456789abcdef0", "account": "210987654321"},
    ],
)
def test_any_region_of_the_pipelines_account_and_images_of_other_origins_pass(tmp_path, changes):
    """A region is published because the environment reads the profile there (publish_regions)."""
    assert load_environment(write(tmp_path, changed(changes)), ami_pipeline=PIPELINE).name == "lab"


def test_cli_validate_checks_environments_against_the_ami_pipeline(tmp_path, capsys):
    unbuilt = write(tmp_path, with_change("ami.ssm_parameter", "/gpufleet/ami/p5-cuda13"))
    assert main(["validate", str(unbuilt)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{unbuilt}: ami.ssm_parameter: /gpufleet/ami/p5-cuda13 is not published in us-east-1")


def _random_text(length: int) -> str:
    """Text gzip cannot shrink much: the checkpoint hook is the one node setting of free length."""
    return "".join(random.Random(7).choices("abcdefghijklmnop0123456789", k=length))


def test_user_data_over_ec2s_limit_is_a_validation_problem(tmp_path):
    document = with_change("node", {"checkpoint_hook": "/usr/local/bin/save " + _random_text(20000)})
    (line,) = problems_of(tmp_path, document)
    assert line.startswith("node: the user data is ")
    assert line.endswith(
        " bytes compressed, over EC2's limit of 16384; turn off a node feature or shorten node.checkpoint_hook"
    )


def test_user_data_under_ec2s_limit_passes(tmp_path):
    document = with_change("node", {"checkpoint_hook": "/usr/local/bin/save " + _random_text(2000)})
    assert load_environment(write(tmp_path, document)).node.checkpoint_hook.startswith("/usr/local/bin/save ")


def test_a_hook_that_would_end_the_user_data_heredoc_is_a_validation_problem(tmp_path):
    document = with_change("node", {"checkpoint_hook": "save\nGPUFLEET_END_OF_FILE\nrm -rf /"})
    assert problems_of(tmp_path, document) == [
        "node: /etc/gpufleet/node.env: a line of its content is 'GPUFLEET_END_OF_FILE', which would end the heredoc "
        "early"
    ]


@pytest.mark.parametrize(
    ("changes", "rollout"),
    [
        ({}, "manual"),
        ({"fleet.rollout": "replace-all"}, "replace-all"),
        ({"fleet.type": "request"}, "replace-all"),
        ({"fleet.type": "request", "fleet.rollout": "replace-all"}, "replace-all"),
    ],
)
def test_image_rollout_of_a_fleet(tmp_path, changes, rollout):
    assert load_environment(write(tmp_path, changed(changes))).fleet.image_rollout == rollout


AUTO_SCALING = {"fleet.backend": "auto-scaling"}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"fleet.type": "request"},
            [
                "fleet.type: an Auto Scaling group always maintains its desired capacity; it has no one-shot request "
                "(remove type, or set backend: spot-fleet)"
            ],
        ),
        (
            {"fleet.valid_until": "2099-01-01T00:00:00Z"},
            [
                "fleet.valid_until: an Auto Scaling group has no end time; its nodes run until the stack is deleted "
                "(remove valid_until, or set backend: spot-fleet)"
            ],
        ),
        (
            {"fleet.replace_unhealthy_instances": False},
            [
                "fleet.replace_unhealthy_instances: an Auto Scaling group always replaces nodes that fail EC2 status "
                "checks (remove replace_unhealthy_instances, or set backend: spot-fleet)"
            ],
        ),
        (
            {
                "fleet.capacity_rebalance": {
                    "replacement_strategy": "launch-before-terminate",
                    "termination_delay_seconds": 300,
                }
            },
            [
                "fleet.capacity_rebalance.replacement_strategy: 'launch-before-terminate' is not available with an "
                "Auto Scaling group, whose capacity rebalancing launches a replacement and then terminates the old "
                "node (remove replacement_strategy, or set backend: spot-fleet)",
                "fleet.capacity_rebalance.termination_delay_seconds: an Auto Scaling group has no termination delay; "
                "its termination lifecycle hook gives the node time to checkpoint (remove termination_delay_seconds, "
                "or set backend: spot-fleet)",
            ],
        ),
        (
            {"fleet.allocation_strategy": "diversified"},
            [
                "fleet.allocation_strategy: 'diversified' has no Auto Scaling counterpart (allowed with backend: "
                "auto-scaling: priceCapacityOptimized, capacityOptimized, capacityOptimizedPrioritized, lowestPrice; "
                "or set backend: spot-fleet)"
            ],
        ),
    ],
)
def test_what_an_auto_scaling_group_cannot_do_is_refused(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(AUTO_SCALING | changes)) == expected


@pytest.mark.parametrize(
    "changes",
    [
        {"fleet.type": "request"},
        {"fleet.valid_until": "2099-01-01T00:00:00Z"},
        {"fleet.replace_unhealthy_instances": False},
        {"fleet.capacity_rebalance": {"replacement_strategy": "launch-before-terminate"}},
        {"fleet.allocation_strategy": "diversified"},
    ],
)
def test_the_same_settings_are_valid_for_a_spot_fleet(tmp_path, changes):
    assert load_environment(write(tmp_path, changed(changes))).fleet.backend == "spot-fleet"


def test_an_auto_scaling_environment_with_rebalancing_is_valid(tmp_path):
    document = changed(AUTO_SCALING | {"fleet.capacity_rebalance": {"replacement_strategy": "launch"}})
    assert load_environment(write(tmp_path, document)).fleet.backend == "auto-scaling"
