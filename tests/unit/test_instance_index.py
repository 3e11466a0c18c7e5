"""The instance index: one listing serves every settled pool; fresh reads, forgets and
failures keep their order however the threads interleave.

The shared fake engine answers `find_managed` from a fleet the test edits, as EC2 was when
the call STARTED (so a held listing is an old one when it returns), counts the listings, can
hold one on an event, and can fail the next; here it also checks that each listing is one
the index may make. Time is a `FakeClock` that also says how often it was read: a reader
looks at it to find the snapshot stale, which is how a test knows every reader is waiting on
the listing before it lets the listing return.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from provisioner.api.clock import FakeClock
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.types import InstanceView
from provisioner.controllers.instance_index import (
    CHANGED_STATES,
    FULL_SNAPSHOT_EVERY,
    OBSERVED_STATES,
    REFRESH_AHEAD,
    InstanceIndex,
)
from provisioner.controllers.metrics import ControllerMetrics
from tests.support.fake_engine import FakeEngine, Listing
from tests.support.instance_views import managed_instance

pytestmark = pytest.mark.unit

CLUSTER = "c1"
INTERVAL = 10.0
WAIT = 10.0  # seconds a held listing may take to be seen; never reached when all is well


def instance(iid: str, pool: str | None, state: str = "running") -> InstanceView:
    return managed_instance(iid, cluster=CLUSTER, pool=pool, state=state)


def index_reads_only(listing: Listing) -> None:
    """What the index may ask EC2: the cluster's observed states, or between snapshots the
    changes; a pool's read is whole."""
    assert listing.cluster == CLUSTER and listing.group is None
    assert listing.states in (OBSERVED_STATES, CHANGED_STATES)
    assert listing.pool is None or listing.states == OBSERVED_STATES, "a pool's read is whole"


def index_engine(fleet: Sequence[InstanceView] = ()) -> FakeEngine:
    return FakeEngine(fleet, check_listing=index_reads_only)


class WatchedClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self._read = threading.Condition()
        self.reads = 0

    def monotonic(self) -> float:
        with self._read:
            self.reads += 1
            self._read.notify_all()
        return super().monotonic()

    def wait_for_reads(self, count: int) -> bool:
        with self._read:
            return self._read.wait_for(lambda: self.reads >= count, WAIT)


def throttled() -> CloudError:
    return CloudError(ErrorKind.RETRYABLE, "RequestLimitExceeded", "Throttled", "slow down")


def ids(views: Sequence[InstanceView]) -> list[tuple[str, str]]:
    return [(v.instance_id, v.state) for v in views]


def build(
    engine: FakeEngine, clock: FakeClock | None = None
) -> tuple[InstanceIndex, FakeClock, ControllerMetrics]:
    clock = clock or FakeClock()
    metrics = ControllerMetrics()
    ops: Any = engine  # only `find_managed` of `EngineOps`: all the index calls
    return InstanceIndex(ops, CLUSTER, INTERVAL, clock, metrics), clock, metrics


def behind_a_held_listing(
    engine: FakeEngine,
    clock: WatchedClock,
    first: Callable[[], None],
    rest: Sequence[Callable[[], None]],
) -> None:
    """Run `first` until the snapshot listing it starts is held, then each of `rest`, each
    on a thread; let the listing return once every one of them found the snapshot stale (so
    waits on it), and wait for them all."""
    began, release = engine.hold(None)
    leader = threading.Thread(target=first)
    leader.start()
    assert began.wait(WAIT)
    waiters = [threading.Thread(target=call) for call in rest]
    reads = clock.reads
    for t in waiters:
        t.start()
    assert clock.wait_for_reads(reads + len(waiters)), "every reader found the snapshot stale"
    release.set()
    for t in (leader, *waiters):
        t.join(WAIT)


def describes(metrics: ControllerMetrics, kind: str) -> float:
    value = metrics.registry.get_sample_value(
        "atomic_gang_instance_index_describes_total", {"kind": kind}
    )
    return value or 0.0


