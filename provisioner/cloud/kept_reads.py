"""The launch facts' reads that never change, kept between passes (`Ec2Engine`).

Every pass that plans a prepare or a launch reads the AMI's root device and, for EFA, the
instance type; a wave of 200 gangs asked the same questions 200 times in a few seconds. An
instance type's description (EC2's catalogue) and an AMI's root device (an AMI is
immutable) never change, so each is kept for the process's life once read; an error never
is. The cluster and the recommended AMI are not kept: a rotated AMI or a new cluster
version reaches the very next prepare (`test_controller_stack_inputs`).

Two passes that miss at once may both read; the answer kept is the later one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

__all__ = ["KeptReads"]

T = TypeVar("T")


class KeptReads:
    """Answers that never change, kept per key once read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[Hashable, object] = {}

    def immutable(self, key: Hashable, read: Callable[[], T]) -> T:
        with self._lock:
            if key in self._kept:
                return self._kept[key]  # type: ignore[return-value]  # this key's own read
        answer = read()  # an error propagates and nothing is kept
        with self._lock:
            self._kept[key] = answer
        return answer
