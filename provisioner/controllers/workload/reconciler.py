"""Workload reconciler: turns Kueue Workloads carrying our check into pool claims and back.

Watches: Kueue Workloads (and, through the manager's mappings, GangNodePools — a pool's
status change re-evaluates its claimant — our AdmissionChecks and the GangClasses they
name). Reads each Workload's owner (a Job, JobSet, PyTorchJob, TrainJob or MPIJob:
`owners.OWNER_KINDS`) from an informer of that kind's objects carrying the queue label; a
live GET only for one it has not seen, or for a kind with no informer (its CRD was not
served when the controller started). The check's GangClass (`spec.parameters`) gives the
shape's defaults and, for an owner without the pool label, the pool's name.
Writes, alone: `GangNodePool.spec` (shape snapshot, the one claim, the namespace the pool
belongs to, the class and who decided each field; the finalizer is set at creation) and
our entry in `Workload.status.admissionChecks`.

The rules live in `workload_decision.decide`; this module gathers its inputs from the
informer caches and EC2's figures for the gang's instance type (`api.pod_fit.InstanceTypes`,
kept per type), performs the writes it asks for (each preconditioned on the version read)
and records an Event on the Workload's owner when our check changes state (the owner is
what its user wrote and watches: `kubectl describe jobset x` shows the gang held, short of
capacity, Ready or released), and on the Workload itself only for Retry and Rejected, whose
message Kueue's eviction clears from our entry. A pool created for a Workload is told once
to each of the pool, the Workload and its owner (`PoolCreated`), whatever state the check
moves from: the check's write in that pass records no second Event.
"""

from __future__ import annotations

import logging

from provisioner.api import constants as c
from provisioner.api.constants import CheckState
from provisioner.api.gang_class import (
    CheckClass,
    ClassedShape,
    GangClass,
    check_class,
    read_gang_shape,
)
from provisioner.api.gangnodepool import Claim, GangNodePool
from provisioner.api.meta import ObjectMeta, OwnerReference
from provisioner.api.owners import GangOwner, OwnerKind, owner_kind
from provisioner.api.pod_fit import InstanceTypeLookupError, UnknownInstanceType
from provisioner.api.shape import GangShape, GangShapeError
from provisioner.api.workload import Workload
from provisioner.controllers.workload.check_update import CheckUpdate
from provisioner.controllers.workload.claim_index import claimant
from provisioner.controllers.workload.decision import (
    PoolChange,
    WorkloadDecision,
    WorkloadInputs,
    decide,
)
from provisioner.controllers.workload.deps import WorkloadReconcilerDeps
from provisioner.controllers.workload.fit import InstanceTypeAnswer
from provisioner.controllers.workload.involved import owner_event, pool_event
from provisioner.controllers.workload.prepare_ahead import PrepareAhead, waits_for_quota
from provisioner.kube.check_state import write_check_state
from provisioner.kube.errors import KubeAlreadyExists, KubeNotFound
from provisioner.kube.events import InvolvedObject
from provisioner.kube.own_writes import WAIT_FOR_OWN_WRITE_SECONDS, OwnWrites
from provisioner.kube.resources import GANG_NODE_POOLS, WORKLOADS, ObjectKey, owner_resource
from provisioner.kube.status import create_object, read_object, update_object
from provisioner.kube.workqueue import Result

log = logging.getLogger(__name__)

# The owner may not have reached our cache yet; look again shortly.
_OWNER_NOT_SEEN_RETRY = 1.0


