"""An unanswered purchase (an intent without a reservation) against EC2's eventually
consistent listings, pure and table-driven: a tagged listing that comes back empty within
`blockPurchase.purchaseSettle` of the last call proves nothing, so the pool keeps looking
and buys nothing; found meanwhile, the block is adopted; empty after the window, one more
call while the offering is sold; a second call lost as well, never a third.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.settings import BlockPurchasePolicy
from provisioner.api.settings.block_purchase import DEFAULT_PURCHASE_SETTLE
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.purchase import PurchaseRead
from provisioner.controllers.pool.steps import Action, AnyView
from tests.support.pool_views import CLAIM, NOW, view
from tests.support.pools import assert_holds

pytestmark = pytest.mark.unit

CAP = Decimal("800")
LATEST = NOW + timedelta(hours=1)
SETTLE = timedelta(minutes=5)
FOUND = "cr-0123456789abcdef0"


def intent(called: timedelta, calls: int = 1) -> dict[str, Any]:
    """An intent whose last call was `called` before NOW, its answer never saved."""
    start = NOW + timedelta(minutes=30)
    return {
        "intent": "pool-uid-1",
        "offeringId": "cb-30m",
        "instanceType": "p4d.24xlarge",
        "instanceCount": 4,
        "availabilityZone": "us-east-1a",
        "upfrontFee": "700",
        "startsAt": start.isoformat(),
        "endsAt": (start + timedelta(hours=24)).isoformat(),
        "intendedAt": (NOW - called).isoformat(),
        "calls": calls,
        "boughtFor": "ml/wl",
    }


def unanswered(read: PurchaseRead, called: timedelta, calls: int = 1, **status: Any) -> AnyView:
    return view(
        phase=Phase.ACQUIRING,
        capacity_block_duration="24h",
        purchase=read,
        status={"blockPurchase": intent(called, calls), **status},
    )


def read(*, found: str | None = None, listed: bool = True) -> PurchaseRead:
    return PurchaseRead(LATEST, CAP, found=found, listed=listed, settle=SETTLE)


@dataclass(frozen=True)
class Row:
    name: str
    given: AnyView
    action: Action
    events: tuple[str, ...]
    status: dict[str, Any] = field(default_factory=dict)
    requeue: float | None = None


UNKNOWN = c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN
ROWS = [
    Row(
        "found within the window: adopted, nothing bought again",
        unanswered(read(found=FOUND), timedelta(seconds=30)),
        Action.NONE,
        (c.EventReason.CAPACITY_BLOCK_BOUGHT,),
        {"blockPurchase": {"reservationId": FOUND, "calls": 1}, "lastError": None},
        0.0,
    ),
    Row(
        "empty within the window, offering listed: wait and look again, no call",
        unanswered(read(), timedelta(seconds=30)),
        Action.NONE,
        (UNKNOWN,),
        {"blockPurchase": {"calls": 1, "reservationId": None}, "lastError": {"reason": UNKNOWN}},
        15.0,
    ),
    Row(
        "empty within the window, offering gone (sold, maybe to us): wait, the intent kept",
        unanswered(read(listed=False), timedelta(seconds=30)),
        Action.NONE,
        (UNKNOWN,),
        {"blockPurchase": {"calls": 1, "offeringId": "cb-30m"}, "blockRefusal": None},
        15.0,
    ),
    Row(
        "the window's last seconds: looked at again when it ends",
        unanswered(read(), SETTLE - timedelta(seconds=4)),
        Action.NONE,
        (UNKNOWN,),
        {"blockPurchase": {"calls": 1}},
        4.0,
    ),
    Row(
        "empty after the window, offering listed: one more call, its time recorded",
        unanswered(read(), SETTLE),
        Action.PURCHASE_BLOCK,
        (UNKNOWN,),
        {"blockPurchase": {"calls": 2, "intendedAt": NOW.isoformat().replace("+00:00", "Z")}},
    ),
    Row(
        "empty after the window, offering gone: nothing was bought, chosen again",
        unanswered(read(listed=False), SETTLE + timedelta(minutes=1)),
        Action.NONE,
        (c.EventReason.BUYING_CAPACITY_BLOCK,),
        {"blockPurchase": None},
        0.0,
    ),
    Row(
        "the second call lost too, within its own window: wait, never a third call",
        unanswered(read(), timedelta(seconds=30), calls=2),
        Action.NONE,
        (UNKNOWN,),
        {"blockPurchase": {"calls": 2}, "blockRefusal": None},
        15.0,
    ),
    Row(
        "the second call lost too, its window over: never a third call; the claim refused",
        unanswered(read(), SETTLE, calls=2),
        Action.NONE,
        (UNKNOWN,),
        {"blockPurchase": None, "blockRefusal": {"claimUid": CLAIM["uid"]}},
    ),
    Row(
        "the second call found within its window: adopted",
        unanswered(read(found=FOUND), timedelta(seconds=30), calls=2),
        Action.NONE,
        (c.EventReason.CAPACITY_BLOCK_BOUGHT,),
        {"blockPurchase": {"reservationId": FOUND, "calls": 2}},
        0.0,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_an_unanswered_purchase(row: Row) -> None:
    step = plan(row.given)
    assert step.action is row.action, step.why
    assert tuple(e.reason for e in step.events) == row.events
    assert_holds(step.status.model_dump(mode="json", by_alias=True), row.status)
    if row.requeue is not None:
        assert step.requeue_after == row.requeue


def test_the_wait_says_what_it_confirms_and_is_said_once() -> None:
    first = plan(unanswered(read(), timedelta(seconds=30)))
    error = first.status.last_error
    assert error is not None
    assert "Confirming whether the purchase" in error.message
    assert "cb-30m" in error.message and "blockPurchase.purchaseSettle" in error.message
    again = unanswered(
        read(), timedelta(seconds=30), lastError=error.model_dump(mode="json", by_alias=True)
    )
    assert plan(again).events == ()


def test_the_setting_defaults_to_minutes_and_refuses_zero() -> None:
    assert BlockPurchasePolicy().purchase_settle == DEFAULT_PURCHASE_SETTLE >= SETTLE
    with pytest.raises(ValueError, match=r"purchase_settle|purchaseSettle"):
        BlockPurchasePolicy.model_validate({"purchaseSettle": "0s"})
