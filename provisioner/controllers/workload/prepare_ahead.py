"""Preparing a pool's stack before Kueue reserves quota, so a cold admission waits only
for EC2's launch and the nodes' join.

Kueue acts on admission checks only once it has reserved quota ("Admission Check", Kueue's
concepts): a claim made before would hold a pool for a gang that may wait for hours. Our
check may already be on the Workload, Pending: Kueue (v0.19) lists a ClusterQueue's checks
that apply to every flavor when its Workload controller first reconciles the Workload, and
the rest once quota is reserved; on an idle queue that is before any quota, under a wave its
controller's queue makes it after (`bench_scale` times both). What can be done meanwhile is
the stack: the Workload reconciler, for a Workload that waits for quota on a LocalQueue
whose ClusterQueue lists one of our AdmissionChecks (whether or not Kueue has listed it on
the Workload yet; the Workload reconciler passes the one it lists), asks `decide` what the
claim would be once quota comes (every rule of the claim's: the shape through the check's
GangClass, the pods' fit, the tenancy, a busy pool), and `ahead_change` says whether to
create the pool it would claim, unclaimed, or to mark an unclaimed Idle pool of that shape
and namespace with `spec.queued`. The pool reconciler prepares the stack of such a pool
(`controllers/pool/plan_acquire._prepare_ahead`); the claim that comes with quota finds it
prepared and launches at once.

Nothing is claimed and nothing launched here: a Workload holding quota claims the pool
whoever queued it, and a pool of another namespace, claimed, busy or of another shape is
left alone. A Workload that never gets quota costs one stack destroy, at the idle stack
TTL the prepare started. A decision the claim would not act on (a refusal, a Retry, a
class to wait for) prepares nothing: the claim decides, and refuses, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Protocol

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool, QueuedWorkload
from provisioner.api.owners import GangOwner
from provisioner.api.shape import shape_differences
from provisioner.api.tenancy import ClusterReadError
from provisioner.api.workload import Workload
from provisioner.controllers.workload.decision import PoolChange, WorkloadDecision
from provisioner.controllers.workload.deps import WorkloadReconcilerDeps
from provisioner.controllers.workload.involved import owner_event, pool_event
from provisioner.kube.errors import KubeConflict
from provisioner.kube.events import InvolvedObject
from provisioner.kube.own_writes import OwnWrites
from provisioner.kube.resources import GANG_NODE_POOLS, WORKLOADS
from provisioner.kube.status import create_object, update_object

__all__ = [
    "LOOK_AGAIN_SECONDS",
    "QUEUE_RETRY_SECONDS",
    "AheadChange",
    "PrepareAhead",
    "QueueChecks",
    "ahead_change",
    "waits_for_quota",
]

log = logging.getLogger(__name__)

# A LocalQueue's ClusterQueue, and that queue's checks, change rarely; a wave of Workloads
# on one queue reads them once per this many seconds.
QUEUE_READ_TTL_SECONDS = 30.0
# A queue the apiserver did not answer for is asked again after this long; an owner not in
# the cache yet, or a pool written since the cache was read, is looked at again sooner. A
# waiting Workload's status may not change again for hours: nothing else would bring it back.
QUEUE_RETRY_SECONDS = 5.0
LOOK_AGAIN_SECONDS = 1.0


class AheadChange(Enum):
    NONE = "none"
    CREATE = "create"  # a new, unclaimed pool of the shape, queued for this Workload
    QUEUE = "queue"  # set `spec.queued` on an unclaimed, Idle pool of the shape


def waits_for_quota(workload: Workload) -> bool:
    """A live Workload Kueue has not reserved quota for (yet, or again after an eviction)."""
    return (
        workload.metadata.deletion_timestamp is None
        and workload.spec.active is not False
        and not workload.is_true(c.WL_FINISHED)
        and not workload.is_true(c.WL_QUOTA_RESERVED)
    )


def queued_for(workload: Workload, now: datetime) -> QueuedWorkload:
    meta = workload.metadata
    return QueuedWorkload(
        namespace=meta.namespace or "", name=meta.name, uid=meta.uid or "", queued_at=now
    )


def ahead_change(
    workload: Workload, decision: WorkloadDecision, pool: GangNodePool | None, queued_alive: bool
) -> AheadChange:
    """What to do for `workload`, waiting for quota, given the decision its claim would get
    (`decide` ahead of quota) about the pool it would claim (`pool`). Only a claim that
    would create the pool, or claim an unclaimed Idle pool of its shape and namespace,
    prepares anything. `queued_alive`: the Workload the pool is queued for still exists."""
    if decision.pool_change is PoolChange.CREATE:
        return AheadChange.CREATE
    if decision.pool_change is not PoolChange.CLAIM or pool is None or decision.shape is None:
        return AheadChange.NONE
    spec = pool.spec
    if (
        spec.claim is not None
        or pool.status.phase != Phase.IDLE
        or spec.owner_namespace != (workload.metadata.namespace or "")
        or shape_differences(spec.shape(), decision.shape)
    ):
        return AheadChange.NONE  # busy, warm (nothing to prepare), or reshaped by the claim
    queued = spec.queued
    if queued is not None and (queued.uid == workload.metadata.uid or queued_alive):
        return AheadChange.NONE  # already asked for (this stack serves both alike)
    return AheadChange.QUEUE


@dataclass
class _Read:
    checks: tuple[str, ...]
    at: float


class QueueChecks:
    """The AdmissionChecks behind a LocalQueue, read live (`admission_reads.
    queue_check_lookup`) and kept `QUEUE_READ_TTL_SECONDS`; None when unanswered."""

    def __init__(
        self,
        read: Callable[[str, str], tuple[str, ...]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read, self._clock = read, clock
        self._kept: dict[tuple[str, str], _Read] = {}
        self._guard = threading.Lock()

    def __call__(self, namespace: str, queue: str) -> tuple[str, ...] | None:
        key, now = (namespace, queue), self._clock()
        with self._guard:
            kept = self._kept.get(key)
        if kept is not None and now - kept.at < QUEUE_READ_TTL_SECONDS:
            return kept.checks
        try:
            checks = self._read(namespace, queue)
        except ClusterReadError as err:
            log.info("queue %s/%s not read; asked again shortly: %s", namespace, queue, err)
            return None
        with self._guard:
            self._kept[key] = _Read(checks, now)
        return checks


class _Reads(Protocol):
    """The Workload reconciler's decision, as its claim path makes it."""

    def our_check_names(self) -> set[str]: ...
    def decide_for(
        self, workload: Workload, check_name: str, *, ahead_of_quota: bool = False
    ) -> tuple[WorkloadDecision, GangNodePool | None, GangOwner | None] | None: ...


