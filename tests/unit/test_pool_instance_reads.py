"""Which listing a pool's pass reads: the shared snapshot when settled, EC2 when in flight.

The GangNodePool reconciler runs over small fakes (the pool object as apiserver and cache
hold it, Nodes, a prepared stack, an engine that counts `find_managed` by pool and state
set) with a real `InstanceIndex` on a `FakeClock`. A settled pool's passes share one
snapshot; a pool in flight lists its own instances on every pass, as before the index; our
own release makes the pool's next read fresh; a pass that waits on the pool's stack
operation, or saves its result, lists nothing of its own; and a settled pool notices an
instance EC2 lost within the refresh interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.clock import FakeClock
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud import naming
from provisioner.cloud.types import InstanceView
from provisioner.controllers.instance_index import CHANGED_STATES, OBSERVED_STATES, InstanceIndex
from provisioner.controllers.launch_budget import LaunchBudget
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.actions import PoolActions
from provisioner.controllers.pool.facts import PassFacts
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler, reads_fresh
from provisioner.controllers.pool.stack_executor import Operation, StackExecutor
from provisioner.controllers.pool.steps import Action, ActionResult, Step
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
INTERVAL = 10
SETTINGS = reconciler_settings(
    instance_index_refresh_seconds=INTERVAL,
)
IDS = ("i-00000000000000001", "i-00000000000000002")
CLAIM = claim()
SET = {
    "acquireGeneration": 2,
    "activeGroup": "gen-1",
    "instanceIds": list(IDS),
    "lastStackOperation": "record",
    "recordedGroup": "gen-1",
}
SATISFIED = {**SET, "phase": Phase.SATISFIED, "readyNodes": 2}
JOINING = {**SET, "phase": Phase.JOINING, "joinDeadline": "2026-11-30T12:05:00Z"}
WARM = {**SET, "phase": Phase.KEEP_WARM, "keepWarmUntil": "2026-11-30T12:10:00Z"}


def pool_object(status: Mapping[str, Any], claim: bool = True) -> dict[str, Any]:
    spec = pool_spec(
        count=2,
        instance_type="m5.large",
        node_role_arn=ROLE,
        ami_variant="standard",
        claim=CLAIM if claim else None,
    )
    return pool(
        uid="pool-uid", resource_version="1", finalizers=[c.FINALIZER], spec=spec, status=status
    )


def instance(iid: str, state: str = "running") -> InstanceView:
    """One of the pool's set, with the launch token EC2 recorded for it: a listing that
    shows it after the set is released shows a stray the pool may release."""
    view = managed_instance(iid, cluster="demo", pool="pool-a", state=state)
    return replace(view, client_token=naming.client_token("pool-uid", 1, "subnet-1"))


def fake_engine() -> FakeEngine:
    """EC2 holding the pool's set, running."""
    return FakeEngine([instance(iid) for iid in IDS])


class World:
    def __init__(
        self,
        status: Mapping[str, Any],
        ready: bool,
        claim: bool = True,
        tag_budget: LaunchBudget | None = None,
    ) -> None:
        self.store = FakePoolStore(pool_object(status, claim))
        self.engine = fake_engine()
        self.clock = FakeClock()
        self.metrics = ControllerMetrics()
        self.recorder = RecordedEvents()
        self.executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=self.metrics)
        engine: Any = self.engine
        self.index = index = InstanceIndex(engine, "demo", INTERVAL, self.clock, self.metrics)
        self.reconciler = GangNodePoolReconciler(
            pool_deps(
                settings=SETTINGS,
                kube=self.store,
                pools=self.store,
                nodes=FakeInformer(*(node(iid, ready=ready) for iid in IDS)),
                engine=engine,
                index=index,
                stacks=FakeStacks(["pool-a"]),
                executor=self.executor,
                recorder=self.recorder,
                now=lambda: NOW,
                metrics=self.metrics,
                tag_budget=tag_budget,
            )
        )

    def observed(self) -> list[str | None]:
        """The pool each pass's listing asked for (None: the shared snapshot)."""
        observed = (OBSERVED_STATES, CHANGED_STATES)
        return [x.pool for x in self.engine.listings if x.states in observed]

    def one_pass(self) -> None:
        self.reconciler.reconcile(ObjectKey("", "pool-a"))


