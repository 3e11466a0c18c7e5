"""The work queue and the `Controller` that runs a reconcile function over it.

Each reconciler in `provisioner/controllers/` is a `Controller`: informers feed it keys,
`max_concurrent` workers take keys off the queue and call `reconcile(key)`. The queue gives
the guarantees a reconciler leans on:

- a key is never processed by two workers at once; a key added while it is processed is
  marked dirty and processed once more after (so no event is lost, and none runs in
  parallel with itself: the GangNodePool reconciler relies on this so a pool never
  launches twice at once, or submits two stack operations);
- a key waiting in the queue is there once, however often it is added;
- `add_rate_limited` backs a failing key off exponentially (capped) until `forget`;
- `add_after` schedules a key (the earliest schedule wins);
- `shutdown(drain=True)` lets queued and in-flight keys finish.

An optional `QueueObserver` hears each key newly queued and each rate-limited retry, how
long each key waited between becoming ready and a worker taking it (the reconcile lag), how
long each key was processed and how each reconcile ended, and it can read the queue's state
now (`WorkQueue.stats`: depth, in-flight work) whenever it likes; the manager plugs the
Prometheus metrics in there (``controllers.runtime_metrics``).

Time comes from an injected `Clock`, so tests move it instead of sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from provisioner.api.clock import SYSTEM_CLOCK, Clock
from provisioner.api.fencing import NotLeader
from provisioner.kube.errors import KubeConflict
from provisioner.kube.informer import Informer
from provisioner.kube.resources import ObjectKey, key_of

__all__ = [
    "NOT_LEADER_REQUEUE",
    "Controller",
    "Outcome",
    "QueueObserver",
    "QueueStats",
    "Result",
    "WorkQueue",
]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

# A pass stopped by the leadership fence (`NotLeader`) looks again after this long, once.
NOT_LEADER_REQUEUE = 5.0


class Outcome(StrEnum):
    """How one reconcile ended."""

    SUCCESS = "success"
    REQUEUE_AFTER = "requeue_after"  # succeeded and asked to look again later
    CONFLICT = "conflict"  # someone wrote after we read: back through the rate limiter
    FENCED = "fenced"  # the leadership fence stopped the pass: looked at once more later
    ERROR = "error"


@dataclass(frozen=True)
class QueueStats:
    """A queue now: keys ready and waiting, and its keys in flight (by clock seconds)."""

    depth: int
    unfinished_seconds: float  # the in-flight keys' time so far, summed
    longest_running_seconds: float  # the oldest in-flight key's time so far (0: none)


class QueueObserver(Protocol):
    """What a queue and its controller report; called with no lock of theirs held."""

    def follow(self, stats: Callable[[], QueueStats]) -> None:
        """The queue (made with this observer) offers its state-now for reading at will."""

    def added(self) -> None:
        """A key was queued that was not already waiting (a duplicate add is not counted)."""

    def retried(self) -> None:
        """A key was scheduled again through the rate limiter (`add_rate_limited`)."""

    def waited(self, seconds: float) -> None:
        """A key was taken `seconds` after it became ready (scheduled keys: after due)."""

    def worked(self, seconds: float) -> None:
        """A key was done `seconds` after it was taken."""

    def reconciled(self, seconds: float, outcome: Outcome) -> None:
        """A reconcile ended, with `outcome`."""


class WorkQueue(Generic[K]):
    """A deduplicating, per-key serialized queue with delays and per-key backoff."""

    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        base_delay: float = 0.005,
        max_delay: float = 300.0,
        observer: QueueObserver | None = None,
    ) -> None:
        self._clock = clock
        self._observer = observer
        self._ready_since: dict[K, float] = {}
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # queued, or added again while processing
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []  # heap of (due, tie-breaker, key)
        self._due: dict[K, float] = {}  # the live schedule of each waiting key
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._started: dict[K, float] = {}  # when each key in flight was taken
        self._shutting_down = False
        if observer is not None:
            observer.follow(self.stats)

    # -- adding -----------------------------------------------------------------------------
    def add(self, key: K) -> None:
        with self._cond:
            added = not self._shutting_down and self._insert(key)
        self._report_added(int(added))

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            due = self._clock.monotonic() + delay
            if self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            heapq.heappush(self._waiting, (due, next(self._seq), key))
            self._cond.notify_all()  # a sleeping worker may need to wake earlier

    def add_rate_limited(self, key: K) -> float:
        """Schedule `key` after its backoff (base * 2^failures, capped); returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            delay = min(self._base_delay * 2.0 ** min(failures, 62), self._max_delay)
        self.add_after(key, delay)
        if self._observer is not None:
            self._observer.retried()
        return delay

    def forget(self, key: K) -> None:
        """Reset `key`'s backoff (after a successful reconcile)."""
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # -- taking -----------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> K | None:
        """The next ready key, now marked processing; None on timeout or after shutdown.

        `timeout` is in clock seconds; 0 never blocks. The caller must call `done(key)`.
        """
        promoted = 0
        key: K | None = None
        with self._cond:
            deadline = None if timeout is None else self._clock.monotonic() + timeout
            while True:
                now = self._clock.monotonic()
                promoted += self._promote(now)
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    self._started[key] = now
                    waited = now - self._ready_since.pop(key, now)
                    break
                if self._shutting_down or (deadline is not None and now >= deadline):
                    break
                waits = [t - now for t in (deadline, self._next_due()) if t is not None]
                self._clock.wait(self._cond, min(waits) if waits else None)
        self._report_added(promoted)
        if key is not None and self._observer is not None:
            self._observer.waited(waited)
        return key

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            started = self._started.pop(key, None)
            worked = None if started is None else self._clock.monotonic() - started
            if key in self._dirty:
                self._append_ready(key)
            self._cond.notify_all()
        if worked is not None and self._observer is not None:
            self._observer.worked(worked)

    def stats(self) -> QueueStats:
        """Keys ready now, and how long the keys in flight have been (clock seconds)."""
        with self._cond:
            now = self._clock.monotonic()
            running = [max(now - t, 0.0) for t in self._started.values()]
            return QueueStats(len(self._queue), sum(running), max(running, default=0.0))

    # -- lifecycle --------------------------------------------------------------------------
    def shutdown(self, *, drain: bool = True, timeout: float | None = None) -> bool:
        """Stop accepting keys and drop scheduled ones; with `drain`, wait (real seconds)
        until queued and in-flight keys are done. Returns True when nothing is left."""
        stop_at = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._shutting_down = True
            self._waiting.clear()
            self._due.clear()
            if not drain:
                self._dirty.difference_update(self._queue)
                self._queue.clear()
                self._ready_since.clear()
            self._cond.notify_all()
            while drain and (self._queue or self._processing):
                remaining = None if stop_at is None else stop_at - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
            return not self._queue and not self._processing

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Keys ready to be taken (not those scheduled for later or in flight)."""
        with self._cond:
            return len(self._queue)

    def processing(self) -> set[K]:
        with self._cond:
            return set(self._processing)

    # -- internals (lock held) --------------------------------------------------------------
    def _insert(self, key: K, ready_at: float | None = None) -> bool:
        """Queue `key` (or mark it for after its processing); False when already queued."""
        if key in self._dirty:
            return False
        self._dirty.add(key)
        if key not in self._processing:
            self._append_ready(key, ready_at)
            self._cond.notify()
        return True

    def _append_ready(self, key: K, ready_at: float | None = None) -> None:
        self._queue.append(key)
        self._ready_since[key] = self._clock.monotonic() if ready_at is None else ready_at

    def _promote(self, now: float) -> int:
        """Queue the scheduled keys now due; returns how many were newly queued."""
        added = 0
        while self._waiting and self._waiting[0][0] <= now:
            due, _, key = heapq.heappop(self._waiting)
            if self._due.get(key) == due:  # else superseded by an earlier schedule
                del self._due[key]
                added += self._insert(key, ready_at=due)  # lag counts from due, not now
        return added

    def _report_added(self, count: int) -> None:
        """Tell the observer of `count` keys newly queued (called with no lock held)."""
        if self._observer is not None:
            for _ in range(count):
                self._observer.added()

    def _next_due(self) -> float | None:
        return self._waiting[0][0] if self._waiting else None


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for: `requeue_after` seconds to look again (None: don't)."""

    requeue_after: float | None = None


