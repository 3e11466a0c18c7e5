"""The pool's plan for buying a Capacity Block, and what a purchase's result leaves: pure.

Called by `plan_acquire.plan_acquiring` before anything else a claimed pool with no launch
marked does, and by `outcomes.outcome` for a purchase's result. It reads only the pass's
`PurchaseRead` (`purchase.read_purchase`), which the pass makes only while the gang asks
for time, has no block it can still start on, and buying is enabled; otherwise it
returns None and the pool acquires as it always has (on the bought block, once there is
one, held at $0 until it starts).

PurchaseCapacityBlock takes no ClientToken. So the intent (offering, fee, start, end, time,
and the tag the block carries) is in the status, written preconditioned on the version the
pass read, before the call; the call is made once (no SDK retry). After a crash or a lost
answer the next pass finds the intent without a reservation and the reservations EC2 lists
tagged with it: found, it is adopted. EC2's listings are eventually consistent, so "not
found" proves nothing until the listing has stayed empty for `blockPurchase.purchaseSettle`
after the last call (`intended_at`, moved at each call): until then the pool keeps looking
and buys, drops and refuses nothing. After it, with the offering still sold, ONE more call
is made under the same intent; after that (and its own window), nothing more is bought for
the claim, which is refused. A refusal from EC2 (a 4xx answer) bought nothing: the intent
is dropped.
"""

from __future__ import annotations

from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.durations import format_duration
from provisioner.api.gangnodepool import BlockPurchase, BlockRefusal, GangNodePoolStatus, LastError
from provisioner.cloud.block_offerings import CapacityBlockOffering
from provisioner.controllers.pool.purchase import PurchaseRead
from provisioner.controllers.pool.status import changed
from provisioner.controllers.pool.steps import (
    Action,
    ActionResult,
    AnyView,
    Event,
    LaunchRead,
    Step,
)

Outcome = tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]
_OPERATION = Action.PURCHASE_BLOCK.value
# While a purchase's effect is unconfirmed, how often the tagged listing is read again:
# soon enough to adopt a block as it shows, seldom enough to cost EC2 little.
_LOOK_AGAIN_SECONDS = 15.0


def _at(moment: object) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"


def plan_purchase(view: AnyView) -> Step | None:
    """The purchase step a claimed pool takes next; None: nothing to buy this pass."""
    read = view.launch.purchase if isinstance(view.launch, LaunchRead) else None
    if read is None or view.spec.claim is None:
        return None
    status = view.status
    if read.error is not None:
        failures = status.consecutive_failures + 1
        err = LastError(
            reason=read.error.reason,
            message=f"{read.error.message} Nothing is bought until EC2 answers.",
            operation=_OPERATION,
            kind=read.error.failure,
        )
        return Step(
            Action.NONE,
            changed(status, last_error=err, consecutive_failures=failures),
            requeue_after=view.timings.backoff(failures),
            why="purchase read failed",
        )
    block = status.block_purchase
    refused = status.block_refusal
    # Said once for the claim, which the Workload decision rejects: nothing more is bought
    # for it, whatever EC2 offers meanwhile.
    if (
        refused is not None
        and refused.claim_uid == view.spec.claim.uid
        and (block is None or block.reservation_id is not None)
    ):
        return _refuse(view, refused.message, _reason(status))
    if block is not None and block.reservation_id is None:
        return _unanswered(view, read, block)
    if read.refusal is not None:
        return _refuse(view, read.refusal)
    choice = read.choice
    if choice is None or choice.chosen is None:
        return _refuse(
            view, _none_affordable(view, read, None if choice is None else choice.earliest)
        )
    return _buy(view, read, choice.chosen)


def _buy(view: AnyView, read: PurchaseRead, offering: CapacityBlockOffering) -> Step:
    claim = view.spec.claim
    assert claim is not None
    intent = BlockPurchase(
        intent=f"{view.uid}-{int(view.now.timestamp())}",
        offering_id=offering.offering_id,
        instance_type=offering.instance_type,
        instance_count=offering.instance_count,
        availability_zone=offering.availability_zone,
        upfront_fee=offering.upfront_fee,
        currency=offering.currency,
        starts_at=offering.start,
        ends_at=offering.end,
        intended_at=view.now,
        calls=1,
        bought_for=f"{claim.namespace}/{claim.name}",
    )
    return Step(
        Action.PURCHASE_BLOCK,
        changed(view.status, block_purchase=intent, block_refusal=None),
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.BUYING_CAPACITY_BLOCK,
                f"Buying Capacity Block {offering.describe()} for Workload "
                f"{intent.bought_for}: the earliest start within the {read.max_fee} USD cap "
                f"(blockPurchase.maxUpfrontFeePerGang). Intent {intent.intent}.",
            ),
        ),
        why="purchase",
    )


