"""What the Workload reconciler should do for one Workload: a pure function and its result.

`decide()` reads a Workload, its owner's labels and annotations (the object the gang was
submitted as), the GangClass of its queue's check, the pool the owner names (or its class
derives) and the settings, and answers what the pool's claim (and, for a new or idle pool,
its shape) should become and what our check on the Workload should say. No I/O: the
reconciler gathers the inputs and writes the answers; a table of tests pins every branch.

The rules, in order:
1. A Workload that is gone, finished, evicted, deactivated, rejected, without quota, or
   whose check we set to Retry holds no claim.
1a. A Workload whose owner is of no supported kind (`owners.OWNER_KINDS`), or that has no
   owner, is Rejected once, naming the supported kinds and its own; rule 1 keeps it so.
2. While the check's GangClass is missing or unusable, Pending naming it. An owner whose
   shape (read through the class: `api.gang_class`) does not parse is Rejected with the
   parser's sentences; so is one whose pods could never fit one node of its type, or a
   type EC2 does not know (`workload.fit`: while EC2 does not answer, a new claim waits).
3. No pool yet: create it with this shape and this claim, belonging to the Workload's
   namespace.
3a. A pool of another namespace, not shared with this one (`tenancy.sharedPools`):
   Rejected, naming the pool, its namespace and the fix; a claim it somehow holds (the
   setting changed) is released. Nothing is launched for it, and warm nodes never cross
   namespaces unless the installer shares the pool. A pool from before pools belonged to a
   namespace (no `ownerNamespace`) is bound to the namespace of its next claimant — or of
   its current one, on that Workload's next pass — except that warm nodes it holds
   unclaimed were last used by a namespace nobody recorded: a claimant gets Retry until
   they are released at the end of their keep-warm window.
4. A Capacity Block (as the pool last read it from EC2) with no time left for the
   Workload's gang: Rejected, naming the block's end and id, so Kueue frees the quota
   instead of holding it for a block that is over; an admitted gang released before its
   block's end is told the release was planned (`block_window` says when a block is over).
   A set already on the block, or warm and whole, runs on until the planned release.
5. Different shape: Rejected naming the fields — unless the pool is Idle with no
   instances, where nothing can be disturbed and the new shape simply replaces the old.
   Checked before the busy rule: a Retry could only end in this Rejected later.
6. Claimed by another live Workload: Retry (Kueue releases our quota and requeues us).
   A claim whose Workload no longer exists is stale and is replaced.
7. Our claim: Ready only when the pool reports Satisfied with exactly N Ready nodes; Retry
   after `acquireAttemptsBeforeRetry` consecutive shortfalls (or
   `unknownErrorAttemptsBeforeRetry` launches answered with an unknown AWS code), or when an
   admitted gang loses its nodes; Pending with the pool's progress otherwise. A claim on a
   whole warm set gets no progress message, when made or before the pool answers it:
   Satisfied comes in one pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from provisioner.api import constants as c
from provisioner.api.constants import CheckState, Phase
from provisioner.api.gang_class import ClassedShape, GangClass, read_gang_shape
from provisioner.api.gangnodepool import Claim, GangNodePool, GangNodePoolSpec, QueuedWorkload
from provisioner.api.meta import ObjectMeta
from provisioner.api.owners import unsupported_owner_message
from provisioner.api.pod_requests import ResourceAmounts, format_amount
from provisioner.api.settings import Settings
from provisioner.api.shape import (
    GangShape,
    GangShapeError,
    describe_shape_conflict,
    shape_differences,
)
from provisioner.api.tenancy import foreign_pool_problem
from provisioner.api.workload import Workload, gang_pod_set_updates
from provisioner.controllers.workload.check_update import CheckUpdate
from provisioner.controllers.workload.claim_reads import (
    answered_its_spec,
    block_refusal,
    holds_claim,
    purchase_refusal,
    satisfied,
    warm_set_whole,
)
from provisioner.controllers.workload.fit import (
    EC2_RETRY_SECONDS,
    InstanceTypeAnswer,
    gang_requests,
    pod_fit_verdict,
)
from provisioner.controllers.workload.progress import progress, unknown_error_retry


class PoolChange(Enum):
    NONE = "none"
    CREATE = "create"  # a new pool with `shape` and `claim`
    CLAIM = "claim"  # set `claim` (and `shape`, reshaping an idle, empty pool)
    RELEASE = "release"  # clear the claim this Workload holds
    BIND = "bind"  # set `owner_namespace` of a pool from before pools had one


@dataclass(frozen=True)
class WorkloadDecision:
    pool_change: PoolChange = PoolChange.NONE
    pool_name: str | None = None
    shape: GangShape | None = None
    claim: Claim | None = None
    check: CheckUpdate | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The claim takes a whole warm set: no launch, the pool is Satisfied in one pass.
    reuses_warm_set: bool = False
    # With CREATE, CLAIM or BIND: the namespace the pool is to belong to, when it belongs
    # to none yet. Never a change of owner.
    owner_namespace: str | None = None
    # The Workload's owner is of a supported kind but not visible yet: look again shortly.
    owner_not_visible: bool = False
    # With CREATE or CLAIM: what one pod of the gang requests, resource to quantity, for
    # the pool's usable-node check (`GangNodePoolSpec.pod_requests`).
    pod_requests: dict[str, str] | None = None
    # Look at the Workload again after this many seconds (EC2 did not answer).
    retry_after: float | None = None
    read: ClassedShape | None = None  # with CREATE or CLAIM: who decided each field

    def new_pool(self, claim: Claim | None, queued: QueuedWorkload | None = None) -> GangNodePool:
        """The pool a CREATE makes, its finalizer set: this decision's shape, namespace, pod
        requests and provenance, held by `claim` (None ahead of quota, `queued` for it)."""
        assert self.shape is not None and self.pool_name is not None
        spec = GangNodePoolSpec.of(
            self.shape, claim, self.owner_namespace, self.pod_requests, self.read
        )
        return GangNodePool(
            metadata=ObjectMeta(name=self.pool_name, finalizers=(c.FINALIZER,)),
            spec=spec.model_copy(update={"queued": queued}) if queued else spec,
        )


@dataclass(frozen=True)
class WorkloadInputs:
    """Everything `decide` reads. `workload` None means it was deleted."""

    workload: Workload | None
    check_name: str | None
    owner_labels: Mapping[str, str] | None
    owner_annotations: Mapping[str, str] | None
    pool: GangNodePool | None
    claimant_exists: bool  # the pool's current claimant Workload is still in the cache
    settings: Settings
    now: datetime
    # None: not asked (the owner names no instance type, or a test leaves the check out).
    instance_type: InstanceTypeAnswer | None = None
    # The owner's kind (Job, JobSet, MPIJob...), so a count problem names what the user applied.
    owner_kind: str = "Job"
    # The class our check names (None: the reference's Job-only reading), or why it cannot serve.
    gang_class: GangClass | None = None
    class_problem: str | None = None
    # Decide as if Kueue had reserved quota and put our check on the Workload: what its
    # claim would be, for the stack prepared while it waits (`prepare_ahead`).
    ahead_of_quota: bool = False


def drops_claim(
    workload: Workload | None, check_name: str | None, ahead_of_quota: bool = False
) -> str | None:
    """Why this Workload may hold no claim, or None when it may (`ahead_of_quota`: would,
    once Kueue reserves its quota and puts our check on it)."""
    if workload is None:
        return "the Workload was deleted"
    if workload.metadata.deletion_timestamp is not None:
        return "the Workload is being deleted"
    if workload.is_true(c.WL_FINISHED):
        return "the Workload finished"
    if workload.is_true(c.WL_EVICTED):
        return "the Workload was evicted"
    if workload.spec.active is False:
        return "the Workload was deactivated"
    if ahead_of_quota:
        return None
    if not workload.is_true(c.WL_QUOTA_RESERVED):
        return "the Workload holds no quota"
    ours = workload.check(check_name) if check_name else None
    if ours is None:
        return "the Workload does not carry our admission check"
    if ours.state == CheckState.REJECTED:
        return "our admission check was rejected"
    if ours.state == CheckState.RETRY:
        # We handed the quota back; Kueue requeues the Workload and resets the check to
        # Pending before it may claim again.
        return "our admission check asked Kueue to retry"
    return None


def _claim_for(workload: Workload, now: datetime) -> Claim:
    meta = workload.metadata
    return Claim(namespace=meta.namespace or "", name=meta.name, uid=meta.uid or "", claimed_at=now)


def decide(inputs: WorkloadInputs) -> WorkloadDecision:
    workload, pool = inputs.workload, inputs.pool
    why_not = drops_claim(workload, inputs.check_name, inputs.ahead_of_quota)
    if why_not is not None:
        if workload is not None and pool is not None and holds_claim(pool, workload):
            return WorkloadDecision(PoolChange.RELEASE, pool.name, notes=(why_not,))
        return WorkloadDecision(notes=(why_not,))
    assert workload is not None and inputs.check_name is not None
    meta = workload.metadata
    unsupported = unsupported_owner_message(f"{meta.namespace}/{meta.name}", meta.owner_references)
    if unsupported is not None:
        rejected = CheckUpdate(
            CheckState.REJECTED, unsupported, reason=c.EventReason.UNSUPPORTED_OWNER_KIND
        )
        if pool is not None and holds_claim(pool, workload):
            return WorkloadDecision(PoolChange.RELEASE, pool.name, check=rejected)
        return WorkloadDecision(check=rejected, notes=("its owner is of no supported kind",))
    if inputs.owner_labels is None or inputs.owner_annotations is None:
        return WorkloadDecision(notes=("the owner is not visible yet",), owner_not_visible=True)

    if inputs.class_problem is not None:  # the platform team's fix, not the Job's
        wait = CheckUpdate(CheckState.PENDING, inputs.class_problem, reason=c.EventReason.WAITING)
        return WorkloadDecision(check=wait, notes=("its GangClass",), retry_after=30.0)
    try:
        read = read_gang_shape(
            inputs.owner_labels,
            inputs.owner_annotations,
            workload.total_pod_count,
            inputs.settings,
            kind=inputs.owner_kind,
            gang_class=inputs.gang_class,
            namespace=workload.metadata.namespace or "",
        )
    except GangShapeError as err:
        rejected = CheckUpdate(CheckState.REJECTED, str(err), reason=err.reason)
        if pool is not None and holds_claim(pool, workload):
            return WorkloadDecision(PoolChange.RELEASE, pool.name, check=rejected)
        return WorkloadDecision(check=rejected)
    shape = read.shape
    requests = gang_requests(workload)
    unfit = _fit_refusal(workload, pool, shape, requests, inputs)
    if unfit is not None:
        return unfit
    shown = {name: format_amount(name, amount) for name, amount in requests.items()}

    namespace = workload.metadata.namespace or ""
    if pool is None:
        return WorkloadDecision(
            PoolChange.CREATE,
            shape.pool,
            shape=shape,
            claim=_claim_for(workload, inputs.now),
            check=CheckUpdate(
                CheckState.PENDING,
                f"Pool {shape.pool} created; acquiring {shape.count}x {shape.instance_type}.",
                reason=c.EventReason.POOL_CREATED,
            ),
            owner_namespace=namespace,
            pod_requests=shown,
            read=read,
        )

    tenancy = _tenancy_decision(workload, pool, inputs)
    if tenancy is not None:
        return tenancy
    # A pool from before pools had an owner is bound with this Workload's claim.
    bind = namespace if pool.spec.owner_namespace is None else None

    refused = block_refusal(
        workload, pool, shape, inputs.settings, inputs.now, inputs.check_name
    ) or purchase_refusal(workload, pool)
    if refused is not None:
        if holds_claim(pool, workload):
            return WorkloadDecision(
                PoolChange.RELEASE, pool.name, check=refused, notes=("its Capacity Block is over",)
            )
        return WorkloadDecision(check=refused)

    claim = pool.spec.claim
    if (
        not holds_claim(pool, workload)
        and shape_differences(pool.spec.shape(), shape)
        and not _idle_and_empty(pool, inputs.now)
    ):
        return WorkloadDecision(
            check=CheckUpdate(
                CheckState.REJECTED,
                describe_shape_conflict(pool.spec.shape(), shape),
                reason=c.EventReason.SHAPE_CONFLICT,
            )
        )
    if claim is not None and claim.uid != workload.metadata.uid and inputs.claimant_exists:
        return WorkloadDecision(
            check=CheckUpdate(
                CheckState.RETRY,
                f"Pool {pool.name} is in use by Workload {claim.namespace}/{claim.name}; "
                "Kueue will retry this Workload after it releases the pool.",
                reason=c.EventReason.POOL_BUSY,
            )
        )

    if not holds_claim(pool, workload):
        stale = (f"replaced a stale claim by {claim.namespace}/{claim.name}",) if claim else ()
        claimed: CheckUpdate | None = CheckUpdate(
            CheckState.PENDING,
            f"Pool {pool.name} claimed; {progress(pool)}",
            reason=c.EventReason.POOL_CLAIMED,
        )
        current = workload.check(inputs.check_name)
        if warm_set_whole(pool) and current is not None and current.state == CheckState.PENDING:
            # The pool answers a claim on a whole warm set with Satisfied in one pass, and
            # that brings the Ready write. A progress message written first would hold the
            # Ready write behind it (one Workload write at a time), for a message that
            # stands for milliseconds; if the pool turns out not to be whole, its status
            # change brings the pass that says why.
            claimed = None
        return WorkloadDecision(
            PoolChange.CLAIM,
            pool.name,
            shape=shape,
            claim=_claim_for(workload, inputs.now),
            check=claimed,
            notes=stale,
            reuses_warm_set=warm_set_whole(pool),
            owner_namespace=bind,
            pod_requests=shown,
            read=read,
        )

    check = _check_for_claimant(workload, pool, inputs)
    if bind is not None:
        return WorkloadDecision(PoolChange.BIND, pool.name, check=check, owner_namespace=bind)
    return WorkloadDecision(check=check)


def _fit_refusal(
    workload: Workload,
    pool: GangNodePool | None,
    shape: GangShape,
    requests: ResourceAmounts,
    inputs: WorkloadInputs,
) -> WorkloadDecision | None:
    """Rejected when one pod of the gang cannot fit one node of its instance type, or EC2
    knows no such type; Pending while EC2 does not answer for a Workload that holds no
    claim yet; None when the gang may go on."""
    holds = pool is not None and holds_claim(pool, workload)
    problems, waiting = pod_fit_verdict(inputs.instance_type, shape, requests)
    if waiting is not None and not holds:
        return WorkloadDecision(
            check=CheckUpdate(c.CheckState.PENDING, waiting, reason=c.EventReason.WAITING),
            notes=("EC2 did not describe the instance type",),
            retry_after=EC2_RETRY_SECONDS,
        )
    if not problems:
        return None
    err = GangShapeError(problems)
    rejected = CheckUpdate(c.CheckState.REJECTED, str(err), reason=err.reason)
    if holds:
        assert pool is not None
        return WorkloadDecision(PoolChange.RELEASE, pool.name, check=rejected)
    return WorkloadDecision(check=rejected)


def _tenancy_decision(
    workload: Workload, pool: GangNodePool, inputs: WorkloadInputs
) -> WorkloadDecision | None:
    """Rejected for a pool of another namespace not shared with this one; Retry for warm
    nodes of a pool from before ownership, whose last namespace is unknown; None when the
    Workload may go on to claim the pool."""
    namespace = workload.metadata.namespace or ""
    owner = pool.spec.owner_namespace
    problem = foreign_pool_problem(pool.name, owner, namespace, inputs.settings.tenancy)
    if problem is not None:
        rejected = CheckUpdate(CheckState.REJECTED, problem.message, reason=problem.reason)
        if holds_claim(pool, workload):
            return WorkloadDecision(
                PoolChange.RELEASE,
                pool.name,
                check=rejected,
                notes=(f"the pool belongs to namespace {owner}",),
            )
        return WorkloadDecision(check=rejected, notes=(f"the pool belongs to namespace {owner}",))
    status = pool.status
    unclaimed = pool.spec.claim is None or not inputs.claimant_exists
    if owner is None and unclaimed and status.instance_ids and not holds_claim(pool, workload):
        until = status.keep_warm_until
        when = f" at {until:%Y-%m-%dT%H:%M:%SZ}" if until is not None else ""
        return WorkloadDecision(
            check=CheckUpdate(
                CheckState.RETRY,
                f"Pool {pool.name} was made before pools belonged to a namespace and holds "
                f"{len(status.instance_ids)} nodes whose last namespace was not recorded; "
                f"they are not handed to namespace {namespace}. They are released when "
                f"their keep-warm window ends{when}; Kueue will retry this Workload, and "
                f"its claim then binds the pool to namespace {namespace}.",
                reason=c.EventReason.WARM_NODES_OF_UNKNOWN_NAMESPACE,
            )
        )
    return None


def _idle_and_empty(pool: GangNodePool, now: datetime) -> bool:
    block = pool.status.block_purchase  # a bought block waits for a gang of its own shape
    held = block is not None and block.reservation_id is not None and now < block.ends_at
    return pool.status.phase == Phase.IDLE and not pool.status.instance_ids and not held


def _check_for_claimant(
    workload: Workload, pool: GangNodePool, inputs: WorkloadInputs
) -> CheckUpdate | None:
    status = pool.status
    current = workload.check(inputs.check_name or "")
    if warm_set_whole(pool) and current is not None and current.state == CheckState.PENDING:
        # Our claim on a whole warm set, before the pool's pass answers it (the pass our
        # claim's own write brings, say): nothing to report that the pool's Satisfied, one
        # pass away, will not replace. As at the claim itself, no progress message.
        return None
    if satisfied(pool):
        ready_now = current is not None and current.state == CheckState.READY
        if not ready_now and not answered_its_spec(pool):
            # Satisfied for the spec before this claim (the last claimant's gang, released a
            # moment ago): the pool has not yet seen this claim, so it has confirmed nothing
            # for it. Its pass on the claim writes a status, whose event brings this back.
            return None
        assert status.active_group is not None
        return CheckUpdate(
            CheckState.READY,
            f"{pool.spec.count}/{pool.spec.count} nodes of pool {pool.name} "
            f"(group {status.active_group}) are Ready.",
            pod_set_updates=gang_pod_set_updates(workload, pool.name, status.active_group),
            reason=c.EventReason.GANG_READY,
        )
    if current is not None and current.state == CheckState.READY:
        # Say why when the pool knows (a Capacity Block ending, a node lost).
        error = status.last_error
        why = f" {error.message}" if error is not None else ""
        if error is not None and error.reason == c.EventReason.CAPACITY_BLOCK_ENDING:
            # Planned, and not lost; a block the pool has no record of (a status from before
            # the record) is refused once the Workload comes back.
            return CheckUpdate(
                CheckState.RETRY,
                f"Pool {pool.name} released the gang as planned before its Capacity Block's "
                f"end; the Workload is requeued.{why}",
                reason=c.EventReason.CAPACITY_BLOCK_ENDING,
            )
        return CheckUpdate(
            CheckState.RETRY,
            f"Pool {pool.name} lost its gang ({status.ready_nodes}/{pool.spec.count} Ready, "
            f"phase {status.phase}); the Workload is requeued to run on a whole gang.{why}",
            reason=c.EventReason.GANG_LOST,
        )
    limit = inputs.settings.acquire_attempts_before_retry
    if status.consecutive_shortfalls >= limit:
        return CheckUpdate(
            CheckState.RETRY,
            f"EC2 had no capacity for {pool.spec.count}x {pool.spec.instance_type} in "
            f"{status.consecutive_shortfalls} consecutive attempts; nothing was left running. "
            "Kueue releases the quota and retries. Consider a capacity reservation "
            f"({c.ANN_CAPACITY_RESERVATION_ID}).",
            reason=c.EventReason.CAPACITY_SHORTFALL,
        )
    if status.consecutive_unknown_errors >= inputs.settings.unknown_error_attempts_before_retry:
        return CheckUpdate(
            CheckState.RETRY, unknown_error_retry(pool), reason=c.EventReason.UNKNOWN_AWS_ERROR
        )
    return CheckUpdate(CheckState.PENDING, progress(pool), reason=c.EventReason.WAITING)