Reconcile = Callable[[ObjectKey], "Result | None"]
ToKeys = Callable[[dict[str, Any]], Iterable[ObjectKey]]


class Controller:
    """Runs `reconcile` for keys from informers on `max_concurrent` worker threads.

    A successful reconcile resets the key's backoff and honours `requeue_after`; a
    `KubeConflict` (someone wrote after we read) is requeued through the rate limiter,
    whose first steps are near-immediate; `NotLeader` (a mutating AWS call refused by the
    leadership fence) ends the pass quietly and looks once more later; any other exception
    backs off and is logged.
    """

    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        *,
        max_concurrent: int = 1,
        queue: WorkQueue[ObjectKey] | None = None,
        observer: QueueObserver | None = None,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.name = name
        self.queue: WorkQueue[ObjectKey] = (
            queue if queue is not None else WorkQueue(observer=observer)
        )
        self._observer = observer
        self._reconcile = reconcile
        self._max_concurrent = max_concurrent
        self._workers: list[threading.Thread] = []

    def watch(self, informer: Informer, to_keys: ToKeys | None = None) -> None:
        """Enqueue the keys `to_keys` maps each event's object to (default: its own key),
        each once per event."""
        mapper: ToKeys = to_keys or (lambda obj: [key_of(obj)])

        def enqueue(*objects: dict[str, Any]) -> None:
            # Each key once per event: both versions of an update mostly map to the same key,
            # and a worker woken by the first add may take it before the second, which would
            # then mark it dirty and run a second pass on the same cache for nothing.
            for key in dict.fromkeys(key for obj in objects for key in mapper(obj)):
                self.queue.add(key)

        # On update both versions count: a Node relabelled from pool a to b concerns both.
        informer.add_handlers(on_add=enqueue, on_update=enqueue, on_delete=enqueue)

    def enqueue(self, key: ObjectKey, delay: float = 0.0) -> None:
        self.queue.add_after(key, delay)

    def start(self) -> None:
        for index in range(self._max_concurrent):
            worker = threading.Thread(
                target=self._work, name=f"{self.name}-worker-{index}", daemon=True
            )
            worker.start()
            self._workers.append(worker)

    def stop(self, *, drain: bool = True, timeout: float = 30.0) -> bool:
        """Shut the queue down (finishing what is queued when `drain`) and join the workers."""
        drained = self.queue.shutdown(drain=drain, timeout=timeout)
        for worker in self._workers:
            worker.join(timeout)
        return drained

    def process_one(self, timeout: float | None = None) -> bool:
        """Take one key and reconcile it; False when nothing came (timeout or shutdown)."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        started = time.monotonic()
        outcome = Outcome.ERROR
        try:
            result = self._reconcile(key)
        except KubeConflict as err:
            outcome = Outcome.CONFLICT
            delay = self.queue.add_rate_limited(key)
            log.info("%s %s: conflict (%s); requeue in %.3fs", self.name, key, err, delay)
        except NotLeader as fenced:
            # Stop, not a failure: no backoff step, no error logged. A term that goes on
            # (the fence reopens on the next renewal) looks at the key again once.
            outcome = Outcome.FENCED
            self.queue.add_after(key, NOT_LEADER_REQUEUE)
            log.info("%s %s: pass stopped, not leader (%s)", self.name, key, fenced)
        except Exception:
            delay = self.queue.add_rate_limited(key)
            log.exception("%s %s: reconcile failed; retry in %.3fs", self.name, key, delay)
        else:
            outcome = Outcome.SUCCESS
            self.queue.forget(key)
            if result is not None and result.requeue_after is not None:
                outcome = Outcome.REQUEUE_AFTER
                self.queue.add_after(key, result.requeue_after)
        finally:
            self.queue.done(key)
            if self._observer is not None:
                self._observer.reconciled(time.monotonic() - started, outcome)
        return True

    def _work(self) -> None:
        while self.process_one():
            pass
