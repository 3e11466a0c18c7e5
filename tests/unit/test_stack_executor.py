"""The stack executor: most urgent first, one operation per pool, the pool queued again
when its operation ends, its result read once, and nothing started after step-down.

Most rows run operations on the test's thread with `run_next(timeout=0)`; the rows about
workers hold an operation on an event instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from provisioner.api.constants import FailureKind, Phase
from provisioner.api.fencing import NotLeader
from provisioner.api.gangnodepool import GangNodePoolStatus
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.stack_executor import Operation, StackExecutor
from provisioner.controllers.pool.steps import Action, ActionResult, Step

pytestmark = pytest.mark.unit

OK = ActionResult(True)
WAIT = 10.0  # seconds a held operation may take to be seen; never reached when all is well


def op(pool: str, action: Action, run: Callable[[], ActionResult] = lambda: OK) -> Operation:
    return Operation(pool, Step(action, GangNodePoolStatus(phase=Phase.ACQUIRING)), run)


class Harness:
    def __init__(self, workers: int = 1) -> None:
        self.requeued: list[str] = []
        self.ran: list[str] = []
        self.metrics = ControllerMetrics()
        self.executor = StackExecutor(
            workers, on_finished=self.requeued.append, metrics=self.metrics
        )

    def gauge(self, name: str) -> float | None:
        return self.metrics.registry.get_sample_value(name)

    def submit(self, pool: str, action: Action) -> bool:
        def run() -> ActionResult:
            self.ran.append(pool)
            return OK

        return self.executor.submit(op(pool, action, run))

    def drain(self) -> None:
        while self.executor.run_next(timeout=0):
            pass


def test_releases_run_first_then_prepares_then_records_and_destroys_last() -> None:
    h = Harness()
    h.submit("old", Action.DESTROY_STACK)
    h.submit("new", Action.PREPARE_STACK)
    h.submit("joining", Action.RECORD_SET)
    h.submit("broken", Action.RELEASE_SET)
    h.submit("newer", Action.PREPARE_STACK)
    h.submit("joined", Action.RECORD_SET)
    h.drain()
    assert h.ran == ["broken", "new", "newer", "joining", "joined", "old"]


def test_a_queued_operation_can_be_withdrawn_and_its_pool_given_another() -> None:
    h = Harness()
    h.submit("a", Action.RECORD_SET)
    h.submit("b", Action.RECORD_SET)
    state = h.executor.state("a")
    assert state.pending is not None and not state.started
    assert h.gauge("atomic_gang_stack_operations_queued") == 2
    instead = Step(Action.RELEASE_SET, GangNodePoolStatus(phase=Phase.JOINING))
    assert h.executor.withdraw("a", instead)
    assert h.executor.state("a").pending is None
    assert h.gauge("atomic_gang_stack_operations_queued") == 1
    assert not h.executor.withdraw("a", instead), "nothing left to withdraw"
    # The pool may be given another operation; the withdrawn one's place in the queue
    # does not run it, nor run the new one ahead of its own priority.
    assert h.submit("a", Action.DESTROY_STACK)
    h.submit("c", Action.PREPARE_STACK)
    h.drain()
    assert h.ran == ["c", "b", "a"]
    assert h.requeued == ["c", "b", "a"]


def test_a_started_operation_cannot_be_withdrawn() -> None:
    h = Harness(workers=1)
    running = Held()
    h.executor.start()
    try:
        h.executor.submit(op("a", Action.RECORD_SET, running))
        assert running.started.wait(WAIT)
        state = h.executor.state("a")
        assert state.pending is not None and state.started
        instead = Step(Action.RELEASE_SET, GangNodePoolStatus(phase=Phase.JOINING))
        assert not h.executor.withdraw("a", instead)
        running.release.set()
        assert _eventually(lambda: h.requeued == ["a"]), "its end queues the pool as usual"
    finally:
        running.release.set()
        h.executor.step_down()
        assert h.executor.join(WAIT)


def test_a_pool_has_one_operation_until_its_result_is_read() -> None:
    h = Harness()
    assert h.submit("a", Action.PREPARE_STACK)
    assert not h.submit("a", Action.PREPARE_STACK), "queued"
    assert h.submit("b", Action.PREPARE_STACK), "another pool is not held up"
    h.drain()
    assert not h.submit("a", Action.RECORD_SET), "finished, its result not yet saved"
    finished = h.executor.state("a").finished
    assert finished is not None
    h.executor.consumed(finished)
    assert h.submit("a", Action.RECORD_SET)


def test_an_operation_that_ends_queues_its_pool_and_its_result_waits_for_it() -> None:
    h = Harness()
    h.submit("a", Action.PREPARE_STACK)
    state = h.executor.state("a")
    assert state.pending is not None and state.pending.step.action is Action.PREPARE_STACK
    assert state.finished is None and h.requeued == []
    h.drain()
    assert h.requeued == ["a"]
    state = h.executor.state("a")
    assert state.pending is None
    assert state.finished is not None and state.finished.result == OK
    assert state.finished.operation.step.action is Action.PREPARE_STACK


def test_a_result_is_read_once_and_a_stale_consume_drops_nothing() -> None:
    h = Harness()
    h.submit("a", Action.PREPARE_STACK)
    h.drain()
    first = h.executor.state("a").finished
    assert first is not None
    h.executor.consumed(first)
    assert h.executor.state("a").finished is None
    h.submit("a", Action.RECORD_SET)
    h.drain()
    h.executor.consumed(first)  # a pass that read the earlier result
    second = h.executor.state("a").finished
    assert second is not None and second.operation.step.action is Action.RECORD_SET


def test_a_pool_that_is_gone_forgets_its_result() -> None:
    h = Harness()
    h.submit("a", Action.DESTROY_STACK)
    h.drain()
    h.executor.forget("a")
    assert h.executor.state("a").finished is None
    assert h.submit("a", Action.PREPARE_STACK)


def test_an_operation_that_raises_comes_back_as_a_retryable_failure() -> None:
    h = Harness()

    def broken() -> ActionResult:
        raise RuntimeError("a bug")

    h.executor.submit(op("a", Action.RECORD_SET, broken))
    h.drain()
    finished = h.executor.state("a").finished
    assert finished is not None and not finished.result.ok
    assert finished.result.failure is FailureKind.RETRYABLE
    assert finished.result.reason == "RuntimeError" and "a bug" in finished.result.message
    assert h.requeued == ["a"]


def test_an_operation_stopped_by_the_fence_ends_and_its_worker_runs_the_next() -> None:
    # On the test's thread: a NotLeader escaping run_next would end a worker's loop.
    h = Harness()

    def fenced() -> ActionResult:
        raise NotLeader("TerminateInstances not sent: the Lease's term ended")

    h.executor.submit(op("a", Action.DESTROY_STACK, fenced))
    assert h.executor.run_next(timeout=0)
    finished = h.executor.state("a").finished
    assert finished is not None and not finished.result.ok
    assert finished.result.reason == "NotLeader"
    h.submit("b", Action.PREPARE_STACK)
    h.drain()
    assert h.ran == ["b"] and h.requeued == ["a", "b"]


class Held:
    """An operation that runs until released, and says when it has started."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> ActionResult:
        self.started.set()
        assert self.release.wait(WAIT), "the test never released the operation"
        return OK


