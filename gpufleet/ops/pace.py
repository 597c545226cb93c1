"""How the commands that follow AWS over minutes (up, down, rehearse) wait and say when: the clock they read and the
sleep between looks, which the tests make virtual, and the time since a start as MM:SS."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Pace:
    """The clock a command reads and the sleep between its looks."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def elapsed(seconds: float) -> str:
    """SECONDS as minutes and seconds, 01:05 (minutes go past 59: 61:40)."""
    whole = int(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"
