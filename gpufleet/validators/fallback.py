"""The capacity fallback (fleet.fallback): what it needs to have something to fall back from and to."""

from __future__ import annotations

from gpufleet.constants import BACKEND_SPOT_FLEET, FLEET_TYPE_MAINTAIN
from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import FleetFlavourValidator, ValidationContext


class FallbackNeedsSpotValidator(FleetFlavourValidator):
    field = "fleet.fallback"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.fleet.fallback is not None and env.capacity.spot < 1:
            return self.problem(
                f"there is no spot part to fall back from: capacity.on_demand ({env.capacity.on_demand}) is the whole "
                f"target ({env.capacity.target}) (lower capacity.on_demand, or remove fallback)"
            )
        return []


class FallbackNeedsMaintainValidator(FleetFlavourValidator):
    field = "fleet.fallback"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        fallback_on_spot_fleet = env.fleet.fallback is not None and env.fleet.backend == BACKEND_SPOT_FLEET
        if fallback_on_spot_fleet and env.fleet.type != FLEET_TYPE_MAINTAIN:
            # source: EC2 API reference, ModifySpotFleetRequest: "You can only modify a Spot Fleet request of type
            # maintain." (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifySpotFleetRequest.html)
            return self.problem(
                "the fallback changes the fleet's on-demand part, and only a maintain fleet can be modified "
                "(set fleet.type: maintain, or remove fallback)"
            )
        return []


class FallbackCeilingValidator(FleetFlavourValidator):
    field = "fleet.fallback.max_extra_on_demand"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        fallback = env.fleet.fallback
        if fallback is None or env.capacity.spot < 1:
            return []
        extra, spot = fallback.max_extra_on_demand, env.capacity.spot
        if not 1 <= extra <= spot:
            return self.problem(
                f"{extra} is out of range (1 to the spot part, capacity.target - capacity.on_demand = {spot}: more "
                "extra on-demand nodes than spot nodes would never be used)"
            )
        return []


class FallbackCapacityBlockValidator(FleetFlavourValidator):
    field = "fleet.fallback"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.fleet.fallback is not None and env.capacity.capacity_block is not None:
            return self.problem(
                "a Capacity Block has no spot nodes to fall back from, and its nodes are not on-demand ones "
                "(remove fallback, or capacity.capacity_block)"
            )
        return []
