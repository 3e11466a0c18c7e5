"""A pool releases an instance no set of it holds only when EC2's record proves it ours.

DESIGN §11: tags say what an instance claims to be; its launch token, as EC2 recorded it,
proves it. A pool's pass finds its live instances by tag; those in no set of it (strays)
are released only once `ownership.prove` proves them (a token of this pool object, or one
signed with the cluster's key for this pool name). A look-alike that carries the pool's
tags but no such token stays running and is reported on the pool, once per change.
The same holds for what the pool's destroy finds by tag.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.clock import FakeClock
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud import naming
from provisioner.cloud.naming import OwnershipKey
from provisioner.cloud.ownership import (
    FLEET_ID_TAG,
    FLEET_NOT_DESCRIBED,
    NO_LAUNCH_TOKEN,
    TOKEN_NOT_OURS,
)
from provisioner.cloud.types import InstanceView
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.actions import PoolActions
from provisioner.controllers.pool.facts import PassFacts
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.controllers.pool.steps import Action, Step
from provisioner.kube.resources import ObjectKey
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.instance_views import managed_instance
from tests.support.nodes import node
from tests.support.pool_reconciler import NODE_ROLE_ARN, pool_deps, reconciler_settings
from tests.support.pools import claim, pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ROLE = NODE_ROLE_ARN
KEY = OwnershipKey(b"k" * 32)
SETTINGS = reconciler_settings()
SET_IDS = ("i-00000000000000001", "i-00000000000000002")
# Strays EC2's record proves ours: launched for this pool object (its UID), and launched by
# this cluster for an earlier pool of the same name (signed with the cluster's key).
THIS_POOLS = "i-0000000000000000a"
EARLIER_POOLS = "i-0000000000000000b"
# Look-alikes: the pool's tags, and no proof.
SOMEONE_ELSES_TOKEN = "i-0000000000000000c"
NO_TOKEN = "i-0000000000000000d"
UNDESCRIBED_FLEET = "i-0000000000000000e"
LOOK_ALIKES = (SOMEONE_ELSES_TOKEN, NO_TOKEN, UNDESCRIBED_FLEET)


def token(uid: str, generation: int) -> str:
    return naming.client_token(uid, generation, "subnet-1", key=KEY, cluster="demo", pool="pool-a")


def tagged(iid: str, client_token: str | None = None, **tags: str) -> InstanceView:
    view = managed_instance(iid, cluster="demo", pool="pool-a", group="gen-1")
    return replace(view, client_token=client_token, tags=tags)


def ec2() -> FakeEngine:
    return FakeEngine(
        [
            *(tagged(i, token("pool-uid", 1)) for i in SET_IDS),
            tagged(THIS_POOLS, token("pool-uid", 1)),
            tagged(EARLIER_POOLS, token("a-deleted-pools-uid", 4)),
            tagged(SOMEONE_ELSES_TOKEN, "agp-1-a-token-of-someone-else"),
            tagged(NO_TOKEN),
            tagged(UNDESCRIBED_FLEET, **{FLEET_ID_TAG: "fleet-not-ours"}),
        ]
    )


def satisfied_pool() -> dict[str, Any]:
    status = {
        "phase": Phase.SATISFIED,
        "acquireGeneration": 2,
        "activeGroup": "gen-1",
        "instanceIds": list(SET_IDS),
        "readyNodes": 2,
        "lastStackOperation": "record",
        "recordedGroup": "gen-1",
    }
    spec = pool_spec(count=2, instance_type="m5.large", node_role_arn=ROLE, ami_variant="standard")
    spec["claim"] = claim()
    return pool(
        uid="pool-uid", resource_version="1", finalizers=[c.FINALIZER], spec=spec, status=status
    )


class World:
    def __init__(self) -> None:
        self.store = FakePoolStore(satisfied_pool())
        self.engine = ec2()
        self.recorder = RecordedEvents()
        metrics = ControllerMetrics()
        self.executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics)
        engine: Any = self.engine
        self.deps = pool_deps(
            settings=SETTINGS,
            kube=self.store,
            pools=self.store,
            nodes=FakeInformer(*(node(i, ready=True) for i in SET_IDS)),
            engine=engine,
            index=InstanceIndex(engine, "demo", 10, FakeClock(), metrics),
            stacks=FakeStacks(["pool-a"]),
            executor=self.executor,
            recorder=self.recorder,
            now=lambda: NOW,
            metrics=metrics,
            ownership_key=KEY,
        )
        self.reconciler = GangNodePoolReconciler(self.deps)

    def one_pass(self) -> None:
        self.reconciler.reconcile(ObjectKey("", "pool-a"))
        while self.executor.run_next(0):
            self.reconciler.reconcile(ObjectKey("", "pool-a"))  # save what it left

    def live(self) -> set[str]:
        return {v.instance_id for v in self.engine.fleet.values() if v.state == "running"}

    def events(self, reason: str) -> list[str]:
        return [m for _, r, m in self.recorder.events if r == reason]


def test_only_strays_ec2_proves_ours_are_released_and_look_alikes_are_reported() -> None:
    world = World()
    world.one_pass()

    assert sorted(world.engine.released) == [THIS_POOLS, EARLIER_POOLS]
    assert world.live() == {*SET_IDS, *LOOK_ALIKES}, "a look-alike was terminated"
    (stray,) = world.events(c.EventReason.STRAY_INSTANCES)
    assert THIS_POOLS in stray and EARLIER_POOLS in stray
    assert not any(i in stray for i in LOOK_ALIKES)
    (unproven,) = world.events(c.EventReason.UNPROVEN_INSTANCES)
    for iid, reason in (
        (SOMEONE_ELSES_TOKEN, TOKEN_NOT_OURS),
        (NO_TOKEN, NO_LAUNCH_TOKEN),
        (UNDESCRIBED_FLEET, FLEET_NOT_DESCRIBED),
    ):
        assert f"{iid} ({reason})" in unproven
    assert set(world.engine.fleets_described) == {"fleet-not-ours"}
    status = GangNodePool.from_dict(world.store.obj).status
    assert status.phase == Phase.SATISFIED and status.instance_ids == SET_IDS

    # Reported once per change, never released, whatever the passes that follow.
    world.one_pass()
    world.one_pass()
    assert sorted(world.engine.released) == [THIS_POOLS, EARLIER_POOLS]
    assert world.live() == {*SET_IDS, *LOOK_ALIKES}
    assert len(world.events(c.EventReason.UNPROVEN_INSTANCES)) == 1


def test_a_pools_destroy_terminates_only_what_ec2_proves_ours() -> None:
    world = World()
    pool_obj = GangNodePool.from_dict(world.store.obj)
    destroy = Step(Action.DESTROY_STACK, pool_obj.status)

    result = PoolActions(world.deps).run(destroy, pool_obj, PassFacts(), pool_obj)

    assert result is not None and result.ok, result
    assert world.live() == set(LOOK_ALIKES), "a look-alike was terminated, or ours left"
    assert all(i not in world.engine.released for i in LOOK_ALIKES)
    (unproven,) = world.events(c.EventReason.UNPROVEN_INSTANCES)
    assert all(i in unproven for i in LOOK_ALIKES)
