"""The keep-warm tag: written on the pass after a set goes warm, at the pool's turn at the
account's CreateTags budget, once per window, and never for a set claimed again first.

The GangNodePool reconciler runs over the fakes of `test_pool_instance_reads` (the pool
object, its Ready Nodes, a fake engine whose listing keeps the tags it launched with, as
a listing from before a write does) with a real `LaunchBudget` for CreateTags.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from provisioner.api.constants import Phase
from provisioner.api.settings import LaunchBudgetSettings
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.controllers.launch_budget import CUBIC_BETA, LaunchBudget, LaunchCost
from provisioner.kube.resources import ObjectKey
from tests.unit.test_pool_instance_reads import CLAIM, IDS, NOW, SATISFIED, World

pytestmark = pytest.mark.unit

REGION = "us-east-1"
ONE_CALL = LaunchCost(calls=1, instances=0)


def warm_world(tag_budget: LaunchBudget | None = None) -> World:
    """A Satisfied pool whose claim just ended, its Nodes Ready."""
    return World(SATISFIED, ready=True, claim=False, tag_budget=tag_budget)


def window(world: World) -> datetime:
    return datetime.fromisoformat(world.store.obj["status"]["keepWarmUntil"])


def test_a_set_going_warm_is_tagged_on_the_next_pass_and_once() -> None:
    world = warm_world()
    world.one_pass()
    assert world.store.obj["status"]["phase"] == Phase.KEEP_WARM
    assert world.engine.keep_warm_tags == [], "tagged in the pass that went warm"
    world.one_pass()
    assert world.engine.keep_warm_tags == [(IDS, window(world))]
    # The listing still shows the tag from before the write: what was written counts.
    world.one_pass()
    world.one_pass()
    assert len(world.engine.keep_warm_tags) == 1


def test_a_pool_whose_turn_has_not_come_writes_nothing_and_waits_for_it() -> None:
    budget = LaunchBudget(LaunchBudgetSettings())
    for i in range(12):  # the paced half of the share, 12.5 calls, spent by other pools
        assert budget.turn(REGION, f"other-{i}", ONE_CALL, NOW).go
    world = warm_world(budget)
    world.one_pass()
    version = world.store.obj["metadata"]["resourceVersion"]
    wait = world.reconciler.reconcile(ObjectKey("", "pool-a")).requeue_after
    assert world.engine.keep_warm_tags == []
    assert wait is not None and wait > 0
    assert world.store.obj["metadata"]["resourceVersion"] == version, "a wait wrote the pool"


def test_a_set_claimed_again_before_its_turn_is_never_tagged_and_gives_the_turn_back() -> None:
    budget = LaunchBudget(LaunchBudgetSettings())
    for i in range(12):
        budget.turn(REGION, f"other-{i}", ONE_CALL, NOW)
    world = warm_world(budget)
    world.one_pass()
    world.one_pass()  # told to wait for its turn
    world.store.obj["spec"]["claim"] = CLAIM
    world.store.changed()
    world.one_pass()
    assert world.store.obj["status"]["phase"] == Phase.SATISFIED
    assert world.engine.keep_warm_tags == []
    # Its reserved call is back: the next pool's turn is the one this pool held.
    assert budget.turn(REGION, "next", ONE_CALL, NOW).wait == pytest.approx(0.5 / 2.5)


def test_a_throttled_tag_shrinks_the_tag_budget_and_is_said() -> None:
    budget = LaunchBudget(LaunchBudgetSettings())
    world = warm_world(budget)
    world.engine.failing["set_keep_warm_tag"] = CloudError(
        ErrorKind.RETRYABLE, "RequestLimitExceeded", "Throttled", "slow down"
    )
    before = budget.rate(REGION, NOW)
    world.one_pass()
    world.one_pass()
    assert budget.rate(REGION, NOW) == pytest.approx(before * CUBIC_BETA)
    error = world.store.obj["status"]["lastError"]
    assert error["operation"] == "tag-keep-warm" and error["reason"] == "Throttled"
    assert world.store.obj["status"]["phase"] == Phase.KEEP_WARM
