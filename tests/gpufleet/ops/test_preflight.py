"""gpufleet preflight against moto, with botocore Stubber for what moto lacks.

moto 5.2.5 implements DescribeInstanceTypeOfferings, DescribeInstanceTypes, DescribeSpotPriceHistory, SSM and
DescribeImages, so those checks run against moto. It does NOT implement GetSpotPlacementScores (NotImplementedError),
and its Service Quotas GetServiceQuota knows only the vpc service (NoSuchResourceException for ec2): the quota checks
run with Stubber on Service Quotas and the instances already running launched in moto (run_instances; spot through
InstanceMarketOptions, which moto reports as InstanceLifecycle "spot"); the placement-score checks run with Stubber;
the end-to-end runs replace placement_scores.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from gpufleet.catalog import load_catalog
from gpufleet.environment import Environment
from gpufleet.loading import environments_dir, load_environment, load_named_environment
from gpufleet.ops import preflight
from tests.gpufleet.environment_files import VALID_EKS, write
from tests.gpufleet.ops.variants import capacity_block, fallback, with_capacity, with_fleet

P4D = load_catalog()["p4d.24xlarge"]
NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def node_image(node_image_id: str) -> str:
    """The image that the dev environment's SSM parameter names."""
    image_id = node_image_id
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name="/gpufleet/ami/p4d-ubuntu1804-cuda11", Value=image_id, Type="String", DataType="aws:ec2:image"
    )
    return image_id


@pytest.fixture
def scores(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Placement scores by AZ id, served instead of moto's missing GetSpotPlacementScores."""
    by_zone_id: dict[str, int] = {}
    monkeypatch.setattr(preflight, "placement_scores", lambda ec2, instance_type, region, capacity: by_zone_id)
    return by_zone_id


def create_service_linked_role(name: str, service: str) -> None:
    """What `aws iam create-service-linked-role --aws-service-name SERVICE` leaves: role NAME under
    /aws-service-role/SERVICE/. moto's CreateServiceLinkedRole knows neither Spot service and would name the role
    AWSServiceRoleForspot(fleet), so the role is made as IAM names it."""
    boto3.client("iam", region_name="us-east-1").create_role(
        RoleName=name,
        Path=f"/aws-service-role/{service}/",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
            }
        ),
    )


@pytest.fixture
def spot_roles(moto: None) -> None:
    """Both service-linked roles that spot requests through the API need, as the EC2 console would create them."""
    create_service_linked_role("AWSServiceRoleForEC2SpotFleet", "spotfleet.amazonaws.com")
    create_service_linked_role("AWSServiceRoleForEC2Spot", "spot.amazonaws.com")


def statuses(document: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["status"] for check in document["checks"]}


def test_dev_passes_against_moto(node_image: str, spot_roles: None, scores: dict[str, int], run_cli) -> None:
    scores["use1-az6"] = 8  # us-east-1a in moto
    code, out, err = run_cli("preflight", "dev")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Preflight dev: 2 x p4d.24xlarge (1 on-demand, 1 spot) in us-east-1a, fleet.backend spot-fleet"
    assert lines[-1] == "preflight passed"
    assert any(line.startswith("pass    offering") for line in lines)


def test_json_reports_every_check(node_image: str, spot_roles: None, scores: dict[str, int], run_json) -> None:
    scores["use1-az6"] = 8
    code, document = run_json("preflight", "dev")
    assert code == 0 and document["ok"] is True
    assert document["backend"] == "spot-fleet"
    # moto's GetServiceQuota knows no ec2 quotas: that is reported as a warn with the reason, not a crash.
    assert statuses(document) == {
        "offering": "pass",
        "efa": "pass",
        "quota-on-demand": "warn",
        "quota-spot": "warn",
        "ami": "pass",
        "reachability": "pass",  # a new VPC: checked at synthesis
        "spot-score": "pass",
        "spot-price": "pass",
        "service-roles": "pass",
        "valid-until": "pass",
        "spot-fleet-api": "pass",  # moto answers the dry run with DryRunOperation (see the moto fixture)
        "autoscaling-api": "pass",  # skipped: the spot-fleet backend
    }
    quota = next(check for check in document["checks"] if check["name"] == "quota-spot")
    assert "NoSuchResourceException" in quota["detail"]


def test_type_not_offered_in_the_az_fails(node_image: str, scores: dict[str, int], environments, run_json) -> None:
    environments("elsewhere", zone="us-east-1e")
    code, document = run_json("preflight", "elsewhere")
    assert code == 1 and document["ok"] is False
    offering = document["checks"][0]
    assert offering["status"] == "fail"
    assert (
        "not offered in us-east-1e (offered in: us-east-1a, us-east-1b, us-east-1c, us-east-1d)" in offering["detail"]
    )


def test_missing_ami_parameter_fails(moto: None, scores: dict[str, int], run_json) -> None:
    code, document = run_json("preflight", "dev")
    assert code == 1
    ami = next(check for check in document["checks"] if check["name"] == "ami")
    assert ami["status"] == "fail" and "SSM parameter /gpufleet/ami/p4d-ubuntu1804-cuda11 not found" in ami["detail"]


def test_parameter_naming_a_missing_image_fails(moto: None, scores: dict[str, int], run_json) -> None:
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name="/gpufleet/ami/p4d-ubuntu1804-cuda11", Value="ami-0123456789abcdef0", Type="String"
    )
    code, document = run_json("preflight", "dev")
    assert code == 1
    ami = next(check for check in document["checks"] if check["name"] == "ami")
    assert ami["status"] == "fail" and "ami-0123456789abcdef0" in ami["detail"]