FLEET = (
    instance("i-a1", "a"),
    instance("i-a2", "a"),
    instance("i-b1", "b", "terminated"),
    instance("i-x", None),  # no pool tag: no pool's
)


def test_one_listing_serves_every_pool_until_the_interval_is_over() -> None:
    engine = index_engine(FLEET)
    index, clock, metrics = build(engine)

    assert ids(index.read("a")) == [("i-a1", "running"), ("i-a2", "running")]
    assert ids(index.read("b")) == [("i-b1", "terminated")]
    assert index.read("c") == []
    clock.advance(INTERVAL - 0.1)
    engine.set_state("i-a1", "shutting-down")
    assert ids(index.read("a"))[0] == ("i-a1", "running"), "within the interval: the snapshot"
    assert engine.calls == [None]

    clock.advance(0.1)
    assert ids(index.read("a"))[0] == ("i-a1", "shutting-down")
    assert engine.calls == [None, None]
    assert engine.listed_states == [OBSERVED_STATES, CHANGED_STATES], "then only the changes"
    assert describes(metrics, "snapshot") == 1 and describes(metrics, "changes") == 1
    assert describes(metrics, "pool") == 0


def test_a_stale_snapshot_is_listed_once_for_every_reader_waiting_on_it() -> None:
    engine, clock = index_engine(FLEET), WatchedClock()
    index, _clock, metrics = build(engine, clock)
    index.read("a")
    clock.advance(INTERVAL)
    answers: dict[int, list[InstanceView]] = {}

    def reader(n: int, pool: str) -> Callable[[], None]:
        return lambda: answers.__setitem__(n, index.read(pool))

    pools = ["a", "b", "c"] * 3
    behind_a_held_listing(
        engine, clock, reader(0, "a"), [reader(n, p) for n, p in enumerate(pools, 1)]
    )

    assert engine.calls == [None, None]
    assert describes(metrics, "snapshot") + describes(metrics, "changes") == 2
    assert [len(answers[n]) for n in range(len(pools) + 1)] == [2, *([2, 1, 0] * 3)]


def test_forget_makes_the_next_read_of_that_pool_alone_fresh() -> None:
    engine = index_engine(FLEET)
    index, _clock, metrics = build(engine)
    index.read("a")
    engine.set_state("i-a1", "shutting-down")  # our own release

    index.forget("a")
    assert ids(index.read("a"))[0] == ("i-a1", "shutting-down")
    assert ids(index.read("a"))[0] == ("i-a1", "shutting-down"), "kept as the pool's entry"
    index.read("b")
    assert engine.calls == [None, "a"]
    assert describes(metrics, "pool") == 1


def test_a_fresh_read_made_during_a_refresh_outlives_the_older_snapshot() -> None:
    engine = index_engine(FLEET)
    index, clock, _metrics = build(engine)
    index.read("a")
    clock.advance(INTERVAL)
    began, release = engine.hold(None)
    refresher = threading.Thread(target=index.read, args=("c",))
    refresher.start()
    assert began.wait(WAIT)  # the snapshot was listed with i-a1 running

    engine.set_state("i-a1", "terminated")
    assert ids(index.read_fresh("a"))[0] == ("i-a1", "terminated")
    index.forget("b")  # e.g. a release of pool b that ended while the listing ran
    release.set()
    refresher.join(WAIT)

    assert ids(index.read("a"))[0] == ("i-a1", "terminated"), "the snapshot began earlier"
    calls = len(engine.calls)
    index.read("b")
    assert engine.calls[calls:] == ["b"], "a forget after the listing began stands"


