"""Preflight checks of an environment's capacity source against its account: the On-Demand Capacity Reservations of
capacity.reservation and the Capacity Block of capacity.capacity_block (DescribeCapacityReservations, and the
resource group's members from Resource Groups ListGroupResources). Part of `gpufleet preflight`
(gpufleet.ops.preflight.run_checks); what only the account knows (the reservation's type, AZ, state, room, dates)
is checked here, the rest by gpufleet.validators.

An instance launches into a reservation only when the reservation is active and has matching attributes (instance
type, platform, Availability Zone, tenancy) and room (EC2 user guide, capacity-reservations-launch.html). The nodes
run Linux/UNIX images with default tenancy (the launch template sets no tenancy; the node images are plain Ubuntu
or Amazon Linux).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import error_code, error_message, is_unavailable
from gpufleet.block_schedule import TERMINATION_LEAD
from gpufleet.constants import RESERVATION_PREFERENCE_ONLY
from gpufleet.environment import CapacityBlock, CapacityReservation, Environment
from gpufleet.ops.checks import Check, unavailable

NODE_PLATFORM = "Linux/UNIX"
NODE_TENANCY = "default"
# A block whose nodes go within this long still launches, but barely: preflight warns.
SHORT_NOTICE = dt.timedelta(hours=24)
# ReservationType of a Capacity Block (botocore ec2 CapacityReservationType: default | capacity-block).
CAPACITY_BLOCK_TYPE = "capacity-block"
CAPACITY_RESERVATION_RESOURCE_TYPE = "AWS::EC2::CapacityReservation"
# States in which a Capacity Block is not there yet but is coming (API_CapacityBlock: active | expired | unavailable
# | cancelled | failed | scheduled | payment-pending | payment-failed).
BLOCK_COMING = ("scheduled", "payment-pending")


def capacity_source_checks(ec2: Any, resource_groups: Any, env: Environment, now: dt.datetime) -> list[Check]:
    """The checks of the environment's capacity source; none without one."""
    checks = []
    if env.capacity.reservation is not None:
        checks.append(check_reservations(ec2, resource_groups, env, env.capacity.reservation, now))
    if env.capacity.capacity_block is not None:
        checks.append(check_capacity_block(ec2, env, env.capacity.capacity_block, now))
    return checks


