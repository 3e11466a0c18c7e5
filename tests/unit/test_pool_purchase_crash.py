"""The purchase's intent is stored before PurchaseCapacityBlock is sent, and a controller
killed right after the call (its answer never saved) buys nothing more: the next one finds
the block by its intent's tag and adopts it, even when EC2's listing shows the block only
later (eventual consistency: it waits blockPurchase.purchaseSettle before buying again).
The real pool reconciler, the fake engine as EC2's record (shared across the controllers,
as EC2 is)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import BlockPurchase, GangNodePool
from provisioner.api.settings import BlockPurchasePolicy
from provisioner.cloud.block_offerings import CapacityBlockOffering
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from tests.support.block_offerings import offering
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.pool_reconciler import pool_deps, reconciler_settings
from tests.support.pools import claim, pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SETTINGS = reconciler_settings(
    block_purchase=BlockPurchasePolicy.model_validate(
        {"enabled": True, "maxUpfrontFeePerGang": "800", "latestStart": "1h"}
    ),
)


def offer(name: str, start: timedelta, fee: str) -> CapacityBlockOffering:
    return offering(name, NOW + start, fee)


class Crash(BaseException):
    """The controller's process ending mid-pass (not an error any code handles)."""


class CrashingEngine(FakeEngine):
    """EC2's record of the purchases; the process dies right after EC2 took the call."""

    def __init__(self, store: FakePoolStore) -> None:
        super().__init__(
            offerings=(
                offer("cb-40s", timedelta(seconds=40), "900"),
                offer("cb-5m", timedelta(minutes=5), "700"),
                offer("cb-10m", timedelta(minutes=10), "500"),
            )
        )
        self.store = store
        self.intent_at_call: list[BlockPurchase | None] = []
        self.crash = True
        # EC2's reservation listing not showing the block yet (eventual consistency).
        self.lagging = False

    def bought_block(self, cluster: str, intent: str) -> str | None:
        return None if self.lagging else super().bought_block(cluster, intent)

    def purchase_capacity_block(self, offering_id: str, tags: Mapping[str, str]) -> str:
        self.intent_at_call.append(GangNodePool.from_dict(self.store.obj).status.block_purchase)
        bought = super().purchase_capacity_block(offering_id, tags)
        if self.crash:
            raise Crash
        return bought


def controller(
    store: FakePoolStore, engine: FakeEngine, at: datetime = NOW
) -> GangNodePoolReconciler:
    metrics = ControllerMetrics()
    return GangNodePoolReconciler(
        pool_deps(
            settings=SETTINGS,
            kube=store,
            pools=store,
            nodes=FakeInformer(),
            engine=engine,
            stacks=FakeStacks([]),  # the purchase comes before the stack is prepared
            executor=StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics),
            recorder=RecordedEvents(),
            now=lambda: at,
            metrics=metrics,
        )
    )


def claimed_pool() -> FakePoolStore:
    spec = pool_spec(
        count=2,
        instance_type="p5.48xlarge",
        mode=c.MODE_FLEET,
        capacity_block_duration="24h",
        claim=claim(claimed_at="2026-11-30T11:59:00Z"),
    )
    obj = pool(uid="pool-uid", resource_version="1", finalizers=[c.FINALIZER], spec=spec)
    obj["status"] = {"phase": Phase.ACQUIRING}
    return FakePoolStore(obj)


def test_a_controller_killed_right_after_the_purchase_call_buys_one_block() -> None:
    store = claimed_pool()
    engine = CrashingEngine(store)

    with pytest.raises(Crash):
        controller(store, engine).reconcile(ObjectKey("", "pool-a"))
    # The intent was stored before EC2 was asked; its answer never was.
    (intent,) = engine.intent_at_call
    assert intent is not None and intent.offering_id == "cb-5m" and intent.reservation_id is None
    stored = GangNodePool.from_dict(store.obj).status.block_purchase
    assert stored == intent

    # The next controller (EC2 is the same) finds the block by its intent's tag.
    engine.crash = False
    controller(store, engine).reconcile(ObjectKey("", "pool-a"))
    after = GangNodePool.from_dict(store.obj).status.block_purchase
    [(offering, tags, reservation)] = engine.bought  # exactly one block, ever
    assert offering == "cb-5m" and tags[c.TAG_PURCHASE_INTENT] == intent.intent
    assert tags[c.TAG_CLUSTER] == "demo" and tags[c.TAG_POOL] == "pool-a"
    assert after is not None and after.reservation_id == reservation and after.calls == 1


def test_a_lost_purchase_the_listing_does_not_show_yet_is_waited_for_not_bought_again() -> None:
    store = claimed_pool()
    engine = CrashingEngine(store)
    with pytest.raises(Crash):
        controller(store, engine).reconcile(ObjectKey("", "pool-a"))

    # The next controller's tagged look finds nothing: EC2's listing lags behind the purchase.
    engine.crash, engine.lagging = False, True
    for seconds in (1, 15, 30, 45):
        controller(store, engine, NOW + timedelta(seconds=seconds)).reconcile(
            ObjectKey("", "pool-a")
        )
        status = GangNodePool.from_dict(store.obj).status
        assert status.block_purchase is not None and status.block_purchase.reservation_id is None
        assert status.block_purchase.calls == 1 and status.block_refusal is None
        assert len(engine.bought) == 1, "bought again while EC2 may not list the block yet"
    assert status.last_error is not None
    assert "Confirming whether the purchase" in status.last_error.message

    # The listing catches up: the block is adopted, the one bought.
    engine.lagging = False
    controller(store, engine, NOW + timedelta(seconds=60)).reconcile(ObjectKey("", "pool-a"))
    after = GangNodePool.from_dict(store.obj).status.block_purchase
    [(_, _, reservation)] = engine.bought
    assert after is not None and after.reservation_id == reservation and after.calls == 1