def test_efa_disagreeing_with_the_catalog_fails(moto: None) -> None:
    wrong_catalog = P4D.model_copy(update={"max_efa_interfaces": 2})
    check = preflight.check_efa(
        boto3.client("ec2", region_name="us-east-1"), load_named_environment("dev"), wrong_catalog
    )
    assert check.status == "fail"
    assert "EC2 reports EFA supported=True, 4 EFA interfaces, 4 network cards" in check.detail


QUOTA_NAMES = {
    "L-417A185B": "Running On-Demand P instances",
    "L-7212CCBC": "All P4, P3 and P2 Spot Instance Requests",
    "L-C4BD4855": "All P5 Spot Instance Requests",
    "L-DB2E81BA": "Running On-Demand G and VT instances",
}


def quota_response(code: str, value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": QUOTA_NAMES[code], "Value": value}}


def stubbed_quota(code: str, value: float) -> Stubber:
    """Stubber on Service Quotas answering one GetServiceQuota of CODE (moto knows no ec2 quotas)."""
    stub = Stubber(boto3.client("service-quotas", region_name="us-east-1"))
    stub.add_response("get_service_quota", quota_response(code, value), {"ServiceCode": "ec2", "QuotaCode": code})
    stub.activate()
    return stub


def launch(image_id: str, instance_type: str, lifecycle: str = "on-demand", environment: str | None = None) -> str:
    """One instance already running in moto; spot ones come back with InstanceLifecycle "spot". ENVIRONMENT: the
    gpufleet:environment tag the node launch template gives an environment's nodes."""
    market = {"InstanceMarketOptions": {"MarketType": "spot"}} if lifecycle == "spot" else {}
    if environment is not None:
        market["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": [{"Key": "gpufleet:environment", "Value": environment}]}
        ]
    reservation = boto3.client("ec2", region_name="us-east-1").run_instances(
        ImageId=image_id, InstanceType=instance_type, MinCount=1, MaxCount=1, **market
    )
    return reservation["Instances"][0]["InstanceId"]


def quota_check(env: str | Environment, lifecycle: str, quotas: Stubber, spec: Any = P4D) -> preflight.Check:
    """ENV: an environment's name, or an Environment (a variant no file has)."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    environment = load_named_environment(env) if isinstance(env, str) else env
    check = preflight.check_vcpu_quota(ec2, quotas.client, environment, spec, lifecycle)
    quotas.assert_no_pending_responses()
    return check


@pytest.mark.parametrize(
    ("lifecycle", "code", "quota", "status", "detail"),
    [
        (
            "on-demand",
            "L-417A185B",
            192.0,
            "pass",
            "Running On-Demand P instances (L-417A185B): quota 192 vCPUs; need 96 (1 x 96: capacity.on_demand 1) + "
            "96 in use by others (1 running) = 192",
        ),
        (
            "on-demand",
            "L-417A185B",
            191.0,
            "fail",
            "Running On-Demand P instances (L-417A185B): quota 191 vCPUs; need 96 (1 x 96: capacity.on_demand 1) + "
            "96 in use by others (1 running) = 192: 1 over; request an increase in the Service Quotas console",
        ),
        (
            "spot",
            "L-7212CCBC",
            192.0,
            "pass",
            "All P4, P3 and P2 Spot Instance Requests (L-7212CCBC): quota 192 vCPUs; need 96 (1 x 96: 1 spot) + 96 "
            "in use by others (1 running) = 192",
        ),
        (
            "spot",
            "L-7212CCBC",
            191.0,
            "fail",
            "All P4, P3 and P2 Spot Instance Requests (L-7212CCBC): quota 191 vCPUs; need 96 (1 x 96: 1 spot) + 96 "
            "in use by others (1 running) = 192: 1 over; request an increase in the Service Quotas console",
        ),
    ],
)
def test_vcpu_quota_counts_the_running_instances(
    node_image_id: str, lifecycle: str, code: str, quota: float, status: str, detail: str
) -> None:
    """One p4d.24xlarge (96 vCPUs) of the same lifecycle already runs; dev needs one more: 192 fits, 191 does not."""
    launch(node_image_id, "p4d.24xlarge", lifecycle)
    check = quota_check("dev", lifecycle, stubbed_quota(code, quota))
    assert (check.name, check.status, check.detail) == (f"quota-{lifecycle}", status, detail)


def test_only_instances_of_the_quota_count(node_image_id: str) -> None:
    """On-demand and spot quotas are separate, the family decides, and stopped instances use no quota.

    Running: spot p4d and spot p3dn (the P4, P3 and P2 spot quota), spot p5 (its own P5 spot quota), on-demand
    g5.48xlarge (the G quota); stopped: an on-demand p4d.
    """
    for instance_type in ("p4d.24xlarge", "p3dn.24xlarge", "p5.48xlarge"):
        launch(node_image_id, instance_type, "spot")
    launch(node_image_id, "g5.48xlarge")
    stopped = launch(node_image_id, "p4d.24xlarge")
    boto3.client("ec2", region_name="us-east-1").stop_instances(InstanceIds=[stopped])

    on_demand = quota_check("dev", "on-demand", stubbed_quota("L-417A185B", 96.0))
    assert on_demand.status == "pass"
    assert on_demand.detail.endswith(
        "quota 96 vCPUs; need 96 (1 x 96: capacity.on_demand 1) + 0 in use by others (0 running) = 96"
    )
    spot = quota_check("dev", "spot", stubbed_quota("L-7212CCBC", 288.0))
    assert spot.status == "pass"
    assert spot.detail.endswith("quota 288 vCPUs; need 96 (1 x 96: 1 spot) + 192 in use by others (2 running) = 288")


def test_p5_spot_uses_the_p5_spot_quota(node_image_id: str, environments) -> None:
    """Stubber pins L-C4BD4855; the running spot p4d belongs to the other P spot quota and does not count."""
    environments("h100", instance_type="p5.48xlarge", target=2, on_demand=0)
    launch(node_image_id, "p4d.24xlarge", "spot")
    check = quota_check("h100", "spot", stubbed_quota("L-C4BD4855", 384.0), load_catalog()["p5.48xlarge"])
    assert check.detail == (
        "All P5 Spot Instance Requests (L-C4BD4855): quota 384 vCPUs; need 384 (2 x 192: 2 spot) + 0 in use by "
        "others (0 running) = 384"
    )


def test_g_family_uses_the_g_quota_codes(moto: None, environments) -> None:
    """Stubber: the expected parameters pin the G and VT quota code and the vCPUs of 3 on-demand g5.48xlarge."""
    environments("gpus", instance_type="g5.48xlarge", target=3, on_demand=3)
    check = quota_check("gpus", "on-demand", stubbed_quota("L-DB2E81BA", 512.0), load_catalog()["g5.48xlarge"])
    assert check.status == "fail"
    assert "need 576 (3 x 192: capacity.on_demand 3) + 0 in use by others (0 running) = 576: 64 over" in check.detail


def test_no_nodes_of_a_lifecycle_skip_its_quota(environments) -> None:
    environments("steady", target=2, on_demand=2)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    with Stubber(ec2), Stubber(quotas):  # no responses queued: any AWS call would raise
        check = preflight.check_vcpu_quota(ec2, quotas, load_named_environment("steady"), P4D, "spot")
    assert (check.status, check.detail) == ("pass", "skipped: no spot nodes")


def test_quota_access_denied_is_a_warning() -> None:
    """Stubber: a caller without servicequotas:GetServiceQuota still gets the other checks."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    with Stubber(ec2), Stubber(quotas) as stub:
        stub.add_client_error("get_service_quota", service_error_code="AccessDeniedException", http_status_code=400)
        check = preflight.check_vcpu_quota(ec2, quotas, load_named_environment("dev"), P4D, "spot")
    assert check.status == "warn" and "could not check: GetServiceQuota AccessDeniedException" in check.detail


