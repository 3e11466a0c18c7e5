"""GangNodePool reconciler: acquires, watches and releases each pool's gang.

Watches: GangNodePools, and Nodes carrying the pool label (mapped to their pool).
Writes, alone: `GangNodePool.status`, all EC2 lifecycle of the pool's instances, the pool's
Pulumi stack, the group label of its own Nodes, and the finalizer's removal.

Each pass observes (the pool, its live instances in EC2 found by tag, its Ready Nodes),
asks `pool_transitions.plan` for ONE step, persists that step's status (for a launch: the
marker with the generation) before acting, performs the action, and persists what
`pool_transitions.outcome` makes of the result. The work queue runs one pass per pool at a
time, so a pool can never launch twice concurrently; the launch marker and ClientToken make
a crash at any point resume rather than repeat.

Stack steps (prepare, record, release a set, destroy) are handed to the `StackExecutor`
instead of run here: the pass persists the step's status, submits, and returns. While the
operation runs, passes of the pool still observe and write plain status changes, and plan
nothing that touches the stack (`plan` makes such steps wait). When it ends, the executor
queues the pool; that pass persists what `pool_transitions.settle` makes of the result on
the status as it is then, and nothing else.

What EC2 holds for the pool comes from the shared `InstanceIndex`: a pool about to act on
its instances (see `reads_fresh`) lists them on every pass; a joining or settled pool reads
the index, at most `instanceIndexRefreshSeconds` old, unless that misses part of its set. A
launch, a release and a destroy each make the pool's next read fresh (`InstanceIndex.forget`),
as the reaper's terminations do.

A failed step's wait (`Backoff`) is remembered here, in memory, and handed to `plan` with the
view: the status write that records a failure wakes the pool at once, and the step must
not run again before the wait its result asked for.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolStatus
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import CloudError, ErrorKind, ReservationNotActive
from provisioner.cloud.instancetypes import efa_cards
from provisioner.cloud.types import (
    AmiChoice,
    CapacityReservationRef,
    ClusterInfo,
    InstanceProfileRef,
    LaunchSpec,
    LaunchTemplateRef,
)
from provisioner.cloud.views import LIVE_STATES
from provisioner.controllers.instance_index import GONE_STATES, InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool_transitions import (
    EXTRA_BLOCK_ENDS_AT,
    EXTRA_STARTS_AT,
    STACK_ACTIONS,
    Action,
    ActionResult,
    Backoff,
    Instance,
    PoolView,
    Step,
    outcome,
    plan,
    settle,
)
from provisioner.controllers.ports import EngineOps, StackOps
from provisioner.controllers.stack_executor import Finished, Operation, StackExecutor
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeConflict, KubeNotFound
from provisioner.kube.events import EventRecorder
from provisioner.kube.informer import Informer
from provisioner.kube.own_writes import WAIT_FOR_OWN_WRITE_SECONDS, OwnWrites
from provisioner.kube.resources import GANG_NODE_POOLS, NODES, ObjectKey
from provisioner.kube.status import write_object, write_status
from provisioner.kube.workqueue import Result
from provisioner.pulumi_driver.port import PoolSpec, StackError, pool_spec_for

log = logging.getLogger(__name__)

# The phases whose next step acts on the pool's instances: a launch, or a release.
_ACTING_PHASES = frozenset({c.PHASE_ACQUIRING, c.PHASE_RELEASING})
# Actions after which EC2 holds something else for the pool than any listing before them.
_CHANGES_INSTANCES = frozenset({Action.LAUNCH, Action.RELEASE_SET, Action.DESTROY_STACK})


def reads_fresh(pool: GangNodePool) -> bool:
    """Whether this pass must list the pool's instances from EC2 rather than the index.

    A pool about to act on its instances (Acquiring, Releasing, a launch or release marked,
    being deleted) acts on what EC2 says now. Every other pool waits for the world to change
    (a joining one for its Nodes, a settled one for a claim, a loss or a timer), and every
    Node or claim event would otherwise cost a listing. What EC2 holds for such a pool
    changes by our own launch or release (the pool reconciler's or the reaper's), each of
    which makes its next read fresh, or by a loss the refresh interval bounds. So a new
    claim on a warm set is admitted on its Nodes being Ready now and on a listing at most
    `instanceIndexRefreshSeconds` old; a listing that misses part of the set is asked again
    (see `_observe`).
    """
    status = pool.status
    if pool.metadata.deletion_timestamp is not None:
        return True
    if status.launch_in_progress is not None or status.release_in_progress is not None:
        return True
    return status.phase in _ACTING_PHASES


def _next_pass(
    before: GangNodePoolStatus, after: GangNodePoolStatus, requeue_after: float | None
) -> float | None:
    """When to look at the pool again: at once means "when our write comes back".

    A pass that wrote the status is run again by its own write's watch event, from a cache
    that holds the write; an immediate requeue would plan from the cache before it (and meet
    a conflict). So it waits for that event; the short requeue only stands in for an event
    that never comes.
    """
    if requeue_after == 0.0 and after != before:
        return WAIT_FOR_OWN_WRITE_SECONDS
    return requeue_after


class GangNodePoolReconciler:
    def __init__(
        self,
        kube: KubeClient,
        pools: Informer,
        nodes: Informer,
        engine: EngineOps,
        index: InstanceIndex,
        stacks: StackOps,
        executor: StackExecutor,
        settings: Settings,
        recorder: EventRecorder,
        now: Callable[[], datetime],
        metrics: ControllerMetrics,
    ) -> None:
        self._kube = kube
        self._pools = pools
        self._nodes = nodes
        self._engine = engine
        self._index = index
        self._stacks = stacks
        self._executor = executor
        self._settings = settings
        self._recorder = recorder
        self._now = now
        self._metrics = metrics
        # Each pool's last failed step and when it may run again. In memory only: a new
        # leader tries once at once, then backs off from the count kept in the status.
        self._backoffs: dict[str, Backoff] = {}
        # Per pool, the versions this reconciler wrote over that the cache still may show.
        self._own_writes = OwnWrites()

    def keys_for_node(self, node: dict[str, Any]) -> list[ObjectKey]:
        pool = (node.get("metadata", {}).get("labels") or {}).get(c.POOL_LABEL)
        return [ObjectKey("", pool)] if pool else []

    # -- one pass -----------------------------------------------------------------------------
    def reconcile(self, key: ObjectKey) -> Result:
        raw = self._pools.get("", key.name)
        if raw is None:
            self._executor.forget(key.name)
            self._backoffs.pop(key.name, None)
            self._own_writes.forget(key.name)
            return Result()
        if self._cache_behind_own_write(raw):
            # Our write's watch event wakes the pool when the cache has it; this is the
            # fallback should that event be lost.
            return Result(requeue_after=WAIT_FOR_OWN_WRITE_SECONDS)
        pool = GangNodePool.from_dict(raw)
        held = self._executor.state(pool.name)
        view = self._observe(
            pool,
            held.pending.step.action if held.pending else None,
            settling=held.finished is not None,
        )
        if held.finished is not None:
            return self._settle(raw, pool, view, held.finished)
        step = plan(view)
        if step.action is not Action.NONE or step.status.phase != view.status.phase:
            log.info(
                "pool %s: %s -> %s, %s",
                pool.name,
                view.status.phase,
                step.status.phase,
                step.action.value,
                extra={
                    "pool": pool.name,
                    "generation": step.status.acquire_generation,
                    "phase": step.status.phase,
                    "action": step.action.value,
                },
            )
        raw = self._persist(raw, view.status, step.status)
        if step.action in STACK_ACTIONS:
            return self._submit(step, pool, view, raw)
        result = self._run(step, pool, view, raw)
        if result is None:
            self._emit(raw, step.events)
            self._observe_metrics(pool, view.status, step.status)
            return Result(requeue_after=_next_pass(view.status, step.status, step.requeue_after))
        status, requeue, events = outcome(view, step, result)
        self._note_backoff(pool.name, step.action, result, requeue)
        if step.action is Action.REMOVE_FINALIZER:
            return Result()
        raw = self._persist_result(raw, step.status, status)
        self._emit(raw, (*step.events, *events))
        self._observe_metrics(pool, step.status, status)
        return Result(requeue_after=_next_pass(view.status, status, requeue))

    def _submit(
        self, step: Step, pool: GangNodePool, view: PoolView, raw: dict[str, Any]
    ) -> Result:
        """Hand a stack step to the executor; it queues the pool again when it ends."""
        operation = Operation(pool.name, step, lambda: self._run_stack_step(step, pool, view))
        if not self._executor.submit(operation):
            # Only after step-down (the pool had nothing pending when this pass looked).
            log.info("pool %s: %s not submitted; not leading", pool.name, step.action.value)
            return Result()
        self._emit(raw, step.events)
        self._observe_metrics(pool, view.status, step.status)
        return Result()

    def _run_stack_step(self, step: Step, pool: GangNodePool, view: PoolView) -> ActionResult:
        result = self._run(step, pool, view, {})  # stack steps never write the object
        assert result is not None
        return result

    def _settle(
        self, raw: dict[str, Any], pool: GangNodePool, view: PoolView, finished: Finished
    ) -> Result:
        """Persist a finished stack operation's result, then let the executor drop it."""
        step = finished.operation.step
        status, requeue, events = settle(view, step, finished.result)
        self._note_backoff(pool.name, step.action, finished.result, requeue)
        log.info(
            "pool %s: stack %s %s",
            pool.name,
            step.action.value,
            "succeeded" if finished.result.ok else f"failed: {finished.result.reason}",
            extra={"pool": pool.name, "phase": status.phase, "action": step.action.value},
        )
        raw = self._persist_result(raw, view.status, status)
        self._executor.consumed(finished)
        self._emit(raw, events)
        self._observe_metrics(pool, view.status, status)
        return Result(requeue_after=_next_pass(view.status, status, requeue))

    def _note_backoff(
        self, pool: str, action: Action, result: ActionResult, requeue: float | None
    ) -> None:
        """Remember how long a failed step waits; any step that succeeds ends the wait."""
        if result.ok:
            self._backoffs.pop(pool, None)
        elif requeue:
            until = self._now() + timedelta(seconds=requeue)
            self._backoffs[pool] = Backoff(action, until)

    def _observe(
        self, pool: GangNodePool, stack_operation: Action | None, settling: bool = False
    ) -> PoolView:
        status = pool.status
        # One paged read of the pool's instances in every state says both what runs and
        # which of the status's IDs EC2 reports gone. An ID absent from it is not gone (EC2
        # lists a fresh launch late); its Node not joining is what the join deadline is for.
        # A pass while the pool's stack operation runs, or the pass that writes its result,
        # acts on no instance (it waits, or saves what the operation did), so the index
        # serves it; the pass after, which may act, lists EC2 if its phase says so.
        if reads_fresh(pool) and stack_operation is None and not settling:
            seen = self._index.read_fresh(pool.name)
        else:
            seen = self._index.read(pool.name)
            if not set(status.instance_ids) <= {v.instance_id for v in seen}:
                # The listing predates the launch, or EC2 listed the launch late: the set is
                # judged on what EC2 says of every member now.
                seen = self._index.read_fresh(pool.name)
        live = [v for v in seen if v.state in LIVE_STATES]
        owned = set(status.instance_ids)
        gone = frozenset(
            v.instance_id for v in seen if v.instance_id in owned and v.state in GONE_STATES
        )
        ready = self._ready_instances(pool.name, status, {v.instance_id for v in live})
        return PoolView(
            name=pool.name,
            uid=pool.metadata.uid or pool.name,
            spec=pool.spec,
            status=status,
            deleting=pool.metadata.deletion_timestamp is not None,
            has_finalizer=c.FINALIZER in pool.metadata.finalizers,
            live=tuple(Instance(v.instance_id, v.managed.group) for v in live),
            gone_ids=gone,
            ready_instance_ids=ready,
            # Asking while the pool's operation runs could wait on the stack's lock.
            # Not asked while `stack_operation` runs (the answer would wait for it); every step
            # that reads it waits for the operation anyway.
            stack_probe=lambda: (
                stack_operation is None and self._stack_holds_what_launch_needs(pool)
            ),
            stack_operation=stack_operation,
            backoff=self._backoffs.get(pool.name),
            now=self._now(),
            join_deadline=timedelta(seconds=self._settings.join_deadline_seconds),
            backoff_base=self._settings.retry_backoff.initial.total_seconds(),
            backoff_max=self._settings.retry_backoff.max.total_seconds(),
            block_release_margin=timedelta(seconds=self._settings.capacity_block_release_seconds),
            idle_stack_ttl=self._settings.stack_operations.idle_stack_ttl,
        )

    def _ready_instances(
        self, pool: str, status: GangNodePoolStatus, live: set[str]
    ) -> frozenset[str]:
        """Instances of the active set whose Node is Ready and labelled pool + group.

        Nodes of the active set that lack the group label get it here: a launch template
        outlives generations and cannot carry one.
        """
        group = status.active_group
        wanted = set(status.instance_ids)
        ready: set[str] = set()
        for node in self._nodes.list_labelled(pool):
            meta, spec = node.get("metadata", {}), node.get("spec", {})
            instance_id = (spec.get("providerID") or "").rsplit("/", 1)[-1]
            labels = meta.get("labels") or {}
            if instance_id not in wanted or instance_id not in live or group is None:
                continue
            if labels.get(c.POOL_LABEL) != pool:
                continue
            if labels.get(c.GROUP_LABEL) != group:
                self._label_node(node, group)
                continue  # counted on the pass the label change triggers
            conditions = (node.get("status") or {}).get("conditions") or []
            if any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions):
                ready.add(instance_id)
        return frozenset(ready)

    def _label_node(self, node: dict[str, Any], group: str) -> None:
        def mutate(obj: dict[str, Any]) -> bool:
            obj.setdefault("metadata", {}).setdefault("labels", {})[c.GROUP_LABEL] = group
            return True

        with contextlib.suppress(KubeNotFound):  # the node left meanwhile
            write_object(self._kube, NODES, node, mutate, c.FIELD_MANAGER)

    # -- writes ---------------------------------------------------------------------------------
    def _persist(
        self, raw: dict[str, Any], before: GangNodePoolStatus, after: GangNodePoolStatus
    ) -> dict[str, Any]:
        if after == before:
            return raw
        wanted = after.to_dict()

        def mutate(status: dict[str, Any]) -> bool:
            status.clear()
            status.update(wanted)
            return True

        written = write_status(self._kube, GANG_NODE_POOLS, raw, mutate, c.FIELD_MANAGER)
        self._own_writes.wrote(raw["metadata"]["name"], raw, written)
        return written

    def _cache_behind_own_write(self, raw: dict[str, Any]) -> bool:
        """Whether the informer still holds a version of the pool this reconciler wrote over.

        The watch event of one write (a launch marker) can queue the pool while the next
        write (the launch's IDs) is still on its way to the cache; a pass planned from the
        older object would launch again (the ClientToken makes EC2 answer with the same
        instances, but it is a call, and a conflict, for nothing) or redo any other step.
        (See `OwnWrites`.)
        """
        name = raw["metadata"]["name"]
        if self._own_writes.cache_behind(name, raw):
            log.debug("pool %s: cache behind our own write; waiting for it", name)
            return True
        return False

    def _persist_result(
        self, raw: dict[str, Any], before: GangNodePoolStatus, after: GangNodePoolStatus
    ) -> dict[str, Any]:
        """Persist what an action left, even if the pool's spec or metadata moved meanwhile.

        The action has happened (a `pulumi up`, a launch); dropping its result on a conflict
        would make the next pass do it again, and a steady writer of labels or annotations
        could keep the pool from ever moving on. This reconciler alone writes status, so if
        the fresh object's status is still the one the action started from, the result is
        applied on top of it; if status itself changed, the conflict stands and the pool is
        planned again.
        """
        try:
            return self._persist(raw, before, after)
        except KubeConflict:
            name = raw["metadata"]["name"]
            fresh = self._kube.get(GANG_NODE_POOLS, name)
            if GangNodePool.from_dict(fresh).status != before:
                raise
            log.info(
                "gangnodepool %s: conflict saving an action's result; re-applied on the fresh one",
                name,
            )
            # The version the action was planned from is written over as well.
            written = self._persist(fresh, before, after)
            self._own_writes.wrote(name, raw, written)
            return written

    def _emit(self, raw: dict[str, Any], events: tuple[Any, ...]) -> None:
        for event in events:
            self._recorder.record(raw, event.type, event.reason, event.message)

    # -- actions --------------------------------------------------------------------------------
    def _run(
        self, step: Step, pool: GangNodePool, view: PoolView, raw: dict[str, Any]
    ) -> ActionResult | None:
        action = step.action
        if action is Action.NONE:
            return None
        try:
            if action is Action.PREPARE_STACK:
                self._prepare(pool)
            elif action is Action.LAUNCH:
                return self._launch(pool, step)
            elif action is Action.RECORD_SET:
                status = step.status
                assert status.active_group is not None
                self._stacks.record_instance_set(
                    pool.name, status.active_group, status.instance_ids
                )
            elif action is Action.RELEASE_SET:
                self._release_set(pool, step)
            elif action is Action.DESTROY_STACK:
                self._destroy(pool)
            elif action is Action.TAG_KEEP_WARM:
                self._engine.set_keep_warm_tag(
                    step.status.instance_ids, step.status.keep_warm_until
                )
            elif action is Action.REMOVE_FINALIZER:
                self._remove_finalizer(raw)
        except CloudError as err:
            log.warning("pool %s: %s failed: %s", pool.name, action.value, err)
            return ActionResult(False, error_kind=err.failure, reason=err.reason, message=str(err))
        except StackError as err:  # its kind decides the wait: config is not retried soon
            log.warning("pool %s: %s failed (%s): %s", pool.name, action.value, err.kind, err)
            return ActionResult(
                False,
                error_kind=err.kind,
                reason=err.reason,
                message=f"{err.message} ({err.kind.value} failure)",
            )
        except Exception as err:  # a bug must not stop the pool's life cycle
            log.exception("pool %s: %s failed", pool.name, action.value)
            return ActionResult(
                False,
                error_kind=FailureKind.RETRYABLE,
                reason=type(err).__name__,
                message=str(err),
            )
        finally:
            # Whatever the result, a listing from before the action may miss what it did
            # (a failed launch may have launched; a failed release may have terminated).
            if action in _CHANGES_INSTANCES:
                self._index.forget(pool.name)
        return ActionResult(True)

    def _stack_holds_what_launch_needs(self, pool: GangNodePool) -> bool:
        """Whether the stack is prepared — and, when the pool is about to launch, prepared
        from today's inputs: a rotated AMI or a changed template field re-prepares once
        before the launch, instead of launching from the stale template."""
        try:
            outputs = self._stacks.outputs(pool.name)
        except StackError as err:
            # Unreadable now (the backend down): assume it holds something, so a release
            # still destroys it and a launch still waits on it; the step that reads it meets
            # the same failure and reports it, with its kind, in the status and events.
            log.warning("pool %s: the stack cannot be read now: %s", pool.name, err)
            return True
        if outputs is None:
            return False
        status = pool.status
        about_to_launch = (
            status.phase == c.PHASE_ACQUIRING
            and status.launch_in_progress is None
            and pool.spec.claim is not None
        )
        if not about_to_launch:
            return True
        try:
            wanted = self._desired_spec(pool)
        except CloudError:
            return True  # the launch meets the same failure and reports it with its kind
        if outputs.spec == wanted:
            return True
        log.info(
            "pool %s: the stack's inputs changed (%s); preparing again before the launch",
            pool.name,
            ", ".join(outputs.spec.differences(wanted)) or "spec",
            extra={"pool": pool.name, "phase": status.phase},
        )
        return False

    def _prepare(self, pool: GangNodePool) -> None:
        self._stacks.prepare(self._desired_spec(pool))

    def _desired_spec(self, pool: GangNodePool) -> PoolSpec:
        """The pool's stack inputs as the world gives them now (AMI, cluster, reservation)."""
        shape = pool.spec.shape()
        cluster, ami = self._cluster_and_ami(shape)
        user_data = Ec2Engine.render_user_data(cluster, pool.name, None)
        return pool_spec_for(
            self._settings,
            shape,
            image_id=ami.ami_id,
            user_data=user_data,
            security_group_ids=cluster.security_group_ids,
            efa_network_cards=self._efa_cards(shape),
            placement_group=shape.placement_group == c.PLACEMENT_CLUSTER,
            # The template targets the reservation as EC2 describes it (fleet mode reads the
            # target and a Capacity Block's market type only from the template).
            capacity_reservation_kind=(
                self._engine.reservation(shape.capacity_reservation_id).kind
                if shape.capacity_reservation_id
                else ""
            ),
        )

    def _efa_cards(self, shape: GangShape) -> tuple[int, ...]:
        """One EFA interface per network card, from EC2's DescribeInstanceTypes answer."""
        if not shape.efa:
            return ()
        info = self._engine.instance_type(shape.instance_type)
        cards = efa_cards(info)
        if not cards:
            raise CloudError(
                ErrorKind.CONFIG,
                None,
                "EfaNotSupported",
                f"{shape.instance_type} does not support EFA (DescribeInstanceTypes says "
                f"EfaSupported=false); remove {c.ANN_EFA} or choose an EFA-capable type such "
                "as p5.48xlarge, p4d.24xlarge or trn1.32xlarge.",
            )
        return cards

    def _cluster_and_ami(self, shape: GangShape) -> tuple[ClusterInfo, AmiChoice]:
        """What both the stack's launch template and a launch need: join data and the AMI."""
        cluster = self._engine.cluster(self._settings.cluster_name)
        ami = self._engine.resolve_ami(
            k8s_version=cluster.version,
            instance_type=shape.instance_type,
            variant=shape.ami_variant,
            explicit_ami_id=shape.ami_id,
        )
        return cluster, ami

    def _launch(self, pool: GangNodePool, step: Step) -> ActionResult:
        marker = step.status.launch_in_progress
        assert marker is not None
        shape = pool.spec.shape()
        cluster, ami = self._cluster_and_ami(shape)
        subnets = self._engine.plan_subnets(
            mode=shape.mode,
            cluster=cluster,
            explicit_subnet_ids=shape.subnets,
            availability_zones=shape.availability_zones,
        )
        outputs = self._stacks.outputs(pool.name)
        template_id = outputs.launch_template_id if outputs else None
        profile = outputs.spec.instance_profile_name if outputs else None
        spec = LaunchSpec(
            pool_name=pool.name,
            pool_uid=pool.metadata.uid or pool.name,
            acquire_generation=step.status.acquire_generation,
            cluster_name=self._settings.cluster_name,
            count=shape.count,
            instance_type=shape.instance_type,
            mode=shape.mode,
            subnets=subnets,
            ami_id=ami.ami_id,
            instance_profile=InstanceProfileRef(name=profile) if profile else None,
            security_group_ids=cluster.security_group_ids,
            user_data=Ec2Engine.render_user_data(cluster, pool.name, marker.group),
            max_lifetime=shape.max_lifetime,
            # Only the id: the engine reads kind and zone from EC2's record before launching.
            capacity_reservation=(
                CapacityReservationRef(shape.capacity_reservation_id)
                if shape.capacity_reservation_id
                else None
            ),
            efa=shape.efa,
            placement_group_name=outputs.placement_group_name if outputs else None,
            launch_template=LaunchTemplateRef(template_id) if template_id else None,
            explicit_placement=shape.availability_zones or shape.subnets,
            block_release_margin=timedelta(seconds=self._settings.capacity_block_release_seconds),
        )
        self._metrics.launch_attempts.labels(mode=shape.mode).inc()
        try:
            launched = self._engine.acquire(spec)
        except ReservationNotActive as err:
            self._metrics.acquisitions.labels(mode=shape.mode, result="not-active").inc()
            starts = {EXTRA_STARTS_AT: err.starts_at.isoformat()} if err.starts_at else {}
            return ActionResult(
                False,
                error_kind=FailureKind.NOT_ACTIVE,
                reason=err.reason,
                message=str(err),
                extra=starts,
            )
        except CloudError as err:
            failure = err.failure
            shortfall = failure in (FailureKind.CAPACITY, FailureKind.MALFORMED)
            result = "shortfall" if shortfall else failure
            self._metrics.acquisitions.labels(mode=shape.mode, result=result).inc()
            if shortfall:
                self._metrics.shortfalls.labels(mode=shape.mode).inc()
            return ActionResult(False, error_kind=failure, reason=err.reason, message=str(err))
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
        self._metrics.acquisitions.labels(mode=shape.mode, result=result).inc()
        ends = launched.capacity_block_ends_at
        return ActionResult(
            True,
            instance_ids=launched.instance_ids,
            extra={EXTRA_BLOCK_ENDS_AT: ends.isoformat()} if ends else {},
        )

    def _release_set(self, pool: GangNodePool, step: Step) -> None:
        active = set(pool.status.instance_ids)
        # A stack that is gone cannot release its record: EC2 does it below, by the IDs.
        if active and active <= set(step.release_ids) and self._stacks.is_prepared(pool.name):
            # The stack's instance-set delete terminates the set and cleans its ENIs.
            self._stacks.remove_instance_set(pool.name)
        leftover = [
            v.instance_id
            for v in self._engine.find_managed(self._settings.cluster_name, pool.name)
            if v.instance_id in set(step.release_ids)
        ]
        if leftover:
            self._engine.release(leftover)

    def _destroy(self, pool: GangNodePool) -> None:
        cluster = self._settings.cluster_name
        if self._stacks.is_prepared(pool.name):
            self._stacks.destroy(pool.name)
        # Whatever no stack holds (its state lost, or gone from the backend while this
        # controller still believed in it) is found by tag and removed, never skipped in
        # silence: instances first, since a placement group in use cannot be deleted.
        leftover = self._engine.find_managed(cluster, pool.name)
        if leftover:
            self._engine.release([v.instance_id for v in leftover])
        orphans = self._engine.leftovers(cluster, pool.name)
        if orphans:
            log.warning(
                "pool %s: no stack holds what its tags name; deleting %s",
                pool.name,
                ", ".join(f"{o.kind} {o.name}" for o in orphans),
            )
            self._engine.delete_leftovers(orphans)

    def _remove_finalizer(self, raw: dict[str, Any]) -> None:
        def mutate(obj: dict[str, Any]) -> bool:
            finalizers = obj.setdefault("metadata", {}).get("finalizers") or []
            if c.FINALIZER not in finalizers:
                return False
            obj["metadata"]["finalizers"] = [f for f in finalizers if f != c.FINALIZER]
            return True

        # Gone already: an earlier pass removed the finalizer and the cache had not caught up.
        with contextlib.suppress(KubeNotFound):
            write_object(self._kube, GANG_NODE_POOLS, raw, mutate, c.FIELD_MANAGER)

    def _observe_metrics(
        self, pool: GangNodePool, before: GangNodePoolStatus, after: GangNodePoolStatus
    ) -> None:
        if before.phase != after.phase and after.phase == c.PHASE_SATISFIED:
            claim = pool.spec.claim
            if claim is not None:
                waited = (self._now() - claim.claimed_at).total_seconds()
                self._metrics.time_to_ready.labels(mode=pool.spec.mode).observe(max(waited, 0.0))
