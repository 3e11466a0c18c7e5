"""The pool reconciler's view of EC2: one shared, paged listing of every managed instance.

Reads: DescribeInstances of this cluster's managed instances by tag, through
`EngineOps.find_managed` — for every pool at a time (the snapshot: in `OBSERVED_STATES`, or
only the instances not running, the changes), or for one pool (a fresh read). Owns, alone:
the snapshot, the changes, each pool's newer entry, and when each is read again. It writes
nothing to EC2 or Kubernetes.

Called by the GangNodePool reconciler's `_observe` (on the pool's work-queue worker), by its
launches, releases and destroys and by the reaper's terminations (`forget`, on a worker, a
stack-executor thread or the reaper's): every method is thread-safe. The Manager builds the
one index, hands it to both, and runs its refresher (`start`, `stop`) while leading: the
refresher lists again ahead of the interval, so no pass waits on the shared listing; a
reader lists itself only if the refresher falls behind (or is not running).

Why: a pool in a steady phase only needs to notice, within a bound, that EC2 lost one of its
instances. One listing every `instanceIndexRefreshSeconds` serves every such pool, where a
listing per pool per pass made 200 describes for each round of events over 200 pools. A pool
in flight still reads fresh (`read_fresh`): its next step acts on what it sees.

Listing only what changed. Between full snapshots (one every `FULL_SNAPSHOT_EVERY` intervals)
the refresher lists only the managed instances that are not running: few, where a snapshot
lists the whole fleet (and the controller parses every instance of it, each interval). It
loses nothing a pool needs: an instance that leaves `running` (stopping, stopped,
shutting-down, terminated) is listed in its new state, for about an hour once terminated,
so a lost instance is seen within the interval as before; one absent from the changes is
running, or, if the older answer had it terminated, aged out of EC2's listings. What it
cannot see is an instance that starts running unknown to the older answer: a launch not ours
(ours make the pool's next read fresh), found by the next full snapshot, and by any pool
about to act, which reads fresh.

Ordering. Every listing takes a sequence number when it STARTS, and so does `forget`; a pool's
answer is the newest of the snapshot and its own entry, with the changes applied on top when
they were listed after it. A listing that started before one of
our own launches or releases may miss its effect, so a snapshot or fresh read that began
before a `forget` never replaces it, and a snapshot never replaces a fresh read that began
after the snapshot did. Staleness bound: what `read` returns was listed by a describe that
started less than `refresh_seconds` ago (as `clock` counts), or after the pool's last
`forget`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from provisioner.api.clock import Clock
from provisioner.cloud.errors import CloudError
from provisioner.cloud.types import InstanceView
from provisioner.cloud.views import LIVE_STATES
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.ports import EngineOps

__all__ = ["GONE_STATES", "OBSERVED_STATES", "InstanceIndex"]

log = logging.getLogger(__name__)

# States in which EC2 says an instance of a set is gone (a stopped instance is no gang member
# either, though it is still live: it can bill again).
GONE_STATES: Final = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
# One listing in every state says both what runs and which of a status's IDs are gone.
OBSERVED_STATES: Final = tuple(sorted({*LIVE_STATES, *GONE_STATES}))

SNAPSHOT: Final = "snapshot"
CHANGES: Final = "changes"
POOL: Final = "pool"

RUNNING: Final = "running"
# What the changes list: every observed state but running.
CHANGED_STATES: Final = tuple(s for s in OBSERVED_STATES if s != RUNNING)
# A full snapshot at least once every this many intervals; a listing of the changes between.
FULL_SNAPSHOT_EVERY: Final = 6
# States an instance never comes back from: absent from the changes, it aged out of EC2's
# listings (a terminated instance is listed for about an hour).
_FINAL_STATES: Final = frozenset({"shutting-down", "terminated"})

# The refresher lists again once the snapshot is this share of the interval old, so that a
# reader, which lists itself once it is the whole interval old, never has to while the
# refresher keeps up (a listing of hundreds of instances takes a while).
REFRESH_AHEAD: Final = 0.8
# After a failed listing the refresher waits at most this long before the next one, so a
# throttled or unreachable EC2 is not asked in a tight loop.
_RETRY_SECONDS: Final = 5.0


@dataclass(frozen=True)
class _Entry:
    """A pool's answer newer than the snapshot; `instances` None: forgotten, ask EC2."""

    seq: int
    instances: tuple[InstanceView, ...] | None