def test_instances_not_readable_is_a_warning() -> None:
    """Stubber: without ec2:DescribeInstances the running vCPUs are unknown, so the quota is not judged."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as ec2_stub:
        ec2_stub.add_client_error(
            "describe_instances", service_error_code="UnauthorizedOperation", http_status_code=403
        )
        check = preflight.check_vcpu_quota(
            ec2, stubbed_quota("L-417A185B", 192.0).client, load_named_environment("dev"), P4D, "on-demand"
        )
    assert check.status == "warn" and "could not check: DescribeInstances UnauthorizedOperation" in check.detail


def test_quota_throttled_stops_the_command(moto: None, scores: dict[str, int], stubbed, run_cli) -> None:
    """Stubber on service-quotas (Throttling); everything else runs against moto."""
    stubbed("service-quotas").add_client_error(
        "get_service_quota", service_error_code="Throttling", http_status_code=400
    )
    code, out, err = run_cli("preflight", "dev")
    assert code == 1 and out == ""
    assert err.startswith("AWS throttled GetServiceQuota in us-east-1 (Throttling)") and err.count("\n") == 1


# The worst case an environment asks of its quotas (preflight.quota_demand): dev is 1 on-demand + 1 spot p4d (96 vCPUs).
OVER = ": 1 over; request an increase in the Service Quotas console"
ON_DEMAND_FALLBACK = "capacity.on_demand 1 + 1 fleet.fallback.max_extra_on_demand"
SPOT_FALLBACK = "1 spot + 1 while fleet.fallback hands its extra nodes back"
REPLACE_ALL = "x 2: fleet.rollout replace-all runs the new node group next to the old one while it rolls"
REQUEST_FLEET = "x 2: a request fleet is replaced by a new one on every change, the old one ending last"


def dev_with(**fleet_keys: Any) -> Environment:
    return with_fleet(load_named_environment("dev"), **fleet_keys)


@pytest.mark.parametrize("quota", [192.0, 191.0], ids=["enough", "one-short"])
@pytest.mark.parametrize(
    ("lifecycle", "code", "env", "why"),
    [
        pytest.param(
            "on-demand", "L-417A185B", {"fallback": fallback(1)}, f"2 x 96: {ON_DEMAND_FALLBACK}", id="od-fallback"
        ),
        pytest.param("spot", "L-7212CCBC", {"fallback": fallback(1)}, f"2 x 96: {SPOT_FALLBACK}", id="spot-fallback"),
        pytest.param(
            "on-demand",
            "L-417A185B",
            {"rollout": "replace-all"},
            f"1 x 96: capacity.on_demand 1; {REPLACE_ALL}",
            id="od-replace-all",
        ),
        pytest.param(
            "spot", "L-7212CCBC", {"rollout": "replace-all"}, f"1 x 96: 1 spot; {REPLACE_ALL}", id="spot-replace-all"
        ),
        pytest.param(
            "on-demand",
            "L-417A185B",
            {"type": "request"},
            f"1 x 96: capacity.on_demand 1; {REQUEST_FLEET}",
            id="od-request-fleet",
        ),
    ],
)
def test_the_fallback_and_a_second_group_count_against_the_quota(
    moto: None, lifecycle: str, code: str, env: dict[str, Any], why: str, quota: float
) -> None:
    """Each doubles what dev asks of the quota, to 192 vCPUs: the fallback's ceiling on-demand (floor + max_extra),
    the spot a hand-back launches before it ends the extra on-demand nodes, or a second node group beside the first."""
    check = quota_check(dev_with(**env), lifecycle, stubbed_quota(code, quota))
    name = preflight.vcpu_quota_for("p4d.24xlarge", lifecycle)
    assert name is not None
    text = f"{name.name} ({code}): quota {quota:g} vCPUs; need 192 ({why}) + 0 in use by others (0 running) = 192"
    expected = ("pass", text) if quota == 192 else ("fail", text + OVER)
    assert (check.status, check.detail) == expected


def test_fallback_and_replace_all_together_ask_for_two_groups_at_their_ceiling(moto: None) -> None:
    """Both groups of a roll may be in a fallback: 2 groups x (1 + 1) on-demand = 4 x 96."""
    check = quota_check(
        dev_with(fallback=fallback(1), rollout="replace-all"), "on-demand", stubbed_quota("L-417A185B", 383.0)
    )
    assert check == preflight.Check(
        "quota-on-demand",
        "fail",
        f"Running On-Demand P instances (L-417A185B): quota 383 vCPUs; need 384 (2 x 96: {ON_DEMAND_FALLBACK}; "
        f"{REPLACE_ALL}) + 0 in use by others (0 running) = 384{OVER}",
    )


def test_the_fallback_ceiling_stops_at_the_target(moto: None, environments) -> None:
    """4 nodes, 3 on-demand, max_extra 2 (more than the spot part, which `gpufleet validate` refuses): the fallback
    raises the on-demand part to the target, 4, not 5."""
    environments("wide", target=4, on_demand=3)
    env = with_fleet(load_named_environment("wide"), fallback=fallback(2))
    check = quota_check(env, "on-demand", stubbed_quota("L-417A185B", 384.0))
    assert check.detail.startswith(
        "Running On-Demand P instances (L-417A185B): quota 384 vCPUs; need 384 (4 x 96: capacity.on_demand 3 + 1 "
        "fleet.fallback.max_extra_on_demand)"
    )


@pytest.mark.parametrize(("quota", "status"), [(96.0, "pass"), (95.0, "fail")], ids=["enough", "one-short"])
def test_the_environments_own_running_nodes_count_once(node_image_id: str, quota: float, status: str) -> None:
    """dev deployed: its on-demand node runs (tagged gpufleet:environment=dev) and is the node dev needs, not one more;
    an untagged spot p4d is not on-demand."""
    launch(node_image_id, "p4d.24xlarge", environment="dev")
    launch(node_image_id, "p4d.24xlarge", "spot", environment="dev")
    check = quota_check("dev", "on-demand", stubbed_quota("L-417A185B", quota))
    text = (
        f"Running On-Demand P instances (L-417A185B): quota {quota:g} vCPUs; need 96 (1 x 96: capacity.on_demand 1; "
        "its 1 running (96 vCPUs) within it) + 0 in use by others (0 running) = 96"
    )
    assert (check.status, check.detail) == (
        status,
        text if status == "pass" else text + OVER,
    )


def test_another_environments_nodes_are_others(node_image_id: str) -> None:
    launch(node_image_id, "p4d.24xlarge", environment="dev")
    launch(node_image_id, "p4d.24xlarge", environment="prod")
    check = quota_check("dev", "on-demand", stubbed_quota("L-417A185B", 192.0))
    assert check.detail == (
        "Running On-Demand P instances (L-417A185B): quota 192 vCPUs; need 96 (1 x 96: capacity.on_demand 1; its 1 "
        "running (96 vCPUs) within it) + 96 in use by others (1 running) = 192"
    )


def test_more_own_nodes_than_a_group_take_its_place(node_image_id: str) -> None:
    """Two of dev's on-demand nodes still run (a file lowered to one, not yet deployed) under replace-all: the running
    two stand for the old group, the new group adds one: 3 x 96."""
    for _ in range(2):
        launch(node_image_id, "p4d.24xlarge", environment="dev")
    check = quota_check(dev_with(rollout="replace-all"), "on-demand", stubbed_quota("L-417A185B", 288.0))
    assert check == preflight.Check(
        "quota-on-demand",
        "pass",
        f"Running On-Demand P instances (L-417A185B): quota 288 vCPUs; need 288 (1 x 96: capacity.on_demand 1; "
        f"{REPLACE_ALL}; its 2 running (192 vCPUs) in place of one group) + 0 in use by others (0 running) = 288",
    )


def test_a_capacity_block_asks_nothing_of_the_on_demand_quota(environments) -> None:
    """Stubber with nothing queued: any call would raise. Its spot quota is skipped too: every node is in the block."""
    environments("block", instance_type="p5.48xlarge", target=2, on_demand=2)
    env = with_capacity(load_named_environment("block"), capacity_block=capacity_block("cr-0123456789abcdef0"))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    with Stubber(ec2), Stubber(quotas):
        on_demand = preflight.check_vcpu_quota(ec2, quotas, env, load_catalog()["p5.48xlarge"], "on-demand")
        spot = preflight.check_vcpu_quota(ec2, quotas, env, load_catalog()["p5.48xlarge"], "spot")
    assert on_demand == preflight.Check(
        "quota-on-demand",
        "pass",
        "skipped: instances in a Capacity Block don't count against On-Demand Instances limits (EC2 user guide)",
    )
    assert spot == preflight.Check("quota-spot", "pass", "skipped: no spot nodes")


def described_instance(lifecycle: str | None, environment: str | None = None) -> dict[str, Any]:
    """A p4d as DescribeInstances lists it (botocore's ec2 Instance shape): InstanceLifecycle absent on-demand."""
    instance: dict[str, Any] = {"InstanceId": "i-0123456789abcdef0", "InstanceType": "p4d.24xlarge"}
    if lifecycle is not None:
        instance["InstanceLifecycle"] = lifecycle
    if environment is not None:
        instance["Tags"] = [{"Key": "gpufleet:environment", "Value": environment}]
    return instance


@pytest.mark.parametrize(
    ("lifecycle", "code", "others"),
    [("on-demand", "L-417A185B", 3), ("spot", "L-7212CCBC", 1)],
)
def test_every_instance_lifecycle_goes_to_its_quota(lifecycle: str, code: str, others: int) -> None:
    """Stubber on EC2, one running p4d of each InstanceLifecycle botocore lists and one of dev's own: capacity-block
    counts against neither quota; scheduled and interruptible-capacity-reservation, undocumented, as on-demand. The
    request asks EC2 for pending and running instances only (the expected parameters)."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    instances = [
        described_instance(kind)
        for kind in (None, "spot", "scheduled", "capacity-block", "interruptible-capacity-reservation")
    ]
    instances.append(described_instance("spot" if lifecycle == "spot" else None, environment="dev"))
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instances",
            {"Reservations": [{"ReservationId": "r-0123456789abcdef0", "Instances": instances}]},
            {"Filters": [{"Name": "instance-state-name", "Values": ["pending", "running"]}]},
        )
        stub.add_response(
            "describe_instance_types",
            {"InstanceTypes": [{"InstanceType": "p4d.24xlarge", "VCpuInfo": {"DefaultVCpus": 96}}]},
            {"InstanceTypes": ["p4d.24xlarge"]},
        )
        check = preflight.check_vcpu_quota(
            ec2, stubbed_quota(code, 1000.0).client, load_named_environment("dev"), P4D, lifecycle
        )
        stub.assert_no_pending_responses()
    assert check.detail.endswith(
        f"its 1 running (96 vCPUs) within it) + {others * 96} in use by others ({others} running) = {96 + others * 96}"
    )


def test_stopped_and_terminated_instances_use_no_quota(node_image_id: str) -> None:
    """moto answers the state filter: an on-demand p4d stopped, another terminated."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.stop_instances(InstanceIds=[launch(node_image_id, "p4d.24xlarge")])
    ec2.terminate_instances(InstanceIds=[launch(node_image_id, "p4d.24xlarge")])
    check = quota_check("dev", "on-demand", stubbed_quota("L-417A185B", 96.0))
    assert check.detail.endswith("+ 0 in use by others (0 running) = 96")


# moto's (and one account's) AZ names and ids in us-east-1.
ZONES = {
    "AvailabilityZones": [
        {"ZoneName": "us-east-1a", "ZoneId": "use1-az6"},
        {"ZoneName": "us-east-1b", "ZoneId": "use1-az1"},
        {"ZoneName": "us-east-1c", "ZoneId": "use1-az2"},
    ]
}
CAVEAT = "one instance type always scores low (AWS recommends 3 or more), so only the AZ comparison counts"


def score_check(scores: dict[str, int]) -> preflight.Check:
    """Stubber: moto does not implement GetSpotPlacementScores. The request asks for one AZ and the spot nodes."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        stub.add_response(
            "get_spot_placement_scores",
            {
                "SpotPlacementScores": [
                    {"Region": "us-east-1", "AvailabilityZoneId": zone_id, "Score": score}
                    for zone_id, score in scores.items()
                ]
            },
            {
                "InstanceTypes": ["p4d.24xlarge"],
                "TargetCapacity": 1,
                "TargetCapacityUnitType": "units",
                "SingleAvailabilityZone": True,
                "RegionNames": ["us-east-1"],
            },
        )
        stub.add_response("describe_availability_zones", ZONES, {})
        check = preflight.check_placement_score(ec2, load_named_environment("dev"))
        stub.assert_no_pending_responses()
    return check


@pytest.mark.parametrize(
    ("scores", "status", "detail"),
    [
        (
            {"use1-az6": 1, "use1-az1": 1, "use1-az2": 1},
            "pass",
            f"spot placement score 1/10 for 1 x p4d.24xlarge in us-east-1a, no AZ of us-east-1 higher (3 scored); "
            f"{CAVEAT}",
        ),
        (
            {"use1-az6": 3, "use1-az1": 3, "use1-az2": 2},
            "pass",
            f"spot placement score 3/10 for 1 x p4d.24xlarge in us-east-1a, no AZ of us-east-1 higher (3 scored); "
            f"{CAVEAT}",
        ),
        (
            {"use1-az6": 1, "use1-az1": 2, "use1-az2": 3},
            "warn",
            f"spot placement score 1/10 for 1 x p4d.24xlarge in us-east-1a, lower than us-east-1c 3/10, "
            f"us-east-1b 2/10; {CAVEAT}; see --suggest-az",
        ),
    ],
)
def test_spot_placement_score_compares_the_azs(scores: dict[str, int], status: str, detail: str) -> None:
    """A single type's low score is no warning by itself (the first case warned before); another AZ higher is."""
    check = score_check(scores)
    assert (check.status, check.detail) == (status, detail)


def test_az_without_a_placement_score_is_a_warning() -> None:
    check = score_check({"use1-az1": 2, "use1-az2": 2})
    assert (check.status, check.detail) == (
        "warn",
        "no spot placement score for us-east-1a (use1-az6) among the 2 scored AZs of us-east-1; see --suggest-az",
    )


def test_placement_score_not_offered_is_a_warning() -> None:
    """Stubber: the API missing in a partition answers an error code the check reports instead of crashing."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        stub.add_client_error(
            "get_spot_placement_scores", service_error_code="UnsupportedOperation", http_status_code=400
        )
        check = preflight.check_placement_score(ec2, load_named_environment("dev"))
    assert check.status == "warn" and "UnsupportedOperation" in check.detail


def test_on_demand_only_skips_the_spot_checks(environments) -> None:
    environments("steady", target=2, on_demand=2)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2):  # no responses queued: any AWS call would raise
        env = load_named_environment("steady")
        assert preflight.check_placement_score(ec2, env).detail == "skipped: every node is on-demand"
        assert preflight.check_spot_price(ec2, env, NOW).status == "pass"


def test_latest_spot_price_wins() -> None:
    """Stubber: pins the 24 h window and the AZ filter; moto returns one fixed price and ignores StartTime."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    history = [
        {
            "AvailabilityZone": "us-east-1a",
            "InstanceType": "p4d.24xlarge",
            "SpotPrice": "12.5000",
            "Timestamp": NOW - dt.timedelta(hours=3),
            "ProductDescription": "Linux/UNIX",
        },
        {
            "AvailabilityZone": "us-east-1a",
            "InstanceType": "p4d.24xlarge",
            "SpotPrice": "11.2500",
            "Timestamp": NOW - dt.timedelta(hours=1),
            "ProductDescription": "Linux/UNIX",
        },
    ]
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": history},
            {
                "InstanceTypes": ["p4d.24xlarge"],
                "ProductDescriptions": ANY,
                "StartTime": NOW - dt.timedelta(hours=24),
                "EndTime": NOW,
                "Filters": [{"Name": "availability-zone", "Values": ["us-east-1a"]}],
            },
        )
        check = preflight.check_spot_price(ec2, load_named_environment("dev"), NOW)
    assert check.detail == "latest spot price $11.2500/h in us-east-1a"