def _unanswered(view: AnyView, read: PurchaseRead, block: BlockPurchase) -> Step:
    """An intent without a reservation: a crash or a lost answer after (or before) the call."""
    status = view.status
    if read.found is not None:
        adopted = block.model_copy(update={"reservation_id": read.found})
        return Step(
            Action.NONE,
            changed(status, block_purchase=adopted, last_error=None, consecutive_failures=0),
            requeue_after=0.0,
            events=(
                Event(
                    c.EVENT_NORMAL,
                    c.EventReason.CAPACITY_BLOCK_BOUGHT,
                    f"Found Capacity Block {read.found} tagged with intent {block.intent} "
                    f"(offering {block.offering_id}, {block.upfront_fee} {block.currency}): "
                    "its purchase took effect though its answer never arrived; adopted, "
                    "nothing bought again.",
                ),
            ),
            why="purchase adopted",
        )
    settled_at = block.intended_at + read.settle
    if view.now < settled_at:
        return _confirming(view, block, settled_at)
    if block.calls < 2 and read.listed:
        again = block.model_copy(update={"calls": block.calls + 1, "intended_at": view.now})
        return Step(
            Action.PURCHASE_BLOCK,
            changed(status, block_purchase=again),
            events=(
                Event(
                    c.EVENT_WARNING,
                    c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN,
                    f"EC2 lists no reservation tagged with intent {block.intent}: the "
                    f"purchase of offering {block.offering_id} bought nothing. Buying it "
                    "once more, the last call under this intent.",
                ),
            ),
            why="purchase again",
        )
    if block.calls < 2:
        # Nothing was bought (the tagged read, settled, proves it) and the offering is gone:
        # choose again.
        return Step(
            Action.NONE,
            changed(status, block_purchase=None),
            requeue_after=0.0,
            events=(
                Event(
                    c.EVENT_NORMAL,
                    c.EventReason.BUYING_CAPACITY_BLOCK,
                    f"Offering {block.offering_id} is no longer sold and nothing was bought "
                    f"under intent {block.intent}; choosing again.",
                ),
            ),
            why="offering gone",
        )
    message = (
        f"Two PurchaseCapacityBlock calls for offering {block.offering_id} (intent "
        f"{block.intent}) went unanswered and EC2 lists no block tagged with that intent; the "
        "controller does not call a third time, so nothing more is bought for this Workload. "
        "Resubmit the Job to try again."
    )
    step = _refuse(view, message, reason=c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN)
    return Step(
        step.action, changed(step.status, block_purchase=None), step.requeue_after, step.events
    )


def _confirming(view: AnyView, block: BlockPurchase, settled_at: datetime) -> Step:
    """EC2 lists no block tagged with the intent yet, and may still show it: look again,
    buy nothing."""
    message = (
        f"Confirming whether the purchase of Capacity Block offering {block.offering_id} "
        f"(intent {block.intent}, {block.upfront_fee} {block.currency}) took effect: its "
        "answer never arrived and EC2 lists no block tagged with it yet, which its eventually "
        "consistent listings do not prove. Nothing is bought again before "
        f"{_at(settled_at)} (blockPurchase.purchaseSettle after the last call)."
    )
    err = LastError(
        reason=c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN,
        message=message,
        operation=_OPERATION,
    )
    said = view.status.last_error == err
    wait = (settled_at - view.now).total_seconds()
    return Step(
        Action.NONE,
        changed(view.status, last_error=err),
        requeue_after=max(1.0, min(wait, _LOOK_AGAIN_SECONDS)),
        events=()
        if said
        else (Event(c.EVENT_NORMAL, c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN, message),),
        why="purchase unconfirmed",
    )


def _reason(status: GangNodePoolStatus) -> str:
    error = status.last_error
    return error.reason if error is not None else c.EventReason.NO_AFFORDABLE_CAPACITY_BLOCK


