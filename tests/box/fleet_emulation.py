"""The Spot Fleet as the box's emulator answers for it: AWS's fleet behaviour is the one part nothing offline runs, so
the box is the fleet (tests/box/cluster.py launches and interrupts the instances) and this module makes moto's Spot
Fleet requests describe what the box launched. Imported by the emulator's server process (tests/box/aws_server.py),
where moto's backends live.

Patched in moto 5.2.5 (moto/ec2/models/spot_requests.py):
- SpotFleetRequest.create_spot_requests launches nothing: a box fleet's instances are the box's.
- describe_spot_fleet_instances lists the instances tagged aws:ec2spot:fleet-request-id with the request's id that
  are pending or running, spot and on-demand alike (DescribeSpotFleetInstances "Describes the running instances for
  the specified Spot Fleet", botocore's ec2 model), as Spot Fleet lists the on-demand part of its capacity beside the
  spot part. That EC2 itself tags a fleet's instances with aws:ec2spot:fleet-request-id is (unconfirmed): here it is
  the box's own record of which fleet launched an instance.
- the request's FulfilledCapacity is the number of those instances (one unit each: the box's fleets weigh every
  instance 1).
- DescribeSpotFleetRequestHistory, which moto lacks: an instanceChange "launched" record for every instance of the
  fleet at its launch time and a "terminated" one for each that was terminated, at or after StartTime, oldest first,
  in the shape botocore's ec2 model gives (HistoryRecords of EventType, EventInformation, Timestamp; StartTime and
  LastEvaluatedTime). One page: the box's fleets are small.
- RequestSpotFleet with DryRun: moto 5.2.5 ignores DryRun there and fails on a request of launch specifications
  without an image; EC2 answers a permitted dry run with the error DryRunOperation ("Request would have succeeded, but
  DryRun flag is set", EC2 API reference, "Common client errors"), moto's DryRunClientError.
- GetSpotPlacementScores, which moto lacks: with SingleAvailabilityZone, a score for each AZ of the region (botocore's
  ec2 model: SpotPlacementScores of Region, AvailabilityZoneId and Score, 1 to 10). The box gives every AZ 9: which
  AZ EC2 would favour is AWS's fleet behaviour, nothing offline knows it.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.ec2.exceptions import DryRunClientError
from moto.ec2.models.spot_requests import SpotFleetRequest, SpotRequestBackend
from moto.ec2.responses.spot_fleets import SpotFleets

FLEET_TAG = "aws:ec2spot:fleet-request-id"
LIVE_STATES = ("pending", "running")


def fleet_instances(fleet: SpotFleetRequest, states: tuple[str, ...] = LIVE_STATES) -> list[Any]:
    backend = fleet.ec2_backend
    found = []
    for reservation in backend.reservations.values():
        for instance in reservation.instances:
            if backend.tags.get(instance.id, {}).get(FLEET_TAG) == fleet.id and instance.state in states:
                found.append(instance)
    return found


def _naive_utc(moment: str | dt.datetime) -> dt.datetime:
    """A StartTime as moto keeps times: naive, in UTC."""
    parsed = moment if isinstance(moment, dt.datetime) else dt.datetime.fromisoformat(moment.replace("Z", "+00:00"))
    return parsed.astimezone(dt.UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _describe_spot_fleet_request_history(self: SpotFleets) -> ActionResult:
    request_id = self._get_param("SpotFleetRequestId")
    start = self._get_param("StartTime")
    fleet = self.ec2_backend.get_spot_fleet_request(request_id)
    records = []
    for instance in fleet_instances(fleet, ("pending", "running", "shutting-down", "terminated")) if fleet else []:
        records.append((instance.launch_time, "launched", instance.id))
        if instance.state == "terminated":
            records.append((getattr(instance, "box_terminated_at", None) or utcnow(), "terminated", instance.id))
    history = [
        {
            "EventType": "instanceChange",
            "Timestamp": moment,
            "EventInformation": {"EventSubType": change, "InstanceId": instance_id},
        }
        for moment, change, instance_id in sorted(records)
        if start is None or moment >= _naive_utc(start)
    ]
    return ActionResult(
        {
            "SpotFleetRequestId": request_id,
            "StartTime": start,
            "LastEvaluatedTime": utcnow(),
            "HistoryRecords": history,
        }
    )


def _describe_spot_fleet_instances(self: SpotRequestBackend, spot_fleet_request_id: str) -> list[Any]:
    fleet = self.get_spot_fleet_request(spot_fleet_request_id)  # type: ignore[attr-defined]
    if not fleet:
        return []
    instances = fleet_instances(fleet)
    # moto's answer reads a spot request's id and instance; an on-demand instance has no spot request (its entry
    # carries the instance alone in AWS's answer: the id here is left empty).
    return [
        SimpleNamespace(id=getattr(instance, "spot_instance_request_id", None) or "", instance=instance)
        for instance in instances
    ]


def _fulfilled_capacity(fleet: SpotFleetRequest) -> float:
    return float(len(fleet_instances(fleet)))


BOX_PLACEMENT_SCORE = 9
_request_spot_fleet = SpotFleets.request_spot_fleet


def _request_spot_fleet_or_dry_run(self: SpotFleets) -> Any:
    if self._get_param("DryRun", False):
        raise DryRunClientError()
    return _request_spot_fleet(self)


def _get_spot_placement_scores(self: SpotFleets) -> ActionResult:
    regions = self._get_param("RegionNames", []) or self._get_multi_param("RegionName") or [self.region]
    single_zone = self._get_param("SingleAvailabilityZone", False)
    scores = []
    for region in regions:
        if single_zone:
            zones = self.ec2_backend.describe_availability_zones()
            scores += [
                {"Region": region, "AvailabilityZoneId": zone.zone_id, "Score": BOX_PLACEMENT_SCORE} for zone in zones
            ]
        else:
            scores.append({"Region": region, "Score": BOX_PLACEMENT_SCORE})
    return ActionResult({"SpotPlacementScores": scores})


def install() -> None:
    # moto sets the attribute in __init__; the property ignores that and counts the box's instances when asked.
    SpotFleetRequest.fulfilled_capacity = property(_fulfilled_capacity, lambda fleet, value: None)  # type: ignore[assignment]
    SpotFleets.describe_spot_fleet_request_history = _describe_spot_fleet_request_history  # type: ignore[attr-defined]
    SpotFleetRequest.create_spot_requests = lambda self, weight_to_add: None  # type: ignore[method-assign]
    SpotRequestBackend.describe_spot_fleet_instances = _describe_spot_fleet_instances  # type: ignore[method-assign]
    SpotFleets.request_spot_fleet = _request_spot_fleet_or_dry_run  # type: ignore[method-assign]
    SpotFleets.get_spot_placement_scores = _get_spot_placement_scores  # type: ignore[attr-defined]