def test_suggest_az_ranks_by_score_then_price(
    node_image: str, spot_roles: None, scores: dict[str, int], run_json
) -> None:
    """moto serves the offerings (us-east-1a..d) and one equal price everywhere; the scores decide, then the name."""
    scores.update({"use1-az6": 3, "use1-az1": 9, "use1-az2": 9})
    code, document = run_json("preflight", "dev", "--suggest-az")
    assert code == 0
    # moto's us-east-1 zone ids (moto/ec2/models/availability_zones_and_regions.py): a=az6, b=az1, c=az2, d=az4.
    assert [(zone["zone"], zone["zone_id"], zone["placement_score"]) for zone in document["suggested_zones"]] == [
        ("us-east-1b", "use1-az1", 9),
        ("us-east-1c", "use1-az2", 9),
        ("us-east-1a", "use1-az6", 3),
        ("us-east-1d", "use1-az4", None),
    ]


def test_suggest_az_price_breaks_ties() -> None:
    """Stubber for the whole ranking: equal scores, the cheaper AZ first."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    env = load_named_environment("dev")
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instance_type_offerings",
            {
                "InstanceTypeOfferings": [
                    {"InstanceType": "p4d.24xlarge", "LocationType": "availability-zone", "Location": zone}
                    for zone in ("us-east-1a", "us-east-1b")
                ]
            },
        )
        stub.add_response(
            "describe_availability_zones",
            {
                "AvailabilityZones": [
                    {"ZoneName": "us-east-1a", "ZoneId": "use1-az6"},
                    {"ZoneName": "us-east-1b", "ZoneId": "use1-az1"},
                ]
            },
            {},
        )
        stub.add_response(
            "get_spot_placement_scores",
            {
                "SpotPlacementScores": [
                    {"AvailabilityZoneId": "use1-az6", "Score": 7},
                    {"AvailabilityZoneId": "use1-az1", "Score": 7},
                ]
            },
        )
        stub.add_response(
            "describe_spot_price_history",
            {
                "SpotPriceHistory": [
                    {"AvailabilityZone": "us-east-1a", "SpotPrice": "14.0", "Timestamp": NOW},
                    {"AvailabilityZone": "us-east-1b", "SpotPrice": "9.5", "Timestamp": NOW},
                ]
            },
        )
        ranking, note = preflight.suggest_zones(ec2, env, NOW)
    assert [(s.zone, s.placement_score, s.spot_price) for s in ranking] == [
        ("us-east-1b", 7, 9.5),
        ("us-east-1a", 7, 14.0),
    ]
    assert note == f"spot scores: {CAVEAT}"


def test_quota_lines_in_the_table(node_image: str, scores: dict[str, int], stubbed, run_cli) -> None:
    """End to end: Stubber on Service Quotas (on-demand, then spot); a spot p4d already runs in moto."""
    scores["use1-az6"] = 1
    quotas = stubbed("service-quotas")
    for code, value in (("L-417A185B", 96.0), ("L-7212CCBC", 96.0)):
        quotas.add_response("get_service_quota", quota_response(code, value), {"ServiceCode": "ec2", "QuotaCode": code})
    launch(node_image, "p4d.24xlarge", "spot")
    code, out, err = run_cli("preflight", "dev")
    assert code == 1, err
    lines = out.splitlines()
    assert (
        "pass    quota-on-demand  Running On-Demand P instances (L-417A185B): quota 96 vCPUs; need 96 (1 x 96: "
        "capacity.on_demand 1) + 0 in use by others (0 running) = 96" in lines
    )
    assert (
        "fail    quota-spot       All P4, P3 and P2 Spot Instance Requests (L-7212CCBC): quota 96 vCPUs; need 96 "
        "(1 x 96: 1 spot) + 96 in use by others (1 running) = 192: 96 over; request an increase in the Service Quotas "
        "console" in lines
    )
    assert lines[-1] == "preflight failed"


VALID_UNTIL = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("now", "status", "detail"),
    [
        (VALID_UNTIL - dt.timedelta(seconds=1), "pass", "the fleet stops at 2025-01-01T00:00:00+00:00"),
        (
            VALID_UNTIL,
            "fail",
            "fleet.valid_until 2025-01-01T00:00:00+00:00 has passed (set a future UTC time, or remove it, before "
            "launching nodes)",
        ),
    ],
    ids=["a-second-before", "the-moment-itself"],
)
def test_valid_until_fails_preflight_from_the_moment_it_comes(environments, now, status, detail) -> None:
    env = load_named_environment("dev")
    env = env.model_copy(update={"fleet": env.fleet.model_copy(update={"valid_until": VALID_UNTIL})})
    assert preflight.check_valid_until(env, now) == preflight.Check("valid-until", status, detail)


def test_without_valid_until_the_check_passes(environments) -> None:
    assert preflight.check_valid_until(load_named_environment("dev"), NOW) == preflight.Check(
        "valid-until", "pass", "not set: the fleet runs until its stack is deleted"
    )


def test_expired_environment_loads_and_fails_preflight_with_one_line(
    node_image: str, scores: dict[str, int], environments, run_cli
) -> None:
    scores["use1-az6"] = 8
    dev = environments_dir() / "dev.yaml"
    expired = dev.read_text().replace("name: dev", "name: expired") + "fleet:\n  valid_until: 2020-01-01T00:00:00Z\n"
    (environments_dir() / "expired.yaml").write_text(expired)
    code, out, err = run_cli("preflight", "expired")
    assert code == 1, err
    lines = out.splitlines()
    assert (
        "fail    valid-until      fleet.valid_until 2020-01-01T00:00:00+00:00 has passed (set a future UTC time, or "
        "remove it, before launching nodes)" in lines
    )
    assert lines[-1] == "preflight failed"


FLEET_ROLE_COMMAND = "aws iam create-service-linked-role --aws-service-name spotfleet.amazonaws.com"
SPOT_ROLE_COMMAND = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"


def test_spot_roles_found_by_get_role(spot_roles: None) -> None:
    iam = boto3.client("iam", region_name="us-east-1")
    assert preflight.check_service_roles(iam, load_named_environment("dev")) == preflight.Check(
        "service-roles", "pass", "AWSServiceRoleForEC2SpotFleet and AWSServiceRoleForEC2Spot exist"
    )


def test_missing_spot_roles_fail_with_the_commands_that_create_them(moto: None) -> None:
    iam = boto3.client("iam", region_name="us-east-1")
    assert preflight.check_service_roles(iam, load_named_environment("dev")) == preflight.Check(
        "service-roles",
        "fail",
        f"AWSServiceRoleForEC2SpotFleet is missing: run `{FLEET_ROLE_COMMAND}`; "
        f"AWSServiceRoleForEC2Spot is missing: run `{SPOT_ROLE_COMMAND}`",
    )


def test_only_the_missing_role_is_named(moto: None) -> None:
    create_service_linked_role("AWSServiceRoleForEC2SpotFleet", "spotfleet.amazonaws.com")
    check = preflight.check_service_roles(boto3.client("iam", region_name="us-east-1"), load_named_environment("dev"))
    assert check == preflight.Check(
        "service-roles", "fail", f"AWSServiceRoleForEC2Spot is missing: run `{SPOT_ROLE_COMMAND}`"
    )


def test_on_demand_only_needs_only_the_fleet_role(moto: None, environments) -> None:
    """The Spot Fleet backend needs its role even without spot nodes; the Spot role is not asked for."""
    environments("steady", target=2, on_demand=2)
    env = load_named_environment("steady")
    iam = boto3.client("iam", region_name="us-east-1")
    assert preflight.check_service_roles(iam, env) == preflight.Check(
        "service-roles", "fail", f"AWSServiceRoleForEC2SpotFleet is missing: run `{FLEET_ROLE_COMMAND}`"
    )
    create_service_linked_role("AWSServiceRoleForEC2SpotFleet", "spotfleet.amazonaws.com")
    assert preflight.check_service_roles(iam, env) == preflight.Check(
        "service-roles",
        "pass",
        "AWSServiceRoleForEC2SpotFleet exists (AWSServiceRoleForEC2Spot not needed: every node is on-demand)",
    )


def test_get_role_denied_is_a_warning() -> None:
    iam = boto3.client("iam", region_name="us-east-1")
    with Stubber(iam) as stub:
        for name in ("AWSServiceRoleForEC2SpotFleet", "AWSServiceRoleForEC2Spot"):
            stub.add_client_error(
                "get_role", "AccessDenied", "not authorized to perform: iam:GetRole", 403, {"RoleName": name}
            )
        check = preflight.check_service_roles(iam, load_named_environment("dev"))
    assert check == preflight.Check(
        "service-roles",
        "warn",
        "could not check AWSServiceRoleForEC2SpotFleet: GetRole AccessDenied: not authorized to perform: iam:GetRole; "
        "AWSServiceRoleForEC2Spot: GetRole AccessDenied: not authorized to perform: iam:GetRole",
    )


AUTO_SCALING_ROLE_COMMAND = "aws iam create-service-linked-role --aws-service-name autoscaling.amazonaws.com"


def test_an_auto_scaling_group_needs_its_own_role_and_neither_spot_role(moto: None) -> None:
    """dev on the auto-scaling backend (1 spot node): only AWSServiceRoleForAutoScaling is asked for."""
    env = with_fleet(load_named_environment("dev"), backend="auto-scaling")
    iam = boto3.client("iam", region_name="us-east-1")
    assert preflight.check_service_roles(iam, env) == preflight.Check(
        "service-roles",
        "warn",
        "AWSServiceRoleForAutoScaling is missing: creating the group creates it if the deploying principal may "
        f"iam:CreateServiceLinkedRole; otherwise run `{AUTO_SCALING_ROLE_COMMAND}`",
    )
    # moto's CreateServiceLinkedRole names the Auto Scaling role as IAM does.
    iam.create_service_linked_role(AWSServiceName="autoscaling.amazonaws.com")
    assert preflight.check_service_roles(iam, env) == preflight.Check(
        "service-roles",
        "pass",
        "AWSServiceRoleForAutoScaling exists (an Auto Scaling group needs no AWSServiceRoleForEC2SpotFleet, and its "
        "role may create AWSServiceRoleForEC2Spot itself)",
    )


def test_an_auto_scaling_group_asks_iam_for_its_role_only() -> None:
    """Stubber: exactly one GetRole, for the group's role; a denied GetRole is a warning."""
    env = with_fleet(load_named_environment("dev"), backend="auto-scaling")
    iam = boto3.client("iam", region_name="us-east-1")
    with Stubber(iam) as stub:
        stub.add_client_error(
            "get_role",
            "AccessDenied",
            "not authorized to perform: iam:GetRole",
            403,
            {"RoleName": "AWSServiceRoleForAutoScaling"},
        )
        check = preflight.check_service_roles(iam, env)
        stub.assert_no_pending_responses()
    assert check == preflight.Check(
        "service-roles",
        "warn",
        "could not check AWSServiceRoleForAutoScaling: GetRole AccessDenied: not authorized to perform: iam:GetRole",
    )


