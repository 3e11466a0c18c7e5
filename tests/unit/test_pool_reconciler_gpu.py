"""What the pool reconciler hands the engine and the stack for a GPU gang, on small fakes.

The reservation's kind comes from EC2's record (the stack's launch template and the
launch both use it), the EFA cards from DescribeInstanceTypes, the placement group from
the stack's outputs; a block not yet started and a launch on a block come back to the
state machine with their times.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolStatus, LaunchInProgress
from provisioner.api.settings import Settings
from provisioner.cloud.errors import CloudError, ErrorKind, ReservationNotActive
from provisioner.cloud.types import (
    AmiChoice,
    InstanceTypeInfo,
    Reservation,
    SubnetRef,
)
from provisioner.controllers.pool.actions import PoolActions
from provisioner.controllers.pool.facts import PassFacts
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.steps import Action, ActionResult, Step
from tests.support import fake_engine
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.pool_reconciler import pool_deps
from tests.support.pools import pool as pool_object
from tests.support.pools import pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/gang-node"
BLOCK = "cr-0fedcba9876543210"
P5 = InstanceTypeInfo("p5.48xlarge", ("x86_64",), True, 32, tuple(range(32)))
M5 = InstanceTypeInfo("m5.large", ("x86_64",), False, 0, (0,))
# The fake's cluster, on an older Kubernetes and the two subnets the launch plans.
CLUSTER = replace(
    fake_engine.CLUSTER, version="1.31", subnet_ids=("subnet-aaaaaaaa", "subnet-bbbbbbbb")
)
BLOCK_END = NOW + timedelta(hours=23)


def ec2_with_block(**overrides: Any) -> FakeEngine:
    """EC2 with the block, the P5 type and two subnets; a launch lands on the block."""
    block = Reservation(
        BLOCK, "capacity-block", "p5.48xlarge", "us-east-1b", 2, 2, "active",
        NOW - timedelta(hours=1), BLOCK_END, "targeted",
    )  # fmt: skip
    fields: dict[str, Any] = {
        "cluster": CLUSTER,
        "type_info": P5,
        "reservations": {BLOCK: block},
        "ami": AmiChoice("ami-0123456789abcdef0", "ssm"),
        "subnets": (
            SubnetRef("subnet-aaaaaaaa", "us-east-1a"),
            SubnetRef("subnet-bbbbbbbb", "us-east-1b"),
        ),
        "block_ends_at": BLOCK_END,
    }
    return FakeEngine(**{**fields, **overrides})


def prepared_stacks() -> FakeStacks:
    return FakeStacks(["pretrain-p5"])


def pool(**spec: Any) -> GangNodePool:
    shape: dict[str, Any] = {
        "pool": "pretrain-p5",
        "count": 2,
        "instance_type": "p5.48xlarge",
        "mode": "fleet",
        "node_role_arn": ROLE,
        "capacity_reservation_id": BLOCK,
        "efa": True,
        "placement_group": "cluster",
        "availability_zones": ["us-east-1b"],
        **spec,
    }
    return GangNodePool.from_dict(pool_object("pretrain-p5", uid="uid-1", spec=pool_spec(**shape)))


def reconciler(engine: FakeEngine, stacks: FakeStacks) -> GangNodePoolReconciler:
    settings = Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {"region": "us-east-1", "nodeRoleArn": ROLE},
            "pulumi": UNREACHED_BACKEND,
        }
    )
    return GangNodePoolReconciler(
        pool_deps(settings=settings, engine=engine, stacks=stacks, now=lambda: NOW)
    )


def run(engine: FakeEngine, stacks: FakeStacks, action: Action, p: GangNodePool) -> ActionResult:
    marker = LaunchInProgress(client_token="uid-1/1", mode="fleet", group="gen-1", started_at=NOW)
    step = Step(action, GangNodePoolStatus(acquire_generation=1, launch_in_progress=marker))
    result = PoolActions(reconciler(engine, stacks)._deps).run(step, p, PassFacts(), p)
    assert result is not None
    return result


def test_the_stack_gets_efa_cards_placement_and_the_reservation_kind_from_ec2() -> None:
    stacks = FakeStacks()
    assert run(ec2_with_block(), stacks, Action.PREPARE_STACK, pool()).ok

    (spec,) = stacks.prepared
    assert spec.efa_network_cards == tuple(range(32))
    assert spec.placement_group and spec.placement_group_name == "atomic-gang-demo-pretrain-p5"
    assert spec.capacity_reservation_id == BLOCK
    assert spec.capacity_reservation_kind == "capacity-block"


def test_efa_on_a_type_without_it_fails_preparation_naming_the_type() -> None:
    stacks = FakeStacks()
    result = run(
        ec2_with_block(type_info=M5), stacks, Action.PREPARE_STACK, pool(instance_type="m5.large")
    )
    assert not result.ok and result.failure is FailureKind.CONFIG
    assert result.reason == "EfaNotSupported" and "m5.large" in result.message
    assert c.ANN_EFA in result.message and stacks.prepared == []


def test_the_launch_names_the_reservation_and_carries_efa_placement_and_zones() -> None:
    engine = ec2_with_block()
    result = run(engine, prepared_stacks(), Action.LAUNCH, pool())

    assert result.ok and result.block_ends_at == BLOCK_END
    (spec,) = engine.launched
    assert spec.capacity_reservation is not None
    assert spec.capacity_reservation.reservation_id == BLOCK
    assert spec.capacity_reservation.kind is None  # the engine reads it from EC2
    assert spec.efa and spec.placement_group_name == "pg-pretrain-p5"
    assert spec.explicit_placement == ("us-east-1b",)
    assert spec.block_release_margin == timedelta(seconds=2100)


@pytest.mark.parametrize(("adopts", "counted"), [(False, "launched"), (True, "adopted")])
def test_a_set_found_already_launched_is_counted_as_adopted_not_bought(
    adopts: bool, counted: str
) -> None:
    engine = ec2_with_block(adopts=adopts)
    pools = reconciler(engine, prepared_stacks())
    marker = LaunchInProgress(client_token="uid-1/1", mode="fleet", group="gen-1", started_at=NOW)
    step = Step(Action.LAUNCH, GangNodePoolStatus(acquire_generation=1, launch_in_progress=marker))
    result = PoolActions(pools._deps).run(step, pool(), PassFacts(), pool())
    assert result is not None and result.ok
    families = {m.name: m for m in pools._metrics.registry.collect()}
    counts = {
        s.labels["result"]: s.value
        for s in families["atomic_gang_acquisitions"].samples
        if s.name.endswith("_total")
    }
    assert counts == {counted: 1.0}


def test_a_block_not_yet_started_comes_back_with_its_start() -> None:
    starts = NOW + timedelta(minutes=20)
    engine = ec2_with_block(
        failing={"acquire": ReservationNotActive("ReservationNotActive", "wait", starts)}
    )
    result = run(engine, prepared_stacks(), Action.LAUNCH, pool())
    assert not result.ok and result.failure is FailureKind.NOT_ACTIVE
    assert result.starts_at == starts


def test_a_reservation_config_error_is_config() -> None:
    err = CloudError(ErrorKind.CONFIG, None, "ReservationNotFound", f"{BLOCK} does not exist")
    result = run(ec2_with_block(failing={"acquire": err}), prepared_stacks(), Action.LAUNCH, pool())
    assert not result.ok and result.failure is FailureKind.CONFIG and BLOCK in result.message
