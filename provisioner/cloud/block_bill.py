"""The Capacity Blocks' part of the bill: the upfront fee of each block the controller
bought, beside the node-seconds `billing` counts, and the block's hours no gang used
(stranded).

A Capacity Block is paid upfront, whole, whatever runs on it ("Capacity Blocks pricing
and billing": the upfront fee is charged when the block is bought). So what its instances
bill is nothing more, and what a team wants to know is how much of what it paid went
unused: the block's instance-seconds (its instance count times its length, up to `now`)
less those its pool's instances ran inside its window. That share of the fee is stranded.

`block_charges` is pure: the blocks come from the pools' status (`status.blockPurchase`,
which holds the fee EC2 quoted), the instance lives from EC2's history (`billing.life_of`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from provisioner.cloud.billing import InstanceLife

__all__ = ["BlockCharge", "BoughtBlock", "block_charges"]


@dataclass(frozen=True)
class BoughtBlock:
    reservation_id: str
    pool: str
    instances: int
    start: datetime
    end: datetime
    upfront_fee: Decimal
    currency: str = "USD"


@dataclass(frozen=True)
class BlockCharge:
    block: BoughtBlock
    paid_seconds: float  # instance-seconds of the block so far (count x elapsed window)
    used_seconds: float  # of those, what the pool's instances ran inside the window

    @property
    def stranded_seconds(self) -> float:
        return max(self.paid_seconds - self.used_seconds, 0.0)

    @property
    def stranded_fee(self) -> Decimal:
        """The share of the fee paid for the stranded instance-seconds (of the whole block's)."""
        whole = self.block.instances * (self.block.end - self.block.start).total_seconds()
        if whole <= 0:
            return Decimal(0)
        share = Decimal(str(self.stranded_seconds)) / Decimal(str(whole))
        return (self.block.upfront_fee * share).quantize(Decimal("0.01"))


def _overlap(a0: datetime, a1: datetime, b0: datetime, b1: datetime) -> float:
    return max((min(a1, b1) - max(a0, b0)).total_seconds(), 0.0)


def block_charges(
    blocks: Iterable[BoughtBlock], lives: Iterable[InstanceLife], now: datetime
) -> list[BlockCharge]:
    """Each block's paid and used instance-seconds up to `now`. An instance counts toward
    its pool's block for the part of its life inside the block's window, at most the
    block's instance count at any time (a pool runs one set on it)."""
    all_lives = list(lives)
    out = []
    for block in blocks:
        until = min(block.end, now)
        paid = block.instances * max((until - block.start).total_seconds(), 0.0)
        used = sum(
            _overlap(life.launched, life.ended or now, block.start, until)
            for life in all_lives
            if life.pool == block.pool
        )
        out.append(BlockCharge(block, paid, min(used, paid)))
    return out