def _none_affordable(
    view: AnyView, read: PurchaseRead, earliest: CapacityBlockOffering | None
) -> str:
    spec = view.spec
    duration = spec.capacity_block_duration
    what = (
        f"{spec.count} x {spec.instance_type} for {format_duration(duration) if duration else '?'}"
    )
    offered = (
        f"the earliest offered is {earliest.describe()}"
        if earliest is not None
        else "EC2 offers none at all"
    )
    return (
        f"No Capacity Block of {what} starts by {_at(read.latest_start)} "
        f"(blockPurchase.latestStart after the claim) within the {read.max_fee} USD cap "
        f"(blockPurchase.maxUpfrontFeePerGang); {offered}. Nothing was bought. Ask for a "
        "higher cap or a later start, or a shorter block, and resubmit the Job."
    )


def _refuse(
    view: AnyView, message: str, reason: str = c.EventReason.NO_AFFORDABLE_CAPACITY_BLOCK
) -> Step:
    """Nothing is bought for the claim: recorded for it, so the Workload decision rejects
    it with `message`; said once."""
    claim = view.spec.claim
    assert claim is not None
    refusal = BlockRefusal(claim_uid=claim.uid, message=message)
    err = LastError(reason=reason, message=message)
    said = view.status.block_refusal == refusal
    return Step(
        Action.NONE,
        changed(view.status, block_refusal=refusal, last_error=err),
        requeue_after=view.timings.config_delay,
        events=() if said else (Event(c.EVENT_WARNING, reason, message),),
        why="no block bought",
    )


def held_block_events(view: AnyView) -> tuple[Event, ...]:
    """A claim dropped on a pool that holds a bought block with time left: the block is not
    released (a Capacity Block cannot be returned), it waits for the next gang of its shape
    in the pool's namespace until it ends, and the pool says so."""
    block = view.status.block_purchase
    if block is None or block.reservation_id is None or view.now >= block.ends_at:
        return ()
    return (
        Event(
            c.EVENT_NORMAL,
            c.EventReason.CAPACITY_BLOCK_HELD,
            f"Capacity Block {block.reservation_id} (bought for {block.bought_for}, "
            f"{block.upfront_fee} {block.currency}) stays with pool {view.name} until "
            f"{_at(block.ends_at)}: the next gang of {block.instance_count} x "
            f"{block.instance_type} in namespace {view.spec.owner_namespace or '?'} runs on it.",
        ),
    )


def purchase_outcome(view: AnyView, status: GangNodePoolStatus, result: ActionResult) -> Outcome:
    """What a purchase's answer leaves: the block, or the intent dropped (EC2 refused:
    nothing bought), or the intent kept (the answer is unknown: the next pass looks for it)."""
    block = status.block_purchase
    assert block is not None
    if result.ok and result.reservation_id:
        bought = block.model_copy(update={"reservation_id": result.reservation_id})
        return (
            changed(status, block_purchase=bought, last_error=None, consecutive_failures=0),
            0.0,
            (
                Event(
                    c.EVENT_NORMAL,
                    c.EventReason.CAPACITY_BLOCK_BOUGHT,
                    f"Bought Capacity Block {result.reservation_id}: {block.instance_count} x "
                    f"{block.instance_type} in {block.availability_zone} from "
                    f"{_at(block.starts_at)} to {_at(block.ends_at)} for {block.upfront_fee} "
                    f"{block.currency} upfront, for Workload {block.bought_for}. The gang is "
                    "held at $0 until it starts.",
                ),
            ),
        )
    failures = status.consecutive_failures + 1
    err = LastError(
        reason=result.reason or c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN,
        message=result.message,
        operation=_OPERATION,
        kind=result.failure,
    )
    if result.failure is FailureKind.CONFIG:
        return (
            changed(status, block_purchase=None, last_error=err, consecutive_failures=failures),
            view.timings.config_delay,
            (
                Event(
                    c.EVENT_WARNING,
                    err.reason,
                    f"EC2 refused the purchase of offering {block.offering_id}; nothing was "
                    f"bought. {result.message}",
                ),
            ),
        )
    return (
        changed(status, last_error=err, consecutive_failures=failures),
        view.timings.backoff(failures),
        (Event(c.EVENT_WARNING, c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN, result.message),),
    )
