"""The policy a pool buys under: its spec's (the claimant's class's, copied there by the
Workload reconciler) in place of the settings', the settings' for a pool without one, and
nothing sent to EC2 when a class enables buying the installation does not grant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.settings import Settings
from provisioner.cloud.block_offerings import CapacityBlockOffering
from provisioner.controllers.pool.purchase import read_purchase
from tests.support.backends import UNREACHED_BACKEND
from tests.support.block_offerings import offering
from tests.support.fake_engine import FakeEngine
from tests.support.pools import claim, pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOURS = timedelta(hours=1)
CLAIMED = datetime(2026, 11, 30, 11, 59, tzinfo=UTC)


def settings(**block_purchase: Any) -> Settings:
    return Settings.model_validate(
        {
            "cluster_name": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "node_role_arn": pool_spec()["nodeRoleArn"]},
            "block_purchase": block_purchase,
        }
    )


GRANTED = settings(enabled=True, max_upfront_fee_per_gang="600", latest_start="1h")
NOT_GRANTED = settings()
CLASS_POLICY = {"enabled": True, "maxUpfrontFeePerGang": "800", "latestStart": "2h"}


def offer(name: str, start: timedelta, fee: str) -> CapacityBlockOffering:
    return offering(name, NOW + start, fee)


OFFERINGS = (
    offer("cb-5m", timedelta(minutes=5), "700"),
    offer("cb-9m", timedelta(minutes=9), "500"),
)


@dataclass(frozen=True)
class Case:
    name: str
    policy: dict[str, Any] | None  # the pool's spec.purchasePolicy
    settings: Settings
    # Expected: nothing read (None), the offering chosen and the cap and latest start read
    # under, or words of the refusal.
    chosen: str | None = None
    cap: Decimal | None = None
    wait: timedelta | None = None
    refused: str | None = None
    reads: bool = True


CASES = [
    Case(
        "the class's policy wins", CLASS_POLICY, GRANTED, "cb-5m", Decimal(800), timedelta(hours=2)
    ),
    Case(
        "no class policy: the settings'", None, GRANTED, "cb-9m", Decimal(600), timedelta(hours=1)
    ),
    Case("a class turns buying off", {"enabled": False}, GRANTED, reads=False),
    Case("no class policy, buying off", None, NOT_GRANTED, reads=False),
    Case(
        "a class enables buying the installation does not grant",
        CLASS_POLICY,
        NOT_GRANTED,
        refused="does not grant the controller ec2:PurchaseCapacityBlock",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_policy_a_pool_buys_under(case: Case) -> None:
    spec = pool_spec(
        pool="p5",
        count=2,
        instance_type="p5.48xlarge",
        mode="fleet",
        capacity_block_duration="24h",
        gang_class="gpu" if case.policy is not None else None,
        purchase_policy=case.policy,
        claim=claim(claimed_at="2026-11-30T11:59:00Z"),
    )
    engine = FakeEngine(offerings=OFFERINGS)
    obj = GangNodePool.from_dict(pool("p5", uid="pool-uid", spec=spec))
    read = read_purchase(engine, case.settings, obj, NOW)
    if not case.reads:
        assert read is None
        return
    assert read is not None and read.error is None
    if case.refused is not None:
        assert read.refusal is not None and case.refused in read.refusal, read.refusal
        assert "GangClass gpu" in read.refusal and read.choice is None
        return
    assert read.refusal is None and read.choice is not None and read.choice.chosen is not None
    assert read.choice.chosen.offering_id == case.chosen
    assert (read.max_fee, read.latest_start) == (case.cap, CLAIMED + case.wait)
