"""The launch marker holds the ClientTokens the launch then sends, in both modes: a pass of
the real pool reconciler writes the marker, and the engine's record of the launch shows the
token EC2 received. A marker of an older controller (`<uid>/<generation>`) still resumes,
and a launch resumed after a crash sends the same token again.

That `EngineOps.launch_tokens` names the tokens the real engine's requests carry is
`tests/unit/test_cloud_launch_tokens.py`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool, LaunchInProgress
from provisioner.api.settings import LaunchBudgetSettings
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.types import LaunchResult, LaunchSpec, SubnetRef
from provisioner.controllers.launch_budget import CUBIC_BETA, LaunchBudget, LaunchCost
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.facts import desired_spec, gather_launch_facts
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from provisioner.kube.workqueue import Result
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.pool_reconciler import pool_deps, reconciler_settings
from tests.support.pools import claim, pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SETTINGS = reconciler_settings()
# Two subnets: runinstances mode has a token for each, fleet mode one for the fleet.
SUBNETS = (SubnetRef("subnet-1", "us-east-1a"), SubnetRef("subnet-2", "us-east-1b"))
MODES = (c.MODE_RUNINSTANCES, c.MODE_FLEET)


class Crash(BaseException):
    """The controller's process ending mid-pass (not an error any code handles)."""


class WitnessEngine(FakeEngine):
    """The fake engine, which also records the pool's marker as stored when EC2 is asked."""

    def __init__(self, store: FakePoolStore, **kwargs: Any) -> None:
        super().__init__(subnets=SUBNETS, **kwargs)
        self.store = store
        self.marker_at_launch: list[LaunchInProgress | None] = []
        # The process dies once EC2 has the request, before the answer is saved.
        self.crash = False

    def acquire(self, spec: LaunchSpec) -> LaunchResult:
        stored = GangNodePool.from_dict(self.store.obj)
        self.marker_at_launch.append(stored.status.launch_in_progress)
        result = super().acquire(spec)
        if self.crash:
            raise Crash
        return result


class TodaysStacks(FakeStacks):
    """A stack prepared from today's inputs, so the pass launches rather than prepares."""

    def __init__(self, engine: FakeEngine, pool_obj: Mapping[str, Any]) -> None:
        super().__init__(["pool-a"])
        shape = GangNodePool.from_dict(pool_obj).spec.shape()
        self._spec = desired_spec(
            SETTINGS, "pool-a", shape, gather_launch_facts(engine, SETTINGS, shape)
        )

    def outputs(self, pool: str) -> Any:
        found = super().outputs(pool)
        return None if found is None else SimpleNamespace(**{**vars(found), "spec": self._spec})


class World:
    def __init__(
        self,
        mode: str,
        status: Mapping[str, Any],
        budget: LaunchBudget | None = None,
        failing: Mapping[str, Exception] | None = None,
    ) -> None:
        self.now = NOW
        spec = pool_spec(count=2, instance_type="m5.large", mode=mode, claim=claim())
        obj = pool(uid="pool-uid", resource_version="1", finalizers=[c.FINALIZER], spec=spec)
        obj["status"] = {"phase": Phase.ACQUIRING, "acquireGeneration": 3, **status}
        self.store = FakePoolStore(obj)
        self.engine = WitnessEngine(self.store, failing=failing)
        metrics = ControllerMetrics()
        self.reconciler = GangNodePoolReconciler(
            pool_deps(
                settings=SETTINGS,
                kube=self.store,
                pools=self.store,
                nodes=FakeInformer(),
                engine=self.engine,
                stacks=TodaysStacks(self.engine, obj),
                executor=StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics),
                recorder=RecordedEvents(),
                now=lambda: self.now,
                metrics=metrics,
                budget=budget,
            )
        )

    def one_pass(self) -> Result:
        return self.reconciler.reconcile(ObjectKey("", "pool-a"))

    def marker_sent(self) -> tuple[LaunchInProgress, str]:
        """The marker stored when EC2 was asked, and the token EC2 received."""
        (marker,) = self.engine.marker_at_launch
        (sent,) = self.engine.sent_tokens
        assert marker is not None, "the launch was made without a marker"
        return marker, sent


def tokens_for(mode: str) -> tuple[str, ...]:
    """This generation's tokens as the engine derives them (signed by the real one)."""
    discriminators = ("fleet",) if mode == c.MODE_FLEET else ("subnet-1", "subnet-2")
    spec = LaunchSpec(
        pool_name="pool-a",
        pool_uid="pool-uid",
        acquire_generation=3,
        cluster_name="demo",
        count=2,
        instance_type="m5.large",
        mode=mode,
        subnets=SUBNETS,
    )
    return tuple(spec.client_token(d) for d in discriminators)


@pytest.mark.parametrize("mode", MODES)
def test_the_marker_persisted_before_a_launch_holds_the_token_ec2_receives(mode: str) -> None:
    world = World(mode, {})
    world.one_pass()

    marker, sent = world.marker_sent()
    assert marker.client_token == sent
    assert marker.client_tokens == tokens_for(mode) and marker.client_tokens[0] == sent
    assert marker.group == "gen-3" and marker.mode == mode
    # The launch went to the subnets the pass planned, which the tokens were derived from.
    assert world.engine.launched[0].subnets == SUBNETS
    assert GangNodePool.from_dict(world.store.obj).status.phase == Phase.JOINING


