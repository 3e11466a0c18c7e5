"""Time, as every part of the controller sees it: the one `Clock`.

The work queue, the leader elector and the event recorder (``provisioner.kube``) and the
EC2 engine and its release (``provisioner.cloud``) each take a `Clock` in their
constructor, `SYSTEM_CLOCK` or `SystemClock()` in production; tests pass `FakeClock` and
move time with `advance` (or the engine's own `sleep`), so no test sleeps. Intervals use
`monotonic` (immune to wall-clock jumps); `wall`/`now` only for timestamps written into
objects and tags.
"""

from __future__ import annotations

import threading
import time
import weakref
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def wall(self) -> datetime:
        """The current UTC time, for timestamps written into objects."""
        ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` (held by the caller) until notified or `timeout` clock-seconds pass."""
        ...

    def now(self) -> datetime:
        """The current UTC time (the engine's name for `wall`)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let `seconds` clock-seconds pass (the engine's polls between AWS calls)."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        cond.wait(timeout)


SYSTEM_CLOCK = SystemClock()  # stateless: one instance serves every default

# A waiter that registers just after an advance would otherwise sleep until the next
# notify; a short real wait bounds that race without making tests depend on real time.
_FAKE_POLL_SECONDS = 0.02


class FakeClock:
    """A clock that moves only when told; `advance` wakes every waiter to re-check time."""

    def __init__(self, start: float = 1000.0, wall: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._wall = wall or datetime(2026, 1, 1, tzinfo=UTC)
        self._waiters: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def wall(self) -> datetime:
        with self._lock:
            return self._wall

    def now(self) -> datetime:
        return self.wall()

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            self._wall += timedelta(seconds=seconds)
            waiters = list(self._waiters)
        for cond in waiters:
            with cond:
                cond.notify_all()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        with self._lock:
            self._waiters.add(cond)
        cond.wait(None if timeout is None else _FAKE_POLL_SECONDS)
