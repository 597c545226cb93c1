"""The capacity fallback's state as `gpufleet status` shows it: read from the SSM parameter its Lambda writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from gpufleet.aws import error_code
from gpufleet.constants import FALLBACK_CHECK_INTERVAL_MINUTES
from gpufleet.environment import Environment
from gpufleet.fallback import FallbackState, parameter_name


@dataclass(frozen=True)
class FallbackStatus:
    parameter: str
    floor: int  # capacity.on_demand
    max_extra: int
    state: FallbackState | None  # None: the function has not run yet
    node_group_id: str  # the fleet request or group status looked at
    unreadable: str = ""  # why the parameter holds no state ("" when it does, or when there is none)

    @property
    def about_another_fleet(self) -> bool:
        return self.state is not None and self.state.node_group_id not in ("", self.node_group_id)

    def line(self) -> str:
        prefix = f"Fallback ({self.parameter})"
        if self.unreadable:
            return f"{prefix}: {self.unreadable}: the fallback replaces it at its next run"
        if self.state is None:
            return (
                f"{prefix}: not run yet (the function writes its state on its first run; it runs every "
                f"{FALLBACK_CHECK_INTERVAL_MINUTES} minutes)"
            )
        if self.about_another_fleet:
            return (
                f"{prefix}: state about {self.state.node_group_id}, not this fleet: the fallback starts afresh at its "
                "next run"
            )
        on_demand = self.state.on_demand if self.state.on_demand is not None else self.floor
        checked = self.state.checked_at.strftime("%Y-%m-%d %H:%M:%SZ") if self.state.checked_at else "-"
        return (
            f"{prefix}: on-demand part {on_demand} (capacity.on_demand {self.floor} + {on_demand - self.floor} extra, "
            f"at most {self.max_extra}); {checked} {self.state.action}: {self.state.reason}{self._hand_back()}"
        )

    def _hand_back(self) -> str:
        """A Spot Fleet probe under way, or the back-off after hand-backs that found spot short (gpufleet.fallback)."""
        state = self.state
        if state is None:
            return ""
        if state.probe_total is not None:
            started = state.probe_started.strftime("%H:%M:%SZ") if state.probe_started else "-"
            return (
                f"; probe since {started}: total {state.probe_total} ({state.probe_extra} spot node(s) beyond the "
                "target), the on-demand nodes they replace end after their checkpoint hook once they are there"
            )
        if state.next_hand_back is not None:
            return (
                f"; {state.hand_back_misses} hand-back(s) in a row found spot short: the next one not before "
                f"{state.next_hand_back:%Y-%m-%d %H:%M:%SZ}"
            )
        return ""

    def as_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "parameter": self.parameter,
            "floor": self.floor,
            "max_extra_on_demand": self.max_extra,
            "run": self.state is not None,
            "unreadable": self.unreadable,
            "about_another_fleet": self.about_another_fleet,
        }
        if self.state is not None:
            document["state"] = json.loads(self.state.to_json())
        return document


def fallback_status(ssm: Any, env: Environment, node_group_id: str) -> FallbackStatus | None:
    """None when the environment has no fleet.fallback."""
    fallback = env.fleet.fallback
    if fallback is None:
        return None
    name = parameter_name(env.name)
    try:
        text = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as error:
        if error_code(error) != "ParameterNotFound":
            raise
        return FallbackStatus(name, env.capacity.on_demand, fallback.max_extra_on_demand, None, node_group_id)
    try:
        state = FallbackState.from_json(text)
    except ValueError as error:
        return FallbackStatus(
            name, env.capacity.on_demand, fallback.max_extra_on_demand, None, node_group_id, unreadable=str(error)
        )
    return FallbackStatus(name, env.capacity.on_demand, fallback.max_extra_on_demand, state, node_group_id)