def test_a_satisfied_pools_passes_share_one_snapshot() -> None:
    world = World(SATISFIED, ready=True)
    for _ in range(3):
        world.one_pass()
    assert world.observed() == [None]
    assert world.store.obj["status"]["phase"] == Phase.SATISFIED


def test_a_joining_pools_node_events_share_the_index() -> None:
    """Each Node event of a joining set is a pass; none of them lists EC2 again."""
    world = World(JOINING, ready=False)
    for _ in range(3):
        world.one_pass()
    assert world.observed() == [None]
    assert world.store.obj["status"]["phase"] == Phase.JOINING


def test_a_joining_pool_asks_ec2_when_the_index_misses_part_of_its_set() -> None:
    """A snapshot from before the launch, or an EC2 that lists a launch late, does not
    hold every member: the pass asks EC2 for the pool, and the set goes Satisfied on it."""
    world = World(JOINING, ready=True)
    late = world.engine.fleet.pop(IDS[1])  # EC2 does not list it yet
    world.one_pass()
    assert world.observed() == [None, "pool-a"]
    assert world.store.obj["status"]["phase"] == Phase.JOINING, "one member is not live"

    world.engine.fleet[IDS[1]] = late
    world.one_pass()
    assert world.observed() == [None, "pool-a", "pool-a"], "the snapshot is not stale yet"
    assert world.store.obj["status"]["phase"] == Phase.SATISFIED

    world.one_pass()
    assert world.observed() == [None, "pool-a", "pool-a"], "the pool's entry holds the set"


def test_a_settled_pool_notices_a_lost_instance_within_the_interval() -> None:
    world = World(SATISFIED, ready=True)
    world.one_pass()
    world.engine.fleet[IDS[0]] = instance(IDS[0], "terminated")  # EC2 took it back
    world.one_pass()
    assert "releaseInProgress" not in world.store.obj["status"], "the snapshot is not stale yet"

    world.clock.advance(INTERVAL)
    world.one_pass()
    assert world.store.obj["status"]["releaseInProgress"]["reason"] == c.EventReason.GANG_BROKEN
    assert world.observed() == [None, None]


def test_our_own_release_makes_the_pools_next_read_fresh() -> None:
    world = World(WARM, ready=True, claim=False)
    world.one_pass()  # the snapshot: the set running, warm
    # The release a stack executor thread runs for the pool, and the Idle status its
    # result leaves (the marker and the settle pass aside).
    pool = GangNodePool.from_dict(world.store.obj)
    release = Step(Action.RELEASE_SET, pool.status, release_ids=IDS)
    result = PoolActions(world.reconciler._deps).run(release, pool, PassFacts(), pool)
    assert result is not None and result.ok and world.engine.released == list(IDS)
    world.store.obj["status"] = {"phase": Phase.IDLE, "idleSince": "2026-11-30T12:00:00Z"}
    world.store.changed()

    world.one_pass()
    world.one_pass()
    # From the snapshot the set would still run, as instances no set owns: strays.
    assert c.EventReason.STRAY_INSTANCES not in world.recorder.reasons
    assert c.EventReason.UNPROVEN_INSTANCES not in world.recorder.reasons
    assert "releaseInProgress" not in world.store.obj["status"]
    assert world.observed() == [None, "pool-a"], "fresh once, then the pool's own entry"


def test_a_claim_on_a_warm_set_is_satisfied_from_the_index() -> None:
    """The warm path lists nothing of its own: the set's Nodes are Ready now, and the
    shared listing is at most the interval old."""
    world = World(WARM, ready=True, claim=False)
    world.one_pass()  # the snapshot, taken by the pool's keep-warm pass
    world.store.obj["spec"]["claim"] = CLAIM
    world.store.changed()
    world.one_pass()
    assert world.store.obj["status"]["phase"] == Phase.SATISFIED
    assert world.observed() == [None]


