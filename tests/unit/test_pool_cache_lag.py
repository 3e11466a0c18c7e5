"""A pass never plans from an informer cache that still holds a version of the pool the
reconciler itself wrote over.

The fakes are those of `test_pool_instance_reads`; here the informer lags the apiserver:
it answers with the object as it was before our last write until told it caught up. (In the
e2e suite a launch marker's own watch event queued the pool while the launch's IDs were still
on their way to the cache; that pass issued the launch again.)
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.kube.own_writes import WAIT_FOR_OWN_WRITE_SECONDS
from provisioner.kube.resources import ObjectKey
from tests.support.informers import LaggingCache
from tests.support.typed_caches import typed
from tests.unit.test_pool_instance_reads import JOINING, World

pytestmark = pytest.mark.unit


def count_observations(world: World) -> list[None]:
    """Each pass that got as far as observing the pool (and so planned) adds one entry."""
    seen: list[None] = []
    observe = world.reconciler._observe

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen.append(None)
        return observe(*args, **kwargs)

    world.reconciler._observe = counted  # type: ignore[method-assign]
    return seen


def test_a_pass_waits_for_the_cache_to_hold_its_own_write() -> None:
    world = World(JOINING, ready=True)
    cache = LaggingCache(lambda: world.store.obj)
    world.reconciler._pools = typed(cache, GangNodePool.from_dict)
    observed = count_observations(world)
    cache.freeze()  # the cache holds Joining; the pass below writes Satisfied
    world.one_pass()
    assert world.store.obj["status"]["phase"] == Phase.SATISFIED
    written = world.store.obj["metadata"]["resourceVersion"]
    assert len(observed) == 1

    result = world.reconciler.reconcile(ObjectKey("", "pool-a"))
    assert result.requeue_after == WAIT_FOR_OWN_WRITE_SECONDS
    assert len(observed) == 1, "nothing planned from the stale object"
    assert world.store.obj["metadata"]["resourceVersion"] == written, "nothing written"

    cache.catch_up()
    world.one_pass()
    assert len(observed) == 2, "planned again once the cache caught up"
    assert world.store.obj["status"]["phase"] == Phase.SATISFIED


def test_a_cache_that_moved_past_our_write_is_planned_from_at_once() -> None:
    world = World(JOINING, ready=True)
    observed = count_observations(world)
    world.one_pass()  # writes Satisfied; the cache (the store itself) holds it at once
    result = world.reconciler.reconcile(ObjectKey("", "pool-a"))
    assert result.requeue_after != WAIT_FOR_OWN_WRITE_SECONDS
    assert len(observed) == 2, "planned from the cache at once"
