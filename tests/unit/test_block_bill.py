"""The Capacity Blocks' part of the bill: the fee paid upfront, and the share of the block's
instance-seconds no gang ran on (stranded). Table-driven."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from provisioner.cloud.billing import InstanceLife
from provisioner.cloud.block_bill import BoughtBlock, block_charges

pytestmark = pytest.mark.unit

START = datetime(2030, 1, 1, tzinfo=UTC)
DAY = timedelta(hours=24)
BLOCK = BoughtBlock("cr-1", "pool-a", 2, START, START + DAY, Decimal("700"))


def life(pool: str, start_h: float, end_h: float | None) -> InstanceLife:
    ended = None if end_h is None else START + timedelta(hours=end_h)
    return InstanceLife(
        f"i-{pool}-{start_h}", "gen-1", START + timedelta(hours=start_h), ended, pool
    )


@dataclass(frozen=True)
class Case:
    name: str
    lives: tuple[InstanceLife, ...]
    now_h: float
    stranded_h: float
    stranded_fee: str


CASES = [
    Case(
        "used whole: nothing stranded",
        (life("pool-a", 0, 24), life("pool-a", 0, 24)),
        30,
        0,
        "0.00",
    ),
    Case("never used: all of it stranded", (), 30, 48, "700.00"),
    Case("used half the day", (life("pool-a", 0, 12), life("pool-a", 0, 12)), 30, 24, "350.00"),
    Case("so far: only the elapsed window is judged", (life("pool-a", 0, None),) * 2, 6, 0, "0.00"),
    Case("another pool's instances count for nothing", (life("pool-b", 0, 24),), 30, 48, "700.00"),
    Case("life outside the window is not the block's", (life("pool-a", -5, 1),), 30, 47, "685.42"),
]


@pytest.mark.parametrize("case", CASES, ids=[x.name for x in CASES])
def test_a_blocks_stranded_hours_and_fee(case: Case) -> None:
    [charge] = block_charges([BLOCK], case.lives, START + timedelta(hours=case.now_h))
    assert charge.stranded_seconds == case.stranded_h * 3600
    assert charge.stranded_fee == Decimal(case.stranded_fee)
    assert charge.block.upfront_fee == Decimal("700")
