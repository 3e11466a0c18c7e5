"""The launch facts' reads, kept between passes (`Ec2Engine`'s preparation reads).

Every pass that plans a prepare or a launch reads the cluster, the recommended AMI, the
AMI's root device and, for EFA, the instance type. A wave of 200 gangs asked the same four
questions 200 times in a few seconds, each call queued behind the others on EC2's read
buckets and on the pool workers. What the answers are made of decides how long one is kept:

- an instance type's description and an AMI's root device never change (an AMI is
  immutable; a type's figures are EC2's catalogue): kept for the process's life;
- the cluster (its version, subnets and security groups) and the recommended AMI (an SSM
  parameter AWS re-publishes with each release) change rarely, and by someone's hand:
  kept `SHORT_LIVED_SECONDS`, so a new AMI or cluster version reaches the next prepare
  within a minute, as Karpenter's AMI and subnet providers keep theirs for minutes.

An error is never kept: the next pass asks again. Two passes that miss at once may both
read; the answer kept is the later one.
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
