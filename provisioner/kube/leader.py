"""Leader election on a `coordination.k8s.io/v1` Lease, so one replica reconciles at a time.

The controller manager builds a `LeaderElector` over a `LeaseLock` and starts its
controllers from `on_started_leading`, stopping them from `on_stopped_leading`. The
algorithm is client-go's:

- a Lease held by someone else is taken only after it went unrenewed for its
  `leaseDurationSeconds`, measured on *our* monotonic clock from when we last saw it change
  (so clock skew between replicas does not matter);
- every create/update carries the resourceVersion just read; a conflict means another
  replica wrote first, and the next attempt re-reads;
- a leader that has not renewed for `renew_deadline` (< lease duration) stops leading
  before anyone else may take over;
- a clean stop calls `on_stopped_leading` first and then clears the holder, so a standby
  takes over on its next attempt instead of waiting out the lease.

After each successful create/update the elector reports the term it holds
(`on_renewed(LeaseTerm)`): holder, `leaseTransitions`, and a monotonic `valid_until` = the
start of that request + `renew_deadline`. No other replica can take the Lease before then
(it waits a full lease duration from when it saw this renewal, and `renew_deadline <
lease_duration`), so a write checked against `valid_until` is a write by the only leader —
the fencing token the stack driver checks before each stack write (``pulumi_driver.fence``).
`others_fenced_since` is when the previous holder's Lease ran out on our clock: from then
on its own fence has closed too.

Safety does not rest on the Lease alone: every write the controllers make is still
preconditioned on what they read (DESIGN invariant 9).
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from provisioner.api.clock import SYSTEM_CLOCK, Clock
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeConflict, KubeNotFound
from provisioner.kube.resources import LEASES

__all__ = [
    "LeaderElector",
    "LeaseLock",
    "LeaseRecord",
    "LeaseStore",
    "LeaseTerm",
    "default_identity",
]

log = logging.getLogger(__name__)

_MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec, plus the resourceVersion it was read at."""

    holder_identity: str
    lease_duration_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    lease_transitions: int
    resource_version: str = ""


@dataclass(frozen=True)
class LeaseTerm:
    """The term a renewal just confirmed (module docstring); monotonic times."""

    holder: str
    lease_transitions: int
    valid_until: float
    others_fenced_since: float


