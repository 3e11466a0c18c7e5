"""A set's record waits its turn behind every prepare, and never holds its pool back.

The record of a launched set in the pool's stack is bookkeeping (Ready never waits for it),
so the stack executor runs it after every queued prepare. While it waits, the pool is
planned as if it were not queued: the pool's passes go on writing what they observe (and
the keep-warm tag goes ahead beside it), and a stack step the pool now needs (a broken
set's release, the pool's deletion) withdraws the record and runs instead, rather than
queue behind the prepares the record waits for.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.clock import FakeClock
from provisioner.api.constants import Phase
from provisioner.cloud.naming import OwnershipKey
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.controllers.pool.steps import Action
from provisioner.kube.resources import ObjectKey
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.instance_views import launched_set
from tests.support.pool_reconciler import NODE_ROLE_ARN, pool_deps, reconciler_settings
from tests.support.pools import claim, pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KEY = OwnershipKey(b"k" * 32)
SET_IDS = ("i-00000000000000001", "i-00000000000000002")
KEY_OF_POOL = ObjectKey("", "pool-a")


def joining_pool() -> dict[str, Any]:
    """A claimed pool whose set of two was just launched: not Ready, not recorded."""
    spec = pool_spec(
        count=2,
        instance_type="m5.large",
        node_role_arn=NODE_ROLE_ARN,
        ami_variant="standard",
        claim=claim(),
    )
    status = {
        "phase": Phase.JOINING,
        "acquireGeneration": 2,
        "activeGroup": "gen-1",
        "instanceIds": list(SET_IDS),
        "readyNodes": 0,
        "lastStackOperation": "prepare",
    }
    return pool(
        uid="pool-uid", resource_version="1", finalizers=[c.FINALIZER], spec=spec, status=status
    )


class World:
    def __init__(self) -> None:
        self.engine = FakeEngine(launched_set(SET_IDS, key=KEY))
        self.stacks = FakeStacks(["pool-a"])
        self.store = FakePoolStore(joining_pool())
        metrics = ControllerMetrics()
        self.executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics)
        engine: Any = self.engine
        self.index = InstanceIndex(engine, "demo", 10, FakeClock(), metrics)
        self.reconciler = GangNodePoolReconciler(
            pool_deps(
                settings=reconciler_settings(),
                kube=self.store,
                pools=self.store,
                nodes=FakeInformer(),
                engine=engine,
                index=self.index,
                stacks=self.stacks,
                executor=self.executor,
                recorder=RecordedEvents(),
                now=lambda: NOW,
                metrics=metrics,
                ownership_key=KEY,
            )
        )

    def queued(self) -> Action | None:
        held = self.executor.state("pool-a")
        assert not held.started, "nothing runs in these tests unless the test runs it"
        return held.pending.step.action if held.pending else None

    def terminate(self, iid: str) -> None:
        """`iid` ended outside the controller, and EC2's next listing shows it."""
        self.engine.fleet[iid] = replace(self.engine.fleet[iid], state="terminated")
        self.index.forget("pool-a")


def test_a_queued_record_is_not_queued_twice_and_leaves_the_pool_its_passes() -> None:
    world = World()
    world.reconciler.reconcile(KEY_OF_POOL)
    assert world.queued() is Action.RECORD_SET
    first = world.executor.state("pool-a").pending

    again = world.reconciler.reconcile(KEY_OF_POOL)

    assert world.executor.state("pool-a").pending is first, "the record was submitted again"
    # Looked at again while it waits, as a joining pool is without a record: its join
    # deadline is written and watched, not left to the record's end.
    assert again.requeue_after is not None and 0 < again.requeue_after <= 5.0
    assert world.store.obj["status"].get("joinDeadline"), world.store.obj["status"]
    assert world.stacks.recorded == []


def test_a_set_broken_while_its_record_waits_is_released_at_once() -> None:
    world = World()
    world.reconciler.reconcile(KEY_OF_POOL)
    assert world.queued() is Action.RECORD_SET
    world.terminate(SET_IDS[0])

    world.reconciler.reconcile(KEY_OF_POOL)

    assert world.queued() is Action.RELEASE_SET, "the release waits behind the record"
    assert world.executor.run_next(0) and not world.executor.run_next(0)
    assert world.stacks.recorded == [], "the withdrawn record ran"
    assert SET_IDS[1] in world.engine.released, "the rest of the set still runs"


def test_a_pool_deleted_while_its_record_waits_goes_without_waiting_for_it() -> None:
    world = World()
    world.reconciler.reconcile(KEY_OF_POOL)
    assert world.queued() is Action.RECORD_SET
    world.store.obj["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:59Z"
    world.store.changed()

    world.reconciler.reconcile(KEY_OF_POOL)

    assert world.queued() is Action.DESTROY_STACK, "the pool's release waits behind the record"
    assert world.executor.run_next(0) and not world.executor.run_next(0)
    assert world.stacks.recorded == [], "the withdrawn record ran"
    assert world.stacks.destroyed == ["pool-a"]
    assert set(SET_IDS) <= set(world.engine.released), "the unrecorded set still runs"


def test_a_set_kept_warm_while_its_record_waits_gets_its_tag_and_keeps_its_record() -> None:
    world = World()
    world.reconciler.reconcile(KEY_OF_POOL)
    assert world.queued() is Action.RECORD_SET
    del world.store.obj["spec"]["claim"]  # the gang finished; its Workload let go
    world.store.changed()

    world.reconciler.reconcile(KEY_OF_POOL)  # claim dropped: keep it warm
    assert world.store.obj["status"]["phase"] == Phase.KEEP_WARM
    world.reconciler.reconcile(KEY_OF_POOL)  # the window onto the instances' tag

    assert [ids for ids, _ in world.engine.keep_warm_tags] == [SET_IDS]
    assert world.queued() is Action.RECORD_SET, "the tag took the record out of the queue"
    assert world.executor.run_next(0)
    assert world.stacks.recorded == [("pool-a", "gen-1", SET_IDS)]
