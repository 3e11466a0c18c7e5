"""Test clocks beside the product's `provisioner.api.clock.FakeClock`.

- `RecordingClock`: the product's FakeClock (what the engine and the kube room take) that
  also keeps every `sleep` asked of it, or refuses to be slept on at all.
- `SecondsClock`: time as a float the test sets, for the parts of the dev world that take
  a `Callable[[], float]` (the emulator's clocks, the node simulator).
"""

from __future__ import annotations

from datetime import datetime

from provisioner.api.clock import FakeClock


class RecordingClock(FakeClock):
    """A FakeClock whose `sleeps` lists each sleep; with `never_sleeps` (the reason), a
    sleep is a test failure instead. `reset()` forgets the sleeps; time moves on."""

    def __init__(
        self, start: float = 1000.0, wall: datetime | None = None, *, never_sleeps: str = ""
    ) -> None:
        super().__init__(start, wall)
        self.never_sleeps = never_sleeps
        self.sleeps: list[float] = []

    def reset(self) -> None:
        self.sleeps.clear()

    def sleep(self, seconds: float) -> None:
        if self.never_sleeps:
            raise AssertionError(self.never_sleeps)
        self.sleeps.append(seconds)
        super().sleep(seconds)


class SecondsClock:
    """Call it for the time in seconds; move it by setting `now`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.start = start
        self.now = start

    def reset(self) -> None:
        self.now = self.start

    def __call__(self) -> float:
        return self.now
