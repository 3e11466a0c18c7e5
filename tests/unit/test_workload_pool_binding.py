"""The Workload reconciler writes the namespace a pool belongs to: a pool from before pools
had an owner is bound by one spec write — with the claim that takes it, or alone by the
Workload already holding it — and a bound pool's owner is never written again."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.unit.test_workload_cache_lag import KEY, World
from tests.unit.test_workload_decision import pool

pytestmark = pytest.mark.unit


def world_with(pool_body: dict[str, Any]) -> World:
    world = World()
    pool_body["metadata"]["resourceVersion"] = "1"
    world.apiserver.objects["gangnodepools"] = pool_body
    return world


def spec(world: World) -> dict[str, Any]:
    return dict(world.apiserver.objects["gangnodepools"]["spec"])


def test_an_unowned_pool_is_bound_with_the_claim_that_takes_it() -> None:
    world = world_with(pool(owner=None).to_dict())
    world.one_pass()
    assert world.apiserver.writes[0] == "gangnodepools:spec"
    assert spec(world)["claim"]["uid"] == "wl-uid"
    assert spec(world)["ownerNamespace"] == KEY.namespace


def test_an_unowned_pool_held_by_the_workload_is_bound_by_one_write() -> None:
    body = pool(owner=None, claim_uid="wl-uid", phase=Phase.JOINING, instances=4).to_dict()
    body["spec"]["claim"]["namespace"] = KEY.namespace
    world = world_with(body)
    world.one_pass()
    assert world.apiserver.writes.count("gangnodepools:spec") == 1
    assert spec(world)["ownerNamespace"] == KEY.namespace
    assert spec(world)["claim"]["uid"] == "wl-uid"
    world.one_pass()
    assert world.apiserver.writes.count("gangnodepools:spec") == 1  # bound once


def test_a_pool_of_another_namespace_is_neither_claimed_nor_rebound() -> None:
    world = world_with(pool(owner="team-a").to_dict())
    world.one_pass()
    assert "gangnodepools:spec" not in world.apiserver.writes
    assert world.apiserver.writes == [f"workloads:check {c.CheckState.REJECTED}"]
    assert spec(world)["ownerNamespace"] == "team-a" and "claim" not in spec(world)