def test_an_auto_scaling_environment_names_its_backend_and_its_role(
    node_image: str, scores: dict[str, int], environments, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto has no SimulatePrincipalPolicy: that check (tests/gpufleet/ops/test_preflight_policy.py) is a stand-in."""
    monkeypatch.setattr(
        preflight, "check_auto_scaling_policy", lambda *args: preflight.Check("autoscaling-api", "pass", "stand-in")
    )
    scores["use1-az6"] = 8
    environments("group")
    path = environments_dir() / "group.yaml"
    path.write_text(path.read_text() + "fleet:\n  backend: auto-scaling\n")
    boto3.client("iam", region_name="us-east-1").create_service_linked_role(AWSServiceName="autoscaling.amazonaws.com")
    code, out, err = run_cli("preflight", "group")
    lines = out.splitlines()
    assert (
        lines[0] == "Preflight group: 2 x p4d.24xlarge (1 on-demand, 1 spot) in us-east-1a, fleet.backend auto-scaling"
    )
    assert (
        "pass    service-roles    AWSServiceRoleForAutoScaling exists (an Auto Scaling group needs no "
        "AWSServiceRoleForEC2SpotFleet, and its role may create AWSServiceRoleForEC2Spot itself)" in lines
    )
    assert "pass    spot-fleet-api   skipped: fleet.backend is auto-scaling" in lines


def test_missing_spot_role_in_the_table(node_image: str, scores: dict[str, int], run_cli) -> None:
    scores["use1-az6"] = 8
    code, out, err = run_cli("preflight", "dev")
    assert code == 1, err
    lines = out.splitlines()
    assert (
        f"fail    service-roles    AWSServiceRoleForEC2SpotFleet is missing: run `{FLEET_ROLE_COMMAND}`; "
        f"AWSServiceRoleForEC2Spot is missing: run `{SPOT_ROLE_COMMAND}`" in lines
    )
    assert lines[-1] == "preflight failed"


def test_an_eks_environment_gets_the_eks_checks_instead_of_the_fleet_ones(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No gpufleet image, no fleet.backend roles, policies or valid_until on eks: EKS's own checks instead."""
    env = load_environment(write(tmp_path, VALID_EKS))

    def named(name: str) -> Any:
        return lambda *args: preflight.Check(name, "pass", "")

    for function in ("check_offering", "check_efa", "check_placement_score", "check_spot_price"):
        monkeypatch.setattr(preflight, function, named(function.removeprefix("check_")))
    monkeypatch.setattr(preflight, "check_vcpu_quota", lambda *args: preflight.Check(f"quota-{args[-1]}", "pass", ""))
    monkeypatch.setattr(preflight, "run_eks_checks", lambda *args: [preflight.Check("eks", "pass", "")])
    monkeypatch.setattr(preflight, "check_reachability", named("reachability"))
    monkeypatch.setattr(preflight, "capacity_source_checks", lambda *args: [preflight.Check("capacity", "pass", "")])
    names = [check.name for check in preflight.run_checks(_NoClients(), env, P4D, NOW)]
    assert names == [
        "offering",
        "efa",
        "quota-on-demand",
        "quota-spot",
        "placement_score",
        "spot_price",
        "eks",
        "reachability",
        "capacity",
    ]


class _NoClients:
    """An Aws whose clients are never called (every check is replaced)."""

    def client(self, service: str) -> None:
        return None


def test_preflight_of_an_eks_environment_names_its_node_groups(
    environments, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    (environments_dir() / "lab.yaml").write_text(json.dumps(VALID_EKS))
    monkeypatch.setattr(preflight, "run_checks", lambda *args: [preflight.Check("eks-version", "pass", "offered")])
    code, out, _ = run_cli("preflight", "lab")
    assert code == 0
    assert out.splitlines()[0] == (
        "Preflight lab: 2 x p4d.24xlarge (1 on-demand, 1 spot) in us-east-1a, EKS managed node groups, Kubernetes 1.35"
    )