def test_a_claim_on_a_warm_set_the_reaper_just_ended_is_not_satisfied() -> None:
    """The reaper's termination makes the pool's next read fresh (as it tells the index),
    so the claim meets the set as EC2 has it now, not as the snapshot had it."""
    world = World(WARM, ready=True, claim=False)
    world.one_pass()
    for iid in IDS:  # the reaper: keep-warm long expired, the set terminated
        world.engine.fleet[iid] = instance(iid, "shutting-down")
    world.index.forget("pool-a")
    world.store.obj["spec"]["claim"] = CLAIM
    world.store.changed()
    world.one_pass()
    assert world.store.obj["status"]["phase"] != Phase.SATISFIED
    assert world.observed() == [None, "pool-a"]


def test_a_pool_waiting_on_its_destroy_lists_nothing_of_its_own() -> None:
    """The passes of a deleted pool while its destroy runs (Node and status events) act
    on no instance: they read the index. The pass that saves the result finds the pool
    forgotten by the destroy, so it, like the pass after, meets EC2 as it is now."""
    world = World(SATISFIED, ready=True)
    world.store.obj["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    world.store.changed()
    world.one_pass()  # plans the destroy from a fresh listing; the executor holds it
    assert world.executor.state("pool-a").pending is not None
    assert world.observed() == ["pool-a"]

    for _ in range(3):
        world.one_pass()
    assert world.observed() == ["pool-a", None], "one shared snapshot, no listing per pass"

    assert world.executor.run_next(timeout=1)
    world.one_pass()  # saves the destroy's result
    assert world.store.obj["status"]["lastStackOperation"] == "destroy"
    assert world.observed() == ["pool-a", None, "pool-a"]


def test_the_pass_that_saves_a_prepare_lists_nothing_of_its_own() -> None:
    """An acquiring pool's prepare ended: saving its result acts on no instance (the
    launch, on the pass after, lists EC2 first)."""
    world = World({"phase": Phase.ACQUIRING, "acquireGeneration": 1}, ready=False)
    pool = GangNodePool.from_dict(world.store.obj)
    prepare = Step(Action.PREPARE_STACK, pool.status)
    assert world.executor.submit(Operation("pool-a", prepare, lambda: ActionResult(True)))
    assert world.executor.run_next(timeout=1)
    assert world.executor.state("pool-a").finished is not None

    world.one_pass()
    assert world.store.obj["status"]["lastStackOperation"] == "prepare"
    assert world.observed() == [None]


def test_the_fake_engine_resets() -> None:
    engine = fake_engine()
    engine.release(IDS)
    engine.reset()
    assert engine.released == [] and engine.find_managed("demo", "pool-a")[0].state == "running"


MARKER_LAUNCH = {
    "launchInProgress": {
        "clientToken": "pool-uid/2",
        "mode": "runinstances",
        "group": "gen-2",
        "startedAt": "2026-11-30T12:00:00Z",
    }
}
MARKER_RELEASE = {"releaseInProgress": {"startedAt": "2026-11-30T12:00:00Z", "reason": "Released"}}


@pytest.mark.parametrize(
    ("phase", "claimed", "extra", "fresh"),
    [
        (Phase.IDLE, False, {}, False),
        (Phase.SATISFIED, True, {}, False),
        (Phase.KEEP_WARM, False, {}, False),
        (Phase.ACQUIRING, True, {}, True),
        (Phase.JOINING, True, {}, False),
        (Phase.JOINING, False, {}, False),
        (Phase.RELEASING, False, {}, True),
        # A settled phase whose claim just changed: the claim acts on no instance.
        (Phase.IDLE, True, {}, False),
        (Phase.SATISFIED, False, {}, False),
        (Phase.KEEP_WARM, True, {}, False),
        # Markers of an action under way, whatever the phase says.
        (Phase.ACQUIRING, True, MARKER_LAUNCH, True),
        (Phase.SATISFIED, True, MARKER_RELEASE, True),
        (Phase.IDLE, False, MARKER_RELEASE, True),
        (Phase.SATISFIED, True, {"deletionTimestamp": "2026-11-30T12:00:00Z"}, True),
    ],
)
def test_which_pools_read_fresh(
    phase: str, claimed: bool, extra: dict[str, Any], fresh: bool
) -> None:
    obj = pool_object({**SATISFIED, "phase": phase}, claim=claimed)
    if "deletionTimestamp" in extra:
        obj["metadata"]["deletionTimestamp"] = extra["deletionTimestamp"]
    else:
        obj["status"].update(extra)
    assert reads_fresh(GangNodePool.from_dict(obj)) is fresh
