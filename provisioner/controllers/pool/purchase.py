"""What a pool reads before it may buy a Capacity Block, and what the plan, the launch and
the Workload decision share about a bought block.

A gang that asks for time (`capacity-block-duration`) runs on the block bought for its pool
(`status.blockPurchase`) once EC2 has sold it: `bought_reservation` is the reservation a
launch targets (the Job's own, or that block), and `launch_shape` the shape a launch and the
pool's stack are built from. `read_purchase` is the observe step's read, only for a pass
that may launch, only while the gang has no block it can still start on and buying is
enabled by the pool's policy: the offerings and the chooser's pick for a new intent;
for an intent without a reservation (a crash, a lost answer), the reservations EC2 lists
tagged with it, whether its offering is still sold, and how long the listing must stay
empty before it may be bought again (`blockPurchase.purchaseSettle`). The plan
(`plan_purchase`) decides from that read alone.

The policy is the pool's own (`spec.purchasePolicy`: the claimant's class's, which the
Workload reconciler copies there; the pool never reads a class), else the settings'
(`class_purchase.effective_policy`). Either way buying needs the installation's grant
(the settings' `blockPurchase.enabled`, which gives the controller the IAM permission):
without it a class's policy is refused with the fix, not sent to EC2 to be denied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from provisioner.api.class_purchase import effective_policy
from provisioner.api.gangnodepool import BlockPurchase, GangNodePool, GangNodePoolSpec
from provisioner.api.gangnodepool import GangNodePoolStatus as Status
from provisioner.api.settings import Settings
from provisioner.api.settings.block_purchase import DEFAULT_PURCHASE_SETTLE
from provisioner.api.shape import GangShape
from provisioner.cloud.block_offerings import OfferingChoice, choose_offering
from provisioner.cloud.errors import CloudError
from provisioner.controllers.ports import EngineOps

_NOT_GRANTED = (
    "GangClass {cls} enables buying a Capacity Block (spec.blockPurchase), but this "
    "installation does not grant the controller ec2:PurchaseCapacityBlock (its settings' "
    "blockPurchase.enabled is false), so nothing is bought. Ask the platform team to enable "
    "the chart's blockPurchase, or run the Job without capacity-block-duration."
)


@dataclass(frozen=True)
class PurchaseRead:
    """What one pass read for a purchase (see the module docstring)."""

    latest_start: datetime  # the claim's time + blockPurchase.latestStart
    max_fee: Decimal  # blockPurchase.maxUpfrontFeePerGang
    # For a new intent: the chooser's answer over the offerings the policy allows.
    choice: OfferingChoice | None = None
    # For an intent without a reservation: the block EC2 lists tagged with it, and whether
    # its offering is still sold.
    found: str | None = None
    listed: bool = False
    # How long after the last call under the intent the tagged listing must stay empty
    # before a call again (blockPurchase.purchaseSettle).
    settle: timedelta = DEFAULT_PURCHASE_SETTLE
    # The policy allows no block for this gang (its type): why, as a sentence.
    refusal: str | None = None
    # A read failed: nothing may be decided (or bought) this pass.
    error: CloudError | None = None


def _fits(block: BlockPurchase, spec: GangNodePoolSpec) -> bool:
    return (block.instance_type, block.instance_count) == (spec.instance_type, spec.count)


def bought_reservation(spec: GangNodePoolSpec, status: Status) -> str | None:
    """The reservation the pool's gangs launch into: the Job's own, or the block bought
    for a gang that asks for time (once EC2 sold it, and while it fits the pool's shape)."""
    if spec.capacity_reservation_id:
        return spec.capacity_reservation_id
    block = status.block_purchase
    if spec.capacity_block_duration is None or block is None or not _fits(block, spec):
        return None
    return block.reservation_id


def launch_shape(pool: GangNodePool) -> GangShape:
    """The shape a launch and the pool's stack are built from: the spec's, on the bought
    block when the gang runs on one."""
    shape = pool.spec.shape()
    wanted = bought_reservation(pool.spec, pool.status)
    if wanted == shape.capacity_reservation_id:
        return shape
    return shape.model_copy(update={"capacity_reservation_id": wanted})


def newly_bought(before: Status, after: Status) -> tuple[BlockPurchase, ...]:
    """The block `after` records that `before` did not (its fee enters the metrics once)."""
    block, was = after.block_purchase, before.block_purchase
    if block is None or block.reservation_id is None:
        return ()
    return () if was is not None and was.reservation_id == block.reservation_id else (block,)


def last_start(block: BlockPurchase, release_margin: timedelta, join: timedelta) -> datetime:
    """The latest moment a gang may be launched on the bought block (`block_window`)."""
    return block.ends_at - release_margin - join


def wants_purchase(
    spec: GangNodePoolSpec, status: Status, now: datetime, margin: timedelta, join: timedelta
) -> bool:
    """Whether a claimed gang that asks for time has no block it can still start on, or a
    purchase whose answer is not known (an intent without a reservation)."""
    if spec.claim is None or spec.capacity_block_duration is None:
        return False
    if spec.capacity_reservation_id:
        return False
    block = status.block_purchase
    if block is None or block.reservation_id is None:
        return True
    return not _fits(block, spec) or now >= last_start(block, margin, join)


def read_purchase(
    engine: EngineOps,
    settings: Settings,
    pool: GangNodePool,
    now: datetime,
) -> PurchaseRead | None:
    """The pass's read for a purchase; None when the pool buys nothing this pass."""
    spec, status = pool.spec, pool.status
    margin, join = settings.capacity_block_release, settings.join_deadline
    if not wants_purchase(spec, status, now, margin, join):
        return None
    policy = effective_policy(spec.purchase_policy, settings, spec.instance_type)
    duration, claim = spec.capacity_block_duration, spec.claim
    if not policy.enabled or duration is None or claim is None:
        return None
    assert policy.max_upfront_fee_per_gang is not None  # the policy requires it when enabled
    read = PurchaseRead(claim.claimed_at + policy.latest_start, policy.max_upfront_fee_per_gang)
    hours = int(duration / timedelta(hours=1))
    try:
        block = status.block_purchase
        if block is not None and block.reservation_id is None:
            found = engine.bought_block(settings.cluster_name, block.intent)
            offered = (
                ()
                if found
                else engine.capacity_block_offerings(
                    block.instance_type, block.instance_count, hours
                )
            )
            listed = any(o.offering_id == block.offering_id for o in offered)
            # EC2's consistency, not a team's choice: the cluster's setting, whatever
            # policy bought the block.
            settle = settings.block_purchase.purchase_settle
            return replace(read, found=found, listed=listed, settle=settle)
        if not settings.block_purchase.enabled:
            return replace(read, refusal=_NOT_GRANTED.format(cls=spec.gang_class))
        if not policy.type_allowed(spec.instance_type):
            return replace(
                read,
                refusal=f"blockPurchase.instanceTypes ({', '.join(policy.instance_types)}) "
                f"does not allow {spec.instance_type}, so no block is bought for it. Ask the "
                "platform team to allow it, or run the Job without "
                "capacity-block-duration.",
            )
        offerings = engine.capacity_block_offerings(
            spec.instance_type, spec.count, hours, earliest_start=now
        )
        allowed = [
            o
            for o in offerings
            if policy.zone_allowed(o.availability_zone)
            and (not spec.availability_zones or o.availability_zone in spec.availability_zones)
        ]
        chosen = choose_offering(allowed, max_fee=read.max_fee, latest_start=read.latest_start)
        return replace(read, choice=chosen)
    except CloudError as err:
        return replace(read, error=err)
