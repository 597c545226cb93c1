"""The Price List API's GetProducts, which moto 5.2.5 lacks, as the box's emulator answers it: one on-demand Linux
price per instance type the box runs, in the shape AWS sends (a PriceList of JSON strings with product.attributes and
terms.OnDemand priceDimensions, botocore/data/pricing/2017-10-15/examples-1.json; the same shape as
tests/gpufleet/ops/test_cost.py's entries). The prices are the box's, not AWS's: stand-ins of the same order, so that
`gpufleet up` and `gpufleet cost` print figures, which nothing here measures.

Installed as WSGI middleware in front of moto's application (tests/box/aws_server.py): a request whose X-Amz-Target
is AWSPriceListService.GetProducts is answered here, every other request goes to moto.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

TARGET = "AWSPriceListService.GetProducts"
BOX_ON_DEMAND_USD = {"p4d.24xlarge": "32.7726000000", "p5.48xlarge": "55.0400000000"}
ON_DEMAND_TERM, RATE = "JRTCKXETXF", "6YS6EN2CT7"


def price_list_entry(instance_type: str, region: str, usd: str) -> str:
    sku = f"BOX{abs(hash((instance_type, region))) % 10**12:012d}"
    offer = f"{sku}.{ON_DEMAND_TERM}"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "servicecode": "AmazonEC2",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    offer: {
                        "priceDimensions": {
                            f"{offer}.{RATE}": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{offer}.{RATE}",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "offerTermCode": ON_DEMAND_TERM,
                        "termAttributes": {},
                    }
                }
            },
        }
    )


def get_products(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to a GetProducts REQUEST: the entries whose attributes match every TERM_MATCH filter."""
    filters = {item["Field"]: item["Value"] for item in request.get("Filters", []) if item.get("Type") == "TERM_MATCH"}
    entries = []
    for instance_type, usd in BOX_ON_DEMAND_USD.items():
        entry = price_list_entry(instance_type, filters.get("regionCode", "us-east-1"), usd)
        attributes = json.loads(entry)["product"]["attributes"]
        if all(attributes.get(field) == value for field, value in filters.items()):
            entries.append(entry)
    return {"FormatVersion": request.get("FormatVersion", "aws_v1"), "PriceList": entries}


def with_price_list(application: Callable) -> Callable:
    def answer(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("HTTP_X_AMZ_TARGET") != TARGET:
            return application(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        request = json.loads(environ["wsgi.input"].read(length) or b"{}")
        body = json.dumps(get_products(request)).encode()
        start_response("200 OK", [("Content-Type", "application/x-amz-json-1.1"), ("Content-Length", str(len(body)))])
        return [body]

    return answer
