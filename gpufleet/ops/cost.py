"""What an environment's nodes cost per hour and per 30 days, from live prices, and the worst case after fallback.

Prices come from three places: on-demand from the Price List Query API (GetProducts), spot from the cluster AZ's spot
price history, Capacity Blocks from the offerings EC2 would sell now. A price that cannot be read (access denied, no
offering, no history) becomes a line saying why, and the totals say that they are incomplete; credentials,
throttling and other failures propagate to aws_errors.

Nodes in an On-Demand Capacity Reservation (capacity.reservation) are priced as on-demand nodes: a reservation is
billed at the On-Demand rate whether an instance runs in it or not (source: nOps, "Cancel Unused Capacity
Reservation", https://help.nops.io/inform/supported-recommendations/cancel-unused-capacity-reservation.md; AWS's own
page not checked offline: unconfirmed). An unused reservation's cost is not shown.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import Aws, error_code, error_message, is_unavailable
from gpufleet.constants import FLAVOUR_EKS
from gpufleet.environment import Environment
from gpufleet.ops.preflight import latest_spot_prices

HOURS_PER_30_DAYS = 720
CURRENCY = "USD"
# The Price List Query API answers only in a few regions, whatever region the prices are for; us-east-1 is one.
# source: the boto3 Pricing client docs ("Amazon Web Services Price List Service API provides the following two
#   endpoints", https://boto3.amazonaws.com/v1/documentation/api/1.24.9/reference/services/pricing.html) and the
#   service description in aws-sdk-php (src/data/pricing/2017-10-15/docs-2.json): https://api.pricing.us-east-1.amazonaws.com
#   and https://api.pricing.ap-south-1.amazonaws.com.
PRICING_REGION = "us-east-1"
# GetProducts filters that leave one on-demand product of the type: Linux, shared tenancy, no pre-installed software,
# capacitystatus Used.
# source (field names and values): the aws_pricing_product data source's example, Terraform/Pulumi
#   (https://www.pulumi.com/registry/packages/aws/api-docs/pricing/getproduct: instanceType, operatingSystem Linux,
#   location, preInstalledSw NA, licenseModel, tenancy Shared, capacitystatus Used); Filter.Field takes "ServiceCode,
#   and all attribute names", TERM_MATCH the only Type
#   (https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_Filter.html).
# regionCode (the region's code, instead of location's display name such as "US East (N. Virginia)") is an attribute
#   of EC2 products that public tools filter on (e.g. the determined.ai code base); not found in AWS's docs
#   (unconfirmed).
ON_DEMAND_FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}
# A Capacity Block is sold in whole days; the shortest (24 h) is what the hourly rate is read from.
# source: botocore/data/ec2/2016-11-15/service-2.json, DescribeCapacityBlockOfferings CapacityDurationHours ("in 1-day
#   increments up 14 days"); CapacityBlockOffering.UpfrontFee is "The total price to be paid up front" for
#   InstanceCount instances over CapacityBlockDurationHours (+ CapacityBlockDurationMinutes).
# A purchased block's price cannot be read back: neither CapacityReservation nor CapacityBlock (DescribeCapacityBlocks)
#   has a price member (same file), so a reserved block is priced by today's offering for the same nodes.
CAPACITY_BLOCK_HOURS = 24
# The eks flavour's cluster fee: "$0.10 per cluster per hour" for a Kubernetes version in standard support, "$0.60 per
# cluster per hour" in extended support (AWS Containers blog, "Amazon EKS extended support for Kubernetes versions
# pricing", 2024). A list price, not read live: the Price List API's attributes of AmazonEKS products were not checked
# here (unconfirmed), and whether the fee differs by region is (unconfirmed). gpufleet preflight warns when the pinned
# version is in extended support.
EKS_CONTROL_PLANE_HOURLY = Decimal("0.10")
EKS_CONTROL_PLANE_SOURCE = "EKS list price, standard support (not read live)"


class PriceUnavailable(Exception):
    """One price could not be read; the message says why, in one line."""


@dataclass(frozen=True)
class CostLine:
    """Some nodes of one market and what each costs per hour (None when the price could not be read)."""

    # on-demand | spot | capacity-block | on-demand (fallback); on eks also system nodes (on-demand), eks control plane
    market: str
    nodes: int
    node_hourly: Decimal | None
    source: str  # where the price came from, or why it is missing

    @property
    def hourly(self) -> Decimal | None:
        return None if self.node_hourly is None else self.node_hourly * self.nodes

    def as_dict(self) -> dict[str, Any]:
        return {
            "market": self.market,
            "nodes": self.nodes,
            "node_hourly": _number(self.node_hourly),
            "hourly": _number(self.hourly),
            "thirty_days": _number(None if self.hourly is None else self.hourly * HOURS_PER_30_DAYS),
            "price_known": self.node_hourly is not None,
            "source": self.source,
        }


@dataclass(frozen=True)
class Mix:
    """The lines of one state of the cluster; its totals count only the known prices."""

    lines: tuple[CostLine, ...]

    @property
    def complete(self) -> bool:
        return all(line.node_hourly is not None for line in self.lines)

    @property
    def hourly(self) -> Decimal:
        return sum((line.hourly for line in self.lines if line.hourly is not None), Decimal(0))

    @property
    def thirty_days(self) -> Decimal:
        return self.hourly * HOURS_PER_30_DAYS

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": [line.as_dict() for line in self.lines],
            "hourly": _number(self.hourly),
            "thirty_days": _number(self.thirty_days),
            "complete": self.complete,
        }


@dataclass(frozen=True)
class Estimate:
    configured: Mix
    # The most the cluster costs once fallback has replaced spot nodes by on-demand ones; None without fleet.fallback.
    after_fallback: Mix | None
    extra_on_demand: int

    @property
    def complete(self) -> bool:
        return self.configured.complete and (self.after_fallback is None or self.after_fallback.complete)

    @property
    def missing(self) -> list[CostLine]:
        """Each market whose price could not be read, once."""
        lines = [*self.configured.lines, *(self.after_fallback.lines if self.after_fallback else ())]
        seen: dict[str, CostLine] = {}
        for line in lines:
            if line.node_hourly is None:
                seen.setdefault(line.market, line)
        return list(seen.values())


def _number(value: Decimal | None) -> float | None:
    return None if value is None else float(round(value, 4))


def capacity_block_id(env: Environment) -> str | None:
    """The Capacity Block reservation the on-demand part runs in (capacity.capacity_block), if any."""
    block = env.capacity.capacity_block
    return None if block is None else block.reservation_id


def extra_on_demand_nodes(env: Environment) -> int:
    """How many spot nodes fallback may replace by on-demand ones at most (0 without fleet.fallback)."""
    fallback = env.fleet.fallback
    if fallback is None:
        return 0
    return min(env.capacity.spot, fallback.max_extra_on_demand)


def on_demand_price(pricing: Any, instance_type: str, region: str) -> Decimal:
    """USD per hour of one on-demand Linux instance, from the Price List Query API."""
    filters = {"instanceType": instance_type, "regionCode": region, **ON_DEMAND_FILTERS}
    pages = pricing.get_paginator("get_products").paginate(
        ServiceCode="AmazonEC2",
        Filters=[{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in filters.items()],
        FormatVersion="aws_v1",
    )
    return single_on_demand_price([text for page in pages for text in page.get("PriceList", [])], instance_type, region)


def single_on_demand_price(price_list: list[str], instance_type: str, region: str) -> Decimal:
    """The one hourly on-demand price in the PriceList entries of GetProducts with ON_DEMAND_FILTERS."""
    prices: set[Decimal] = set()
    for text in price_list:
        # Each entry is a JSON string: product.attributes, and terms.OnDemand.<offer>.priceDimensions.<rate> with
        # unit and pricePerUnit.USD. source: botocore/data/pricing/2017-10-15/examples-1.json, GetProducts
        product = json.loads(text)
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                if dimension.get("unit") == "Hrs" and CURRENCY in dimension.get("pricePerUnit", {}):
                    prices.add(Decimal(dimension["pricePerUnit"][CURRENCY]))
    if not prices:
        raise PriceUnavailable(f"the Price List API has no on-demand Linux price for {instance_type} in {region}")
    if len(prices) > 1:
        listed = ", ".join(f"{price:f}" for price in sorted(prices))
        raise PriceUnavailable(f"the Price List API has several on-demand prices for {instance_type} ({listed})")
    return prices.pop()


def spot_price(ec2: Any, instance_type: str, zone: str, now: dt.datetime) -> Decimal:
    price = latest_spot_prices(ec2, instance_type, [zone], now).get(zone)
    if price is None:
        raise PriceUnavailable(f"no spot price history for {instance_type} in {zone} in the last 24 hours")
    return Decimal(str(price))


def capacity_block_price(ec2: Any, instance_type: str, zone: str, nodes: int) -> tuple[Decimal, str]:
    """USD per node-hour of the cheapest 24-hour Capacity Block offering for NODES instances in ZONE, and its id."""
    pages = ec2.get_paginator("describe_capacity_block_offerings").paginate(
        InstanceType=instance_type, InstanceCount=nodes, CapacityDurationHours=CAPACITY_BLOCK_HOURS
    )
    rates: list[tuple[Decimal, str]] = []
    for page in pages:
        for offering in page.get("CapacityBlockOfferings", []):
            if offering.get("AvailabilityZone") != zone or offering.get("CurrencyCode", CURRENCY) != CURRENCY:
                continue
            hours = (
                Decimal(offering["CapacityBlockDurationHours"])
                + Decimal(offering.get("CapacityBlockDurationMinutes", 0)) / 60
            )
            rate = Decimal(offering["UpfrontFee"]) / hours / int(offering["InstanceCount"])
            rates.append((rate, offering.get("CapacityBlockOfferingId", "")))
    if not rates:
        raise PriceUnavailable(
            f"no {CAPACITY_BLOCK_HOURS}-hour Capacity Block offering for {nodes} x {instance_type} in {zone}"
        )
    return min(rates)


PriceReading = tuple[Decimal | None, str]  # (USD per node-hour, where it came from) or (None, why it is missing)
NOT_NEEDED: PriceReading = (None, "not needed")


def _read(reader: Callable[[], tuple[Decimal, str]]) -> PriceReading:
    try:
        return reader()
    except PriceUnavailable as missing:
        return None, f"price unavailable: {missing}"
    except ClientError as error:
        if is_unavailable(error):
            return None, f"price unavailable: {error.operation_name} {error_code(error)}: {error_message(error)}"
        raise


def estimate(aws: Aws, env: Environment, now: dt.datetime) -> Estimate:
    """The environment's mix priced now; each price is read once, and only when some nodes need it."""
    ec2 = aws.client("ec2")
    zone, instance_type, capacity = env.availability_zone, env.instance_type, env.capacity
    extra = extra_on_demand_nodes(env)
    block = capacity_block_id(env)

    on_demand = NOT_NEEDED
    if (capacity.on_demand and not block) or extra:
        pricing = Aws(PRICING_REGION, aws.session).client("pricing")
        source = f"Price List API: Linux, shared tenancy, {env.region}"
        on_demand = _read(lambda: (on_demand_price(pricing, instance_type, env.region), source))
    spot = NOT_NEEDED
    if capacity.spot:
        spot = _read(lambda: (spot_price(ec2, instance_type, zone, now), f"latest spot price in {zone}"))
    # With a Capacity Block, the block holds the on-demand part of the fleet (spot has no place in a block).
    reserved_market, reserved = "on-demand", on_demand
    if block:

        def read_block() -> tuple[Decimal, str]:
            rate, offering_id = capacity_block_price(ec2, instance_type, zone, capacity.on_demand)
            return rate, f"{block}: today's cheapest {CAPACITY_BLOCK_HOURS} h offering in {zone} ({offering_id})"

        reserved_market, reserved = "capacity-block", _read(read_block) if capacity.on_demand else NOT_NEEDED

    configured = [CostLine(reserved_market, capacity.on_demand, *reserved), CostLine("spot", capacity.spot, *spot)]
    if env.flavour == FLAVOUR_EKS:
        configured.extend(_eks_lines(aws, env))
    after_fallback = None
    if env.fleet.fallback is not None:
        after_fallback = _mix(
            CostLine(reserved_market, capacity.on_demand, *reserved),
            CostLine("spot", capacity.spot - extra, *spot),
            CostLine("on-demand (fallback)", extra, *on_demand),
        )
    return Estimate(_mix(*configured), after_fallback, extra)


def _eks_lines(aws: Aws, env: Environment) -> list[CostLine]:
    """What the eks flavour runs beside the GPU nodes: the on-demand system nodes (eks.system_nodes) and the
    cluster's control plane."""
    assert env.eks is not None, "the environment's validation: the eks flavour has an eks section"
    system = env.eks.system_nodes
    pricing = Aws(PRICING_REGION, aws.session).client("pricing")
    source = f"Price List API: Linux, shared tenancy, {env.region}"
    price = _read(lambda: (on_demand_price(pricing, system.instance_type, env.region), source))
    return [
        CostLine("system nodes (on-demand)", system.count, *price),
        CostLine("eks control plane", 1, EKS_CONTROL_PLANE_HOURLY, EKS_CONTROL_PLANE_SOURCE),
    ]


def _mix(*lines: CostLine) -> Mix:
    return Mix(tuple(line for line in lines if line.nodes))