class PrepareAhead:
    """The Workload reconciler's pass for a Workload waiting for quota, our check listed
    on it or not yet: the pool change `ahead_change` asks for, written through the
    reconciler's own-writes record."""

    def __init__(self, reads: _Reads, deps: WorkloadReconcilerDeps, writes: OwnWrites) -> None:
        self._reads, self._deps, self._writes = reads, deps, writes
        self._checks = QueueChecks(deps.queue_checks) if deps.queue_checks else None

    def consider(self, workload: Workload, listed: str | None = None) -> float | None:
        """Look after the pool of `workload`, if it waits for quota on a queue with our
        check (`listed`: the check of ours Kueue already lists on it, so its queue need
        not be read); the seconds after which to look again (its owner not visible yet,
        its queue or its type not read, a write that met another's), or None."""
        queue, namespace = workload.spec.queue_name, workload.metadata.namespace or ""
        if self._checks is None or not queue or not waits_for_quota(workload):
            return None
        check = listed
        if check is None:
            checks = self._checks(namespace, queue)
            if checks is None:
                return QUEUE_RETRY_SECONDS
            ours = self._reads.our_check_names()
            check = next((n for n in checks if n in ours), None)
        if check is None:
            return None
        decided = self._reads.decide_for(workload, check, ahead_of_quota=True)
        if decided is None:
            return LOOK_AGAIN_SECONDS  # the pool cache is behind our own write
        decision, pool, owner = decided
        if decision.owner_not_visible:
            return LOOK_AGAIN_SECONDS  # Kueue made the Workload before our cache saw the Job
        if decision.pool_change is PoolChange.NONE and decision.retry_after is not None:
            return decision.retry_after  # EC2 has not said what the type offers yet
        queued = pool.spec.queued if pool is not None else None
        change = ahead_change(workload, decision, pool, queued is not None and self._alive(queued))
        try:
            if change is AheadChange.CREATE:
                self._create(workload, decision, owner)
            elif change is AheadChange.QUEUE:
                assert pool is not None
                self._queue(workload, pool)
        except KubeConflict:  # a claim or another pass wrote the pool since the cache read
            return LOOK_AGAIN_SECONDS
        return None

    def _alive(self, queued: QueuedWorkload) -> bool:
        found = self._deps.workloads.get(queued.namespace, queued.name)
        return found is not None and found.metadata.uid == queued.uid

    def _create(
        self, workload: Workload, decision: WorkloadDecision, owner: GangOwner | None
    ) -> None:
        """The pool the claim would create, unclaimed and queued; PoolCreated is told once
        to each of the pool, the Workload and its owner, as a pool created by a claim is
        (the claim that follows says Claimed)."""
        shape, name = decision.shape, decision.pool_name
        assert shape is not None and name is not None
        queued = queued_for(workload, self._deps.now())
        pool = decision.new_pool(None, queued)
        create_object(self._deps.kube, GANG_NODE_POOLS, pool)
        who, recorder = f"{queued.namespace}/{queued.name}", self._deps.recorder
        recorder.normal(
            pool_event(pool),
            c.EventReason.POOL_CREATED,
            f"Created ahead of quota for Workload {who}, to prepare its stack while it waits.",
        )
        told = (
            f"Pool {name} created while the gang waits for quota; its stack is prepared "
            f"meanwhile, so {shape.count}x {shape.instance_type} launch all-or-nothing as soon "
            "as quota is reserved."
        )
        recorder.normal(
            InvolvedObject.of(WORKLOADS, workload.metadata), c.EventReason.POOL_CREATED, told
        )
        if owner is not None:
            recorder.normal(owner_event(owner), c.EventReason.POOL_CREATED, told)
        log.info("pool %s: created ahead of quota for Workload %s", name, who)

    def _queue(self, workload: Workload, pool: GangNodePool) -> None:
        queued = queued_for(workload, self._deps.now())
        wanted = pool.model_copy(update={"spec": pool.spec.model_copy(update={"queued": queued})})
        written = update_object(self._deps.kube, GANG_NODE_POOLS, pool, wanted, c.FIELD_MANAGER)
        self._writes.wrote(pool.name, pool, written)
        log.info(
            "pool %s: queued for Workload %s/%s, waiting for quota",
            pool.name,
            queued.namespace,
            queued.name,
        )
