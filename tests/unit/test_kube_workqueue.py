"""The work queue's guarantees and the Controller's handling of reconcile outcomes.

Time is a FakeClock; threads synchronise on events and barriers, never on sleeps.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from provisioner.api.clock import FakeClock
from provisioner.api.fencing import NotLeader
from provisioner.kube.errors import KubeConflict
from provisioner.kube.resources import ObjectKey
from provisioner.kube.workqueue import (
    NOT_LEADER_REQUEUE,
    Controller,
    Outcome,
    QueueStats,
    Result,
    WorkQueue,
)

A, B, C = ObjectKey("", "a"), ObjectKey("", "b"), ObjectKey("ns", "c")
WAIT = 10.0  # real seconds a thread may take before a test fails (never reached when green)


def drain_now(queue: WorkQueue[str]) -> list[str]:
    taken: list[str] = []
    while (key := queue.get(timeout=0)) is not None:
        taken.append(key)
        queue.done(key)
    return taken


def test_queued_keys_are_deduplicated_and_fifo() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    for key in ("a", "b", "a", "c", "b"):
        queue.add(key)
    assert len(queue) == 3
    assert drain_now(queue) == ["a", "b", "c"]


def test_a_key_added_while_processing_is_processed_once_more_after() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("a")
    # Not handed to another worker while the first still holds it.
    assert len(queue) == 0
    assert queue.get(timeout=0) is None
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_rate_limited_backoff_doubles_up_to_the_cap_and_forget_resets() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock, base_delay=1.0, max_delay=8.0)
    delays = []
    for _ in range(6):
        delays.append(queue.add_rate_limited("a"))
        clock.advance(delays[-1])
        assert drain_now(queue) == ["a"]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert queue.num_requeues("a") == 6
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    assert queue.add_rate_limited("a") == 1.0


def test_rate_limited_key_is_not_ready_before_its_delay() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock, base_delay=2.0)
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")  # second failure: 4s, but the earlier 2s schedule wins
    clock.advance(1.9)
    assert drain_now(queue) == []
    clock.advance(0.1)
    assert drain_now(queue) == ["a"]
    clock.advance(10)
    assert drain_now(queue) == []  # the superseded 4s schedule does not fire again


def test_add_after_honours_the_earliest_schedule_per_key() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 10)
    queue.add_after("b", 5)
    queue.add_after("a", 3)
    queue.add_after("b", 7)  # later than the existing schedule: ignored
    assert drain_now(queue) == []
    clock.advance(3)
    assert drain_now(queue) == ["a"]
    clock.advance(2)
    assert drain_now(queue) == ["b"]
    clock.advance(100)
    assert drain_now(queue) == []


def test_add_after_zero_is_an_immediate_add() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add_after("a", 0)
    assert drain_now(queue) == ["a"]


def test_a_blocked_worker_wakes_when_the_fake_clock_reaches_a_schedule() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    got: list[str | None] = []
    waiting = threading.Event()

    def worker() -> None:
        waiting.set()
        got.append(queue.get())

    queue.add_after("a", 30)
    thread = threading.Thread(target=worker)
    thread.start()
    assert waiting.wait(WAIT)
    clock.advance(30)
    thread.join(WAIT)
    assert got == ["a"]


def test_get_with_a_timeout_returns_none_when_nothing_is_ready() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add_after("a", 5)
    assert queue.get(timeout=0) is None


def test_shutdown_without_drain_drops_queued_and_scheduled_keys() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("a")
    queue.add_after("b", 1)
    assert queue.shutdown(drain=False)
    assert queue.get() is None
    queue.add("c")  # ignored once shutting down
    assert len(queue) == 0


def test_shutdown_with_drain_waits_for_in_flight_keys() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    assert not queue.shutdown(drain=True, timeout=0)  # "a" is still in flight
    queue.done("a")
    assert queue.shutdown(drain=True, timeout=0)


def test_shutdown_with_drain_still_hands_out_queued_keys() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("a")
    queue.add("b")
    assert not queue.shutdown(drain=True, timeout=0)
    assert drain_now(queue) == ["a", "b"]
    assert queue.get() is None


# -- Controller ---------------------------------------------------------------------------
def controller_on_fake_clock(
    outcomes: dict[ObjectKey, list[object]],
) -> tuple[Controller, FakeClock, list[ObjectKey]]:
    """A controller whose reconcile pops the next outcome (a Result or an exception)."""
    clock = FakeClock()
    seen: list[ObjectKey] = []

    def reconcile(key: ObjectKey) -> Result | None:
        seen.append(key)
        outcome = outcomes[key].pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is None or isinstance(outcome, Result)
        return outcome

    queue: WorkQueue[ObjectKey] = WorkQueue(clock=clock, base_delay=1.0, max_delay=60.0)
    return Controller("test", reconcile, queue=queue), clock, seen


def test_a_conflict_is_requeued_through_the_rate_limiter() -> None:
    controller, clock, seen = controller_on_fake_clock(
        {A: [KubeConflict("moved on", status=409), KubeConflict("again", status=409), None]}
    )
    controller.enqueue(A)
    assert controller.process_one(timeout=0)
    assert controller.queue.num_requeues(A) == 1
    assert not controller.process_one(timeout=0)
    clock.advance(1)
    assert controller.process_one(timeout=0)
    clock.advance(1.5)
    assert not controller.process_one(timeout=0)  # second failure waits 2s
    clock.advance(0.5)
    assert controller.process_one(timeout=0)
    assert controller.queue.num_requeues(A) == 0  # success forgot the failures
    assert seen == [A, A, A]


def test_other_errors_back_off_and_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    controller, clock, seen = controller_on_fake_clock({A: [RuntimeError("boom"), None]})
    controller.enqueue(A)
    assert controller.process_one(timeout=0)
    assert "reconcile failed" in caplog.text and "boom" in caplog.text
    clock.advance(1)
    assert controller.process_one(timeout=0)
    assert seen == [A, A]


def test_a_pass_stopped_by_the_fence_is_no_failure_and_looks_again_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`NotLeader`: no backoff step, no error logged; one look later, for a term that goes
    on (the fence reopens at the next renewal)."""
    caplog.set_level(logging.INFO)
    controller, clock, seen = controller_on_fake_clock({A: [NotLeader("fenced"), None]})
    controller.enqueue(A)
    assert controller.process_one(timeout=0)
    assert controller.queue.num_requeues(A) == 0
    assert "reconcile failed" not in caplog.text and "not leader" in caplog.text
    clock.advance(NOT_LEADER_REQUEUE - 0.5)
    assert not controller.process_one(timeout=0)
    clock.advance(0.5)
    assert controller.process_one(timeout=0)
    assert seen == [A, A]


