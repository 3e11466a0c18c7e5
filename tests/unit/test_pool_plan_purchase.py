"""The pool's purchase of a Capacity Block, pure: what `plan` does with a pass's purchase
read, and what a purchase's answer leaves (`purchase_outcome`). Table-driven.

The scene is the issue's: 2 x p5.48xlarge for 24 h, offerings at +40 s (over the cap),
+5 min (under it) and +10 min (under it, cheaper): the +5 min one is bought.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind, Phase
from provisioner.cloud.block_offerings import CapacityBlockOffering, choose_offering
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.controllers.pool.outcomes import outcome
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.purchase import (
    PurchaseRead,
    bought_reservation,
    wants_purchase,
)
from provisioner.controllers.pool.steps import Action, ActionResult, AnyView
from tests.support.block_offerings import offering
from tests.support.pool_views import CLAIM, NOW, TIMINGS, view
from tests.support.pools import assert_holds

pytestmark = pytest.mark.unit

CAP = Decimal("800")
LATEST = NOW + timedelta(hours=1)
# An unanswered call made longer ago than blockPurchase.purchaseSettle: EC2's tagged listing
# has settled (`test_pool_purchase_settle` has the window itself).
SETTLED = {"intendedAt": (NOW - timedelta(minutes=10)).isoformat()}


def offer(name: str, start: timedelta, fee: str) -> CapacityBlockOffering:
    return offering(name, NOW + start, fee, instance_type="p4d.24xlarge", count=4)


SCENE = (
    offer("cb-40s", timedelta(seconds=40), "900"),
    offer("cb-5m", timedelta(minutes=5), "700"),
    offer("cb-10m", timedelta(minutes=10), "500"),
)
DEAR = (offer("cb-dear", timedelta(minutes=5), "5000"),)


def chosen_from(offerings: tuple[CapacityBlockOffering, ...]) -> PurchaseRead:
    return PurchaseRead(
        LATEST, CAP, choice=choose_offering(offerings, max_fee=CAP, latest_start=LATEST)
    )


def intent(calls: int = 1, reservation: str | None = None, **extra: Any) -> dict[str, Any]:
    o = SCENE[1]
    return {
        "intent": "pool-uid-1",
        "offeringId": o.offering_id,
        "instanceType": o.instance_type,
        "instanceCount": o.instance_count,
        "availabilityZone": o.availability_zone,
        "upfrontFee": str(o.upfront_fee),
        "startsAt": o.start.isoformat(),
        "endsAt": o.end.isoformat(),
        "intendedAt": NOW.isoformat(),
        "calls": calls,
        "boughtFor": "ml/wl",
        **({"reservationId": reservation} if reservation else {}),
        **extra,
    }


def acquiring(purchase: PurchaseRead | None, **status: Any) -> AnyView:
    return view(
        phase=Phase.ACQUIRING,
        capacity_block_duration="24h",
        purchase=purchase,
        status=status,
    )


@dataclass(frozen=True)
class Row:
    name: str
    given: AnyView
    action: Action
    events: tuple[str, ...]
    status: dict[str, Any] = field(default_factory=dict)


REFUSAL = {"claimUid": CLAIM["uid"], "message": "No Capacity Block ..."}

ROWS = [
    Row(
        "the earliest block under the cap is intended, then bought",
        acquiring(chosen_from(SCENE)),
        Action.PURCHASE_BLOCK,
        (c.EventReason.BUYING_CAPACITY_BLOCK,),
        {"blockPurchase": {"offeringId": "cb-5m", "calls": 1, "upfrontFee": "700"}},
    ),
    Row(
        "nothing under the cap by the latest start: refused for the claim, nothing bought",
        acquiring(chosen_from(DEAR)),
        Action.NONE,
        (c.EventReason.NO_AFFORDABLE_CAPACITY_BLOCK,),
        {"blockPurchase": None, "blockRefusal": {"claimUid": CLAIM["uid"]}},
    ),
    Row(
        "a refusal already said for the claim is not said again, nor bought around",
        acquiring(chosen_from(SCENE), blockRefusal=REFUSAL),
        Action.NONE,
        (),
        {"blockPurchase": None},
    ),
    Row(
        "the policy's types do not include the gang's",
        acquiring(PurchaseRead(LATEST, CAP, refusal="blockPurchase.instanceTypes ...")),
        Action.NONE,
        (c.EventReason.NO_AFFORDABLE_CAPACITY_BLOCK,),
    ),
    Row(
        "an intent without its answer: the block tagged with it is adopted, not bought again",
        acquiring(PurchaseRead(LATEST, CAP, found="cr-0123456789abcdef0"), blockPurchase=intent()),
        Action.NONE,
        (c.EventReason.CAPACITY_BLOCK_BOUGHT,),
        {"blockPurchase": {"reservationId": "cr-0123456789abcdef0", "calls": 1}},
    ),
    Row(
        "an intent a tagged read proves bought nothing: one more call, the last",
        acquiring(PurchaseRead(LATEST, CAP, listed=True), blockPurchase=intent(**SETTLED)),
        Action.PURCHASE_BLOCK,
        (c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN,),
        {"blockPurchase": {"calls": 2, "offeringId": "cb-5m"}},
    ),
    Row(
        "two calls unanswered and nothing tagged: no third call; the claim is refused",
        acquiring(PurchaseRead(LATEST, CAP, listed=True), blockPurchase=intent(calls=2, **SETTLED)),
        Action.NONE,
        (c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN,),
        {"blockPurchase": None, "blockRefusal": {"claimUid": CLAIM["uid"]}},
    ),
    Row(
        "nothing tagged and the offering no longer sold: the intent goes, chosen again",
        acquiring(PurchaseRead(LATEST, CAP, listed=False), blockPurchase=intent(**SETTLED)),
        Action.NONE,
        (c.EventReason.BUYING_CAPACITY_BLOCK,),
        {"blockPurchase": None},
    ),
    Row(
        "a read that failed decides nothing and buys nothing",
        acquiring(
            PurchaseRead(
                LATEST,
                CAP,
                error=CloudError(ErrorKind.RETRYABLE, "Unavailable", "Down", "EC2 down."),
            ),
            blockPurchase=intent(),
        ),
        Action.NONE,
        (),
        {"blockPurchase": {"calls": 1}, "lastError": {"reason": "Down"}},
    ),
    Row(
        "buying off (no read): the gang is acquired on demand like any other",
        acquiring(None),
        Action.LAUNCH,
        (),
        {"blockPurchase": None},
    ),
    Row(
        "a bought block: the launch targets it, as a scheduled block the user bought",
        acquiring(None, blockPurchase=intent(reservation="cr-0123456789abcdef0")),
        Action.LAUNCH,
        (),
        {"blockPurchase": {"reservationId": "cr-0123456789abcdef0"}},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_plan_purchase(row: Row) -> None:
    step = plan(row.given)
    assert step.action is row.action, step.why
    assert tuple(e.reason for e in step.events) == row.events
    assert_holds(step.status.model_dump(mode="json", by_alias=True), row.status)


def test_a_refusal_names_the_earliest_offering_and_its_fee() -> None:
    step = plan(acquiring(chosen_from(DEAR)))
    message = step.status.block_refusal.message if step.status.block_refusal else ""
    assert "cb-dear" in message and "5000 USD" in message and "Nothing was bought" in message


@pytest.mark.parametrize(
    ("result", "kept", "reservation", "events"),
    [
        (
            ActionResult(True, reservation_id="cr-0123456789abcdef0"),
            True,
            "cr-0123456789abcdef0",
            (c.EventReason.CAPACITY_BLOCK_BOUGHT,),
        ),
        (
            ActionResult(False, failure=FailureKind.CONFIG, reason="InvalidParameterValue"),
            False,
            None,
            ("InvalidParameterValue",),
        ),
        (
            ActionResult(
                False, failure=FailureKind.RETRYABLE, reason="CapacityBlockPurchaseUnknown"
            ),
            True,
            None,
            (c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN,),
        ),
    ],
    ids=["bought", "refused by EC2: nothing bought", "answer lost: the intent stays"],
)
def test_what_a_purchase_answer_leaves(
    result: ActionResult, kept: bool, reservation: str | None, events: tuple[str, ...]
) -> None:
    given = acquiring(chosen_from(SCENE))
    status, _, said = outcome(given, plan(given), result)
    assert (status.block_purchase is not None) is kept
    if status.block_purchase is not None:
        assert status.block_purchase.reservation_id == reservation
    assert tuple(e.reason for e in said) == events


def test_a_gang_with_a_block_it_can_still_start_on_reads_nothing_to_buy() -> None:
    bought = acquiring(None, blockPurchase=intent(reservation="cr-0123456789abcdef0"))
    spec, status = bought.spec, bought.status
    margin, join = TIMINGS.block_release_margin, TIMINGS.join_deadline
    assert bought_reservation(spec, status) == "cr-0123456789abcdef0"
    assert not wants_purchase(spec, status, NOW, margin, join)
    # Too close to its end for a gang to start: a new block is wanted.
    late = status.block_purchase.ends_at if status.block_purchase else NOW
    assert wants_purchase(spec, status, late - margin - join, margin, join)
    # A gang that asks for no time wants nothing bought.
    plain = view(phase=Phase.ACQUIRING)
    assert not wants_purchase(plain.spec, plain.status, NOW, margin, join)