def test_a_full_snapshot_keeps_fresh_reads_and_forgets_newer_than_it() -> None:
    # As above, but the held listing is a full snapshot (its install replaces the entries it
    # answers), not a listing of the changes: it began before the fresh read of `a` and the
    # forget of `b`, so both stand over it.
    engine = index_engine(FLEET)
    index, clock, metrics = build(engine)
    index.read("a")
    clock.advance(INTERVAL * FULL_SNAPSHOT_EVERY)
    began, release = engine.hold(None)
    refresher = threading.Thread(target=index.read, args=("c",))
    refresher.start()
    assert began.wait(WAIT)  # the snapshot was listed with i-a1 running
    assert engine.listed_states[-1] == OBSERVED_STATES, "a full snapshot, not the changes"

    engine.set_state("i-a1", "terminated")
    assert ids(index.read_fresh("a"))[0] == ("i-a1", "terminated")
    index.forget("b")
    release.set()
    refresher.join(WAIT)
    assert describes(metrics, "snapshot") == 2

    assert ids(index.read("a"))[0] == ("i-a1", "terminated"), "the snapshot began earlier"
    calls = len(engine.calls)
    index.read("b")
    assert engine.calls[calls:] == ["b"], "a forget after the snapshot began stands"


def test_a_fresh_read_that_began_before_a_forget_does_not_clear_it() -> None:
    engine = index_engine(FLEET)
    index, _clock, _metrics = build(engine)
    index.read("a")
    began, release = engine.hold("a")
    observer = threading.Thread(target=index.read_fresh, args=("a",))
    observer.start()  # a pass of pool a lists it, while the executor releases its set
    assert began.wait(WAIT)
    engine.set_state("i-a1", "shutting-down")
    index.forget("a")
    release.set()
    observer.join(WAIT)

    assert ids(index.read("a"))[0] == ("i-a1", "shutting-down")
    assert engine.calls == [None, "a", "a"]


def test_a_newer_snapshot_replaces_an_older_fresh_read() -> None:
    engine = index_engine(FLEET)
    index, clock, _metrics = build(engine)
    index.read_fresh("a")
    engine.set_state("i-a2", "terminated")
    clock.advance(INTERVAL)
    assert ids(index.read("a"))[1] == ("i-a2", "terminated")
    assert engine.calls == ["a", None]


def test_a_failed_listing_reaches_the_reader_and_the_next_read_lists_again() -> None:
    engine = index_engine(FLEET)
    index, _clock, metrics = build(engine)
    engine.fail_next = throttled()
    with pytest.raises(CloudError) as failed:
        index.read("a")
    assert failed.value.kind is ErrorKind.RETRYABLE and failed.value.reason == "Throttled"

    assert len(index.read("a")) == 2
    assert engine.calls == [None, None]
    assert describes(metrics, "snapshot") == 2


def test_readers_waiting_on_a_listing_that_fails_share_its_failure() -> None:
    engine, clock = index_engine(FLEET), WatchedClock()
    index, _clock, _metrics = build(engine, clock)
    index.read("a")
    clock.advance(INTERVAL)
    engine.fail_next = throttled()
    failures: list[CloudError] = []
    lock = threading.Lock()

    def reader() -> None:
        try:
            index.read("a")
        except CloudError as err:
            with lock:
                failures.append(err)

    behind_a_held_listing(engine, clock, reader, [reader] * 4)

    assert engine.calls == [None, None], "a throttled account is not asked once per reader"
    assert len(failures) == 5
    assert all(f.kind is ErrorKind.RETRYABLE and f.reason == "Throttled" for f in failures)
    assert len(index.read("a")) == 2, "the next read lists again"


def test_a_failed_fresh_read_reaches_the_reader_and_keeps_the_pool_forgotten() -> None:
    engine = index_engine(FLEET)
    index, _clock, _metrics = build(engine)
    index.read("a")
    index.forget("a")
    engine.fail_next = throttled()
    with pytest.raises(CloudError):
        index.read("a")
    assert len(index.read("a")) == 2
    assert engine.calls == [None, "a", "a"]


def test_forget_all_lists_everything_again_at_once() -> None:
    engine = index_engine(FLEET)
    index, _clock, _metrics = build(engine)
    index.read("a")
    index.forget_all()  # a new leadership term
    index.read("b")
    assert engine.calls == [None, None]


