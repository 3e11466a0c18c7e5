"""Preparing a pool's stack before Kueue reserves quota, so a cold admission waits only
for EC2's launch and the nodes' join.

Kueue runs admission checks only once it has reserved quota ("Admission Check", Kueue's
concepts), so until then a gang Workload carries no check of ours, and a claim made then
would hold a pool for a gang that may wait for hours. What can be done meanwhile is the
stack: the Workload reconciler, for a Workload that waits for quota on a LocalQueue whose
ClusterQueue lists one of our AdmissionChecks, reads the gang's shape as the claim will
(its owner, through the check's GangClass) and `ahead_change` says whether to create the
pool it would claim, unclaimed, or to mark an unclaimed pool of that shape and namespace
with `spec.queued`. The pool reconciler prepares the stack of such a pool
(`controllers/pool/plan_acquire._prepare_ahead`); the claim that comes with quota finds it
prepared and launches at once.

Nothing is claimed and nothing launched here: a Workload holding quota claims the pool
whoever queued it, and a pool of another namespace, claimed, busy or of another shape is
left alone. A Workload that never gets quota costs one stack destroy, at the idle stack
TTL the prepare started. Best effort: a queue the apiserver cannot read now, or a shape
that does not read, prepares nothing (the claim decides, and refuses, as before).
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
from provisioner.api.gang_class import CheckClass, ClassedShape, read_gang_shape
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolSpec, QueuedWorkload
from provisioner.api.meta import ObjectMeta
from provisioner.api.owners import GangOwner
from provisioner.api.shape import GangShapeError, shape_differences
from provisioner.api.tenancy import ClusterReadError
from provisioner.api.workload import Workload
from provisioner.controllers.workload.deps import WorkloadReconcilerDeps
from provisioner.kube.errors import KubeAlreadyExists, KubeConflict
from provisioner.kube.events import InvolvedObject
from provisioner.kube.own_writes import OwnWrites
from provisioner.kube.resources import GANG_NODE_POOLS, WORKLOADS
from provisioner.kube.status import create_object, update_object

__all__ = ["AheadChange", "PrepareAhead", "QueueChecks", "ahead_change", "waits_for_quota"]

log = logging.getLogger(__name__)

# A LocalQueue's ClusterQueue, and that queue's checks, change rarely; a wave of Workloads
# on one queue reads them once per this many seconds.
QUEUE_READ_TTL_SECONDS = 30.0


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
    workload: Workload, read: ClassedShape, pool: GangNodePool | None, queued_alive: bool
) -> AheadChange:
    """What to do for `workload`, waiting for quota, whose gang reads as `read`, about the
    pool it would claim (`pool`; None: no such pool yet). `queued_alive`: the Workload the
    pool is already queued for still exists."""
    if pool is None:
        return AheadChange.CREATE
    spec, namespace = pool.spec, workload.metadata.namespace or ""
    if (
        spec.claim is not None
        or pool.status.phase != Phase.IDLE
        or spec.owner_namespace != namespace
        or shape_differences(spec.shape(), read.shape)
    ):
        return AheadChange.NONE
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
    queue_check_lookup`) and kept `QUEUE_READ_TTL_SECONDS`; an unanswered read is ()."""

    def __init__(
        self,
        read: Callable[[str, str], tuple[str, ...]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read, self._clock = read, clock
        self._kept: dict[tuple[str, str], _Read] = {}
        self._guard = threading.Lock()

    def __call__(self, namespace: str, queue: str) -> tuple[str, ...]:
        key, now = (namespace, queue), self._clock()
        with self._guard:
            kept = self._kept.get(key)
        if kept is not None and now - kept.at < QUEUE_READ_TTL_SECONDS:
            return kept.checks
        try:
            checks = self._read(namespace, queue)
        except ClusterReadError as err:
            log.info("queue %s/%s not read; nothing prepared ahead: %s", namespace, queue, err)
            return ()
        with self._guard:
            self._kept[key] = _Read(checks, now)
        return checks


class _Reads(Protocol):
    """What the Workload reconciler reads for a claim, read the same way here."""

    def our_check_names(self) -> set[str]: ...
    def owner_of(self, workload: Workload) -> GangOwner | None: ...
    def check_class_of(self, check_name: str) -> CheckClass: ...


class PrepareAhead:
    """The Workload reconciler's pass for a Workload with no check of ours yet: the pool
    change `ahead_change` asks for, written through the reconciler's own-writes record."""

    def __init__(self, reads: _Reads, deps: WorkloadReconcilerDeps, writes: OwnWrites) -> None:
        self._reads, self._deps, self._writes = reads, deps, writes
        self._checks = QueueChecks(deps.queue_checks) if deps.queue_checks else None

    def consider(self, workload: Workload) -> AheadChange:
        found = self._shape(workload) if self._checks is not None else None
        if found is None:
            return AheadChange.NONE
        read, owner = found
        name = read.shape.pool
        pool = self._deps.pools.get("", name)
        if self._writes.cache_behind(name, pool):
            return AheadChange.NONE  # our write's watch event brings the Workload back
        queued = pool.spec.queued if pool is not None else None
        alive = queued is not None and self._alive(queued)
        change = ahead_change(workload, read, pool, alive)
        try:
            if change is AheadChange.CREATE:
                self._create(workload, read, owner)
            elif change is AheadChange.QUEUE:
                assert pool is not None
                self._queue(workload, pool)
        except (KubeAlreadyExists, KubeConflict):
            # A claim or another pass wrote the pool since the cache was read: its watch
            # event brings the Workload back, and the next pass decides on what it wrote.
            return AheadChange.NONE
        return change

    def _shape(self, workload: Workload) -> tuple[ClassedShape, GangOwner] | None:
        """The gang's shape as its claim will read it, and its owner, when it waits for
        quota on a queue with our check; None otherwise (nothing to prepare)."""
        queue, namespace = workload.spec.queue_name, workload.metadata.namespace or ""
        if not queue or not waits_for_quota(workload):
            return None
        assert self._checks is not None
        ours = self._reads.our_check_names()
        check = next((n for n in self._checks(namespace, queue) if n in ours), None)
        if check is None:
            return None
        named = self._reads.check_class_of(check)
        owner = self._reads.owner_of(workload)
        if owner is None or named.message is not None:
            return None
        try:
            read = read_gang_shape(
                owner.labels,
                owner.annotations,
                workload.total_pod_count,
                self._deps.settings,
                kind=owner.kind,
                gang_class=named.gang_class,
                namespace=namespace,
            )
        except GangShapeError:
            return None  # the claim refuses it, naming the fields
        return read, owner

    def _alive(self, queued: QueuedWorkload) -> bool:
        found = self._deps.workloads.get(queued.namespace, queued.name)
        return found is not None and found.metadata.uid == queued.uid

    def _create(self, workload: Workload, read: ClassedShape, owner: GangOwner) -> None:
        """The pool, unclaimed and queued; PoolCreated is told once to each of the pool,
        the Workload and its owner, as a pool created by a claim is (the claim that follows
        says Claimed)."""
        namespace = workload.metadata.namespace or ""
        spec = GangNodePoolSpec.of(read.shape, None, namespace, None, read)
        queued = queued_for(workload, self._deps.now())
        pool = GangNodePool(
            metadata=ObjectMeta(name=read.shape.pool, finalizers=(c.FINALIZER,)),
            spec=spec.model_copy(update={"queued": queued}),
        )
        create_object(self._deps.kube, GANG_NODE_POOLS, pool)
        who, recorder = f"{namespace}/{workload.metadata.name}", self._deps.recorder
        recorder.normal(
            InvolvedObject.of(GANG_NODE_POOLS, pool.metadata),
            c.EventReason.POOL_CREATED,
            f"Created ahead of quota for Workload {who}, to prepare its stack while it waits.",
        )
        shape = read.shape
        told = (
            f"Pool {pool.name} created while the gang waits for quota; its stack is prepared "
            f"meanwhile, so {shape.count}x {shape.instance_type} launch all-or-nothing as soon "
            "as quota is reserved."
        )
        recorder.normal(
            InvolvedObject.of(WORKLOADS, workload.metadata), c.EventReason.POOL_CREATED, told
        )
        meta = owner.metadata
        recorder.normal(
            InvolvedObject(
                owner.api_version,
                owner.kind,
                meta.name,
                meta.namespace,
                meta.uid,
                meta.resource_version,
            ),
            c.EventReason.POOL_CREATED,
            told,
        )
        log.info("pool %s: created ahead of quota for Workload %s", pool.name, who)

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
