"""A time limit for one test step: a step that runs past it fails with TimeoutError instead of hanging the suite.

Used where the property under test is speed (an adversarial input read in time proportional to its size). SIGALRM
interrupts Python code and the regular-expression engine alike (both check for signals as they run); tests run in
the main thread, pytest-xdist's workers included, where Python delivers signals.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"took more than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
