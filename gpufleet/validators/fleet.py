"""The node group: rollout, capacity rebalancing, the fleet's end time and what an Auto Scaling group cannot do."""

from __future__ import annotations

import datetime as dt

from gpufleet.constants import (
    AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES,
    BACKEND_AUTO_SCALING,
    FLEET_TYPE_MAINTAIN,
    FLEET_TYPE_REQUEST,
    REPLACEMENT_LAUNCH,
    REPLACEMENT_LAUNCH_BEFORE_TERMINATE,
    ROLLOUT_MANUAL,
    ROLLOUT_REPLACE_ALL,
)
from gpufleet.environment import Environment, Fleet
from gpufleet.rules import Problem
from gpufleet.validators.base import FleetFlavourValidator, ValidationContext


class RolloutValidator(FleetFlavourValidator):
    field = "fleet.rollout"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.fleet.type == FLEET_TYPE_REQUEST and env.fleet.rollout == ROLLOUT_MANUAL:
            # source: EC2 API reference, ModifySpotFleetRequest: "You can only modify a Spot Fleet request of type
            # maintain." (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifySpotFleetRequest.html)
            return self.problem(
                "a request fleet cannot be modified, so every change replaces it, a new image included "
                f"(remove rollout, or set it to {ROLLOUT_REPLACE_ALL})"
            )
        return []


class CapacityRebalanceValidator(FleetFlavourValidator):
    field = "fleet.capacity_rebalance"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        rebalance = env.fleet.capacity_rebalance
        if rebalance is None:
            return []
        if env.fleet.type != FLEET_TYPE_MAINTAIN:
            return self.problem(
                "capacity rebalance needs a fleet that maintains capacity (set fleet.type: maintain "
                "or remove capacity_rebalance)"
            )
        delay = rebalance.termination_delay_seconds
        if delay is not None and rebalance.replacement_strategy != REPLACEMENT_LAUNCH_BEFORE_TERMINATE:
            return [
                Problem(
                    f"{self.field}.termination_delay_seconds",
                    "only applies to replacement_strategy: launch-before-terminate (remove it)",
                )
            ]
        return []


def valid_until_problem(valid_until: dt.datetime | None, now: dt.datetime) -> str | None:
    """A fleet.valid_until that has passed (a time equal to now has): a fleet requested with it ends before it
    starts. A time without zone is UTC."""
    if valid_until is None:
        return None
    if valid_until.tzinfo is None:
        valid_until = valid_until.replace(tzinfo=dt.UTC)
    if valid_until <= now:
        return f"{valid_until.isoformat()} has passed (set a future UTC time, or remove it, before launching nodes)"
    return None


class ValidUntilValidator(FleetFlavourValidator):
    """A warning: the date passes with no edit to the file, and the cluster must still be possible to destroy."""

    field = "fleet.valid_until"
    severity = "warning"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        return self.problem_if(valid_until_problem(env.fleet.valid_until, context.now))


class AutoScalingValidator(FleetFlavourValidator):
    """A rule of fleet.backend auto-scaling: what a Spot Fleet offers and an Auto Scaling group does not."""

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.fleet.backend != BACKEND_AUTO_SCALING:
            return []
        return self.problem_if(self.auto_scaling_problem(env.fleet))

    def auto_scaling_problem(self, fleet: Fleet) -> str | None:
        raise NotImplementedError


class AutoScalingFleetTypeValidator(AutoScalingValidator):
    field = "fleet.type"

    def auto_scaling_problem(self, fleet: Fleet) -> str | None:
        if fleet.type == FLEET_TYPE_REQUEST:
            return (
                "an Auto Scaling group always maintains its desired capacity; it has no one-shot request "
                "(remove type, or set backend: spot-fleet)"
            )
        return None


class AutoScalingValidUntilValidator(AutoScalingValidator):
    field = "fleet.valid_until"

    def auto_scaling_problem(self, fleet: Fleet) -> str | None:
        if fleet.valid_until is not None:
            return (
                "an Auto Scaling group has no end time; its nodes run until the stack is deleted "
                "(remove valid_until, or set backend: spot-fleet)"
            )
        return None


class AutoScalingReplaceUnhealthyValidator(AutoScalingValidator):
    """An Auto Scaling group replaces instances that fail their health checks; CloudFormation offers no property to
    stop it (AWS::AutoScaling::AutoScalingGroup has no SuspendedProcesses)."""

    field = "fleet.replace_unhealthy_instances"

    def auto_scaling_problem(self, fleet: Fleet) -> str | None:
        if not fleet.replace_unhealthy_instances:
            return (
                "an Auto Scaling group always replaces nodes that fail EC2 status checks "
                "(remove replace_unhealthy_instances, or set backend: spot-fleet)"
            )
        return None


class AutoScalingReplacementStrategyValidator(FleetFlavourValidator):
    """An Auto Scaling group's CapacityRebalance is on or off: it launches the replacement, then terminates the old
    node itself, with no launch-before-terminate strategy and no termination delay. source: cfn-lint 1.58's bundled
    AWS::AutoScaling::AutoScalingGroup schema, properties.CapacityRebalance ("type": "boolean": "After launching a
    new instance, it then terminates an old instance")."""

    field = "fleet.capacity_rebalance"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        rebalance = env.fleet.capacity_rebalance
        if env.fleet.backend != BACKEND_AUTO_SCALING or rebalance is None:
            return []
        problems = []
        if rebalance.replacement_strategy != REPLACEMENT_LAUNCH:
            problems.append(
                Problem(
                    f"{self.field}.replacement_strategy",
                    f"'{rebalance.replacement_strategy}' is not available with an Auto Scaling group, whose capacity "
                    "rebalancing launches a replacement and then terminates the old node (remove "
                    "replacement_strategy, or set backend: spot-fleet)",
                )
            )
        if rebalance.termination_delay_seconds is not None:
            problems.append(
                Problem(
                    f"{self.field}.termination_delay_seconds",
                    "an Auto Scaling group has no termination delay; its termination lifecycle hook gives the node "
                    "time to checkpoint (remove termination_delay_seconds, or set backend: spot-fleet)",
                )
            )
        return problems


class AutoScalingAllocationStrategyValidator(AutoScalingValidator):
    field = "fleet.allocation_strategy"

    def auto_scaling_problem(self, fleet: Fleet) -> str | None:
        if fleet.allocation_strategy not in AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES:
            return (
                f"'{fleet.allocation_strategy}' has no Auto Scaling counterpart (allowed with backend: auto-scaling: "
                f"{', '.join(AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES)}; or set backend: spot-fleet)"
            )
        return None
