"""A GangClass's capacityBlockDuration and blockPurchase: the duration a gang asks for, the
policy it is bought under (the class's in place of the settings'), and a class that enables
buying where the installation does not grant it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.api import constants as c
from provisioner.api.class_purchase import ClassBlockPurchase, effective_policy
from provisioner.api.gang_class import (
    FieldSource,
    GangClass,
    class_problems,
    read_gang_shape,
)
from provisioner.api.gangnodepool import GangNodePoolSpec
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShapeError
from tests.support.backends import UNREACHED_BACKEND

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
QUEUE = {c.QUEUE_NAME_LABEL: "gang-queue"}
CLASS_POLICY = {"enabled": True, "maxUpfrontFeePerGang": "800", "maxDuration": "48h"}


def settings(**block_purchase: Any) -> Settings:
    return Settings.model_validate(
        {
            "cluster_name": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
            "block_purchase": block_purchase,
        }
    )


GRANTED = settings(enabled=True, max_upfront_fee_per_gang="100", latest_start="2h")
NOT_GRANTED = settings()


def gang_class(**spec: Any) -> GangClass:
    body = {"instanceType": "p5.48xlarge", "mode": "fleet", **spec}
    return GangClass.from_dict({"metadata": {"name": "gpu"}, "spec": body})


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Expected: the duration asked for (None: none) and who decided it, or refusal words.
    duration: timedelta | None = None
    source: FieldSource = FieldSource.DEFAULT
    refused: tuple[str, ...] = ()


CASES = [
    Case(
        "the class's default duration when the Job names none",
        spec={"capacityBlockDuration": "24h"},
        duration=timedelta(hours=24),
        source=FieldSource.CLASS,
    ),
    Case(
        "the Job's duration wins where the class allows it",
        spec={"capacityBlockDuration": "24h", "jobOverrides": ["capacity-block-duration"]},
        annotations={c.ANN_CAPACITY_BLOCK_DURATION: "48h"},
        duration=timedelta(hours=48),
        source=FieldSource.ANNOTATION,
    ),
    Case(
        "the Job's duration refused where the class does not allow it",
        spec={"capacityBlockDuration": "24h"},
        annotations={c.ANN_CAPACITY_BLOCK_DURATION: "48h"},
        refused=("capacity-block-duration", "spec.jobOverrides"),
    ),
    Case(
        "the class's maxDuration, not the settings', caps the Job's ask",
        spec={
            "blockPurchase": {**CLASS_POLICY, "maxDuration": "24h"},
            "jobOverrides": ["capacity-block-duration"],
        },
        annotations={c.ANN_CAPACITY_BLOCK_DURATION: "48h"},
        refused=("capacity-block-duration", "at most 24h"),
    ),
    Case(
        "a class default longer than the class's maxDuration names the class's field",
        spec={
            "capacityBlockDuration": "48h",
            "blockPurchase": {**CLASS_POLICY, "maxDuration": "24h"},
        },
        refused=("GangClass gpu (spec.capacityBlockDuration)", "at most 24h"),
    ),
    Case(
        "a duration EC2 does not sell is refused naming the class's field",
        spec={"capacityBlockDuration": "25h"},
        refused=("GangClass gpu (spec.capacityBlockDuration)", "EC2 sells no block"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_duration_a_gang_asks_for(case: Case) -> None:
    annotations = {c.ANN_COUNT: "2", **case.annotations}
    read = lambda: read_gang_shape(  # noqa: E731
        QUEUE, annotations, 2, GRANTED, gang_class=gang_class(**case.spec), namespace="ml"
    )
    if case.refused:
        with pytest.raises(GangShapeError) as err:
            read()
        for words in case.refused:
            assert words in str(err.value), str(err.value)
        return
    classed = read()
    assert classed.shape.capacity_block_duration == case.duration
    assert classed.sources["capacity-block-duration"] == case.source


@dataclass(frozen=True)
class PolicyCase:
    name: str
    own: dict[str, Any] | None
    settings: Settings
    # Expected: the effective policy's enabled and cap.
    enabled: bool
    cap: Decimal | None


POLICY_CASES = [
    PolicyCase("the class's policy wins", CLASS_POLICY, GRANTED, True, Decimal(800)),
    PolicyCase("no class policy: the settings'", None, GRANTED, True, Decimal(100)),
    PolicyCase("a class may turn buying off", {"enabled": False}, GRANTED, False, None),
    PolicyCase("no class policy, buying off", None, NOT_GRANTED, False, None),
]


@pytest.mark.parametrize("case", POLICY_CASES, ids=[case.name for case in POLICY_CASES])
def test_the_policy_a_gang_is_bought_under(case: PolicyCase) -> None:
    own = None if case.own is None else ClassBlockPurchase.model_validate(case.own)
    policy = effective_policy(own, case.settings, "p5.48xlarge")
    assert (policy.enabled, policy.max_upfront_fee_per_gang) == (case.enabled, case.cap)
    # Unset fields of a class's policy take the defaults, not the installation's values.
    if own is not None:
        assert policy.latest_start == timedelta(hours=24)


def test_a_class_that_enables_buying_without_the_grant_names_the_fix() -> None:
    buying = gang_class(capacityBlockDuration="24h", blockPurchase=CLASS_POLICY)
    (problem,) = class_problems(buying, NOT_GRANTED)
    assert "spec.blockPurchase.enabled is true" in problem
    assert "ec2:PurchaseCapacityBlock" in problem and "blockPurchase.enabled=true" in problem
    assert class_problems(buying, GRANTED) == []
    off = gang_class(blockPurchase={**CLASS_POLICY, "enabled": False})
    assert class_problems(off, NOT_GRANTED) == []


def test_a_class_policy_is_judged_by_the_settings_rules() -> None:
    with pytest.raises(ValidationError, match="maxUpfrontFeePerGang"):
        gang_class(blockPurchase={"enabled": True})
    with pytest.raises(ValidationError, match="shorter than 24h"):
        gang_class(blockPurchase={"maxDuration": "12h"})
    with pytest.raises(ValidationError, match="maxUpfrontFeePerGang"):
        gang_class(blockPurchase={"maxUpfrontFeePerGang": "a lot"})


def test_the_class_policy_is_read_with_the_shape() -> None:
    buying = gang_class(capacityBlockDuration="24h", blockPurchase=CLASS_POLICY)
    read = read_gang_shape(QUEUE, {}, 2, GRANTED, gang_class=buying, namespace="ml")
    assert read.purchase_policy == buying.spec.block_purchase
    plain = read_gang_shape(QUEUE, {}, 2, GRANTED, gang_class=gang_class(), namespace="ml")
    assert plain.purchase_policy is None


def test_the_pool_spec_records_the_claimants_class_policy() -> None:
    buying = gang_class(capacityBlockDuration="24h", blockPurchase=CLASS_POLICY)
    read = read_gang_shape(QUEUE, {}, 2, GRANTED, gang_class=buying, namespace="ml")
    spec = GangNodePoolSpec.of(read.shape, None, "ml", read=read)
    assert spec.purchase_policy == buying.spec.block_purchase
    assert spec.to_dict()["purchasePolicy"]["maxUpfrontFeePerGang"] == "800"
    # A later claimant whose class sets no policy buys under the settings' again.
    plain = read_gang_shape(QUEUE, {}, 2, GRANTED, gang_class=gang_class(), namespace="ml")
    assert spec.with_claim(None, read=plain).purchase_policy is None