class InstanceIndex:
    """Every pool's managed instances from one listing at most `refresh_seconds` old."""

    def __init__(
        self,
        engine: EngineOps,
        cluster: str,
        refresh_seconds: float,
        clock: Clock,
        metrics: ControllerMetrics,
    ) -> None:
        self._engine = engine
        self._cluster = cluster
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._describes = metrics.instance_index_describes
        # Guards every field below; never held across a call to EC2.
        self._lock = threading.Lock()
        # Held for a whole snapshot listing: one at a time, and readers that find the
        # snapshot stale wait on it and share the one listing instead of each making theirs.
        self._refreshing = threading.Lock()
        self._seq = 0
        self._snapshot: dict[str, tuple[InstanceView, ...]] = {}
        self._snapshot_seq = 0
        # When the newest listing for every pool (snapshot or changes) began; None: no
        # snapshot since the start or `forget_all`.
        self._snapshot_started: float | None = None
        self._full_started: float | None = None  # when the newest full snapshot began
        # The newest listing of the changes, by pool, newer than the snapshot when its seq is.
        self._changes: dict[str, dict[str, InstanceView]] = {}
        self._changes_seq = 0
        self._entries: dict[str, _Entry] = {}
        # Snapshot listings ended, well or not: a reader that waited on `_refreshing` sees
        # whether one ended meanwhile, and shares its answer instead of listing again.
        self._listed = 0
        self._failure: CloudError | None = None  # the last listing's, if it failed
        self._refresher: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- the reconciler's calls ---------------------------------------------------------------
    def read(self, pool: str) -> list[InstanceView]:
        """The pool's instances from the shared snapshot (listed again if it is stale), or
        from EC2 directly if the pool was forgotten since the snapshot began."""
        self._ensure_snapshot()
        with self._lock:
            cached = self._cached(pool)
        if cached is None:
            return self.read_fresh(pool)
        return list(cached)

    def read_fresh(self, pool: str) -> list[InstanceView]:
        """The pool's instances, listed now; kept as its entry unless something newer is."""
        seq = self._next_seq()
        self._describes.labels(kind=POOL).inc()
        found = self._engine.find_managed(self._cluster, pool, states=OBSERVED_STATES)
        with self._lock:
            if seq > self._newest_seq(pool):
                self._entries[pool] = _Entry(seq, tuple(found))
        return found

    def forget(self, pool: str) -> None:
        """We changed the pool's instances: its next `read` lists them from EC2."""
        with self._lock:
            self._seq += 1
            self._entries[pool] = _Entry(self._seq, None)

    def forget_all(self) -> None:
        """Another leader may have acted since anything here was listed: drop it all."""
        with self._lock:
            self._seq += 1
            self._snapshot, self._snapshot_seq, self._snapshot_started = {}, self._seq, None
            self._full_started = None
            self._changes, self._changes_seq = {}, self._seq
            self._entries = {}

    # -- the refresher ------------------------------------------------------------------------
    def start(self) -> None:
        """Keep the snapshot fresh from a thread of its own until `stop`."""
        with self._lock:
            if self._refresher is not None:
                return
            self._stopping = stopping = threading.Event()
            self._refresher = threading.Thread(
                target=self._keep_fresh, args=(stopping,), name="instance-index", daemon=True
            )
            self._refresher.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            refresher, self._refresher = self._refresher, None
            self._stopping.set()
        if refresher is not None:
            refresher.join(timeout)

    def refresh_due_in(self) -> float:
        """Seconds until the refresher lists again: 0 when never listed, or dropped."""
        with self._lock:
            started = self._snapshot_started
            if started is None:
                return 0.0
            due = started + self._refresh_seconds * REFRESH_AHEAD
            return max(0.0, due - self._clock.monotonic())

    def _keep_fresh(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.refresh_due_in()):
            try:
                with self._refreshing:
                    # A reader may have listed while this thread waited for the lock.
                    if self.refresh_due_in() == 0.0:
                        self._refresh()
            except Exception as err:  # readers list for themselves meanwhile
                log.warning("instance index: listing EC2 failed: %s", err)
                stopping.wait(min(self._refresh_seconds, _RETRY_SECONDS))

    # -- the snapshot -------------------------------------------------------------------------
    def _ensure_snapshot(self) -> None:
        with self._lock:
            if not self._stale():
                return
            seen = self._listed
        with self._refreshing:
            with self._lock:
                if self._listed != seen:
                    # Another reader listed while this one waited: share its answer, or its
                    # failure (asking again at once would only add to a throttled account).
                    if self._failure is not None:
                        err = self._failure
                        raise CloudError(err.kind, err.code, err.reason, err.message) from err
                    if not self._stale():
                        return
            self._refresh()

    def _refresh(self) -> None:
        """List every pool's instances, or what changed; the caller holds `_refreshing`."""
        seq = self._next_seq()
        started = self._clock.monotonic()
        with self._lock:
            full = (
                self._full_started is None
                or started - self._full_started >= self._refresh_seconds * FULL_SNAPSHOT_EVERY
            )
        self._describes.labels(kind=SNAPSHOT if full else CHANGES).inc()
        try:
            found = self._engine.find_managed(
                self._cluster, None, states=OBSERVED_STATES if full else CHANGED_STATES
            )
        except Exception as err:
            with self._lock:
                self._listed += 1
                # Only EC2's answer is shared; waiters on a bug's failure list for themselves.
                self._failure = err if isinstance(err, CloudError) else None
            raise
        snapshot = _by_pool(found)
        with self._lock:
            # Counted with the install, so no reader sees this listing ended but not kept.
            self._listed += 1
            self._failure = None
            if seq < self._snapshot_seq or seq < self._changes_seq:
                return  # `forget_all` came after this listing began
            if full:
                self._snapshot, self._snapshot_seq = snapshot, seq
                self._full_started = started
                # Entries older than this snapshot are answered by it now, and so are the
                # changes listed before it.
                self._entries = {p: e for p, e in self._entries.items() if e.seq > seq}
                self._changes = {}
            else:
                self._changes = {
                    pool: {v.instance_id: v for v in views} for pool, views in snapshot.items()
                }
                self._changes_seq = seq
            self._snapshot_started = started
        log.debug(
            "instance index: %s, %d instances of %d pools",
            "snapshot" if full else "changes",
            len(found),
            len(snapshot),
        )

    # -- under self._lock ---------------------------------------------------------------------
    def _stale(self) -> bool:
        started = self._snapshot_started
        return started is None or self._clock.monotonic() - started >= self._refresh_seconds

    def _cached(self, pool: str) -> tuple[InstanceView, ...] | None:
        if self._snapshot_started is None:
            return None  # dropped by `forget_all` since this reader's refresh
        entry = self._entries.get(pool)
        if entry is not None and entry.seq > self._snapshot_seq:
            if entry.instances is None:
                return None  # forgotten: only EC2 can say now
            base, base_seq = entry.instances, entry.seq
        else:
            base, base_seq = self._snapshot.get(pool, ()), self._snapshot_seq
        if self._changes_seq > base_seq:
            return _with_changes(base, self._changes.get(pool, {}))
        return base

    def _newest_seq(self, pool: str) -> int:
        entry = self._entries.get(pool)
        return max(self._snapshot_seq, entry.seq if entry is not None else 0)

    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq


def _with_changes(
    older: tuple[InstanceView, ...], changed: dict[str, InstanceView]
) -> tuple[InstanceView, ...]:
    """A pool's older answer brought up to a newer listing of its instances not running.

    One listed there is as listed. One not listed is running, unless the older answer had it
    shutting down or terminated: then it aged out of EC2's listings and is left out.
    """
    views: list[InstanceView] = []
    for view in older:
        now = changed.get(view.instance_id)
        if now is not None:
            views.append(now)
        elif view.state not in _FINAL_STATES:
            views.append(view if view.state == RUNNING else replace(view, state=RUNNING))
    known = {view.instance_id for view in older}
    views.extend(v for iid, v in changed.items() if iid not in known)
    return tuple(sorted(views, key=lambda v: v.instance_id))


def _by_pool(instances: Iterable[InstanceView]) -> dict[str, tuple[InstanceView, ...]]:
    grouped: dict[str, list[InstanceView]] = {}
    for view in instances:
        if view.managed.pool is not None:  # untagged by pool: no pool reads it
            grouped.setdefault(view.managed.pool, []).append(view)
    return {pool: tuple(views) for pool, views in grouped.items()}
