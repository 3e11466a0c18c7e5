"""The instance event feed: what each instance itself would know (it started, it was ended).

A real node needs no EC2 listing to learn that it booted: it is the machine that booted.
The node simulator stands in for hundreds of such machines, and asking EC2 for every live
instance four times a second to learn the same thing made it the emulator's largest client
(a DescribeInstances of every warm instance, serialized by moto, on each poll). The feed
tells it instead, in order, which instances were launched and which were terminated;
`GET /_emulator/instance-events?after=N&wait=S` waits up to S seconds for one after N.

Events are numbered from 1 and never renumbered; a reset drops the retained ones, so a
reader whose `after` is older than `first - 1` knows it missed some and lists EC2 instead.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Any, Final

# Enough for every launch and termination of a long benchmark; a reader that falls further
# behind sees the gap and lists EC2 once.
RETAINED_EVENTS: Final = 50_000
MAX_WAIT_SECONDS: Final = 30.0
LAUNCHED: Final = "launched"
TERMINATED: Final = "terminated"


class InstanceEventFeed:
    """Numbered launch and termination events, with a wait for the next one."""

    def __init__(self, retained: int = RETAINED_EVENTS) -> None:
        self._changed = threading.Condition()
        self._events: deque[tuple[int, str, str]] = deque(maxlen=retained)
        self._last = 0

    def add(self, event: str, instance_ids: list[str]) -> None:
        if not instance_ids:
            return
        with self._changed:
            for instance_id in instance_ids:
                self._last += 1
                self._events.append((self._last, instance_id, event))
            self._changed.notify_all()

    def forget(self) -> None:
        """Drop every retained event (a reset); numbering goes on, so readers see a gap."""
        with self._changed:
            self._events.clear()
            self._changed.notify_all()

    def after(self, after: int, wait: float = 0.0) -> dict[str, Any]:
        """Events numbered above `after`, waiting up to `wait` seconds for the first one.

        `first` is the oldest retained number (`last + 1` when none is retained): a reader
        with `after < first - 1` missed events and must list EC2 to catch up.
        """
        wait = min(max(wait, 0.0), MAX_WAIT_SECONDS)
        with self._changed:
            if self._last <= after and wait > 0:
                self._changed.wait_for(lambda: self._last > after, timeout=wait)
            first = self._events[0][0] if self._events else self._last + 1
            # Retained events are numbered without holes, so the first one wanted is at
            # a known index.
            newer = itertools.islice(self._events, max(0, after + 1 - first), None)
            found = [
                {"seq": seq, "instance_id": instance_id, "event": event}
                for seq, instance_id, event in newer
            ]
            return {"events": found, "first": first, "last": self._last}