class WorkloadReconciler:
    def __init__(self, deps: WorkloadReconcilerDeps) -> None:
        self._kube = deps.kube
        self._workloads = deps.workloads
        self._pools = deps.pools
        self._checks = deps.checks
        self._classes = deps.classes
        self._owners = deps.owners
        self._settings = deps.settings
        self._recorder = deps.recorder
        self._now = deps.now
        # EC2's figures for the gang's instance type (kept per type by the port).
        self._instance_types = deps.instance_types
        # The Workloads and pools this reconciler wrote over that the caches may still show
        # as before: a pass planned from one would write it again, and meet a conflict.
        self._own_workload_writes = OwnWrites()
        self._own_pool_writes = OwnWrites()
        self._ahead = PrepareAhead(self, deps, self._own_pool_writes)

    # -- mappings used by the manager ------------------------------------------------------
    def keys_for_pool(self, pool: GangNodePool) -> list[ObjectKey]:
        """The pool's claimant, and the Workload it is queued for (`prepare_ahead`)."""
        held = (pool.spec.claim, pool.spec.queued)
        return [ObjectKey(w.namespace, w.name) for w in held if w is not None]

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
            # Gone, or not routed through our check (yet: Kueue lists a check limited to
            # some flavors only with quota): it may hold no claim, and its pool's stack may
            # be prepared ahead of quota.
            self._release_claims_of(key, workload)
            return Result(requeue_after=self._ahead.consider(workload) if workload else None)
        if waits_for_quota(workload) and not self._claims_of(key, workload):
            # Kueue lists a check that applies to every flavor as soon as it queues the
            # Workload, Pending, before any quota: holding no claim, it is prepared for as
            # one whose check is not listed yet. (One holding a claim is decided below:
            # without quota, the decision releases it.)
            return Result(requeue_after=self._ahead.consider(workload, listed=check_name))

        decided = self.decide_for(workload, check_name)
        if decided is None:
            # Planned from the pool as it was before our claim or release, this pass would
            # write that again. The pool's own watch event queues this Workload (its claimant).
            return Result(requeue_after=WAIT_FOR_OWN_WRITE_SECONDS)
        decision, pool, owner = decided
        pool_name = decision.pool_name or (pool.name if pool else None)
        log.debug(
            "Workload %s: pool %s change=%s check=%s notes=%s",
            key,
            pool_name,
            decision.pool_change.value,
            decision.check.state if decision.check else None,
            decision.notes,
            extra={"workload": str(key), "pool": pool_name},
        )
        if decision.owner_not_visible:
            return Result(requeue_after=_OWNER_NOT_SEEN_RETRY)
        told = self._apply_pool_change(decision, pool, workload, owner)
        if decision.check is not None:
            self._write_check(workload, check_name, decision.check, owner, told=told)
        return Result(requeue_after=decision.retry_after)

    def decide_for(
        self, workload: Workload, check_name: str, *, ahead_of_quota: bool = False
    ) -> tuple[WorkloadDecision, GangNodePool | None, GangOwner | None] | None:
        """What `decide` makes of `workload` under our check `check_name`, with the pool and
        owner it read; None while the pool cache shows the pool from before our own write.
        `ahead_of_quota`: as if Kueue had reserved quota and put our check on it (for
        `prepare_ahead`, whose pool follows only a decision a claim would get)."""
        owner = self._owner(workload)
        named = self._check_class(check_name)
        read = self._read_shape(workload, owner, named.gang_class)
        pool_name = read.shape.pool if read else owner.labels.get(c.POOL_LABEL) if owner else None
        if owner is not None and c.POOL_LABEL not in owner.labels:
            # A derived pool's name follows the class: the pool this Workload already holds
            # stays its own (or is released by the decision), whatever the class says now.
            pool_name = self._pool_held_by(workload) or pool_name
        pool = self._pools.get("", pool_name) if pool_name else None
        if pool_name and self._own_pool_writes.cache_behind(pool_name, pool):
            return None
        decision = decide(
            WorkloadInputs(
                workload=workload,
                check_name=check_name,
                owner_labels=owner.labels if owner else None,
                owner_annotations=owner.annotations if owner else None,
                pool=pool,
                claimant_exists=self._claimant_exists(pool),
                settings=self._settings,
                now=self._now(),
                instance_type=self._instance_type(owner, read),
                owner_kind=owner.kind if owner else "Job",
                gang_class=named.gang_class,
                class_problem=named.message,
                ahead_of_quota=ahead_of_quota,
            )
        )
        return decision, pool, owner

    def _check_name(self, workload: Workload | None) -> str | None:
        if workload is None:
            return None
        ours = self.our_check_names()
        return next((s.name for s in workload.status.admission_checks if s.name in ours), None)

    def _pool_held_by(self, workload: Workload) -> str | None:
        uid = workload.metadata.uid
        held = (p for p in self._pools.list() if p.spec.claim and p.spec.claim.uid == uid)
        return next((p.name for p in held), None)

    def _check_class(self, check_name: str) -> CheckClass:
        """The GangClass our check names, or why it cannot serve (its Active says so too)."""
        check = self._checks.get("", check_name)
        parameters = check.spec.parameters if check is not None else None
        return check_class(check_name, parameters, self._classes, self._settings)

    def _read_shape(
        self, workload: Workload, owner: GangOwner | None, gang_class: GangClass | None
    ) -> ClassedShape | None:
        """The owner's shape read through its class, to name the pool the class derives
        (`decide` reads it again, and answers its refusal); None without a class, owner or a
        shape that reads."""
        if owner is None or gang_class is None:
            return None
        try:
            return read_gang_shape(
                owner.labels,
                owner.annotations,
                workload.total_pod_count,
                self._settings,
                kind=owner.kind,
                gang_class=gang_class,
                namespace=workload.metadata.namespace or "",
            )
        except GangShapeError:
            return None

    def _owner(self, workload: Workload) -> GangOwner | None:
        """The Workload's owner of a supported kind, from its kind's cache or, not there, a
        live GET; None when it has none, or its owner is not visible (yet)."""
        ref = workload.owner
        kind = owner_kind(ref.api_version, ref.kind) if ref is not None else None
        if ref is None or kind is None:
            return None
        namespace = workload.metadata.namespace or ""
        cache = self._owners.get(kind)
        cached = cache.get(namespace, ref.name) if cache is not None else None
        if cached is not None and (not ref.uid or cached.uid == ref.uid):
            return cached
        # Not in the cache: an owner without the queue label (the informer selects on it),
        # one the watch has not delivered yet, or a kind with no informer.
        return self._read_owner(workload, ref, kind)

    def _read_owner(
        self, workload: Workload, ref: OwnerReference, kind: OwnerKind
    ) -> GangOwner | None:
        namespace = workload.metadata.namespace or ""
        what = f"{kind.kind} {namespace}/{ref.name}"
        try:
            owner = read_object(
                self._kube, owner_resource(kind), ref.name, namespace, GangOwner.from_dict
            )
        except KubeNotFound:
            log.info("Workload %s: owner %s not found yet", _name(workload), what)
            return None
        if ref.uid and owner.uid != ref.uid:
            log.info("Workload %s: %s was recreated; waiting", _name(workload), what)
            return None
        return owner

    def _instance_type(
        self, owner: GangOwner | None, read: ClassedShape | None
    ) -> InstanceTypeAnswer | None:
        """EC2's answer for the type the owner names or its class gives (None: neither). An
        answer is kept per type by the port, so this asks EC2 once per type per process."""
        raw = (owner.annotations.get(c.ANN_INSTANCE_TYPE, "") if owner else "").strip()
        raw = read.shape.instance_type if read is not None else raw
        if not raw:
            return None
        try:
            return InstanceTypeAnswer(raw, figures=self._instance_types.figures(raw))
        except UnknownInstanceType:
            return InstanceTypeAnswer(raw, unknown=True)
        except InstanceTypeLookupError as err:
            log.info("instance type %s not described by EC2: %s", raw, err)
            return InstanceTypeAnswer(raw, error=str(err) or type(err).__name__)

    def _claimant_exists(self, pool: GangNodePool | None) -> bool:
        claim = pool.spec.claim if pool else None
        if claim is None:
            return False
        claimant = self._workloads.get(claim.namespace, claim.name)
        return claimant is not None and claimant.metadata.uid == claim.uid

    # -- writes ------------------------------------------------------------------------------
    def _claims_of(self, key: ObjectKey, workload: Workload | None) -> list[GangNodePool]:
        """The pools this Workload claims (any uid of its name, when it is gone)."""
        # The index holds only pools this namespace/name claims; a Workload of that name
        # made again since keeps the claims of its own uid.
        return [
            pool
            for pool in self._pools.list_indexed(claimant(key.namespace, key.name))
            if pool.spec.claim is not None
            and (workload is None or pool.spec.claim.uid == workload.metadata.uid)
        ]

    def _release_claims_of(self, key: ObjectKey, workload: Workload | None) -> None:
        for pool in self._claims_of(key, workload):
            self._set_claim(pool, None, None)
            log.info(
                "pool %s: claim by %s released (Workload gone or not ours)",
                pool.name,
                key,
            )

    def _apply_pool_change(
        self,
        decision: WorkloadDecision,
        pool: GangNodePool | None,
        workload: Workload,
        owner: GangOwner | None,
    ) -> bool:
        """Make the pool change the decision asks for and record its Events. True when
        those told the Workload and its owner what the check's write says (a pool created
        for it): that write records no Event of its own, so each hears of the pool once."""
        change = decision.pool_change
        if change is PoolChange.CREATE:
            assert decision.shape is not None and decision.claim is not None
            new = decision.new_pool(decision.claim)
            try:
                create_object(self._kube, GANG_NODE_POOLS, new)
            except KubeAlreadyExists:
                # Another pass created it after our cache was read: decide again on fresh data.
                raise
            self._recorder.normal(
                pool_event(new),
                c.EventReason.POOL_CREATED,
                f"Created for Workload {_name(workload)}.",
            )
            shape = decision.shape
            told = (
                f"Pool {new.name} created; acquiring {shape.count}x {shape.instance_type} "
                f"all-or-nothing. The gang is held until all {shape.count} nodes are Ready."
            )
            self._recorder.normal(
                InvolvedObject.of(WORKLOADS, workload.metadata), c.EventReason.POOL_CREATED, told
            )
            self._tell_owner(owner, c.EventReason.POOL_CREATED, told)
            return True
        elif change is PoolChange.CLAIM:
            assert pool is not None and decision.claim is not None
            self._set_claim(
                pool,
                decision.claim,
                decision.shape,
                decision.owner_namespace,
                decision.pod_requests,
                decision.read,
            )
            reuse = ""
            if decision.reuses_warm_set:
                reuse = f"; reusing its {pool.spec.count} warm nodes"
            self._recorder.normal(
                pool_event(pool),
                c.EventReason.CLAIMED,
                f"Claimed by Workload {_name(workload)}{reuse}.",
            )
            if not decision.reuses_warm_set:
                # A whole warm set is Ready a pass away, and the check's Ready tells the
                # owner: "held until Ready" would stand for milliseconds, one more write per
                # warm admission (and in a wave, hundreds) for the pool's Event to say.
                self._tell_owner(
                    owner,
                    c.EventReason.CLAIMED,
                    f"Pool {pool.name} claimed. The gang is held until all "
                    f"{decision.shape.count if decision.shape else pool.spec.count} nodes "
                    "are Ready.",
                )
        elif change is PoolChange.RELEASE:
            assert pool is not None
            self._set_claim(pool, None, None)
            why = decision.notes[0] if decision.notes else "claim dropped"
            self._recorder.normal(
                pool_event(pool), c.EventReason.CLAIM_RELEASED, f"{_name(workload)}: {why}."
            )
            self._tell_owner(
                owner, c.EventReason.CLAIM_RELEASED, f"Released pool {pool.name}: {why}."
            )
        elif change is PoolChange.BIND:
            # A pool from before pools had an owner, held by this Workload: it is its
            # namespace's from now on (the CRD refuses any later change).
            assert pool is not None and decision.owner_namespace is not None
            wanted = pool.model_copy(update={"spec": pool.spec.bound_to(decision.owner_namespace)})
            written = update_object(self._kube, GANG_NODE_POOLS, pool, wanted, c.FIELD_MANAGER)
            self._own_pool_writes.wrote(pool.name, pool, written)
            log.info("pool %s: bound to namespace %s", pool.name, decision.owner_namespace)
        return False

    def _tell_owner(self, owner: GangOwner | None, reason: c.EventReason, message: str) -> None:
        """A Normal Event on the object the gang was submitted as, when it was read."""
        if owner is not None:
            self._recorder.normal(owner_event(owner), reason, message)

    def _set_claim(
        self,
        pool: GangNodePool,
        claim: Claim | None,
        shape: GangShape | None,
        owner_namespace: str | None = None,
        pod_requests: dict[str, str] | None = None,
        read: ClassedShape | None = None,
    ) -> None:
        spec = pool.spec.with_claim(claim, shape, pod_requests, read)
        if owner_namespace is not None and spec.owner_namespace is None:
            spec = spec.bound_to(owner_namespace)
        wanted = pool.model_copy(update={"spec": spec})
        written = update_object(self._kube, GANG_NODE_POOLS, pool, wanted, c.FIELD_MANAGER)
        self._own_pool_writes.wrote(pool.name, pool, written)

    def _write_check(
        self,
        workload: Workload,
        check_name: str,
        update: CheckUpdate,
        owner: GangOwner | None,
        *,
        told: bool,
    ) -> None:
        before = workload.check(check_name)
        written = write_check_state(
            self._kube,
            workload,
            check_name,
            state=update.state,
            message=update.message,
            pod_set_updates=update.pod_set_updates,
            now=self._now(),
            field_manager=c.FIELD_MANAGER,
        )
        if written is None:
            return
        self._own_workload_writes.wrote(_key(workload.metadata), workload, written)
        if told:
            return  # the pool change's Events said it, to the Workload and its owner
        if before is None or before.state != update.state:
            warning = update.state in _STATES_KUEUE_ACTS_ON
            kind = c.EVENT_WARNING if warning else c.EVENT_NORMAL
            if warning:
                # Kueue answers Retry or Rejected by evicting the Workload, which resets our
                # entry to Pending ("Previously: Retry") and drops its message: the Event
                # keeps why. Any other state stays in the entry (`kubectl describe workload`
                # shows it), and Kueue says Admitted on the Workload a moment after a Ready:
                # an Event of ours there would be a third copy, and a write per admission.
                self._recorder.record(
                    InvolvedObject.of(WORKLOADS, workload.metadata),
                    kind,
                    update.reason,
                    update.message,
                )
            if owner is not None:
                self._recorder.record(owner_event(owner), kind, update.reason, update.message)


# Check states Kueue answers by evicting the Workload (requeued, or deactivated).
_STATES_KUEUE_ACTS_ON = frozenset({CheckState.RETRY, CheckState.REJECTED})


def _name(workload: Workload) -> str:
    return f"{workload.metadata.namespace}/{workload.metadata.name}"


def _key(meta: ObjectMeta) -> ObjectKey:
    return ObjectKey(meta.namespace or "", meta.name)