def test_a_listing_begun_before_forget_all_is_not_kept() -> None:
    engine = index_engine(FLEET)
    index, _clock, _metrics = build(engine)
    began, release = engine.hold(None)
    old_term = threading.Thread(target=index.read, args=("c",))
    old_term.start()  # a pass of the last term, still listing when leadership came back
    assert began.wait(WAIT)
    engine.set_state("i-a1", "terminated")  # the other leader's release
    index.forget_all()
    release.set()
    old_term.join(WAIT)

    assert ids(index.read("a"))[0] == ("i-a1", "terminated")
    # The old term's reader found nothing kept and asked EC2 for its own pool.
    assert engine.calls == [None, "c", None]


SHORT = 0.5  # the refresher's interval in its tests: it waits real seconds, as the clock says


def until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_refresher_lists_ahead_of_the_interval_so_readers_never_do() -> None:
    engine, clock = index_engine(FLEET), FakeClock()
    index = InstanceIndex(engine, CLUSTER, SHORT, clock, ControllerMetrics())  # type: ignore[arg-type]
    index.start()
    try:
        assert until(lambda: engine.calls == [None]), "the first listing, with no reader"
        assert index.refresh_due_in() == pytest.approx(SHORT * REFRESH_AHEAD)
        time.sleep(2 * SHORT)  # the thread wakes, finds the clock has not moved, lists nothing
        assert engine.calls == [None]

        engine.set_state("i-a1", "shutting-down")
        clock.advance(SHORT * REFRESH_AHEAD)  # due, though not yet stale for a reader
        assert until(lambda: engine.calls == [None, None])
        assert ids(index.read("a"))[0] == ("i-a1", "shutting-down")
        assert engine.calls == [None, None], "the reader found it listed already"
    finally:
        index.stop()
    clock.advance(SHORT)
    time.sleep(2 * SHORT)
    assert engine.calls == [None, None], "stopped: no more listings"


def test_the_refresher_lists_again_after_a_failed_listing() -> None:
    engine, clock = index_engine(FLEET), FakeClock()
    engine.fail_next = throttled()
    index = InstanceIndex(engine, CLUSTER, SHORT, clock, ControllerMetrics())  # type: ignore[arg-type]
    index.start()
    try:
        assert until(lambda: engine.calls == [None, None]), "failed, then listed again"
        assert until(lambda: index.refresh_due_in() > 0)
        assert ids(index.read("a")) == [("i-a1", "running"), ("i-a2", "running")]
        assert engine.calls == [None, None]
    finally:
        index.stop()


def test_the_fake_engine_resets() -> None:
    engine = index_engine(FLEET)
    engine.find_managed(CLUSTER, "b", states=OBSERVED_STATES)
    engine.fail_next = throttled()
    engine.hold("a")
    engine.reset()
    assert len(engine.find_managed(CLUSTER, "a", states=OBSERVED_STATES)) == 2
    assert engine.calls == ["a"]


# --- listing only what changed between full snapshots ----------------------------------------


def test_a_full_snapshot_every_few_intervals_and_only_the_changes_between() -> None:
    engine = index_engine(FLEET)
    index, clock, metrics = build(engine)
    for _ in range(2 * FULL_SNAPSHOT_EVERY + 1):
        index.read("a")
        clock.advance(INTERVAL)
    full, changes = OBSERVED_STATES, CHANGED_STATES
    between = [changes] * (FULL_SNAPSHOT_EVERY - 1)
    assert engine.listed_states == [full, *between, full, *between, full]
    assert describes(metrics, "snapshot") == 3
    assert describes(metrics, "changes") == 2 * (FULL_SNAPSHOT_EVERY - 1)


def test_the_changes_of_a_steady_fleet_list_nothing_and_keep_every_set() -> None:
    engine = index_engine([instance("i-a1", "a"), instance("i-a2", "a"), instance("i-b1", "b")])
    index, clock, _ = build(engine)
    before = {pool: ids(index.read(pool)) for pool in ("a", "b")}
    clock.advance(INTERVAL)
    assert {pool: ids(index.read(pool)) for pool in ("a", "b")} == before
    assert engine.listed_states[-1] == CHANGED_STATES


