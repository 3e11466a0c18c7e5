"""What the pool reconciler hands the engine and the stack for a GPU gang, on small fakes.

The reservation's kind comes from EC2's record (the stack's launch template and the
launch both use it), the EFA cards from DescribeInstanceTypes, the placement group from
the stack's outputs; a block not yet started and a launch on a block come back to the
state machine with their times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolStatus, LaunchInProgress
from provisioner.api.settings import Settings
from provisioner.cloud.errors import CloudError, ErrorKind, ReservationNotActive
from provisioner.cloud.types import (
    AmiChoice,
    ClusterInfo,
    InstanceTypeInfo,
    LaunchResult,
    LaunchSpec,
    Reservation,
    SubnetRef,
)
from provisioner.controllers.gangnodepool import GangNodePoolReconciler
from provisioner.controllers.pool_actions import PoolActions
from provisioner.controllers.pool_facts import PassFacts
from provisioner.controllers.pool_steps import Action, ActionResult, Step
from stacks.spec import PoolSpec
from tests.support.backends import UNREACHED_BACKEND
from tests.support.pool_reconciler import pool_deps

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/gang-node"
BLOCK = "cr-0fedcba9876543210"
P5 = InstanceTypeInfo("p5.48xlarge", ("x86_64",), True, 32, tuple(range(32)))
M5 = InstanceTypeInfo("m5.large", ("x86_64",), False, 0, (0,))
CLUSTER = ClusterInfo(
    name="demo",
    arn=None,
    status="ACTIVE",
    version="1.31",
    endpoint="https://demo.example",
    certificate_authority="Q0E=",
    service_cidr="10.100.0.0/16",
    vpc_id="vpc-1",
    subnet_ids=("subnet-aaaaaaaa", "subnet-bbbbbbbb"),
    security_group_ids=("sg-1",),
)
BLOCK_END = NOW + timedelta(hours=23)


@dataclass
class FakeEngine:
    info: InstanceTypeInfo = P5
    acquire_raises: Exception | None = None
    launched: list[LaunchSpec] = field(default_factory=list)
    # The generation's set is already in EC2 (a re-issued launch finds it by tag).
    adopts: bool = False

    def cluster(self, name: str) -> ClusterInfo:
        return CLUSTER

    def resolve_ami(self, **_: Any) -> AmiChoice:
        return AmiChoice("ami-0123456789abcdef0", "ssm")

    def plan_subnets(self, **_: Any) -> tuple[SubnetRef, ...]:
        return (
            SubnetRef("subnet-aaaaaaaa", "us-east-1a"),
            SubnetRef("subnet-bbbbbbbb", "us-east-1b"),
        )

    def instance_type(self, instance_type: str) -> InstanceTypeInfo:
        return self.info

    def reservation(self, reservation_id: str) -> Reservation:
        return Reservation(
            reservation_id, "capacity-block", "p5.48xlarge", "us-east-1b", 2, 2, "active",
            NOW - timedelta(hours=1), BLOCK_END, "targeted",
        )  # fmt: skip

    def acquire(self, spec: LaunchSpec) -> LaunchResult:
        self.launched.append(spec)
        if self.acquire_raises is not None:
            raise self.acquire_raises
        ids = tuple(f"i-{n:017x}" for n in range(1, spec.count + 1))
        return LaunchResult(
            ids,
            spec.mode,
            spec.group,
            "tok",
            spec.subnets[:1],
            adopted=self.adopts,
            capacity_block_ends_at=BLOCK_END,
        )


@dataclass
class FakeStacks:
    prepared: list[PoolSpec] = field(default_factory=list)

    def outputs(self, pool: str) -> Any:
        # The fields of PoolOutputs the launch reads.
        return SimpleNamespace(
            launch_template_id="lt-0123456789abcdef0",
            placement_group_name=f"pg-{pool}",
            spec=SimpleNamespace(instance_profile_name=None),
        )

    def prepare(self, spec: PoolSpec) -> dict[str, Any]:
        self.prepared.append(spec)
        return {}


def pool(**spec: Any) -> GangNodePool:
    return GangNodePool.from_dict(
        {
            "metadata": {"name": "pretrain-p5", "uid": "uid-1"},
            "spec": {
                "pool": "pretrain-p5",
                "count": 2,
                "instanceType": "p5.48xlarge",
                "mode": "fleet",
                "region": "us-east-1",
                "nodeRoleArn": ROLE,
                "keepWarmTTL": "10m",
                "maxLifetime": "4h",
                "amiVariant": "nvidia",
                "capacityReservationId": BLOCK,
                "efa": True,
                "placementGroup": "cluster",
                "availabilityZones": ["us-east-1b"],
                **spec,
            },
        }
    )


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
    result = PoolActions(reconciler(engine, stacks)._deps).run(step, p, PassFacts(), {})
    assert result is not None
    return result


def test_the_stack_gets_efa_cards_placement_and_the_reservation_kind_from_ec2() -> None:
    stacks = FakeStacks()
    assert run(FakeEngine(), stacks, Action.PREPARE_STACK, pool()).ok

    (spec,) = stacks.prepared
    assert spec.efa_network_cards == tuple(range(32))
    assert spec.placement_group and spec.placement_group_name == "atomic-gang-demo-pretrain-p5"
    assert spec.capacity_reservation_id == BLOCK
    assert spec.capacity_reservation_kind == "capacity-block"


def test_efa_on_a_type_without_it_fails_preparation_naming_the_type() -> None:
    stacks = FakeStacks()
    result = run(FakeEngine(info=M5), stacks, Action.PREPARE_STACK, pool(instanceType="m5.large"))
    assert not result.ok and result.failure is FailureKind.CONFIG
    assert result.reason == "EfaNotSupported" and "m5.large" in result.message
    assert c.ANN_EFA in result.message and stacks.prepared == []


def test_the_launch_names_the_reservation_and_carries_efa_placement_and_zones() -> None:
    engine = FakeEngine()
    result = run(engine, FakeStacks(), Action.LAUNCH, pool())

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
    engine = FakeEngine(adopts=adopts)
    pools = reconciler(engine, FakeStacks())
    marker = LaunchInProgress(client_token="uid-1/1", mode="fleet", group="gen-1", started_at=NOW)
    step = Step(Action.LAUNCH, GangNodePoolStatus(acquire_generation=1, launch_in_progress=marker))
    result = PoolActions(pools._deps).run(step, pool(), PassFacts(), {})
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
    engine = FakeEngine(acquire_raises=ReservationNotActive("ReservationNotActive", "wait", starts))
    result = run(engine, FakeStacks(), Action.LAUNCH, pool())
    assert not result.ok and result.failure is FailureKind.NOT_ACTIVE
    assert result.starts_at == starts


def test_a_reservation_config_error_is_config() -> None:
    err = CloudError(ErrorKind.CONFIG, None, "ReservationNotFound", f"{BLOCK} does not exist")
    result = run(FakeEngine(acquire_raises=err), FakeStacks(), Action.LAUNCH, pool())
    assert not result.ok and result.failure is FailureKind.CONFIG and BLOCK in result.message
