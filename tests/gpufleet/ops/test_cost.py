"""gpufleet cost with botocore Stubber: moto 5 has no Pricing service and no DescribeCapacityBlockOfferings, and its
spot price history is one fixed price that ignores the time window, so every price here is a Stubber answer.

The GetProducts answers are PriceList entries as AWS sends them: each a JSON string with product.attributes and
terms.OnDemand/Reserved.<offer>.priceDimensions.<rate>.pricePerUnit.USD
(shape: botocore/data/pricing/2017-10-15/examples-1.json, GetProducts). The expected figures are worked out by hand
in each test. Environments with fleet.backend, fleet.fallback or capacity.capacity_block are shipped ones with those
keys added (tests/gpufleet/ops/variants.py).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from gpufleet.aws import Aws
from gpufleet.loading import environments_dir, load_named_environment
from gpufleet.ops import cost
from tests.gpufleet.environment_files import VALID_EKS
from tests.gpufleet.ops.variants import capacity_block, fallback, with_capacity, with_fleet

P4D_ON_DEMAND = "32.7726000000"
P4D_SPOT_EARLIER, P4D_SPOT_LATEST = "11.9051", "11.5718"
PRICING_FILTERS = [
    {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "p4d.24xlarge"},
    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
]


def price_list_entry(usd: str, sku: str = "J4UDT9GUH4RRHKKN", instance_type: str = "p4d.24xlarge") -> str:
    """One GetProducts PriceList entry: an on-demand hourly price and a (cheaper) reserved one that must not count."""
    on_demand_offer, reserved_offer, rate = f"{sku}.JRTCKXETXF", f"{sku}.4NA7Y494T4", "6YS6EN2CT7"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": "us-east-1",
                    "location": "US East (N. Virginia)",
                    "locationType": "AWS Region",
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "licenseModel": "No License required",
                    "usagetype": f"BoxUsage:{instance_type}",
                    "operation": "RunInstances",
                    "servicecode": "AmazonEC2",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    on_demand_offer: {
                        "priceDimensions": {
                            f"{on_demand_offer}.{rate}": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{on_demand_offer}.{rate}",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2025-11-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                },
                "Reserved": {
                    reserved_offer: {
                        "priceDimensions": {
                            f"{reserved_offer}.{rate}": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"Linux/UNIX (Amazon VPC), {instance_type} reserved instance applied",
                                "appliesTo": [],
                                "rateCode": f"{reserved_offer}.{rate}",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": "19.2224000000"},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2025-11-01T00:00:00Z",
                        "offerTermCode": "4NA7Y494T4",
                        "termAttributes": {
                            "LeaseContractLength": "1yr",
                            "OfferingClass": "standard",
                            "PurchaseOption": "No Upfront",
                        },
                    }
                },
            },
            "version": "20251101000000",
            "publicationDate": "2025-11-01T00:00:00Z",
        }
    )


def answer_on_demand(pricing: Stubber, *entries: str) -> None:
    pricing.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": list(entries or [price_list_entry(P4D_ON_DEMAND)])},
        {"ServiceCode": "AmazonEC2", "Filters": PRICING_FILTERS, "FormatVersion": "aws_v1"},
    )


def answer_spot(ec2: Stubber, points: list[tuple[str, str]] | None = None) -> None:
    """Spot price history of us-east-1a: (hour, price) points; by default an earlier and a later price."""
    points = [("10", P4D_SPOT_EARLIER), ("11", P4D_SPOT_LATEST)] if points is None else points
    history = [
        {
            "AvailabilityZone": "us-east-1a",
            "InstanceType": "p4d.24xlarge",
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": price,
            "Timestamp": dt.datetime(2025, 11, 20, int(hour), tzinfo=dt.UTC),
        }
        for hour, price in points
    ]
    ec2.add_response(
        "describe_spot_price_history",
        {"SpotPriceHistory": history},
        {
            "InstanceTypes": ["p4d.24xlarge"],
            "ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
            "StartTime": ANY,
            "EndTime": ANY,
            "Filters": [{"Name": "availability-zone", "Values": ["us-east-1a"]}],
        },
    )


def offering(zone: str, fee: str, offering_id: str) -> dict[str, Any]:
    return {
        "CapacityBlockOfferingId": offering_id,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": zone,
        "InstanceCount": 2,
        "StartDate": dt.datetime(2025, 11, 24, 11, 30, tzinfo=dt.UTC),
        "EndDate": dt.datetime(2025, 11, 25, 11, 30, tzinfo=dt.UTC),
        "CapacityBlockDurationHours": 24,
        "CapacityBlockDurationMinutes": 0,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
        "Tenancy": "default",
    }


def answer_capacity_blocks(ec2: Stubber, offerings: list[dict[str, Any]]) -> None:
    ec2.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": offerings},
        {"InstanceType": "p5.48xlarge", "InstanceCount": 2, "CapacityDurationHours": 24},
    )


def use_environment(monkeypatch: pytest.MonkeyPatch, env: Any) -> None:
    """`gpufleet cost` loads ENV (a variant of a shipped environment) instead of reading its file."""
    import gpufleet.loading

    monkeypatch.setattr(gpufleet.loading, "load_named_environment", lambda name: env)


def line(
    market: str, nodes: int, node_hourly: float | None, hourly: float | None, thirty_days: float | None, source: str
):
    return {
        "market": market,
        "nodes": nodes,
        "node_hourly": node_hourly,
        "hourly": hourly,
        "thirty_days": thirty_days,
        "price_known": node_hourly is not None,
        "source": source,
    }


ON_DEMAND_SOURCE = "Price List API: Linux, shared tenancy, us-east-1"
SPOT_SOURCE = "latest spot price in us-east-1a"


def test_dev_mix_from_live_prices(stubbed, run_json) -> None:
    """1 on-demand x 32.7726 + 1 spot x 11.5718 (the later of two points) = 44.3444 per hour; x 720 = 31927.968."""
    answer_on_demand(stubbed("pricing"))
    answer_spot(stubbed("ec2"))
    code, document = run_json("cost", "dev")
    assert code == 0
    assert document == {
        "environment": "dev",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "instance_type": "p4d.24xlarge",
        "flavour": "fleet",
        "backend": "spot-fleet",
        "currency": "USD",
        "hours_in_30_days": 720,
        "complete": True,
        "lines": [
            line("on-demand", 1, 32.7726, 32.7726, 23596.272, ON_DEMAND_SOURCE),
            line("spot", 1, 11.5718, 11.5718, 8331.696, SPOT_SOURCE),
        ],
        "hourly": 44.3444,
        "thirty_days": 31927.968,
        "after_fallback": None,
    }


DEV_TABLE = """\
Cost dev: 2 x p4d.24xlarge in us-east-1a (fleet.backend spot-fleet), USD
MARKET     NODES  PER NODE-HOUR  PER HOUR  PER 30 DAYS  PRICE
on-demand  1      32.7726        32.77     23,596.27    Price List API: Linux, shared tenancy, us-east-1
spot       1      11.5718        11.57     8,331.70     latest spot price in us-east-1a
total      2                     44.34     31,927.97
"""


def test_dev_table(stubbed, run_cli) -> None:
    """The text docs/operations/aws-commands.md shows under `gpufleet cost`."""
    answer_on_demand(stubbed("pricing"))
    answer_spot(stubbed("ec2"))
    code, out, err = run_cli("cost", "dev")
    assert (code, err) == (0, "")
    assert out == DEV_TABLE


@pytest.mark.parametrize("backend", ["spot-fleet", "auto-scaling"])
def test_worst_case_after_fallback(backend: str, environments, stubbed, monkeypatch, run_json) -> None:
    """4 nodes, 1 on-demand, 3 spot; fallback may add 2 on-demand. Both backends keep the same mix.
    Configured: 32.7726 + 3 x 11.5718 = 67.4880 per hour, x 720 = 48591.36.
    Worst case: 32.7726 + 1 x 11.5718 + 2 x 32.7726 = 109.8896 per hour, x 720 = 79120.512."""
    env = load_named_environment(environments("big", target=4, on_demand=1))
    use_environment(monkeypatch, with_fleet(env, backend=backend, fallback=fallback(max_extra_on_demand=2)))
    answer_on_demand(stubbed("pricing"))
    answer_spot(stubbed("ec2"))
    code, document = run_json("cost", "big")
    assert code == 0
    assert document["backend"] == backend
    assert (document["hourly"], document["thirty_days"], document["complete"]) == (67.488, 48591.36, True)
    assert document["after_fallback"] == {
        "extra_on_demand": 2,
        "lines": [
            line("on-demand", 1, 32.7726, 32.7726, 23596.272, ON_DEMAND_SOURCE),
            line("spot", 1, 11.5718, 11.5718, 8331.696, SPOT_SOURCE),
            line("on-demand (fallback)", 2, 32.7726, 65.5452, 47192.544, ON_DEMAND_SOURCE),
        ],
        "hourly": 109.8896,
        "thirty_days": 79120.512,
        "complete": True,
    }


@pytest.mark.parametrize(("ceiling", "extra"), [(5, 3), (3, 3), (2, 2)])
def test_fallback_ceiling(ceiling: int, extra: int, environments) -> None:
    """Fallback replaces at most the spot nodes, and at most max_extra_on_demand of them."""
    env = load_named_environment(environments("big", target=4, on_demand=1))
    assert cost.extra_on_demand_nodes(with_fleet(env, fallback=fallback(max_extra_on_demand=ceiling))) == extra


def test_on_demand_price_read_for_fallback_alone(environments, stubbed, monkeypatch, run_json) -> None:
    """All spot, fallback on: the on-demand price is read for the worst case only.
    Worst case: 1 spot x 11.5718 + 1 x 32.7726 = 44.3444 per hour."""
    env = load_named_environment(environments("spotty", target=2, on_demand=0))
    use_environment(monkeypatch, with_fleet(env, fallback=fallback(max_extra_on_demand=1)))
    answer_on_demand(stubbed("pricing"))
    answer_spot(stubbed("ec2"))
    code, document = run_json("cost", "spotty")
    assert code == 0
    assert [entry["market"] for entry in document["lines"]] == ["spot"]
    assert (document["hourly"], document["after_fallback"]["hourly"]) == (23.1436, 44.3444)


def test_capacity_block_priced_from_the_cheapest_offering_in_the_az(environments, stubbed, monkeypatch, run_json):
    """2 x p5 in a Capacity Block: offerings for 2 nodes over 24 h in us-east-1a at 1512 and 1600 USD (and a cheaper
    one in us-east-1b, not the cluster's AZ). 1512 / 24 / 2 = 31.5 per node-hour; 63 per hour; x 720 = 45360.
    No Pricing API call: nothing runs on plain on-demand."""
    env = load_named_environment(environments("h100", instance_type="p5.48xlarge", target=2, on_demand=2))
    use_environment(monkeypatch, with_capacity(env, capacity_block=capacity_block("cr-0a1b2c3d4e5f67890")))
    answer_capacity_blocks(
        stubbed("ec2"),
        [
            offering("us-east-1a", "1600.00", "cb-0000000000000000a"),
            offering("us-east-1b", "1400.00", "cb-0000000000000000b"),
            offering("us-east-1a", "1512.00", "cb-0000000000000000c"),
        ],
    )
    code, document = run_json("cost", "h100")
    assert code == 0
    assert document["lines"] == [
        line(
            "capacity-block",
            2,
            31.5,
            63.0,
            45360.0,
            "cr-0a1b2c3d4e5f67890: today's cheapest 24 h offering in us-east-1a (cb-0000000000000000c)",
        )
    ]
    assert (document["hourly"], document["thirty_days"]) == (63.0, 45360.0)


def test_no_capacity_block_offering_in_the_az(environments, stubbed, monkeypatch, run_json) -> None:
    env = load_named_environment(environments("h100", instance_type="p5.48xlarge", target=2, on_demand=2))
    use_environment(monkeypatch, with_capacity(env, capacity_block=capacity_block("cr-0a1b2c3d4e5f67890")))
    answer_capacity_blocks(stubbed("ec2"), [offering("us-east-1b", "1400.00", "cb-0000000000000000b")])
    code, document = run_json("cost", "h100")
    assert code == 3 and document["complete"] is False
    assert document["lines"] == [
        line(
            "capacity-block",
            2,
            None,
            None,
            None,
            "price unavailable: no 24-hour Capacity Block offering for 2 x p5.48xlarge in us-east-1a",
        )
    ]
    assert document["hourly"] == 0.0


DENIED = "User: arn:aws:iam::123456789012:user/alice is not authorized to perform: pricing:GetProducts"


def test_pricing_denied_makes_the_totals_incomplete(stubbed, run_cli) -> None:
    """Without pricing:GetProducts the on-demand line says why; the totals hold the spot node only (11.5718)."""
    stubbed("pricing").add_client_error(
        "get_products", service_error_code="AccessDeniedException", service_message=DENIED, http_status_code=400
    )
    answer_spot(stubbed("ec2"))
    code, out, err = run_cli("cost", "dev")
    assert (code, err) == (3, "")
    assert out == (
        "Cost dev: 2 x p4d.24xlarge in us-east-1a (fleet.backend spot-fleet), USD\n"
        "MARKET              NODES  PER NODE-HOUR  PER HOUR  PER 30 DAYS  PRICE\n"
        f"on-demand           1      -              -         -            price unavailable: GetProducts "
        f"AccessDeniedException: {DENIED}\n"
        "spot                1      11.5718        11.57     8,331.70     latest spot price in us-east-1a\n"
        "total (incomplete)  2                     11.57     8,331.70\n"
        "\n"
        "totals are incomplete: no price for on-demand (see PRICE above)\n"
    )


def test_no_spot_price_history(stubbed, run_json) -> None:
    answer_on_demand(stubbed("pricing"))
    answer_spot(stubbed("ec2"), points=[])
    code, document = run_json("cost", "dev")
    assert code == 3 and document["complete"] is False
    assert document["lines"][1] == line(
        "spot",
        1,
        None,
        None,
        None,
        "price unavailable: no spot price history for p4d.24xlarge in us-east-1a in the last 24 hours",
    )
    assert document["hourly"] == 32.7726


def test_several_on_demand_prices_are_not_guessed_between(stubbed, run_json) -> None:
    answer_on_demand(
        stubbed("pricing"), price_list_entry(P4D_ON_DEMAND), price_list_entry("30.0000000000", sku="ZZZZEXAMPLESKU01")
    )
    answer_spot(stubbed("ec2"))
    code, document = run_json("cost", "dev")
    assert code == 3
    assert document["lines"][0]["source"] == (
        "price unavailable: the Price List API has several on-demand prices for p4d.24xlarge "
        "(30.0000000000, 32.7726000000)"
    )


def test_throttled_pricing_stops_with_one_line(stubbed, run_cli) -> None:
    stubbed("pricing").add_client_error("get_products", service_error_code="ThrottlingException", http_status_code=400)
    code, out, err = run_cli("cost", "dev")
    assert (code, out) == (1, "")
    assert err == (
        "AWS throttled GetProducts in us-east-1 (ThrottlingException) after 8 attempts: wait a minute and retry, "
        "or stop other tools calling the same API\n"
    )


def test_prices_are_asked_in_the_pricing_region_and_the_cluster_region(monkeypatch, environments) -> None:
    """The Price List API lives in us-east-1 whatever the cluster's region; spot prices come from the cluster's."""
    asked: list[tuple[str, str]] = []
    pricing_stub, ec2_stub = Stubber(Aws("us-east-1").client("pricing")), Stubber(Aws("eu-west-1").client("ec2"))
    clients = {"pricing": pricing_stub.client, "ec2": ec2_stub.client}

    def client(self: Aws, service: str) -> Any:
        asked.append((service, self.region))
        return clients[service]

    monkeypatch.setattr(Aws, "client", client)
    env = load_named_environment("dev").model_copy(update={"region": "eu-west-1", "availability_zone": "eu-west-1a"})
    pricing_stub.add_response("get_products", {"PriceList": [price_list_entry("35.5000000000")]})
    ec2_stub.add_response("describe_spot_price_history", {"SpotPriceHistory": []})
    with pricing_stub, ec2_stub:
        estimate = cost.estimate(Aws("eu-west-1"), env, dt.datetime(2025, 11, 20, 12, tzinfo=dt.UTC))
    assert sorted(asked) == [("ec2", "eu-west-1"), ("pricing", "us-east-1")]
    assert estimate.configured.lines[0].node_hourly == cost.Decimal("35.5000000000")


FALLBACK_TABLE = """\
Cost big: 4 x p4d.24xlarge in us-east-1a (fleet.backend auto-scaling), USD
MARKET     NODES  PER NODE-HOUR  PER HOUR  PER 30 DAYS  PRICE
on-demand  1      32.7726        32.77     23,596.27    Price List API: Linux, shared tenancy, us-east-1
spot       3      11.5718        34.72     24,995.09    latest spot price in us-east-1a
total      4                     67.49     48,591.36

Worst case after fallback: 2 spot node(s) replaced by on-demand (fleet.fallback)
MARKET                NODES  PER NODE-HOUR  PER HOUR  PER 30 DAYS  PRICE
on-demand             1      32.7726        32.77     23,596.27    Price List API: Linux, shared tenancy, us-east-1
spot                  1      11.5718        11.57     8,331.70     latest spot price in us-east-1a
on-demand (fallback)  2      32.7726        65.55     47,192.54    Price List API: Linux, shared tenancy, us-east-1
total                 4                     109.89    79,120.51
"""


def test_fallback_table(environments, stubbed, monkeypatch, run_cli) -> None:
    """The second run docs/operations/aws-commands.md shows under `gpufleet cost`."""
    env = load_named_environment(environments("big", target=4, on_demand=1))
    use_environment(monkeypatch, with_fleet(env, backend="auto-scaling", fallback=fallback(max_extra_on_demand=2)))
    answer_on_demand(stubbed("pricing"))
    answer_spot(stubbed("ec2"))
    code, out, err = run_cli("cost", "big")
    assert (code, err) == (0, "")
    assert out == FALLBACK_TABLE


EKS_TABLE = """\
Cost lab: 2 x p4d.24xlarge in us-east-1a (EKS managed node groups, Kubernetes 1.35), USD
MARKET                    NODES  PER NODE-HOUR  PER HOUR  PER 30 DAYS  PRICE
on-demand                 1      32.7726        32.77     23,596.27    Price List API: Linux, shared tenancy, us-east-1
spot                      1      11.5718        11.57     8,331.70     latest spot price in us-east-1a
system nodes (on-demand)  2      0.0960         0.19      138.24       Price List API: Linux, shared tenancy, us-east-1
eks control plane         1      0.1000         0.10      72.00        EKS list price, standard support (not read live)
total                     5                     44.64     32,138.21
"""


def test_an_eks_environment_adds_its_system_nodes_and_control_plane(environments, stubbed, run_cli) -> None:
    """32.7726 + 11.5718 + 2 x 0.096 (m6i.large) + 0.10 = 44.6364 per hour; x 720 = 32138.208."""
    (environments_dir() / "lab.yaml").write_text(json.dumps(VALID_EKS))
    pricing = stubbed("pricing")
    answer_on_demand(pricing)
    system_filters = [dict(f, Value="m6i.large") if f["Field"] == "instanceType" else f for f in PRICING_FILTERS]
    pricing.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [price_list_entry("0.0960000000", "SYSTEMSKU", "m6i.large")]},
        {"ServiceCode": "AmazonEC2", "Filters": system_filters, "FormatVersion": "aws_v1"},
    )
    answer_spot(stubbed("ec2"))
    code, out, err = run_cli("cost", "lab")
    assert (code, err) == (0, "")
    assert out == EKS_TABLE
