"""A deleted pool lets go of every instance, whatever its stack has recorded.

EC2 refuses to delete a placement group that still holds instances ("Before you can delete
a placement group, it must contain no instances": Placement groups, "Delete a placement
group", Amazon EC2 User Guide). A pool deleted between its launch and the stack's record of
that set holds instances the stack's destroy does not terminate; a destroy that ran before
they went failed on the group at every try, and the pool kept its finalizer, and they ran,
for as long as anyone let them. The stack here behaves as EC2 makes it behave: its destroy
terminates the set it recorded and fails while any other instance of the pool runs.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.clock import FakeClock
from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud.naming import OwnershipKey
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from provisioner.pulumi_driver.port import StackError
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.instance_views import launched_set
from tests.support.pool_reconciler import NODE_ROLE_ARN, pool_deps, reconciler_settings
from tests.support.pools import pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ROLE = NODE_ROLE_ARN
KEY = OwnershipKey(b"k" * 32)
SETTINGS = reconciler_settings()
SET_IDS = ("i-00000000000000001", "i-00000000000000002")
LIVE = frozenset({"pending", "running"})


class PlacementGroupStacks(FakeStacks):
    """A stack whose destroy ends with DeletePlacementGroup: it terminates the set it
    recorded, then fails while any other instance of the pool is live. `timeline` says
    what was terminated, and when the destroy ran, in order."""

    def __init__(self, engine: FakeEngine, timeline: list[str], **failing: Exception) -> None:
        super().__init__(["pool-a"], failing=failing)
        self._engine, self.timeline = engine, timeline
        self.record: tuple[str, ...] = ()

    def record_instance_set(self, pool: str, group: str, instance_ids: Any) -> None:
        super().record_instance_set(pool, group, instance_ids)
        self.record = tuple(instance_ids)

    def destroy(self, pool: str) -> None:
        for iid in self.record:
            if self._engine.fleet[iid].state in LIVE:
                self._engine.fleet[iid] = replace(self._engine.fleet[iid], state="shutting-down")
        in_use = [i for i, v in self._engine.fleet.items() if v.state in LIVE]
        self.timeline.append(f"destroy (in use {len(in_use)})")
        if in_use:
            self.destroyed.append(pool)
            raise StackError(
                "PlacementGroupInUse",
                f"DeletePlacementGroup pg-{pool} failed (InvalidPlacementGroup.InUse)",
                kind=FailureKind.RETRYABLE,
            )
        super().destroy(pool)


class TimedEngine(FakeEngine):
    def __init__(self, timeline: list[str], *args: Any) -> None:
        super().__init__(*args)
        self.timeline = timeline

    def release(self, instance_ids: Any, *, known_since: datetime | None = None) -> Any:
        live = [i for i in instance_ids if i in self.fleet and self.fleet[i].state in LIVE]
        if live:
            self.timeline.append(f"terminate {len(live)}")
        return super().release(instance_ids, known_since=known_since)


def deleted_joining_pool() -> dict[str, Any]:
    status = {
        "phase": Phase.JOINING,
        "acquireGeneration": 2,
        "activeGroup": "gen-1",
        "instanceIds": list(SET_IDS),
        "readyNodes": 0,
        "lastStackOperation": "prepare",
    }
    spec = pool_spec(count=2, instance_type="m5.large", node_role_arn=ROLE, ami_variant="standard")
    return pool(
        uid="pool-uid",
        resource_version="1",
        finalizers=[c.FINALIZER],
        deletion_timestamp="2026-11-30T11:59:59Z",
        spec=spec,
        status=status,
    )


class World:
    def __init__(self, *, recorded: bool = False, **failing: Exception) -> None:
        self.timeline: list[str] = []
        self.engine = TimedEngine(self.timeline, launched_set(SET_IDS, key=KEY))
        self.stacks = PlacementGroupStacks(self.engine, self.timeline, **failing)
        if recorded:
            self.stacks.record_instance_set("pool-a", "gen-1", SET_IDS)
        self.store = FakePoolStore(deleted_joining_pool())
        metrics = ControllerMetrics()
        self.executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics)
        engine: Any = self.engine
        deps = pool_deps(
            settings=SETTINGS,
            kube=self.store,
            pools=self.store,
            nodes=FakeInformer(),
            engine=engine,
            index=InstanceIndex(engine, "demo", 10, FakeClock(), metrics),
            stacks=self.stacks,
            executor=self.executor,
            recorder=RecordedEvents(),
            now=lambda: NOW,
            metrics=metrics,
            ownership_key=KEY,
        )
        self.reconciler = GangNodePoolReconciler(deps)

    def one_pass(self) -> None:
        self.reconciler.reconcile(ObjectKey("", "pool-a"))
        while self.executor.run_next(0):
            self.reconciler.reconcile(ObjectKey("", "pool-a"))  # save what it left

    def live(self) -> set[str]:
        return {i for i, v in self.engine.fleet.items() if v.state in LIVE}

    def finalizers(self) -> list[str]:
        return list(self.store.obj["metadata"].get("finalizers") or [])


def test_a_pool_deleted_before_its_set_is_recorded_terminates_it_before_the_stack_goes() -> None:
    world = World()

    world.one_pass()
    world.one_pass()

    assert world.live() == set(), "the unrecorded set still runs"
    assert world.timeline[:2] == ["terminate 2", "destroy (in use 0)"], world.timeline
    assert world.stacks.destroyed == ["pool-a"], "the destroy was refused (or tried again)"
    assert c.FINALIZER not in world.finalizers()


def test_a_recorded_set_goes_the_same_way_and_the_stacks_delete_finds_it_gone() -> None:
    """`release` cleans a set's ENIs as the stack's delete of its set would: the destroy
    need not tell the two kinds of set apart, nor read the stack first."""
    world = World(recorded=True)

    world.one_pass()
    world.one_pass()

    assert world.live() == set()
    assert world.timeline[:2] == ["terminate 2", "destroy (in use 0)"], world.timeline
    assert c.FINALIZER not in world.finalizers()


def test_a_state_backend_that_cannot_be_read_keeps_no_deleted_pools_set_running() -> None:
    down = StackError("BackendUnavailable", "S3 GetObject answered 500", kind=FailureKind.RETRYABLE)
    world = World(outputs=down)

    world.one_pass()

    assert world.live() == set(), "the set runs while the backend is down"
    assert world.timeline == ["terminate 2"], world.timeline
    assert c.FINALIZER in world.finalizers(), "the stack is not destroyed yet"
    status = GangNodePool.from_dict(world.store.obj).status
    assert status.phase == Phase.RELEASING and status.last_error is not None
    assert status.last_error.reason == "BackendUnavailable"


def test_the_pass_that_takes_the_finalizer_off_writes_no_status_before() -> None:
    """The object goes with its finalizer: an Idle phase written just before is read by no
    one, and its watch event would start one more pass, with an EC2 listing."""
    world = World(recorded=True)
    world.one_pass()  # the destroy, and the pass that saves its result
    assert c.FINALIZER in world.finalizers() and world.stacks.destroyed == ["pool-a"]
    written: list[Any] = []
    patch_status = world.store.patch_status

    def recording(ref: Any, name: str, patch: Any, **kwargs: Any) -> Any:
        written.append(patch)
        return patch_status(ref, name, patch, **kwargs)

    world.store.patch_status = recording  # type: ignore[method-assign]

    world.one_pass()

    assert c.FINALIZER not in world.finalizers()
    assert written == [], f"status written before the finalizer went: {written}"
