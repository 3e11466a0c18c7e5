"""`blockPurchase`: whether the controller may buy a Capacity Block for a gang that asks for
time (`atomic-gang.k8s.aws/capacity-block-duration`), and within what.

Buying spends money at once, so it is off unless the platform team turns it on, and then
capped: a fee per gang, a duration, how long after its claim a gang may wait for its start,
and the instance types and zones a block may be bought for. One value, `BlockPurchasePolicy`,
resolved for a gang by one function (`api.class_purchase.effective_policy`): a GangClass's
`blockPurchase` (the same fields) replaces this one for its gangs; `enabled` here is also
the installation's grant of `ec2:PurchaseCapacityBlock`, which a class's policy still needs.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from fnmatch import fnmatchcase
from typing import Annotated, Self

from pydantic import Field, field_validator, model_validator

from provisioner.api.fields import AvailabilityZone, PositiveDuration
from provisioner.api.settings.section import Section

__all__ = ["DEFAULT_PURCHASE_SETTLE", "SHORTEST_BLOCK", "BlockPurchasePolicy"]

_TYPE_GLOB = re.compile(r"^[a-z0-9.-]+\*?$|^\*$")
# The shortest block EC2 sells ("DescribeCapacityBlockOfferings": 1-day increments).
SHORTEST_BLOCK = timedelta(hours=24)
# "Eventual consistency in the Amazon EC2 API" gives no bound; its examples settle in seconds
# to a minute or two. A gang waits this long at $0 once per lost answer; a second block costs
# its whole fee.
DEFAULT_PURCHASE_SETTLE = timedelta(minutes=5)

Fee = Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=2)]


class BlockPurchasePolicy(Section):
    """What the controller may buy for one gang; `enabled` false buys nothing."""

    enabled: bool = Field(
        default=False,
        description="Buy Capacity Blocks for gangs that ask for a duration. Off: such a gang "
        "is acquired on demand like any other (and held as a shortfall while EC2 has none).",
    )
    max_upfront_fee_per_gang: Fee | None = Field(
        default=None,
        description="The most one block for one gang may cost upfront, in USD; required "
        "when enabled.",
    )
    max_duration: PositiveDuration = Field(
        default=timedelta(hours=336),
        description="The longest block a Job may ask for (at least 24h, EC2's shortest).",
    )
    latest_start: PositiveDuration = Field(
        default=timedelta(hours=24),
        description="How long after its claim a gang may wait for its block to start; a "
        "gang whose earliest affordable block starts later is rejected.",
    )
    instance_types: tuple[str, ...] = Field(
        default=(),
        description="Instance types a block may be bought for (exact or trailing-* glob); "
        "empty: any the controller allows.",
    )
    availability_zones: tuple[AvailabilityZone, ...] = Field(
        default=(), description="Zones a block may be bought in; empty: any."
    )
    purchase_settle: PositiveDuration = Field(
        default=DEFAULT_PURCHASE_SETTLE,
        description="How long after a PurchaseCapacityBlock call whose answer never came "
        "EC2's listing of the blocks tagged with its intent must stay empty before the "
        "controller may call once more. EC2 is eventually consistent: a block just bought "
        "may be missing from DescribeCapacityReservations for a while, and "
        "PurchaseCapacityBlock takes no ClientToken, so calling again too soon can buy a "
        "second block. Until then the gang waits (Pending, nothing bought).",
    )

    @field_validator("instance_types")
    @classmethod
    def _globs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [p for p in v if not _TYPE_GLOB.match(p)]
        if bad:
            raise ValueError(
                f"blockPurchase.instanceTypes entries {bad} are not instance types or "
                'trailing-* globs such as "p5.48xlarge" or "p5.*"'
            )
        return v

    @model_validator(mode="after")
    def _capped(self) -> Self:
        if self.max_duration < SHORTEST_BLOCK:
            raise ValueError(
                "blockPurchase.maxDuration is shorter than 24h, the shortest block EC2 sells; "
                "no block could ever be bought"
            )
        if self.enabled and self.max_upfront_fee_per_gang is None:
            raise ValueError(
                "blockPurchase.enabled is true without blockPurchase.maxUpfrontFeePerGang: "
                'set the most one gang\'s block may cost upfront, in USD (e.g. "1600")'
            )
        return self

    def type_allowed(self, instance_type: str) -> bool:
        return not self.instance_types or any(
            fnmatchcase(instance_type, p) if p.endswith("*") else instance_type == p
            for p in self.instance_types
        )

    def zone_allowed(self, zone: str) -> bool:
        return not self.availability_zones or zone in self.availability_zones
