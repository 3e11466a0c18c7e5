"""The leader elector's state machine: acquire, renew, expiry, takeover, conflicts, release,
on a FakeClock and an in-memory Lease store shared by the electors (as the apiserver is)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from provisioner.api.clock import FakeClock
from provisioner.kube.errors import KubeAlreadyExists, KubeConflict, KubeUnavailable
from provisioner.kube.leader import LeaderElector, LeaseRecord

LEASE, RENEW, RETRY = 15.0, 10.0, 2.0


class FakeLeaseStore:
    """One Lease with apiserver semantics: resourceVersion bumps, 409 on a stale write."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.failing = False
        self.before_write: Callable[[], None] | None = None
        self.writes = 0

    def get(self) -> LeaseRecord | None:
        self._maybe_fail()
        return self.record

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._maybe_fail()
        self._hook()
        if self.record is not None:
            raise KubeAlreadyExists("lease exists", status=409, reason="AlreadyExists")
        return self._store(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self._maybe_fail()
        self._hook()
        assert self.record is not None
        if record.resource_version != self.record.resource_version:
            raise KubeConflict("the object has been modified", status=409, reason="Conflict")
        return self._store(record)

    def tamper(self, **changes: object) -> None:
        """Another writer changes the Lease (bumping its resourceVersion)."""
        assert self.record is not None
        self._store(replace(self.record, **changes))  # type: ignore[arg-type]

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.writes += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record

    def _hook(self) -> None:
        hook, self.before_write = self.before_write, None
        if hook is not None:
            hook()

    def _maybe_fail(self) -> None:
        if self.failing:
            raise KubeUnavailable("apiserver unreachable", reason="Unavailable")


class Replica:
    """An elector plus the log of its callbacks."""

    def __init__(self, name: str, store: FakeLeaseStore, clock: FakeClock) -> None:
        self.events: list[str] = []
        self.elector = LeaderElector(
            store,
            name,
            on_started_leading=lambda: self.events.append("started"),
            on_stopped_leading=lambda: self.events.append("stopped"),
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
            clock=clock,
        )

    def tick(self) -> bool:
        self.elector.tick()
        return self.elector.is_leader()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store() -> FakeLeaseStore:
    return FakeLeaseStore()


@pytest.fixture
def a(store: FakeLeaseStore, clock: FakeClock) -> Replica:
    return Replica("a", store, clock)


@pytest.fixture
def b(store: FakeLeaseStore, clock: FakeClock) -> Replica:
    return Replica("b", store, clock)


def test_the_first_replica_creates_the_lease_and_leads(a: Replica, store: FakeLeaseStore) -> None:
    assert a.tick()
    assert a.events == ["started"]
    assert store.record is not None
    assert store.record.holder_identity == "a"
    assert store.record.lease_duration_seconds == 15
    assert store.record.lease_transitions == 0
    assert store.record.acquire_time == store.record.renew_time


def test_a_held_lease_is_not_taken(a: Replica, b: Replica) -> None:
    a.tick()
    assert not b.tick()
    assert b.elector.leader == "a"
    assert b.events == []


def test_the_leader_renews_and_keeps_acquire_time(
    a: Replica, b: Replica, store: FakeLeaseStore, clock: FakeClock
) -> None:
    a.tick()
    assert store.record is not None
    acquired = store.record.acquire_time
    for _ in range(20):  # 40 s: far past one lease duration, renewed all along
        clock.advance(RETRY)
        assert a.tick()
        assert not b.tick()
    assert store.record.acquire_time == acquired
    assert store.record.renew_time == clock.wall()
    assert store.record.lease_transitions == 0
    assert a.events == ["started"]


def test_an_unrenewed_lease_is_taken_over_after_its_duration(
    a: Replica, b: Replica, store: FakeLeaseStore, clock: FakeClock
) -> None:
    a.tick()
    b.tick()  # b first sees a's record now
    clock.advance(LEASE - 0.1)
    assert not b.tick()
    clock.advance(0.1)
    assert b.tick()
    assert b.events == ["started"]
    assert store.record is not None
    assert store.record.holder_identity == "b"
    assert store.record.lease_transitions == 1
    # The old leader, back from a pause, sees b holding the Lease and steps down.
    assert not a.tick()
    assert a.events == ["started", "stopped"]


def test_expiry_is_measured_from_when_the_observer_saw_the_record(
    a: Replica, b: Replica, clock: FakeClock
) -> None:
    a.tick()
    clock.advance(LEASE * 3)  # a stalls; b has not looked yet
    assert not b.tick()  # first sight: b cannot know how old the record is
    clock.advance(LEASE)
    assert b.tick()


def test_a_leader_whose_renewals_fail_stops_at_the_renew_deadline(
    a: Replica, store: FakeLeaseStore, clock: FakeClock
) -> None:
    a.tick()
    store.failing = True
    clock.advance(RENEW - 0.1)
    assert a.tick()  # still within the deadline
    clock.advance(0.1)
    assert not a.tick()
    assert a.events == ["started", "stopped"]


def test_the_leader_stops_before_a_standby_may_take_over(
    a: Replica, b: Replica, store: FakeLeaseStore, clock: FakeClock
) -> None:
    a.tick()
    b.tick()
    store.failing = True
    t = 0.0
    stopped_at = took_over_at = None
    while took_over_at is None:
        clock.advance(RETRY / 2)
        t += RETRY / 2
        store.failing = True
        a.tick()
        if stopped_at is None and not a.elector.is_leader():
            stopped_at = t
        store.failing = False
        if b.tick():
            took_over_at = t
    assert stopped_at is not None and stopped_at < took_over_at


def test_a_conflict_on_renewal_is_not_a_renewal_and_the_next_tick_rereads(
    a: Replica, store: FakeLeaseStore, clock: FakeClock
) -> None:
    a.tick()
    clock.advance(RETRY)
    store.before_write = lambda: store.tamper(renew_time=clock.wall())  # someone writes first
    assert a.tick()  # still leading: the deadline has not passed
    assert store.record is not None
    renewed_by_tamper = store.writes
    clock.advance(RETRY)
    assert a.tick()
    assert store.writes == renewed_by_tamper + 1  # re-read, then renewed
    assert store.record.holder_identity == "a"


def test_a_conflict_that_hands_the_lease_to_another_stops_the_leader(
    a: Replica, store: FakeLeaseStore, clock: FakeClock
) -> None:
    a.tick()
    clock.advance(RETRY)
    store.before_write = lambda: store.tamper(holder_identity="intruder")
    a.tick()
    assert a.elector.is_leader()  # the lost update alone proves nothing yet
    clock.advance(RETRY)
    assert not a.tick()
    assert a.events == ["started", "stopped"]


def test_losing_the_create_race_means_following(
    a: Replica, b: Replica, store: FakeLeaseStore
) -> None:
    def b_creates_first() -> None:
        store._store(LeaseRecord("b", 15, None, None, 0))

    store.before_write = b_creates_first
    assert not a.tick()
    assert a.events == []


def test_release_clears_the_holder_and_a_standby_takes_over_at_once(
    a: Replica, b: Replica, store: FakeLeaseStore
) -> None:
    a.tick()
    b.tick()
    assert a.elector.release()
    assert a.events == ["started", "stopped"]
    assert store.record is not None
    assert store.record.holder_identity == ""
    assert b.tick()  # no waiting out the lease duration
    assert store.record.holder_identity == "b"
    assert store.record.lease_transitions == 1


def test_release_by_a_follower_does_nothing(a: Replica, b: Replica, store: FakeLeaseStore) -> None:
    a.tick()
    b.tick()
    writes = store.writes
    assert not b.elector.release()
    assert store.writes == writes


def test_a_failing_callback_does_not_break_the_elector(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    def boom() -> None:
        raise RuntimeError("callback failed")

    elector = LeaderElector(
        store, "a", on_started_leading=boom, on_stopped_leading=boom, clock=clock
    )
    elector.tick()
    assert elector.is_leader()


@pytest.mark.parametrize(("lease", "renew", "retry"), [(10, 10, 2), (15, 10, 10), (15, 10, 0)])
def test_timings_must_be_ordered(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            FakeLeaseStore(),
            "a",
            on_started_leading=lambda: None,
            on_stopped_leading=lambda: None,
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
        )
