"""What a pool's status says about a claim: whether a Workload holds the pool, whether its
set is whole (warm or Satisfied), and whether the Capacity Block it names or the pool
bought can still serve the claimant (rule 4 of `decision`, and a purchase the pool refused).
Pure: read by `decision.decide`.
"""

from __future__ import annotations

from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.constants import CheckState, Phase
from provisioner.api.gangnodepool import CapacityBlock, GangNodePool
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape
from provisioner.api.workload import Workload
from provisioner.controllers.pool.block_window import BlockWindow
from provisioner.controllers.workload.check_update import CheckUpdate

__all__ = [
    "answered_its_spec",
    "block_refusal",
    "holds_claim",
    "purchase_refusal",
    "satisfied",
    "warm_set_whole",
]


def holds_claim(pool: GangNodePool, workload: Workload) -> bool:
    claim = pool.spec.claim
    return claim is not None and claim.uid == workload.metadata.uid


def _whole_set_in(pool: GangNodePool, phase: str) -> bool:
    """In `phase` with N instances and N Ready nodes, as the pool last wrote its status,
    and not being released (a set whose release has begun is never whole again)."""
    status, n = pool.status, pool.spec.count
    return (
        status.phase == phase
        and status.active_group is not None
        and len(status.instance_ids) == n
        and status.ready_nodes == n
        and status.release_in_progress is None
    )


def answered_its_spec(pool: GangNodePool) -> bool:
    """Whether the pool's status answers its spec as it is now (the claim included): a
    status written for an older generation says nothing of the current claim."""
    generation = pool.metadata.generation
    return generation is None or pool.status.observed_generation >= generation


def warm_set_whole(pool: GangNodePool) -> bool:
    return _whole_set_in(pool, Phase.KEEP_WARM)


def satisfied(pool: GangNodePool) -> bool:
    return _whole_set_in(pool, Phase.SATISFIED)


def _block_window(pool: GangNodePool, shape: GangShape, settings: Settings) -> BlockWindow | None:
    """The Capacity Block the Workload names, as the pool last read it from EC2 (its record,
    or the end of the block its active set runs on, for a status written before the record
    existed); None when the Workload names no block the pool knows."""
    rid = shape.capacity_reservation_id
    if not rid:
        return None
    status = pool.status
    block = status.capacity_block
    ends_at = status.capacity_block_ends_at
    if block is None and ends_at is not None and pool.spec.capacity_reservation_id == rid:
        block = CapacityBlock(reservation_id=rid, ends_at=ends_at)
    if block is None or block.reservation_id != rid:
        return None
    return BlockWindow(
        block,
        release_margin=settings.capacity_block_release,
        start_time=settings.join_deadline,
    )


def block_refusal(
    workload: Workload,
    pool: GangNodePool,
    shape: GangShape,
    settings: Settings,
    now: datetime,
    check_name: str | None,
) -> CheckUpdate | None:
    """Rejected when the Workload's block can no longer serve it; None otherwise.

    Until the block's planned release, a set already on it (launched, or on its way, for
    this Workload; or warm and whole, reused without a launch) runs on: only a gang that
    would have to be launched is refused. From the release on, nothing runs on the block.
    """
    window = _block_window(pool, shape, settings)
    if window is None or not window.too_late_to_start(now):
        return None
    status = pool.status
    holds = holds_claim(pool, workload)
    if not window.over(now):
        on_its_way = bool(status.instance_ids) or status.launch_in_progress is not None
        if (holds and on_its_way) or warm_set_whole(pool):
            return None
    current = workload.check(check_name or "")
    if holds and current is not None and current.state == CheckState.READY:
        message = window.planned_release(pool.name)
    else:
        message = window.refusal(now, shape.count)
    return CheckUpdate(CheckState.REJECTED, message, reason=c.EventReason.CAPACITY_BLOCK_ENDED)


def purchase_refusal(workload: Workload, pool: GangNodePool) -> CheckUpdate | None:
    """Rejected when the pool buys no Capacity Block for this claim (none under the cap
    before the latest start; or purchases whose answers were lost), as the pool recorded."""
    refusal = pool.status.block_refusal
    if refusal is None or refusal.claim_uid != workload.metadata.uid:
        return None
    if not holds_claim(pool, workload):
        return None
    error = pool.status.last_error
    reason = error.reason if error is not None else c.EventReason.NO_AFFORDABLE_CAPACITY_BLOCK
    return CheckUpdate(CheckState.REJECTED, refusal.message, reason=reason)
