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
from typing import Any

from provisioner.api import constants as c
from provisioner.api.gangnodepool import Claim, GangNodePool, GangNodePoolSpec
from provisioner.api.settings import Settings
from provisioner.api.workload import Workload, check_state_patch
from provisioner.controllers.workload_decision import (
    CheckUpdate,
    PoolChange,
    WorkloadDecision,
    WorkloadInputs,
    decide,
)
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeAlreadyExists, KubeNotFound
from provisioner.kube.events import EventRecorder
from provisioner.kube.informer import Informer
from provisioner.kube.own_writes import WAIT_FOR_OWN_WRITE_SECONDS, OwnWrites
from provisioner.kube.resources import GANG_NODE_POOLS, JOBS, WORKLOADS, ObjectKey, key_of
from provisioner.kube.status import patch_status_entries, write_object
from provisioner.kube.workqueue import Result

log = logging.getLogger(__name__)

# The owner Job may not have reached our cache yet; look again shortly.
_JOB_NOT_SEEN_RETRY = 1.0


class WorkloadReconciler:
    def __init__(
        self,
        kube: KubeClient,
        workloads: Informer,
        pools: Informer,
        checks: Informer,
        jobs: Informer,
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
    def keys_for_pool(self, pool: dict[str, Any]) -> list[ObjectKey]:
        claim = (pool.get("spec") or {}).get("claim")
        return [ObjectKey(claim["namespace"], claim["name"])] if claim else []

    def our_check_names(self) -> set[str]:
        return {
            obj["metadata"]["name"]
            for obj in self._checks.list()
            if (obj.get("spec") or {}).get("controllerName") == self._settings.controller_name
        }

    # -- reconcile --------------------------------------------------------------------------
    def reconcile(self, key: ObjectKey) -> Result:
        raw = self._workloads.get(key.namespace, key.name)
        if self._own_workload_writes.cache_behind(key, raw):
            # Our write's watch event queues the Workload again once the cache holds it.
            return Result(requeue_after=WAIT_FOR_OWN_WRITE_SECONDS)
        workload = Workload.from_dict(raw) if raw else None
        check_name = self._check_name(workload)
        if workload is None or check_name is None:
            # Gone, or not routed through our check: it may hold no claim.
            self._release_claims_of(key, workload)
            return Result()

        job = self._owner_job(workload)
        pool_name = (job or {}).get("metadata", {}).get("labels", {}).get(c.POOL_LABEL)
        pool_raw = self._pools.get("", pool_name) if pool_name else None
        if pool_name and self._own_pool_writes.cache_behind(pool_name, pool_raw):
            # Planned from the pool as it was before our claim or release, this pass would
            # write that again. The pool's own watch event queues this Workload (its claimant).
            return Result(requeue_after=WAIT_FOR_OWN_WRITE_SECONDS)
        pool = GangNodePool.from_dict(pool_raw) if pool_raw else None
        decision = decide(
            WorkloadInputs(
                workload=workload,
                check_name=check_name,
                job_labels=(job or {}).get("metadata", {}).get("labels", {}) if job else None,
                job_annotations=(job or {}).get("metadata", {}).get("annotations", {})
                if job
                else None,
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
        self._apply_pool_change(decision, pool_raw, workload)
        if decision.check is not None:
            self._write_check(raw, workload, check_name, decision.check)  # type: ignore[arg-type]
        return Result()

    def _check_name(self, workload: Workload | None) -> str | None:
        if workload is None:
            return None
        ours = self.our_check_names()
        return next((s.name for s in workload.status.admission_checks if s.name in ours), None)

    def _owner_job(self, workload: Workload) -> dict[str, Any] | None:
        owner = workload.owner_job
        if owner is None:
            return None
        name, uid = owner
        namespace = workload.metadata.namespace or ""
        cached = self._jobs.get(namespace, name)
        if cached is not None and (not uid or cached.get("metadata", {}).get("uid") == uid):
            return cached
        # Not in the cache: a Job without the pool label (the informer selects on it; its
        # Workload is refused by name below), or one the watch has not delivered yet.
        try:
            job = self._kube.get(JOBS, name, namespace=namespace)
        except KubeNotFound:
            log.info("Workload %s: owner Job %s/%s not found yet", _name(workload), namespace, name)
            return None
        if uid and job.get("metadata", {}).get("uid") != uid:
            log.info(
                "Workload %s: Job %s/%s was recreated; waiting", _name(workload), namespace, name
            )
            return None
        return job

    def _claimant_exists(self, pool: GangNodePool | None) -> bool:
        claim = pool.spec.claim if pool else None
        if claim is None:
            return False
        raw = self._workloads.get(claim.namespace, claim.name)
        return bool(raw) and (raw or {}).get("metadata", {}).get("uid") == claim.uid

    # -- writes ------------------------------------------------------------------------------
    def _release_claims_of(self, key: ObjectKey, workload: Workload | None) -> None:
        for pool_raw in self._pools.list():
            claim = (pool_raw.get("spec") or {}).get("claim")
            if not claim or (claim["namespace"], claim["name"]) != (key.namespace, key.name):
                continue
            if workload is not None and claim["uid"] != workload.metadata.uid:
                continue
            self._set_claim(pool_raw, None, None)
            log.info(
                "pool %s: claim by %s released (Workload gone or not ours)",
                pool_raw["metadata"]["name"],
                key,
            )

    def _apply_pool_change(
        self, decision: WorkloadDecision, pool_raw: dict[str, Any] | None, workload: Workload
    ) -> None:
        change = decision.pool_change
        if change is PoolChange.CREATE:
            assert decision.shape is not None and decision.claim is not None
            spec = GangNodePoolSpec.model_validate(
                {**decision.shape.model_dump(), "claim": decision.claim}
            )
            body = {
                "apiVersion": c.API_VERSION,
                "kind": c.GNP_KIND,
                "metadata": {"name": decision.pool_name, "finalizers": [c.FINALIZER]},
                "spec": spec.to_dict(),
            }
            try:
                self._kube.create(GANG_NODE_POOLS, body)
            except KubeAlreadyExists:
                # Another pass created it after our cache was read: decide again on fresh data.
                raise
            self._recorder.normal(body, "PoolCreated", f"Created for Workload {_name(workload)}.")
        elif change is PoolChange.CLAIM:
            assert pool_raw is not None and decision.claim is not None
            self._set_claim(pool_raw, decision.claim, decision.shape)
            reuse = ""
            if decision.reuses_warm_set:
                count = (pool_raw.get("spec") or {}).get("count")
                reuse = f"; reusing its {count} warm nodes"
            self._recorder.normal(
                pool_raw, "Claimed", f"Claimed by Workload {_name(workload)}{reuse}."
            )
        elif change is PoolChange.RELEASE:
            assert pool_raw is not None
            self._set_claim(pool_raw, None, None)
            why = decision.notes[0] if decision.notes else "claim dropped"
            self._recorder.normal(pool_raw, "ClaimReleased", f"{_name(workload)}: {why}.")

    def _set_claim(self, pool_raw: dict[str, Any], claim: Claim | None, shape: Any) -> None:
        def mutate(obj: dict[str, Any]) -> bool:
            spec = obj.setdefault("spec", {})
            if shape is not None:
                spec.update(shape.to_dict())
            if claim is None:
                spec.pop("claim", None)
            else:
                spec["claim"] = claim.to_dict()
            return True

        written = write_object(self._kube, GANG_NODE_POOLS, pool_raw, mutate, c.FIELD_MANAGER)
        self._own_pool_writes.wrote(pool_raw["metadata"]["name"], pool_raw, written)

    def _write_check(
        self, raw: dict[str, Any], workload: Workload, check_name: str, update: CheckUpdate
    ) -> None:
        before = workload.check(check_name)
        ops = check_state_patch(
            workload,
            check_name,
            state=update.state,  # type: ignore[arg-type]
            message=update.message,
            pod_set_updates=update.pod_set_updates,
            now=self._now(),
        )
        if ops is None:
            return
        # check_state_patch pins the resourceVersion itself (its first operation); the
        # helper pins it again from the object read, so that operation is left out.
        written = patch_status_entries(self._kube, WORKLOADS, raw, ops[1:], c.FIELD_MANAGER)
        self._own_workload_writes.wrote(key_of(raw), raw, written)
        if before is None or before.state != update.state:
            kind = (
                c.EVENT_WARNING
                if update.state in (c.CHECK_RETRY, c.CHECK_REJECTED)
                else c.EVENT_NORMAL
            )
            self._recorder.record(raw, kind, update.reason or update.state, update.message)


def _name(workload: Workload) -> str:
    return f"{workload.metadata.namespace}/{workload.metadata.name}"