def _moment(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def group_reservation_ids(resource_groups: Any, group_arn: str) -> list[str]:
    """The Capacity Reservation ids in a resource group (the last part of each member's ARN,
    arn:aws:ec2:REGION:ACCOUNT:capacity-reservation/ID)."""
    pages = resource_groups.get_paginator("list_group_resources").paginate(
        Group=group_arn, Filters=[{"Name": "resource-type", "Values": [CAPACITY_RESERVATION_RESOURCE_TYPE]}]
    )
    return [item["Identifier"]["ResourceArn"].rsplit("/", 1)[1] for page in pages for item in page["Resources"]]


def describe_reservations(ec2: Any, ids: list[str]) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_capacity_reservations").paginate(CapacityReservationIds=ids)
    return [reservation for page in pages for reservation in page["CapacityReservations"]]


def reservation_mismatches(reservation: dict[str, Any], env: Environment, now: dt.datetime) -> list[str]:
    """Why the environment's nodes cannot launch into this reservation; empty when they can."""
    found = []
    if reservation.get("ReservationType") == CAPACITY_BLOCK_TYPE:
        found.append("it is a Capacity Block (name it in capacity.capacity_block instead)")
    if reservation["State"] != "active":
        starts = reservation.get("StartDate")
        when = f", starts {_moment(starts)}" if reservation["State"] == "scheduled" and starts else ""
        found.append(f"state {reservation['State']}{when}")
    if reservation["InstanceType"] != env.instance_type:
        found.append(f"for {reservation['InstanceType']}, not {env.instance_type}")
    if reservation["AvailabilityZone"] != env.availability_zone:
        found.append(f"in {reservation['AvailabilityZone']}, not {env.availability_zone}")
    if reservation.get("InstancePlatform", NODE_PLATFORM) != NODE_PLATFORM:
        found.append(f"platform {reservation['InstancePlatform']}, not {NODE_PLATFORM}")
    if reservation.get("Tenancy", NODE_TENANCY) != NODE_TENANCY:
        found.append(f"tenancy {reservation['Tenancy']}, not {NODE_TENANCY}")
    if reservation.get("PlacementGroupArn"):
        # The nodes launch into their stack's own cluster placement group, which no reservation can name yet.
        found.append(f"reserved in placement group {reservation['PlacementGroupArn'].rsplit('/', 1)[1]}")
    end = reservation.get("EndDate")
    if reservation.get("EndDateType") == "limited" and end is not None and end <= now:
        found.append(f"ended {_moment(end)}")
    return found


def check_reservations(
    ec2: Any, resource_groups: Any, env: Environment, reservation: CapacityReservation, now: dt.datetime
) -> Check:
    """The reservations must be usable by the nodes and have room for the on-demand nodes: all of them (only),
    or else the rest launch as plain on-demand (first)."""
    only = reservation.preference == RESERVATION_PREFERENCE_ONLY
    source = reservation.resource_group_arn or ", ".join(reservation.ids or ())
    try:
        ids = list(reservation.ids or ()) or group_reservation_ids(resource_groups, source)
        described = describe_reservations(ec2, ids) if ids else []
    except ClientError as error:
        code = error_code(error)
        if code.startswith("InvalidCapacityReservationId") or code == "NotFoundException":
            return Check("reservation", "fail", f"{source}: {code}: {error_message(error)}")
        if is_unavailable(error):
            return unavailable("reservation", error)
        raise
    usable = []
    notes = []
    ending_soon = False
    for item in described:
        mismatches = reservation_mismatches(item, env, now)
        if mismatches:
            notes.append(f"{item['CapacityReservationId']} unusable: {'; '.join(mismatches)}")
            continue
        usable.append(item)
        end = item.get("EndDate") if item.get("EndDateType") == "limited" else None
        if end is not None and end - now < SHORT_NOTICE:
            ending_soon = True
            notes.append(f"{item['CapacityReservationId']} ends {_moment(end)}")
    room = sum(item["AvailableInstanceCount"] for item in usable)
    nodes = env.capacity.on_demand
    text = (
        f"{len(usable)} of {len(described)} reservations usable ({source}), {room} free for {nodes} on-demand "
        f"x {env.instance_type} in {env.availability_zone}"
    )
    text += "".join(f"; {note}" for note in notes)
    if room >= nodes:
        return Check("reservation", "warn" if ending_soon else "pass", text)
    if only:
        return Check("reservation", "fail", f"{text}: preference only launches no node outside them")
    return Check("reservation", "warn", f"{text}: {nodes - room} launch as plain on-demand (preference first)")


def check_capacity_block(ec2: Any, env: Environment, capacity_block: CapacityBlock, now: dt.datetime) -> Check:
    """The block must be for this type and AZ, hold every node, and not be over; a scheduled one says when. Its start
    and end must be the file's: the deploy makes the group's scheduled actions from those (gpufleet.block_schedule)."""
    block_id = capacity_block.reservation_id
    try:
        (block,) = describe_reservations(ec2, [block_id])
    except ClientError as error:
        if error_code(error).startswith("InvalidCapacityReservationId"):
            return Check("capacity-block", "fail", f"{block_id}: {error_code(error)}: {error_message(error)}")
        if is_unavailable(error):
            return unavailable("capacity-block", error)
        raise
    problems = []
    if block.get("ReservationType") != CAPACITY_BLOCK_TYPE:
        problems.append("not a Capacity Block (name it in capacity.reservation instead)")
    if block["InstanceType"] != env.instance_type:
        problems.append(f"for {block['InstanceType']}, not {env.instance_type}")
    if block["AvailabilityZone"] != env.availability_zone:
        problems.append(f"in {block['AvailabilityZone']}, not {env.availability_zone}")
    if block["TotalInstanceCount"] < env.capacity.target:
        problems.append(f"holds {block['TotalInstanceCount']} instances, not the {env.capacity.target} nodes")
    state, start, end = block["State"], block.get("StartDate"), block["EndDate"]
    for verb, key, described, written in (
        ("starts", "start", start, capacity_block.start),
        ("ends", "end", end, capacity_block.end),
    ):
        if described is not None and described != written:
            problems.append(
                f"{verb} {_moment(described)}, not {_moment(written)} (set capacity.capacity_block.{key} to it)"
            )
    terminating = end - TERMINATION_LEAD
    if state != "active" and state not in BLOCK_COMING:
        problems.append(f"state {state}")
    elif now >= terminating:
        problems.append(f"ends {_moment(end)}: EC2 terminates its instances from {_moment(terminating)}")
    text = f"{block_id} ({env.capacity.target} x {env.instance_type} in {env.availability_zone})"
    if problems:
        return Check("capacity-block", "fail", f"{text}: {'; '.join(problems)}")
    window = f"ends {_moment(end)}, instances terminated from {_moment(terminating)}"
    if state in BLOCK_COMING:
        starts = f"starts {_moment(start)}" if start else "start not known yet"
        return Check("capacity-block", "warn", f"{text}: {state}, {starts}; nodes launch from then on; {window}")
    if block["AvailableInstanceCount"] < env.capacity.target:
        return Check(
            "capacity-block",
            "warn",
            f"{text}: active, {block['AvailableInstanceCount']} of {block['TotalInstanceCount']} free "
            f"(instances already in it, this cluster's included, take the rest); {window}",
        )
    if terminating - now < SHORT_NOTICE:
        return Check("capacity-block", "warn", f"{text}: active; {window}, in less than a day")
    return Check("capacity-block", "pass", f"{text}: active; {window}")
