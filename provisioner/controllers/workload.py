"""Workload reconciler: turns Kueue Workloads carrying our check into pool claims and back.

Watches: Kueue Workloads (and, through the manager's mappings, GangNodePools — a pool's
status change re-evaluates its claimant — and our AdmissionChecks). Reads owner Jobs from
an informer of the Jobs that carry the pool label (a live GET only for one it has not seen).
Writes, alone: `GangNodePool.spec` (shape snapshot and the one claim; the finalizer is set
at creation) and our entry in `Workload.status.admissionChecks`.

The rules live in `workload_decision.decide`; this module gathers its inputs from the
informer caches, performs the writes it asks for (each preconditioned on the version read)
and records an Event on the Workload when our check changes state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.gangnodepool import Claim, GangNodePool, GangNodePoolSpec
from provisioner.api.meta import ObjectMeta
from provisioner.api.owners import GangOwner
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.controllers.workload_decision import (
    CheckUpdate,
    PoolChange,
    WorkloadDecision,
    WorkloadInputs,
    decide,
)
from provisioner.kube.cache import TypedCache
from provisioner.kube.check_state import write_check_state
from provisioner.kube.errors import KubeAlreadyExists, KubeNotFound
from provisioner.kube.events import EventRecorder, InvolvedObject
from provisioner.kube.own_writes import WAIT_FOR_OWN_WRITE_SECONDS, OwnWrites
from provisioner.kube.resources import GANG_NODE_POOLS, JOBS, WORKLOADS, ObjectKey
from provisioner.kube.status import ObjectStore, create_object, read_object, update_object
from provisioner.kube.workqueue import Result

log = logging.getLogger(__name__)

# The owner Job may not have reached our cache yet; look again shortly.
_JOB_NOT_SEEN_RETRY = 1.0


class WorkloadReconciler:
    def __init__(
        self,
        kube: ObjectStore,
        workloads: TypedCache[Workload],
        pools: TypedCache[GangNodePool],
        checks: TypedCache[AdmissionCheck],
        jobs: TypedCache[GangOwner],
        settings: Settings,
        recorder: EventRecorder,
        now: Callable[[], datetime],
    ) -> None:
        self._kube = kube
        self._workloads = workloads
        self._pools = pools
        self._checks = checks
        self._jobs = jobs
        self._settings = settings
        self._recorder = recorder
        self._now = now
        # The Workloads and pools this reconciler wrote over that the caches may still show
        # as before: a pass planned from one would write it again, and meet a conflict.
        self._own_workload_writes = OwnWrites()
        self._own_pool_writes = OwnWrites()

    # -- mappings used by the manager ------------------------------------------------------
    def keys_for_pool(self, pool: GangNodePool) -> list[ObjectKey]:
        claim = pool.spec.claim
        return [ObjectKey(claim.namespace, claim.name)] if claim else []

    def our_check_names(self) -> set[str]:
        return {
            check.metadata.name
            for check in self._checks.list()
            if check.is_ours(self._settings.controller_name)
        }

    # -- reconcile --------------------------------------------------------------------------
    def reconcile(self, key: ObjectKey) -> Result:
        workload = self._workloads.get(key.namespace, key.name)
        if self._own_workload_writes.cache_behind(key, workload):
            # Our write's watch event queues the Workload again once the cache holds it.
            return Result(requeue_after=WAIT_FOR_OWN_WRITE_SECONDS)
        check_name = self._check_name(workload)
        if workload is None or check_name is None:
            # Gone, or not routed through our check: it may hold no claim.
            self._release_claims_of(key, workload)
            return Result()

        job = self._owner_job(workload)
        pool_name = job.labels.get(c.POOL_LABEL) if job else None
        pool = self._pools.get("", pool_name) if pool_name else None
        if pool_name and self._own_pool_writes.cache_behind(pool_name, pool):
            # Planned from the pool as it was before our claim or release, this pass would
            # write that again. The pool's own watch event queues this Workload (its claimant).
            return Result(requeue_after=WAIT_FOR_OWN_WRITE_SECONDS)
        decision = decide(
            WorkloadInputs(
                workload=workload,
                check_name=check_name,
                job_labels=job.labels if job else None,
                job_annotations=job.annotations if job else None,
                pool=pool,
                claimant_exists=self._claimant_exists(pool),
                settings=self._settings,
                now=self._now(),
            )
        )
        log.debug(
            "Workload %s: pool %s change=%s check=%s notes=%s",
            key,
            pool_name,
            decision.pool_change.value,
            decision.check.state if decision.check else None,
            decision.notes,
            extra={"workload": str(key), "pool": pool_name},
        )
        if job is None and decision.check is None:
            return Result(requeue_after=_JOB_NOT_SEEN_RETRY)
        self._apply_pool_change(decision, pool, workload)
        if decision.check is not None:
            self._write_check(workload, check_name, decision.check)
        return Result()

    def _check_name(self, workload: Workload | None) -> str | None:
        if workload is None:
            return None
        ours = self.our_check_names()
        return next((s.name for s in workload.status.admission_checks if s.name in ours), None)

    def _owner_job(self, workload: Workload) -> GangOwner | None:
        owner = workload.owner_job
        if owner is None:
            return None
        name, uid = owner
        namespace = workload.metadata.namespace or ""
        cached = self._jobs.get(namespace, name)
        if cached is not None and (not uid or cached.uid == uid):
            return cached
        # Not in the cache: a Job without the pool label (the informer selects on it; its
        # Workload is refused by name below), or one the watch has not delivered yet.
        try:
            job = read_object(self._kube, JOBS, name, namespace, GangOwner.from_dict)
        except KubeNotFound:
            log.info("Workload %s: owner Job %s/%s not found yet", _name(workload), namespace, name)
            return None
        if uid and job.uid != uid:
            log.info(
                "Workload %s: Job %s/%s was recreated; waiting", _name(workload), namespace, name
            )
            return None
        return job

    def _claimant_exists(self, pool: GangNodePool | None) -> bool:
        claim = pool.spec.claim if pool else None
        if claim is None:
            return False
        claimant = self._workloads.get(claim.namespace, claim.name)
        return claimant is not None and claimant.metadata.uid == claim.uid

    # -- writes ------------------------------------------------------------------------------
    def _release_claims_of(self, key: ObjectKey, workload: Workload | None) -> None:
        for pool in self._pools.list():
            claim = pool.spec.claim
            if not claim or (claim.namespace, claim.name) != (key.namespace, key.name):
                continue
            if workload is not None and claim.uid != workload.metadata.uid:
                continue
            self._set_claim(pool, None, None)
            log.info(
                "pool %s: claim by %s released (Workload gone or not ours)",
                pool.name,
                key,
            )

    def _apply_pool_change(
        self, decision: WorkloadDecision, pool: GangNodePool | None, workload: Workload
    ) -> None:
        change = decision.pool_change
        if change is PoolChange.CREATE:
            assert decision.shape is not None and decision.claim is not None
            assert decision.pool_name is not None
            new = GangNodePool(
                metadata=ObjectMeta(name=decision.pool_name, finalizers=(c.FINALIZER,)),
                spec=GangNodePoolSpec.of(decision.shape, decision.claim),
            )
            try:
                create_object(self._kube, GANG_NODE_POOLS, new)
            except KubeAlreadyExists:
                # Another pass created it after our cache was read: decide again on fresh data.
                raise
            self._recorder.normal(
                _pool_event(new), "PoolCreated", f"Created for Workload {_name(workload)}."
            )
        elif change is PoolChange.CLAIM:
            assert pool is not None and decision.claim is not None
            self._set_claim(pool, decision.claim, decision.shape)
            reuse = ""
            if decision.reuses_warm_set:
                reuse = f"; reusing its {pool.spec.count} warm nodes"
            self._recorder.normal(
                _pool_event(pool), "Claimed", f"Claimed by Workload {_name(workload)}{reuse}."
            )
        elif change is PoolChange.RELEASE:
            assert pool is not None
            self._set_claim(pool, None, None)
            why = decision.notes[0] if decision.notes else "claim dropped"
            self._recorder.normal(_pool_event(pool), "ClaimReleased", f"{_name(workload)}: {why}.")

    def _set_claim(self, pool: GangNodePool, claim: Claim | None, shape: GangShape | None) -> None:
        wanted = pool.model_copy(update={"spec": pool.spec.with_claim(claim, shape)})
        written = update_object(self._kube, GANG_NODE_POOLS, pool, wanted, c.FIELD_MANAGER)
        self._own_pool_writes.wrote(pool.name, pool, written)

    def _write_check(self, workload: Workload, check_name: str, update: CheckUpdate) -> None:
        before = workload.check(check_name)
        written = write_check_state(
            self._kube,
            workload,
            check_name,
            state=update.state,  # type: ignore[arg-type]
            message=update.message,
            pod_set_updates=update.pod_set_updates,
            now=self._now(),
            field_manager=c.FIELD_MANAGER,
        )
        if written is None:
            return
        self._own_workload_writes.wrote(_key(workload.metadata), workload, written)
        if before is None or before.state != update.state:
            kind = (
                c.EVENT_WARNING
                if update.state in (c.CHECK_RETRY, c.CHECK_REJECTED)
                else c.EVENT_NORMAL
            )
            self._recorder.record(
                InvolvedObject.of(WORKLOADS, workload.metadata),
                kind,
                update.reason or update.state,
                update.message,
            )


def _name(workload: Workload) -> str:
    return f"{workload.metadata.namespace}/{workload.metadata.name}"


def _key(meta: ObjectMeta) -> ObjectKey:
    return ObjectKey(meta.namespace or "", meta.name)


def _pool_event(pool: GangNodePool) -> InvolvedObject:
    return InvolvedObject.of(GANG_NODE_POOLS, pool.metadata)
