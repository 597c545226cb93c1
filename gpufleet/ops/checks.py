"""What a preflight check reports: pass, warn or fail, with one line of detail (gpufleet preflight prints one row per
check). Shared by the preflight checks and the capacity-source checks of gpufleet.ops.reservations."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from botocore.exceptions import ClientError

from gpufleet.aws import error_code, error_message

Status = Literal["pass", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def unavailable(name: str, error: ClientError) -> Check:
    """A check the caller may not make (access denied, opt-in region...): a warn that says which call failed."""
    return Check(name, "warn", f"could not check: {error.operation_name} {error_code(error)}: {error_message(error)}")
