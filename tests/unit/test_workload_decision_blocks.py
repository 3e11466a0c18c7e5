"""The Workload decision on a Capacity Block with little or no time left, as a table.

A block's gangs are released `capacityBlockReleaseSeconds` (35 min here) before its end, and
a new gang needs up to `joinDeadlineSeconds` (10 min) to start: from 45 min before the end
no gang is launched on it, and from 35 min nothing runs on it. A Workload its block can no
longer serve is Rejected (Kueue frees its quota) naming the block and its end; a set already
on the block runs on until the planned release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.controllers.workload.decision import PoolChange, WorkloadInputs, decide
from tests.support.pools import claim, pool_spec
from tests.support.pools import pool as pool_body
from tests.unit.test_workload_decision import (
    ANNOTATIONS,
    CHECK,
    LABELS,
    NOW,
    SETTINGS,
    workload,
)

BLOCK = "cr-0fedcba9876543210"
OTHER_BLOCK = "cr-0123456789abcdef0"
ON_BLOCK = {**ANNOTATIONS, c.ANN_CAPACITY_RESERVATION_ID: BLOCK}


def ends_in(minutes: int) -> str:
    return (NOW + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def block_pool(
    *,
    ends: str | None,
    record: bool = True,
    block: str = BLOCK,
    holder: str | None = "uid-1",
    phase: Phase = Phase.ACQUIRING,
    instances: int = 0,
    ready: int = 0,
) -> GangNodePool:
    status: dict[str, Any] = {
        "phase": phase,
        "instanceIds": [f"i-{n:017x}" for n in range(instances)],
        "readyNodes": ready,
    }
    if instances:
        status["activeGroup"] = "g2"
    if ends is not None and record:
        status["capacityBlock"] = {"reservationId": block, "endsAt": ends}
    elif ends is not None:
        # A status written before the record existed: only the active set's block end.
        status["capacityBlockEndsAt"] = ends
    held = claim(name="wl-uid-1", uid=holder, claimed_at="2026-11-29T11:00:00Z") if holder else None
    spec = pool_spec(
        instance_type="p4d.24xlarge",
        capacity_reservation_id=block,
        claim=held,
        owner_namespace="ml",
    )
    return GangNodePool.model_validate(pool_body(uid="pool-uid", spec=spec, status=status))


@dataclass(frozen=True)
class Row:
    name: str
    pool: GangNodePool
    check_state: str = c.CheckState.PENDING
    state: str | None = c.CheckState.REJECTED  # None: no check write
    change: PoolChange = PoolChange.NONE
    says: tuple[str, ...] = ()
    not_says: tuple[str, ...] = field(default=("lost its gang",))


ROWS = [
    Row(
        "requeued after its block's set was released: rejected, the end and id named",
        block_pool(ends=ends_in(30), holder=None),
        says=(BLOCK, ends_in(30), "no gang can start on it any more", "Nothing was launched"),
    ),
    Row(
        "requeued and claiming again after the release: rejected and the claim dropped",
        block_pool(ends=ends_in(30)),
        change=PoolChange.RELEASE,
        says=(BLOCK, ends_in(30)),
    ),
    Row(
        "a block ended long ago",
        block_pool(ends=ends_in(-120), holder=None),
        says=(BLOCK, ends_in(-120)),
    ),
    Row(
        "inside the start time before the release: a new gang is refused",
        block_pool(ends=ends_in(40)),
        change=PoolChange.RELEASE,
        says=(BLOCK, ends_in(40), "joinDeadlineSeconds", "10m0s"),
    ),
    Row(
        "the gang released as planned: rejected, saying it was planned",
        block_pool(ends=ends_in(34), phase=Phase.SATISFIED, instances=4, ready=4),
        check_state=c.CheckState.READY,
        change=PoolChange.RELEASE,
        says=("as planned", BLOCK, ends_in(34), "35m0s"),
    ),
    Row(
        "the planned release, read from a status written before the record",
        block_pool(ends=ends_in(34), record=False, phase=Phase.SATISFIED, instances=4, ready=4),
        check_state=c.CheckState.READY,
        change=PoolChange.RELEASE,
        says=("as planned", BLOCK),
    ),
    Row(
        "a set already on the block runs until its planned release",
        block_pool(ends=ends_in(40), phase=Phase.SATISFIED, instances=4, ready=4),
        check_state=c.CheckState.READY,
        state=c.CheckState.READY,
    ),
    Row(
        "a set still joining on the block is the pool's to judge",
        block_pool(ends=ends_in(40), phase=Phase.JOINING, instances=4, ready=2),
        state=c.CheckState.PENDING,
    ),
    Row(
        "a whole warm set on the block is reused without a launch",
        block_pool(ends=ends_in(40), holder=None, phase=Phase.KEEP_WARM, instances=4, ready=4),
        state=None,
        change=PoolChange.CLAIM,
    ),
    Row(
        "a block with time for a gang is claimed",
        block_pool(ends=ends_in(46), holder=None),
        state=c.CheckState.PENDING,
        change=PoolChange.CLAIM,
    ),
    Row(
        "a record of another block says nothing about this one",
        block_pool(ends=ends_in(30), holder=None, block=OTHER_BLOCK),
        state=c.CheckState.REJECTED,  # the shapes differ on a pool that is not idle
        says=("capacity-reservation-id",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_a_workload_on_a_block_with_no_time_left(row: Row) -> None:
    decision = decide(
        WorkloadInputs(
            workload=workload(check_state=row.check_state),
            check_name=CHECK,
            owner_labels=LABELS,
            owner_annotations=ON_BLOCK,
            pool=row.pool,
            claimant_exists=True,
            settings=SETTINGS,
            now=NOW,
        )
    )
    assert decision.pool_change is row.change
    if row.state is None:
        assert decision.check is None
        return
    assert decision.check is not None and decision.check.state == row.state, decision.check
    for text in row.says:
        assert text in decision.check.message
    for text in row.not_says:
        assert text not in decision.check.message
    if row.state == c.CheckState.REJECTED and not row.says[0].startswith("capacity"):
        assert decision.check.reason == c.EventReason.CAPACITY_BLOCK_ENDED
