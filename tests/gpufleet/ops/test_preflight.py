"""gpufleet preflight against moto, with botocore Stubber for what moto lacks.

moto 5.2.5 implements DescribeInstanceTypeOfferings, DescribeInstanceTypes, DescribeSpotPriceHistory, SSM and
DescribeImages, so those checks run against moto. It does NOT implement GetSpotPlacementScores (NotImplementedError),
and its Service Quotas GetServiceQuota knows only the vpc service (NoSuchResourceException for ec2): the quota and
placement-score checks are tested with Stubber on real clients; the end-to-end runs replace placement_scores.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from gpufleet.catalog import load_catalog
from gpufleet.environment import environments_dir, load_named_environment
from gpufleet.ops import preflight

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


def statuses(document: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["status"] for check in document["checks"]}


def test_dev_passes_against_moto(node_image: str, scores: dict[str, int], run_cli) -> None:
    scores["use1-az6"] = 8  # us-east-1a in moto
    code, out, err = run_cli("preflight", "dev")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Preflight dev: 2 x p4d.24xlarge (1 on-demand, 1 spot) in us-east-1a"
    assert lines[-1] == "preflight passed"
    assert any(line.startswith("pass    offering") for line in lines)


def test_json_reports_every_check(node_image: str, scores: dict[str, int], run_json) -> None:
    scores["use1-az6"] = 8
    code, document = run_json("preflight", "dev")
    assert code == 0 and document["ok"] is True
    # moto's GetServiceQuota knows no ec2 quotas: that is reported as a warn with the reason, not a crash.
    assert statuses(document) == {
        "offering": "pass",
        "efa": "pass",
        "quota-on-demand": "warn",
        "quota-spot": "warn",
        "ami": "pass",
        "spot-score": "pass",
        "spot-price": "pass",
        "valid-until": "pass",
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


def quota_response(code: str, value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": "quota", "Value": value}}


@pytest.mark.parametrize(
    ("lifecycle", "quota_code", "value", "status", "detail"),
    [
        ("on-demand", "L-417A185B", 96.0, "pass", "quota 96 vCPUs, need 96 (1 x 96)"),
        ("on-demand", "L-417A185B", 64.0, "fail", "quota 64 vCPUs, need 96 (1 x 96): request an increase"),
        ("spot", "L-7212CCBC", 0.0, "fail", "quota 0 vCPUs, need 96 (1 x 96)"),
        ("spot", "L-7212CCBC", 384.0, "pass", "quota 384 vCPUs"),
    ],
)
def test_vcpu_quota(lifecycle: str, quota_code: str, value: float, status: str, detail: str) -> None:
    """Stubber: moto's GetServiceQuota has no ec2 quotas."""
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    with Stubber(quotas) as stub:
        stub.add_response(
            "get_service_quota", quota_response(quota_code, value), {"ServiceCode": "ec2", "QuotaCode": quota_code}
        )
        check = preflight.check_vcpu_quota(quotas, load_named_environment("dev"), P4D, lifecycle)
        stub.assert_no_pending_responses()
    assert (check.name, check.status) == (f"quota-{lifecycle}", status)
    assert detail in check.detail


def test_g_family_uses_the_g_quota_codes(environments) -> None:
    """Stubber: the expected parameters pin the G and VT quota code and the vCPUs of 3 on-demand g5.48xlarge."""
    environments("gpus", instance_type="g5.48xlarge", target=3, on_demand=3)
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    with Stubber(quotas) as stub:
        stub.add_response(
            "get_service_quota", quota_response("L-DB2E81BA", 512.0), {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"}
        )
        check = preflight.check_vcpu_quota(
            quotas, load_named_environment("gpus"), load_catalog()["g5.48xlarge"], "on-demand"
        )
    assert check.status == "fail" and "need 576 (3 x 192)" in check.detail


def test_quota_access_denied_is_a_warning() -> None:
    """Stubber: a caller without servicequotas:GetServiceQuota still gets the other checks."""
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    with Stubber(quotas) as stub:
        stub.add_client_error("get_service_quota", service_error_code="AccessDeniedException", http_status_code=400)
        check = preflight.check_vcpu_quota(quotas, load_named_environment("dev"), P4D, "spot")
    assert check.status == "warn" and "could not check: GetServiceQuota AccessDeniedException" in check.detail


def test_quota_throttled_stops_the_command(moto: None, scores: dict[str, int], stubbed, run_cli) -> None:
    """Stubber on service-quotas (Throttling); everything else runs against moto."""
    stubbed("service-quotas").add_client_error(
        "get_service_quota", service_error_code="Throttling", http_status_code=400
    )
    code, out, err = run_cli("preflight", "dev")
    assert code == 1 and out == ""
    assert err.startswith("AWS throttled GetServiceQuota in us-east-1 (Throttling)") and err.count("\n") == 1


ZONES = {"AvailabilityZones": [{"ZoneName": "us-east-1a", "ZoneId": "use1-az6"}]}


@pytest.mark.parametrize(("score", "status"), [(9, "pass"), (5, "pass"), (2, "warn")])
def test_spot_placement_score(score: int, status: str) -> None:
    """Stubber: moto does not implement GetSpotPlacementScores. The request must ask for one AZ and the spot nodes."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        stub.add_response(
            "get_spot_placement_scores",
            {
                "SpotPlacementScores": [
                    {"Region": "us-east-1", "AvailabilityZoneId": "use1-az6", "Score": score},
                    {"Region": "us-east-1", "AvailabilityZoneId": "use1-az1", "Score": 10},
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
    assert check.status == status
    assert f"spot placement score {score}/10 for 1 x p4d.24xlarge in us-east-1a" in check.detail


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


def test_suggest_az_ranks_by_score_then_price(node_image: str, scores: dict[str, int], run_json) -> None:
    """moto serves the offerings (us-east-1a..d) and one equal price everywhere; the scores decide, then the name."""
    scores.update({"use1-az6": 3, "use1-az1": 9, "use1-az2": 9})
    code, document = run_json("preflight", "dev", "--suggest-az")
    assert code == 0
    ranked = [(zone["zone"], zone["placement_score"]) for zone in document["suggested_zones"]]
    zone_ids = {zone["zone"]: zone["zone_id"] for zone in document["suggested_zones"]}
    expected = sorted(ranked, key=lambda pair: (-(pair[1] or 0), pair[0]))
    assert ranked == expected
    assert [score for _, score in ranked] == [9, 9, 3, None]
    assert zone_ids["us-east-1a"] == "use1-az6"


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
    assert note == ""


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