def test_requeue_after_schedules_the_key_again() -> None:
    controller, clock, seen = controller_on_fake_clock({A: [Result(requeue_after=30), Result()]})
    controller.enqueue(A)
    assert controller.process_one(timeout=0)
    clock.advance(29)
    assert not controller.process_one(timeout=0)
    clock.advance(1)
    assert controller.process_one(timeout=0)
    clock.advance(1000)
    assert not controller.process_one(timeout=0)  # a plain Result() does not requeue
    assert seen == [A, A]


def test_workers_never_process_one_key_twice_at_once() -> None:
    keys = [ObjectKey("ns", f"k{i}") for i in range(5)]
    lock = threading.Lock()
    in_flight: Counter[ObjectKey] = Counter()
    overlaps: list[ObjectKey] = []
    processed: Counter[ObjectKey] = Counter()

    def reconcile(key: ObjectKey) -> None:
        with lock:
            in_flight[key] += 1
            if in_flight[key] > 1:
                overlaps.append(key)
        sum(range(2000))  # some work, so other workers run meanwhile
        with lock:
            in_flight[key] -= 1
            processed[key] += 1

    controller = Controller("serial", reconcile, max_concurrent=8)
    controller.start()

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(400):
            controller.enqueue(rng.choice(keys))

    producers = [threading.Thread(target=producer, args=(seed,)) for seed in range(4)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join(WAIT)
    assert controller.stop(drain=True, timeout=WAIT)
    assert overlaps == []
    assert set(processed) == set(keys)


def test_no_more_than_max_concurrent_keys_are_processed_at_once() -> None:
    lock = threading.Lock()
    running = 0
    peak = 0
    three_running = threading.Barrier(3)
    release = threading.Event()

    def reconcile(key: ObjectKey) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        if key.name in {"k0", "k1", "k2"}:
            three_running.wait(WAIT)  # proves three run together
            release.wait(WAIT)
        with lock:
            running -= 1

    controller = Controller("bounded", reconcile, max_concurrent=3)
    for index in range(10):
        controller.enqueue(ObjectKey("", f"k{index}"))
    controller.start()
    release.set()
    assert controller.stop(drain=True, timeout=WAIT)
    assert peak == 3
    assert not three_running.broken


def test_watch_enqueues_the_keys_of_both_versions_of_an_update() -> None:
    class Source:
        def add_handlers(self, on_add=None, on_update=None, on_delete=None):  # type: ignore[no-untyped-def]
            self.on_add, self.on_update, self.on_delete = on_add, on_update, on_delete

    def pool_of(node: dict[str, object]) -> list[ObjectKey]:
        labels = node["metadata"]["labels"]  # type: ignore[index]
        return [ObjectKey("", labels["pool"])] if "pool" in labels else []

    source = Source()
    controller = Controller("nodes", lambda key: None)
    controller.watch(source, pool_of)  # type: ignore[arg-type]
    old = {"metadata": {"name": "n1", "labels": {"pool": "a"}}}
    new = {"metadata": {"name": "n1", "labels": {"pool": "b"}}}
    source.on_update(old, new)
    source.on_delete({"metadata": {"name": "n2", "labels": {}}})
    taken = []
    while (key := controller.queue.get(timeout=0)) is not None:
        taken.append(key)
    assert taken == [ObjectKey("", "a"), ObjectKey("", "b")]


def test_an_update_whose_versions_map_to_one_key_is_one_pass() -> None:
    class Source:
        def add_handlers(self, on_add=None, on_update=None, on_delete=None):  # type: ignore[no-untyped-def]
            self.on_update = on_update

    taken: list[ObjectKey] = []

    class EagerWorker(WorkQueue[ObjectKey]):
        """A worker wakes on each add and takes the key before the handler goes on."""

        def add(self, key: ObjectKey) -> None:
            super().add(key)
            if (got := self.get(timeout=0)) is not None:
                taken.append(got)

    queue = EagerWorker(clock=FakeClock())
    source = Source()
    controller = Controller("pools", lambda key: None, queue=queue)
    controller.watch(source)  # type: ignore[arg-type]
    old = {"metadata": {"name": "p1", "resourceVersion": "1"}}
    new = {"metadata": {"name": "p1", "resourceVersion": "2"}}
    source.on_update(old, new)
    for key in taken:
        queue.done(key)
    # Taken once, and not queued again by the same event's other version.
    assert taken == [ObjectKey("", "p1")]
    assert queue.get(timeout=0) is None


def test_max_concurrent_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Controller("x", lambda key: None, max_concurrent=0)


def test_keys_print_as_namespace_slash_name() -> None:
    assert str(C) == "ns/c" and str(A) == "a"


class RecordingObserver:
    def __init__(self) -> None:
        self.waits: list[float] = []
        self.worked_for: list[float] = []
        self.results: list[str] = []
        self.adds = 0
        self.retries = 0
        self.stats: Callable[[], QueueStats] | None = None

    def follow(self, stats: Callable[[], QueueStats]) -> None:
        self.stats = stats

    def added(self) -> None:
        self.adds += 1

    def retried(self) -> None:
        self.retries += 1

    def waited(self, seconds: float) -> None:
        self.waits.append(seconds)

    def worked(self, seconds: float) -> None:
        self.worked_for.append(seconds)

    def reconciled(self, seconds: float, outcome: Outcome) -> None:
        self.results.append(outcome)


def test_the_observer_counts_adds_once_per_queued_key_and_retries_apart() -> None:
    clock = FakeClock()
    observer = RecordingObserver()
    queue: WorkQueue[str] = WorkQueue(clock=clock, observer=observer)
    queue.add("a")
    queue.add("a")  # already waiting: not a new add
    queue.add_after("b", 5)  # counted when it falls due, as client-go's AddAfter
    assert observer.adds == 1
    queue.add_rate_limited("c")
    assert observer.retries == 1
    clock.advance(6)
    assert drain_now(queue) == ["a", "c", "b"]
    assert observer.adds == 3


def test_the_queue_state_now_shows_depth_and_a_stuck_key() -> None:
    clock = FakeClock()
    observer = RecordingObserver()
    queue: WorkQueue[str] = WorkQueue(clock=clock, observer=observer)
    assert observer.stats is not None
    queue.add("a")
    queue.add("b")
    assert observer.stats() == QueueStats(2, 0.0, 0.0)
    assert queue.get(timeout=0) == "a"
    clock.advance(30)  # "a" is stuck in its reconcile: the gauges see it without an event
    assert queue.get(timeout=0) == "b"
    clock.advance(10)
    assert observer.stats() == QueueStats(0, 50.0, 40.0)
    queue.done("a")
    assert observer.worked_for == [40.0]
    assert observer.stats() == QueueStats(0, 10.0, 10.0)


def test_the_observer_hears_the_wait_from_ready_not_from_scheduling() -> None:
    clock = FakeClock()
    observer = RecordingObserver()
    queue: WorkQueue[str] = WorkQueue(clock=clock, observer=observer)
    queue.add("a")
    queue.add("b")
    clock.advance(2)
    queue.add_after("c", 10)  # its lag counts from when it falls due, not from now
    assert queue.get(timeout=0) == "a"
    clock.advance(11)
    assert drain_now(queue) == ["b", "c"]
    queue.done("a")
    assert observer.waits == [2, 13, 1]


def test_a_key_made_dirty_while_processing_waits_from_when_it_was_released() -> None:
    clock = FakeClock()
    observer = RecordingObserver()
    queue: WorkQueue[str] = WorkQueue(clock=clock, observer=observer)
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    clock.advance(5)  # in flight: not yet ready again
    queue.done("a")
    clock.advance(0.5)
    assert queue.get(timeout=0) == "a"
    assert observer.waits == [0, 0.5]


def test_the_controller_reports_each_outcome() -> None:
    observer = RecordingObserver()
    outcomes = iter(
        [KubeConflict("moved", status=409), RuntimeError("boom"), None, Result(requeue_after=30)]
    )

    def reconcile(key: ObjectKey) -> Result | None:
        if isinstance(next_outcome := next(outcomes), Exception):
            raise next_outcome
        return next_outcome

    clock = FakeClock()
    controller = Controller(
        "t", reconcile, queue=WorkQueue(clock=clock, observer=observer), observer=observer
    )
    for _ in range(4):
        controller.enqueue(A)
        clock.advance(10)
        assert controller.process_one(timeout=0)
    assert observer.results == [
        Outcome.CONFLICT,
        Outcome.ERROR,
        Outcome.SUCCESS,
        Outcome.REQUEUE_AFTER,
    ]
