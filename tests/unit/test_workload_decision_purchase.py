"""The Workload decision around a bought Capacity Block: a claim the pool buys nothing for
is rejected with the pool's words (the earliest offering and its fee), only for that claim;
and a pool that holds a bought block with time left keeps its shape for the next gang."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.gangnodepool import BlockPurchase, BlockRefusal, GangNodePool
from provisioner.controllers.workload.decision import PoolChange, decide
from tests.unit.test_workload_decision import NOW, inputs, pool, workload

pytestmark = pytest.mark.unit


def with_status(gnp: GangNodePool, **status: Any) -> GangNodePool:
    return gnp.model_copy(update={"status": gnp.status.model_copy(update=status)})


def bought(ends_in: timedelta) -> BlockPurchase:
    return BlockPurchase(
        intent="pool-uid-1",
        offering_id="cb-1",
        instance_type="p5.48xlarge",
        instance_count=4,
        availability_zone="us-east-1a",
        upfront_fee=Decimal(700),
        starts_at=NOW - timedelta(hours=1),
        ends_at=NOW + ends_in,
        intended_at=NOW - timedelta(hours=2),
        bought_for="ml/wl-old",
        reservation_id="cr-0123456789abcdef0",
    )


@pytest.mark.parametrize(
    ("ends_in", "change", "state"),
    [
        (timedelta(hours=5), PoolChange.NONE, c.CheckState.REJECTED),
        (timedelta(hours=-1), PoolChange.CLAIM, c.CheckState.PENDING),
    ],
    ids=["a block with time left keeps the pool's shape", "an ended block does not"],
)
def test_an_idle_pool_holding_a_bought_block_keeps_its_shape(
    ends_in: timedelta, change: PoolChange, state: str
) -> None:
    held = with_status(pool(instance_type="p5.48xlarge"), block_purchase=bought(ends_in))
    decision = decide(inputs(workload(), held))
    assert decision.pool_change is change
    assert decision.check is not None and decision.check.state == state


@pytest.mark.parametrize(
    ("claim_uid", "rejected"),
    [("uid-1", True), ("uid-other", False)],
    ids=["refused for this claim: rejected", "refused for an earlier claim: not this one"],
)
def test_a_claim_the_pool_buys_nothing_for_is_rejected_with_its_words(
    claim_uid: str, rejected: bool
) -> None:
    message = "No Capacity Block ... the earliest offered is cb-9 (... 5000 USD upfront)."
    refused = with_status(
        pool(claim_uid="uid-1", phase="Acquiring"),
        block_refusal=BlockRefusal(claim_uid=claim_uid, message=message),
    )
    decision = decide(inputs(workload(), refused))
    if rejected:
        assert decision.check is not None and decision.check.state == c.CheckState.REJECTED
        assert decision.check.message == message
        assert decision.pool_change is PoolChange.RELEASE
    else:
        assert decision.check is None or decision.check.state != c.CheckState.REJECTED
