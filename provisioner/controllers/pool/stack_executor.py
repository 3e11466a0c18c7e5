"""The stack executor: pools' Pulumi operations run here, never on a reconcile worker.

The GangNodePool reconciler submits a pool's stack operation (prepare, record the set,
release a set, destroy) and returns at once, so every other pool's Node and status events
go on being reconciled while a Pulumi `up` runs. `workers` threads take operations most
urgent first (`pool_steps.StackPriority`, then the order they came in), and a pool
has at most one operation here at a time: queued, running, or finished and not yet read.
An operation that has not started can be taken back (`withdraw`): a pool whose queued
record gives way to a release plans the release instead (the reconciler's `reconcile`).

When an operation ends, its result waits here and `on_finished(pool)` queues the pool
again; that pool's next pass reads the result (`state`), saves it in the pool's status and
only then drops it (`consumed`). So a result is applied once, and a pass that fails to save
it finds it again on the next.

Nothing here is the only record of anything: a marker is in the pool's status before an
operation is submitted, and the driver's oplog marks the operation before it starts. A
process that dies loses the queue and the results; the new leader's `recover()` records
the interrupted operation as aborted and the pools are planned again from the world.

Leadership lost (`step_down`): nothing more starts and queued operations are dropped. A
running one is not let finish: the driver's step-down (``pulumi_driver.fence``, called by
the Manager right after this one's) kills its CLI, so the operation ends with a failure
that nothing reads — its result is dropped, as the process ends — and it writes nothing to
the stack after the Lease is lost.

Called by: `reconciler.py` (submit, state, withdraw, consumed, forget) and `manager.py` (start,
step_down, join).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from provisioner.api.constants import FailureKind
from provisioner.api.fencing import NotLeader
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.steps import ActionResult, Step, stack_priority

__all__ = ["Finished", "Operation", "PoolOperations", "StackExecutor"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Operation:
    """One pool's stack step, and the call that performs it (it reports failures in its
    `ActionResult`, with their kind)."""

    pool: str
    step: Step
    run: Callable[[], ActionResult]


@dataclass(frozen=True)
class Finished:
    operation: Operation
    result: ActionResult


@dataclass(frozen=True)
class PoolOperations:
    """What the executor holds for one pool, read in one look."""

    pending: Operation | None = None  # queued or running
    finished: Finished | None = None  # ended, result not yet saved
    started: bool = False  # `pending` is running (it can no longer be withdrawn)


class StackExecutor:
    def __init__(
        self, workers: int, on_finished: Callable[[str], None], metrics: ControllerMetrics
    ) -> None:
        if workers < 1:
            raise ValueError("the stack executor needs at least one worker")
        self._workers = workers
        self._on_finished = on_finished
        self._metrics = metrics
        self._cond = threading.Condition()
        self._heap: list[tuple[int, int, str]] = []  # (priority, arrival, pool)
        self._seq = itertools.count()
        self._queued: dict[str, Operation] = {}
        # Each queued pool's arrival: a heap entry left by a withdrawn operation is skipped.
        self._arrival: dict[str, int] = {}
        self._running: dict[str, Operation] = {}
        self._finished: dict[str, Finished] = {}
        self._stepped_down = False
        self._threads: list[threading.Thread] = []

    # -- the reconciler's side ------------------------------------------------------------
    def submit(self, operation: Operation) -> bool:
        """Queue `operation`; False if its pool already has one here or after step-down."""
        pool = operation.pool
        with self._cond:
            if self._stepped_down or self._holds(pool):
                return False
            self._queued[pool] = operation
            priority = stack_priority(operation.step.action)
            self._arrival[pool] = arrival = next(self._seq)
            heapq.heappush(self._heap, (priority, arrival, pool))
            self._report()
            self._cond.notify()
        return True

    def state(self, pool: str) -> PoolOperations:
        with self._cond:
            running = self._running.get(pool)
            pending = running or self._queued.get(pool)
            return PoolOperations(pending, self._finished.get(pool), started=running is not None)

    def withdraw(self, pool: str, instead: Step) -> bool:
        """Take back `pool`'s queued operation before it starts, for `instead`; False once it
        has started (its end queues the pool as usual) or when none is queued. Nothing of a
        queued operation has happened: the driver marks one in its oplog as it starts."""
        with self._cond:
            operation = self._queued.pop(pool, None)
            if operation is None:
                return False
            del self._arrival[pool]
            self._report()
        log.info(
            "pool %s: queued stack %s withdrawn for %s",
            pool,
            operation.step.action.value,
            instead.action.value,
            extra={"pool": pool},
        )
        return True

    def consumed(self, finished: Finished) -> None:
        """The pool's status now holds `finished`'s result: drop it."""
        with self._cond:
            if self._finished.get(finished.operation.pool) is finished:
                del self._finished[finished.operation.pool]

    def forget(self, pool: str) -> None:
        """The pool is gone: nobody will read its result."""
        with self._cond:
            self._finished.pop(pool, None)

    # -- workers --------------------------------------------------------------------------
    def start(self) -> None:
        for index in range(self._workers):
            thread = threading.Thread(
                target=self._work, name=f"stack-operation-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def run_next(self, timeout: float | None = None) -> bool:
        """Run the most urgent queued operation on this thread; False when none came
        within `timeout` seconds (0 never waits) or after step-down."""
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._drop_withdrawn() and not self._stepped_down:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            if self._stepped_down:
                return False
            _, _, pool = heapq.heappop(self._heap)
            operation = self._queued.pop(pool)
            del self._arrival[pool]
            self._running[pool] = operation
            self._report()
        result = self._perform(operation)
        with self._cond:
            del self._running[pool]
            keep = not self._stepped_down
            if keep:
                self._finished[pool] = Finished(operation, result)
            self._report()
            self._cond.notify_all()
        if keep:
            self._on_finished(pool)
        return True

    def _perform(self, operation: Operation) -> ActionResult:
        action = operation.step.action.value
        # A stack operation can take minutes; its start is what an operator (and the backoff
        # fault test) reads to see how long a failed pool waited before trying again.
        log.info(
            "pool %s: stack %s started", operation.pool, action, extra={"pool": operation.pool}
        )
        started = time.monotonic()
        try:
            result = operation.run()
        except NotLeader as fenced:
            # A destroy's own EC2 calls (the leftovers it terminates) meet the fence like a
            # pass's do. NotLeader is not an Exception, so that nothing on the way turns it
            # into a failure to retry; caught here, it ends this operation and not the
            # worker thread, which the next term needs.
            log.info("pool %s: stack %s stopped: %s", operation.pool, action, fenced)
            result = ActionResult(
                False, failure=FailureKind.RETRYABLE, reason="NotLeader", message=str(fenced)
            )
        except Exception as err:  # the call reports its failures; this is a bug
            log.exception("pool %s: stack operation %s raised", operation.pool, action)
            result = ActionResult(
                False, failure=FailureKind.RETRYABLE, reason=type(err).__name__, message=str(err)
            )
        # The stack port times each call for the histogram
        # (atomic_gang_stack_operation_seconds); the log line puts one pool's on its timeline.
        log.info(
            "pool %s: stack %s %s in %.2fs",
            operation.pool,
            action,
            "succeeded" if result.ok else "failed",
            time.monotonic() - started,
            extra={"pool": operation.pool},
        )
        return result

    def _work(self) -> None:
        while self.run_next():
            pass

    # -- leadership -----------------------------------------------------------------------
    def step_down(self) -> None:
        """Start nothing more and drop what is queued; what runs is ended by the driver's
        fence (module docstring)."""
        with self._cond:
            self._stepped_down = True
            dropped = sorted(self._queued)
            self._queued.clear()
            self._arrival.clear()
            self._heap.clear()
            self._finished.clear()
            self._report()
            self._cond.notify_all()
        if dropped:
            log.info("stepped down: dropped the queued stack operations of %s", dropped)

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for running operations; True if none is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning(
                        "stack operations of %s still running; the driver's oplog marks "
                        "them for the next leader's recovery if the process ends first",
                        sorted(self._running),
                    )
                    return False
                self._cond.wait(remaining)
        return True

    # -- internals (lock held) ------------------------------------------------------------
    def _drop_withdrawn(self) -> bool:
        """Pop the heap's entries of withdrawn operations; True if a queued one is on top."""
        while self._heap:
            _, arrival, pool = self._heap[0]
            if self._arrival.get(pool) == arrival:
                return True
            heapq.heappop(self._heap)
        return False

    def _holds(self, pool: str) -> bool:
        return pool in self._queued or pool in self._running or pool in self._finished

    def _report(self) -> None:
        self._metrics.stack_operations_queued.set(len(self._queued))
        self._metrics.stack_operations_running.set(len(self._running))