@pytest.mark.parametrize("mode", MODES)
def test_an_older_controllers_marker_resumes_and_says_the_token_sent(mode: str) -> None:
    old = {"clientToken": "pool-uid/3", "mode": mode, "group": "gen-3"}
    world = World(mode, {"launchInProgress": {**old, "startedAt": "2026-11-30T11:00:00Z"}})
    world.one_pass()

    marker, sent = world.marker_sent()
    assert (marker.client_token, marker.client_tokens) == (sent, tokens_for(mode))
    # Still the same launch: its generation, group and start.
    assert marker.group == "gen-3" and marker.started_at == datetime(
        2026, 11, 30, 11, 0, tzinfo=UTC
    )
    assert world.engine.launched[0].acquire_generation == 3
    status = GangNodePool.from_dict(world.store.obj).status
    assert status.phase == Phase.JOINING and status.active_group == "gen-3"


@pytest.mark.parametrize("mode", MODES)
def test_a_crash_between_marker_and_result_sends_the_same_token_again(mode: str) -> None:
    world = World(mode, {})
    world.engine.crash = True
    with pytest.raises(Crash):
        world.one_pass()  # the marker is stored, then the process dies mid-launch
    stored = GangNodePool.from_dict(world.store.obj).status.launch_in_progress
    assert stored is not None and world.engine.sent_tokens == [stored.client_token]

    # The next controller starts from the stored marker.
    again = World(mode, world.store.obj["status"])
    again.one_pass()

    marker, sent = again.marker_sent()
    assert marker == stored
    assert sent == stored.client_token == world.engine.sent_tokens[0]


def test_a_launch_waits_for_its_turn_at_the_budget_writing_nothing() -> None:
    """Another pool took the budget's last tokens: this pass launches nothing, writes
    nothing, and looks again when its turn comes, when it launches."""
    budget = LaunchBudget(LaunchBudgetSettings(request_bucket=4, share=1.0))  # 2 paced
    assert budget.turn("us-east-1", "pool-b", LaunchCost(2, 2), NOW).go
    world = World(c.MODE_RUNINSTANCES, {}, budget=budget)
    before = dict(world.store.obj)

    waited = world.one_pass()

    # A fresh launch is paced by its first subnet's call, refilled at 5 a second.
    assert waited.requeue_after == pytest.approx(0.2)
    assert world.engine.launched == [] and world.store.obj == before
    world.now = NOW + timedelta(seconds=0.2)
    world.one_pass()
    assert GangNodePool.from_dict(world.store.obj).status.phase == Phase.JOINING


def test_request_limit_exceeded_shrinks_the_budget_and_the_pool_asks_for_its_turn() -> None:
    budget = LaunchBudget(LaunchBudgetSettings())
    throttle = CloudError(ErrorKind.RETRYABLE, "RequestLimitExceeded", "Throttled", "slow down")
    world = World(c.MODE_RUNINSTANCES, {}, budget=budget, failing={"acquire": throttle})
    before = budget.rate("us-east-1", NOW)

    world.one_pass()

    assert budget.rate("us-east-1", NOW) == pytest.approx(before * CUBIC_BETA)
    status = GangNodePool.from_dict(world.store.obj).status
    assert status.launch_in_progress is not None  # the same token is replayed
    assert status.last_error is not None and status.last_error.reason == "Throttled"


def _short_after(calls: int | None) -> CloudError:
    err = CloudError(ErrorKind.CAPACITY, "InsufficientInstanceCapacity", "Short", "none")
    err.calls = calls
    return err


@pytest.mark.parametrize(("calls", "next_waits"), [(1, 0.0), (2, 0.2), (None, 0.2)])
def test_the_calls_a_launch_sent_are_charged_to_the_budget(
    calls: int | None, next_waits: float
) -> None:
    """Two subnets: the turn is paced by one call and holds the other. A launch that tried
    both (or cannot say) leaves the next pool waiting for the second call's refill."""
    budget = LaunchBudget(LaunchBudgetSettings(request_bucket=4, share=1.0))  # 2 paced, 2 held
    world = World(c.MODE_RUNINSTANCES, {}, budget=budget, failing={"acquire": _short_after(calls)})

    world.one_pass()

    told = budget.turn("us-east-1", "pool-b", LaunchCost(1, 1), NOW)
    assert told.wait == pytest.approx(next_waits) and told.go == (next_waits == 0.0)


def test_a_pass_that_dies_mid_launch_gives_its_hold_back_charged_whole() -> None:
    budget = LaunchBudget(LaunchBudgetSettings(request_bucket=4, share=1.0))  # 2 paced, 2 held
    world = World(c.MODE_RUNINSTANCES, {}, budget=budget)
    world.engine.crash = True

    with pytest.raises(Crash):
        world.one_pass()

    # Its hold is free for another fresh launch, which waits for the second call's refill.
    two_subnets = LaunchCost(1, 1, extra_calls=1)
    assert budget.turn("us-east-1", "pool-b", two_subnets, NOW).wait == pytest.approx(0.2)
    assert budget.turn("us-east-1", "pool-b", two_subnets, NOW + timedelta(seconds=0.2)).go
