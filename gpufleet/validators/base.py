"""What every environment rule shares: the context it is checked in and its base class."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpufleet.ami.pipeline import Pipeline
from gpufleet.constants import FLAVOUR_FLEET, FLAVOURS
from gpufleet.environment import Environment
from gpufleet.rules import Validator


@dataclass(frozen=True)
class ValidationContext:
    path: Path
    now: dt.datetime
    # The AMI pipeline (ami/pipeline.yaml) that publishes /gpufleet/ami/PROFILE; None: not checked against it.
    ami_pipeline: Pipeline | None = None


class EnvironmentValidator(Validator[Environment, ValidationContext]):
    """A rule of an environment file, checked for the flavours it names (gpufleet.constants.FLAVOURS)."""

    flavours: ClassVar[tuple[str, ...]] = FLAVOURS


class FleetFlavourValidator(EnvironmentValidator):
    """A rule about what only the fleet flavour has: gpufleet's node group (fleet), its node image and its node
    scripts (the user data)."""

    flavours = (FLAVOUR_FLEET,)
