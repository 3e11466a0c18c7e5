"""The launch facts' reads that never change, kept between passes (`Ec2Engine`).

Every pass that plans a prepare or a launch reads the AMI's root device and, for EFA, the
instance type; a wave of 200 gangs asked the same questions 200 times in a few seconds. An
instance type's description (EC2's catalogue) and an AMI's root device (an AMI is
immutable) never change, so each is kept for the process's life once read; an error never
is. The cluster and the recommended AMI are not kept: a rotated AMI or a new cluster
version reaches the very next prepare (`test_controller_stack_inputs`). `short_lived` keeps
an answer a while, for a caller that can wait that long for a change.

Two passes that miss at once may both read; the answer kept is the later one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Final, TypeVar

from provisioner.api.clock import Clock

__all__ = ["SHORT_LIVED_SECONDS", "KeptReads"]

SHORT_LIVED_SECONDS: Final = 60.0

T = TypeVar("T")


class KeptReads:
    """Answers kept per key: for good (`immutable`) or for `short_lived` seconds."""

    def __init__(self, clock: Clock, short_lived: float = SHORT_LIVED_SECONDS) -> None:
        self._clock = clock
        self._short_lived = short_lived
        self._lock = threading.Lock()
        self._kept: dict[Hashable, tuple[float | None, object]] = {}

    def immutable(self, key: Hashable, read: Callable[[], T]) -> T:
        return self._kept_or_read(key, read, None)

    def short_lived(self, key: Hashable, read: Callable[[], T]) -> T:
        return self._kept_or_read(key, read, self._short_lived)

    def forget(self) -> None:
        """Drop every answer (a caller that knows the world changed)."""
        with self._lock:
            self._kept.clear()

    def _kept_or_read(self, key: Hashable, read: Callable[[], T], ttl: float | None) -> T:
        now = self._clock.monotonic()
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and (kept[0] is None or now < kept[0]):
            return kept[1]  # type: ignore[return-value]  # stored by this key's own read
        answer = read()  # an error propagates and nothing is kept
        with self._lock:
            self._kept[key] = (None if ttl is None else now + ttl, answer)
        return answer