def test_workers_bound_how_many_run_and_a_held_pool_holds_up_no_other() -> None:
    h = Harness(workers=2)
    slow, other, third = Held(), Held(), Held()
    h.executor.start()
    try:
        h.executor.submit(op("slow", Action.PREPARE_STACK, slow))
        assert slow.started.wait(WAIT)
        h.executor.submit(op("other", Action.RECORD_SET, other))
        assert other.started.wait(WAIT), "a second worker runs another pool beside the held one"
        h.executor.submit(op("third", Action.RECORD_SET, third))
        assert not third.started.wait(0.2), "a third must wait: two workers"
        assert h.gauge("atomic_gang_stack_operations_in_flight") == 2
        assert h.gauge("atomic_gang_stack_operations_queued") == 1
        other.release.set()
        assert third.started.wait(WAIT)
    finally:
        for held in (slow, other, third):
            held.release.set()
        h.executor.step_down()
        assert h.executor.join(WAIT)
    assert h.gauge("atomic_gang_stack_operations_in_flight") == 0


def test_step_down_starts_nothing_more_and_drops_what_ends_after() -> None:
    h = Harness(workers=1)
    running = Held()
    h.executor.start()
    h.executor.submit(op("running", Action.PREPARE_STACK, running))
    assert running.started.wait(WAIT)
    assert h.submit("queued", Action.RECORD_SET)
    assert h.gauge("atomic_gang_stack_operations_queued") == 1

    h.executor.step_down()
    assert h.gauge("atomic_gang_stack_operations_queued") == 0
    assert not h.submit("late", Action.PREPARE_STACK), "no submission after step-down"
    assert not h.executor.join(0.05), "the running operation is not cut short"
    running.release.set()
    assert h.executor.join(WAIT)
    assert h.ran == [], "the queued operation never started"
    assert h.requeued == [], "nobody is left to read a result"
    assert h.executor.state("running").finished is None
    assert not h.executor.run_next(timeout=0)


def _eventually(condition: Callable[[], bool]) -> bool:
    """Whether `condition` holds within WAIT seconds (a worker's callback runs after its
    operation leaves the running set, outside the executor's lock)."""
    deadline = time.monotonic() + WAIT
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        StackExecutor(0, on_finished=lambda _pool: None, metrics=ControllerMetrics())
