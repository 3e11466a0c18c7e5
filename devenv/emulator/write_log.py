"""What the S3 and EC2 write logs (`s3_writes`, `ec2_writes`) share: entries numbered in
arrival order, each completed with the answer's time and status as the answer starts,
read after a sequence number, cleared on reset; thread-safe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any, Generic, Protocol, TypeVar

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Entry(Protocol):
    seq: int
    answered: float | None
    status: int | None


E = TypeVar("E", bound=Entry)


class WriteLog(Generic[E]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: list[E] = []

    def record(
        self,
        app: WSGIApp,
        environ: dict[str, Any],
        start: Callable[..., Any],
        entry_for: Callable[[int], E],
    ) -> Any:
        """Run ``app`` with the entry ``entry_for(seq)`` logged, its answer noted."""
        with self._lock:
            entry = entry_for(len(self._writes) + 1)
            self._writes.append(entry)

        def recorded(status: str, headers: Any, *rest: Any) -> Any:
            with self._lock:
                entry.answered = time.time()
                entry.status = int(status.split(" ", 1)[0])
            return start(status, headers, *rest)

        return app(environ, recorded)

    def report(self, after: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(w) for w in self._writes if w.seq > after]  # type: ignore[call-overload]

    def clear(self) -> None:
        with self._lock:
            self._writes.clear()
