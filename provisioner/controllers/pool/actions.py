"""The GangNodePool reconciler's actions: the one external effect each planned step names.

Called by the reconciler's loop (`reconciler.py`) for the steps it runs in the pass (a
launch, the keep-warm tag, the finalizer's removal) and, through the stack executor, for the
stack steps (prepare, record, release a set, destroy). Each action reports an
`ActionResult`; a failure keeps its `FailureKind` from the engine's `CloudError` or the
driver's `StackError`, and `pool_outcomes` picks the wait from it.

Writes: EC2 (launch, terminate, tags, leftovers, through the engine), the pool's stack
(through the stack port) and, for the finalizer, the GangNodePool's metadata.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud.block_purchase import BlockPurchaseRefused
from provisioner.cloud.errors import CloudError, ErrorKind, ReservationNotActive
from provisioner.cloud.leftovers import split_proven
from provisioner.controllers.pool.deps import PoolReconcilerDeps
from provisioner.controllers.pool.facts import (
    LaunchFacts,
    PassFacts,
    StackNames,
    desired_spec,
    gather_launch_facts,
    pool_launch_spec,
)
from provisioner.controllers.pool.proofs import PoolProofs
from provisioner.controllers.pool.purchase import launch_shape
from provisioner.controllers.pool.steps import Action, ActionResult, Step
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import GANG_NODE_POOLS
from provisioner.kube.status import update_object
from provisioner.pulumi_driver.port import PoolOutputs, StackError

log = logging.getLogger(__name__)

# Actions after which EC2 holds something else for the pool than any listing before them.
_CHANGES_INSTANCES = frozenset({Action.LAUNCH, Action.RELEASE_SET, Action.DESTROY_STACK})


def cloud_failure(err: CloudError) -> ActionResult:
    """What a failed action reports of EC2's error: its kind (which picks the wait), its
    reason and message, and whether EC2 throttled it (which shrinks the budget it ran at)."""
    return ActionResult(
        False, failure=err.failure, reason=err.reason, message=str(err), throttled=err.throttled
    )


class PoolActions:
    def __init__(self, deps: PoolReconcilerDeps) -> None:
        self._deps = deps
        self._proofs = PoolProofs(
            deps.engine, deps.settings.cluster_name, deps.ownership_key, deps.recorder
        )

    def run(
        self, step: Step, pool: GangNodePool, facts: PassFacts, written: GangNodePool
    ) -> ActionResult | None:
        """Perform `step`'s action on what the pass read (`facts`); None for a step that
        has none. `written` is the pool as the pass last wrote it (the finalizer comes off
        that version); stack steps write no object."""
        action = step.action
        if action is Action.NONE:
            return None
        deps = self._deps
        try:
            if action is Action.PREPARE_STACK:
                known = self._launch_facts(pool, facts)
                prepared = deps.stacks.prepare(
                    desired_spec(deps.settings, pool.name, launch_shape(pool), known),
                    refresh_first=step.refresh_stack,
                )
                return ActionResult(True, repairs=prepared.repairs)
            elif action is Action.LAUNCH:
                return self._launch(pool, step, facts)
            elif action is Action.PURCHASE_BLOCK:
                return self._purchase(pool, step)
            elif action is Action.RECORD_SET:
                status = step.status
                assert status.active_group is not None
                deps.stacks.record_instance_set(pool.name, status.active_group, status.instance_ids)
            elif action is Action.RELEASE_SET:
                self._release_set(pool, step)
            elif action is Action.DESTROY_STACK:
                self._destroy(pool)
            elif action is Action.TAG_KEEP_WARM:
                deps.engine.set_keep_warm_tag(step.status.instance_ids, step.status.keep_warm_until)
            elif action is Action.REMOVE_FINALIZER:
                self._remove_finalizer(written)
        except CloudError as err:
            log.warning("pool %s: %s failed: %s", pool.name, action.value, err)
            return cloud_failure(err)
        except StackError as err:  # its kind decides the wait: config is not retried soon
            log.warning("pool %s: %s failed (%s): %s", pool.name, action.value, err.kind, err)
            return ActionResult(
                False,
                failure=err.kind,
                reason=err.reason,
                message=f"{err.message} ({err.kind.value} failure)",
            )
        except Exception as err:  # a bug must not stop the pool's life cycle
            log.exception("pool %s: %s failed", pool.name, action.value)
            return ActionResult(
                False, failure=FailureKind.RETRYABLE, reason=type(err).__name__, message=str(err)
            )
        finally:
            # Whatever the result, a listing from before the action may miss what it did
            # (a failed launch may have launched; a failed release may have terminated).
            if action in _CHANGES_INSTANCES:
                deps.index.forget(pool.name)
        return ActionResult(True)

    def _launch_facts(self, pool: GangNodePool, facts: PassFacts) -> LaunchFacts:
        """The pass's facts, or the error reading them met; read here only if the pass
        gathered none (every pass that plans a launch or a prepare gathers them)."""
        if isinstance(facts.launch, CloudError):
            raise facts.launch
        if facts.launch is None:
            return gather_launch_facts(
                self._deps.engine, self._deps.settings, launch_shape(pool), with_subnets=True
            )
        return facts.launch

    def _outputs(self, pool: GangNodePool, facts: PassFacts) -> PoolOutputs | None:
        """The stack's outputs as the pass read them (or the failure it met)."""
        if facts.stack is None:
            return self._deps.stacks.outputs(pool.name)
        if facts.stack.error is not None:
            raise facts.stack.error
        return facts.stack.outputs

    def _launch(self, pool: GangNodePool, step: Step, facts: PassFacts) -> ActionResult:
        deps = self._deps
        shape = launch_shape(pool)
        # First: a pass whose launch facts failed planned no marker and sends nothing.
        known = self._launch_facts(pool, facts)
        marker = step.status.launch_in_progress
        assert marker is not None
        outputs = self._outputs(pool, facts)
        # The subnets the pass planned, so the tokens sent are the ones the marker holds.
        spec = pool_launch_spec(
            deps.settings,
            pool,
            known,
            StackNames.of(outputs),
            step.status.acquire_generation,
        )
        assert spec.group == marker.group  # the marker names its generation's group
        metrics = deps.metrics
        metrics.launch_attempts.labels(mode=shape.mode).inc()
        try:
            launched = deps.engine.acquire(spec)
        except ReservationNotActive as err:
            metrics.acquisitions.labels(
                mode=shape.mode, instance_type=shape.instance_type, result="not-active"
            ).inc()
            return ActionResult(
                False,
                failure=FailureKind.NOT_ACTIVE,
                reason=err.reason,
                message=str(err),
                starts_at=err.starts_at,
                calls=0,  # EC2's record of the reservation decided: nothing was sent
            )
        except CloudError as err:
            failure = err.failure
            shortfall = failure in (FailureKind.CAPACITY, FailureKind.MALFORMED)
            result = "shortfall" if shortfall else failure
            metrics.acquisitions.labels(
                mode=shape.mode, instance_type=shape.instance_type, result=result
            ).inc()
            if shortfall:
                metrics.shortfalls.labels(mode=shape.mode, instance_type=shape.instance_type).inc()
            return replace(
                cloud_failure(err),
                unreleased_ids=err.instance_ids,
                rolled_back_ids=err.rolled_back,
                gone=err.gone,
                calls=err.calls,
            )
        if launched.adopted:
            # The generation's set was already in EC2 (a crash, a lost answer, or a pass
            # that re-issued the launch): counted apart, so `launched` counts sets bought.
            log.info(
                "pool %s: adopted the %d instances group %s already had",
                pool.name,
                len(launched.instance_ids),
                launched.group,
            )
        result = "adopted" if launched.adopted else "launched"
        metrics.acquisitions.labels(
            mode=shape.mode, instance_type=shape.instance_type, result=result
        ).inc()
        return ActionResult(
            True,
            instance_ids=launched.instance_ids,
            block_ends_at=launched.capacity_block_ends_at,
            calls=len(launched.attempts),
        )

    def _purchase(self, pool: GangNodePool, step: Step) -> ActionResult:
        """PurchaseCapacityBlock for the intent the pass just wrote, once; the block carries
        tags naming the cluster, pool, namespace, Workload and the intent (the proof a
        later pass looks for before it may call again)."""
        block = step.status.block_purchase
        assert block is not None and block.reservation_id is None
        namespace, _, workload = block.bought_for.partition("/")
        tags = {
            c.TAG_MANAGED: "true",
            c.TAG_CLUSTER: self._deps.settings.cluster_name,
            c.TAG_POOL: pool.name,
            c.TAG_NAMESPACE: namespace,
            c.TAG_WORKLOAD: workload,
            c.TAG_PURCHASE_INTENT: block.intent,
        }
        try:
            bought = self._deps.engine.purchase_capacity_block(block.offering_id, tags)
        except CloudError as err:
            # Refused by EC2: nothing bought. Any other failure: whether it bought is unknown.
            refused = isinstance(err, BlockPurchaseRefused)
            kind = FailureKind.CONFIG if refused else FailureKind.RETRYABLE
            return ActionResult(False, failure=kind, reason=err.reason, message=str(err.message))
        return ActionResult(True, reservation_id=bought)

    def _release_set(self, pool: GangNodePool, step: Step) -> None:
        deps = self._deps
        active = set(pool.status.instance_ids)
        # A stack that is gone cannot release its record: EC2 does it below, by the IDs.
        if active and active <= set(step.release_ids) and deps.stacks.is_prepared(pool.name):
            # The stack's instance-set delete terminates the set and cleans its ENIs.
            deps.stacks.remove_instance_set(pool.name)
        # Then every id, BY ID, whatever a listing shows: a fresh instance may be missing
        # from the listing and from the stack's record and still run. The step succeeds
        # only once EC2 shows each one shutting-down or terminated; until then the status
        # keeps the ids (the failure leaves it as it was) and a later pass goes on.
        marker = step.status.release_in_progress
        self._release_by_id(step.release_ids, None if marker is None else marker.started_at)

    def _release_by_id(self, ids: Sequence[str], known_since: datetime | None) -> None:
        if not ids:
            return
        report = self._deps.engine.release(ids, known_since=known_since)
        if not report.all_gone:
            raise CloudError(
                ErrorKind.RETRYABLE,
                None,
                "TerminationUnconfirmed",
                f"EC2 does not yet show {', '.join(report.unconfirmed)} shutting down or "
                "terminated (a fresh instance can answer NotFound and still run); the ids "
                "stay in the pool's status and the release is repeated.",
                instance_ids=report.unconfirmed,
            )

    def _destroy(self, pool: GangNodePool) -> None:
        deps = self._deps
        cluster = deps.settings.cluster_name
        # The instances go FIRST, before the stack is even read: by id what the status holds
        # (a listing may not show a fresh launch yet) and, found by tag, what EC2's record
        # proves ours (a tag alone proves nothing). A set launched and not yet recorded is
        # one the stack knows nothing of, and EC2 refuses to delete a placement group that
        # holds instances: a destroy that went first failed on them at every try, and they
        # ran as long as the pool was kept. Nor does a state backend that cannot be read
        # keep a deleted pool's instances running. `release` cleans their ENIs as the
        # stack's own delete of its set would; that delete then finds the set gone.
        leftover, unproven = self._proofs.releasable(
            pool, deps.engine.find_managed(cluster, pool.name)
        )
        self._proofs.report(pool, unproven)
        marker = pool.status.release_in_progress
        held = [*pool.status.instance_ids, *(marker.instance_ids if marker else ())]
        self._release_by_id(
            list(dict.fromkeys([*held, *(v.instance_id for v in leftover)])),
            None if marker is None else marker.started_at,
        )
        # What the stack made, read before it goes: the only proof that a template or group
        # found by tag below is the pool's (`cloud.leftovers`).
        stack = deps.stacks.outputs(pool.name)
        # Destroyed even without outputs: a first `up` that failed partway keeps what it
        # made (a placement group, say) in the state and registers no outputs. The driver
        # answers a pool with no stack at all without running the CLI.
        deps.stacks.destroy(pool.name)
        found = deps.engine.leftovers(cluster, pool.name)
        orphans, foreign = split_proven(found, stack.resource_ids if stack else frozenset())
        if foreign:
            log.warning(
                "pool %s: %s carry its tags but its stack never recorded them; left alone "
                "(tags prove nothing): delete them by hand if they are the pool's",
                pool.name,
                ", ".join(f"{o.kind} {o.resource_id} ({o.name})" for o in foreign),
            )
        if orphans:
            log.warning(
                "pool %s: its stack's %s outlived the destroy; deleting",
                pool.name,
                ", ".join(f"{o.kind} {o.name}" for o in orphans),
            )
            deps.engine.delete_leftovers(orphans)

    def _remove_finalizer(self, pool: GangNodePool) -> None:
        finalizers = pool.metadata.finalizers
        if c.FINALIZER not in finalizers:
            return
        kept = tuple(f for f in finalizers if f != c.FINALIZER)
        wanted = pool.model_copy(
            update={"metadata": pool.metadata.model_copy(update={"finalizers": kept})}
        )
        # Gone already: an earlier pass removed the finalizer and the cache had not caught up.
        with contextlib.suppress(KubeNotFound):
            update_object(self._deps.kube, GANG_NODE_POOLS, pool, wanted, c.FIELD_MANAGER)