def test_a_pending_instance_missing_from_the_changes_has_started_running() -> None:
    engine = index_engine([instance("i-a1", "a", "pending"), instance("i-a2", "a")])
    index, clock, _ = build(engine)
    assert ids(index.read("a")) == [("i-a1", "pending"), ("i-a2", "running")]
    engine.set_state("i-a1", "running")
    clock.advance(INTERVAL)
    assert ids(index.read("a")) == [("i-a1", "running"), ("i-a2", "running")]


def test_a_lost_instance_is_seen_by_the_changes_in_its_new_state() -> None:
    engine = index_engine([instance("i-a1", "a"), instance("i-a2", "a")])
    index, clock, _ = build(engine)
    index.read("a")
    engine.set_state("i-a2", "terminated")
    clock.advance(INTERVAL)
    assert ids(index.read("a")) == [("i-a1", "running"), ("i-a2", "terminated")]
    engine.set_state("i-a1", "stopped")
    clock.advance(INTERVAL)
    assert ids(index.read("a")) == [("i-a1", "stopped"), ("i-a2", "terminated")]
    engine.set_state("i-a1", "running")  # started again: no longer among the changes
    clock.advance(INTERVAL)
    assert ids(index.read("a")) == [("i-a1", "running"), ("i-a2", "terminated")]


def test_a_terminated_instance_that_ages_out_of_ec2_is_left_out() -> None:
    engine = index_engine([instance("i-a1", "a"), instance("i-a2", "a", "terminated")])
    index, clock, _ = build(engine)
    assert len(index.read("a")) == 2
    del engine.fleet["i-a2"]  # an hour later
    clock.advance(INTERVAL)
    assert ids(index.read("a")) == [("i-a1", "running")]


def test_a_launch_not_ours_is_seen_by_the_next_full_snapshot() -> None:
    """Running and unknown to the older answer, it is in no listing of changes."""
    engine = index_engine([instance("i-a1", "a")])
    index, clock, _ = build(engine)
    index.read("a")
    engine.fleet["i-a9"] = instance("i-a9", "a")
    for _ in range(FULL_SNAPSHOT_EVERY - 1):
        clock.advance(INTERVAL)
        assert ids(index.read("a")) == [("i-a1", "running")]
    clock.advance(INTERVAL)
    assert ids(index.read("a")) == [("i-a1", "running"), ("i-a9", "running")]
    assert engine.listed_states[-1] == OBSERVED_STATES


def test_a_forgotten_pool_is_read_fresh_whatever_changes_were_listed_since() -> None:
    engine = index_engine([instance("i-a1", "a")])
    index, clock, _ = build(engine)
    index.read("a")
    index.forget("a")
    engine.fleet["i-a2"] = instance("i-a2", "a")  # our launch, running at once
    clock.advance(INTERVAL)
    index.read("b")  # lists the changes: the new instance is running, so not among them
    engine.listings.clear()
    assert ids(index.read("a")) == [("i-a1", "running"), ("i-a2", "running")]
    assert engine.calls == ["a"], "asked EC2 for the pool"


def test_changes_listed_after_a_fresh_read_apply_to_it_and_not_the_other_way() -> None:
    engine = index_engine([instance("i-a1", "a")])
    index, clock, _ = build(engine)
    index.read("a")
    index.forget("a")
    engine.fleet["i-a2"] = instance("i-a2", "a", "pending")
    assert ids(index.read("a")) == [("i-a1", "running"), ("i-a2", "pending")]  # fresh
    engine.set_state("i-a1", "shutting-down")
    engine.set_state("i-a2", "running")
    clock.advance(INTERVAL)
    # The changes were listed after the fresh read: i-a1 is shutting down, and i-a2, absent
    # from them, is running now.
    assert ids(index.read("a")) == [("i-a1", "shutting-down"), ("i-a2", "running")]
    assert engine.listed_states[-1] == CHANGED_STATES
    engine.set_state("i-a1", "terminated")
    fresh = index.read_fresh("a")  # newer than the changes: taken as listed
    assert ids(fresh) == [("i-a1", "terminated"), ("i-a2", "running")]
    assert ids(index.read("a")) == ids(fresh)
