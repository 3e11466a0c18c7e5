"""The controller's whole life on real parts: claim, N-or-0 launch, join, Ready, keep-warm,
warm reuse without a launch, expiry releasing the set and keeping the prepared stack, a
claim on the kept stack launching without a prepare, deletion destroying the stack."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.integration.controller_harness import GangEnv, eventually


def _told_pool_created(env: GangEnv, names: set[str]) -> list[str]:
    """The kinds of the objects named `names` that PoolCreated Events are about, one entry
    per occurrence (an Event repeated in its window is counted, not listed again)."""
    core = k8s.CoreV1Api(env.custom.api_client)
    found = [
        *core.list_namespaced_event(env.namespace).items,
        *core.list_namespaced_event("default").items,  # the cluster-scoped pool's
    ]
    return sorted(
        e.involved_object.kind
        for e in found
        for _ in range(e.count or 1)
        if e.reason == c.EventReason.POOL_CREATED and e.involved_object.name in names
    )


def test_full_life_of_a_pool(gang_env_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env: GangEnv = gang_env_factory()
    prepares: list[str] = []
    real_prepare = env.driver.prepare

    def counted_prepare(spec: Any, **options: Any) -> Any:
        prepares.append(spec.pool)
        return real_prepare(spec, **options)

    monkeypatch.setattr(env.driver, "prepare", counted_prepare)
    first = env.submit("train-1", "pool-life", count=2, **{c.ANN_KEEP_WARM_TTL: "6s"})

    pool = env.wait_phase("pool-life", Phase.SATISFIED, timeout=180)
    ids = pool["status"]["instanceIds"]
    group = pool["status"]["activeGroup"]
    assert len(ids) == 2 and len(env.live_instances("pool-life")) == 2

    check = env.wait_check(first, c.CheckState.READY)
    # The pool made for train-1 is told once to the pool, to the Workload and to its Job.
    once = [c.GNP_KIND, "Job", "Workload"]
    told = {"pool-life", first, "train-1"}
    eventually(
        lambda: _told_pool_created(env, told) == once,
        30,
        lambda: f"PoolCreated once each; told: {_told_pool_created(env, told)}",
    )
    (update,) = check["podSetUpdates"]
    assert update["nodeSelector"] == {c.POOL_LABEL: "pool-life", c.GROUP_LABEL: group}
    assert update["tolerations"] == [
        {"key": c.GANG_TAINT_KEY, "operator": "Equal", "value": "pool-life", "effect": "NoSchedule"}
    ]
    # The launched set is recorded in the pool's stack.
    outputs = env.driver.outputs("pool-life")
    assert outputs is not None
    eventually(lambda: set(env.driver.outputs("pool-life").instance_ids) == set(ids), 60, "record")  # type: ignore[union-attr]

    env.kueue.finish(env.namespace, first)
    pool = env.wait_phase("pool-life", Phase.KEEP_WARM)
    until = pool["status"]["keepWarmUntil"]

    def tagged() -> set[str]:
        """Each live instance's keep-warm tag: written a pass after the set went warm."""
        return {
            t["Value"]
            for i in env.live_instances("pool-life")
            for t in i.get("Tags", [])
            if t["Key"] == c.TAG_KEEP_WARM_UNTIL
        }

    eventually(lambda: tagged() == {until}, 30, lambda: f"keep-warm tags {tagged()} != {until}")

    launched_before = env.launches()
    second = env.submit("train-2", "pool-life", count=2, **{c.ANN_KEEP_WARM_TTL: "3s"})
    env.wait_check(second, c.CheckState.READY, timeout=60)
    assert env.launches() == launched_before, "warm reuse launched new instances"
    assert env.pool("pool-life")["status"]["instanceIds"] == ids  # type: ignore[index]

    env.kueue.finish(env.namespace, second)
    env.wait_phase("pool-life", Phase.KEEP_WARM)
    idle = env.wait_phase("pool-life", Phase.IDLE, timeout=120)
    assert env.live_instances("pool-life") == []
    assert idle["status"].get("idleSince"), idle["status"]
    # Keep-warm over: the set is released and the prepared stack kept for the next claim.
    kept = env.driver.read_outputs("pool-life")
    assert kept is not None and kept.instance_ids == () and kept.launch_template_id

    assert prepares == ["pool-life"]
    third = env.submit("train-3", "pool-life", count=2, **{c.ANN_KEEP_WARM_TTL: "1h"})
    env.wait_check(third, c.CheckState.READY, timeout=120)
    assert env.launches() == launched_before + 2
    assert prepares == ["pool-life"], "a claim on a kept stack prepared it again"

    # Deleting the pool releases the set and destroys the stack at once.
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, "pool-life")
    eventually(lambda: env.pool("pool-life") is None, 120, "the pool released and removed")
    assert env.live_instances("pool-life") == []
    assert env.driver.read_outputs("pool-life") is None, "stack still present after deletion"
