"""Polling with a deadline, for tests that watch real processes converge."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    probe: Callable[[], T | None],
    timeout: float = 90,
    what: str | Callable[[], str] = "",
    every: float = 0.25,
) -> T:
    """Poll until `probe` answers; `what` (or what it returns, at the timeout) says why."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    described = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout}s waiting for {described}; last={last!r}")


def when(
    check: Callable[[], bool],
    timeout: float = 90,
    what: str | Callable[[], str] = "",
    every: float = 0.02,
) -> float:
    """Poll until `check` holds; the `time.monotonic()` at which it was first seen to."""
    return eventually(lambda: time.monotonic() if check() else None, timeout, what, every)