class LeaseStore(Protocol):
    """Where the record lives (`LeaseLock`; tests use an in-memory fake)."""

    def get(self) -> LeaseRecord | None:
        """The current record, or None when there is no Lease yet."""
        ...

    def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create it; `KubeConflict` (AlreadyExists) when another replica was first."""
        ...

    def update(self, record: LeaseRecord) -> LeaseRecord:
        """Write it at `record.resource_version`; `KubeConflict` if the Lease moved on."""
        ...


class LeaseLock:
    """A `LeaseStore` on a real Lease (the client library only ships a ConfigMap lock)."""

    def __init__(
        self, client: KubeClient, namespace: str, name: str, *, request_timeout: float = 5.0
    ) -> None:
        # Short requests: a renewal stuck for longer than the renew deadline is a lost one.
        self._client = client.with_timeout(request_timeout)
        self.namespace = namespace
        self.name = name

    def get(self) -> LeaseRecord | None:
        try:
            return _record(self._client.get(LEASES, self.name, namespace=self.namespace))
        except KubeNotFound:
            return None

    def create(self, record: LeaseRecord) -> LeaseRecord:
        body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": _spec(record)}
        return _record(self._client.create(LEASES, body))

    def update(self, record: LeaseRecord) -> LeaseRecord:
        return _record(
            self._client.patch(
                LEASES,
                self.name,
                {"spec": _spec(record)},
                namespace=self.namespace,
                resource_version=record.resource_version,
            )
        )


class LeaderElector:
    """Acquires and renews one Lease for `identity`; `tick()` is one attempt."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        *,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock = SYSTEM_CLOCK,
        on_renewed: Callable[[LeaseTerm], None] | None = None,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "leader election needs 0 < retry_period < renew_deadline < lease_duration"
            )
        self.identity = identity
        self._store = store
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_renewed = on_renewed
        # When the holder before us is certainly fenced (set when we take the Lease).
        self._others_fenced_since = 0.0
        self._lease_seconds = math.ceil(lease_duration)
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._clock = clock
        self._lock = threading.RLock()
        self._leading = False
        self._last_renew = 0.0
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- state ------------------------------------------------------------------------------
    # Read without the lock: a tick holds it across requests, and a reader must not wait.
    def is_leader(self) -> bool:
        return self._leading

    @property
    def leader(self) -> str:
        """The holder we last saw ("" when nobody holds the Lease)."""
        observed = self._observed
        return observed.holder_identity if observed else ""

    # -- one step ---------------------------------------------------------------------------
    def tick(self) -> None:
        """Try to acquire (or, when leading, renew) once; stop leading past the deadline."""
        with self._lock:
            started = self._clock.monotonic()
            try:
                renewed = self._try_acquire_or_renew(started)
            except Exception as err:
                log.warning("leader election (%s): %s: %s", self.identity, type(err).__name__, err)
                renewed = False
            if renewed:
                self._last_renew = started  # the request's start: the conservative bound
                observed, report = self._observed, self._on_renewed
                if report is not None and observed is not None:
                    term = LeaseTerm(
                        self.identity,
                        observed.lease_transitions,
                        started + self._renew_deadline,
                        self._others_fenced_since,
                    )
                    _quietly(lambda: report(term))
                if not self._leading:
                    self._leading = True
                    log.info("leader election: %s is now the leader", self.identity)
                    _quietly(self._on_started)
                return
            if not self._leading:
                return
            other = self._observed.holder_identity if self._observed else ""
            if other and other != self.identity:
                self._step_down(f"{other} holds the Lease")
            elif self._clock.monotonic() - self._last_renew >= self._renew_deadline:
                self._step_down(f"no renewal within {self._renew_deadline:g}s")

    def release(self) -> bool:
        """Stop leading, then clear the holder so a standby need not wait out the lease."""
        with self._lock:
            if not self._leading:
                return False
            self._step_down("released")
            try:
                record = self._store.get()
                if record is None or record.holder_identity != self.identity:
                    return False
                now = self._clock.wall()
                self._observed = self._store.update(
                    replace(
                        record,
                        holder_identity="",
                        lease_duration_seconds=1,
                        acquire_time=now,
                        renew_time=now,
                    )
                )
                return True
            except Exception as err:
                log.warning("leader election: release by %s failed: %s", self.identity, err)
                return False

    # -- running on a thread ----------------------------------------------------------------
    def run(self) -> None:
        """Attempt every `retry_period` (real seconds) until `stop()`."""
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self._retry_period)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-elector", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if release:
            self.release()
        else:
            with self._lock:
                if self._leading:
                    self._step_down("stopped")

    # -- internals (lock held) --------------------------------------------------------------
    def _try_acquire_or_renew(self, now: float) -> bool:
        wall = self._clock.wall()
        record = self._store.get()
        if record is None:
            mine = LeaseRecord(self.identity, self._lease_seconds, wall, wall, 0)
            try:
                self._observe(self._store.create(mine), now)
            except KubeConflict:
                return False  # another replica created it first; read it next time
            self._others_fenced_since = now  # nobody held it
            return True
        if self._observed is None or record.resource_version != self._observed.resource_version:
            self._observe(record, now)
        ours = record.holder_identity == self.identity
        if (
            record.holder_identity
            and not ours
            and (now < self._observed_at + record.lease_duration_seconds)
        ):
            return False  # held by someone else and not expired
        claim = replace(
            record,
            holder_identity=self.identity,
            lease_duration_seconds=self._lease_seconds,
            acquire_time=record.acquire_time if ours else wall,
            renew_time=wall,
            lease_transitions=record.lease_transitions + (0 if ours else 1),
        )
        # Taking it: the holder before us (if any) is fenced since its Lease ran out on our
        # clock; a released Lease's holder stepped down before it cleared the holder.
        taken_at = (
            self._observed_at + record.lease_duration_seconds if record.holder_identity else now
        )
        try:
            self._observe(self._store.update(claim), now)
        except KubeConflict:
            log.info("leader election: the Lease changed under %s; re-reading", self.identity)
            return False
        if not ours:
            self._others_fenced_since = min(taken_at, now)
        return True

    def _observe(self, record: LeaseRecord, now: float) -> None:
        self._observed = record
        self._observed_at = now

    def _step_down(self, why: str) -> None:
        self._leading = False
        log.warning("leader election: %s stopped leading: %s", self.identity, why)
        _quietly(self._on_stopped)


def default_identity() -> str:
    """Host name plus a random suffix: unique per process, readable in `kubectl get lease`."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _quietly(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("leader election callback %r failed", callback)


def _spec(record: LeaseRecord) -> dict[str, Any]:
    return {
        # Null removes the field: a released Lease has no holder.
        "holderIdentity": record.holder_identity or None,
        "leaseDurationSeconds": record.lease_duration_seconds,
        "acquireTime": _format(record.acquire_time),
        "renewTime": _format(record.renew_time),
        "leaseTransitions": record.lease_transitions,
    }


def _record(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder_identity=spec.get("holderIdentity") or "",
        lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=_parse(spec.get("acquireTime")),
        renew_time=_parse(spec.get("renewTime")),
        lease_transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
    )


def _format(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime(_MICROTIME) if moment else None


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
