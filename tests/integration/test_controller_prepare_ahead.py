"""A gang Workload waiting for quota gets its pool's stack prepared before Kueue reserves
it, so its admission launches without a `pulumi up` in between; on real parts (apiserver,
Workload, LocalQueue and ClusterQueue objects, the EC2 emulator, the real Pulumi driver,
the in-process controller).

Kueue acts on admission checks only once quota is reserved; the stand-in plays it: the
Workload is created without quota on a LocalQueue whose ClusterQueue lists our check, and
given quota later. Kueue (v0.19) also lists a check that applies to every flavor on the
Workload, Pending, as soon as it queues it; each test runs both ways: the check listed
before quota, and not yet. The stack's prepares are counted on the driver itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv.kueue_objects import apply_object
from provisioner.api import constants as c
from provisioner.api.gangnodepool import StackOperation
from tests.integration.controller_harness import CHECK, GangEnv, eventually
from tests.support import kueue_objects as ko

pytestmark = pytest.mark.integration

QUEUE = "lq-ahead"


def _queue_with_our_check(env: GangEnv) -> None:
    cluster_queue = f"cq-ahead-{env.namespace}"
    held = ko.cluster_queue(cluster_queue, ko.FLAVOR_NAME, CHECK, {"cpu": "8"})
    # The stand-in plays quota; a Kueue manager on the same apiserver admits nothing here.
    held["spec"]["stopPolicy"] = "Hold"
    apply_object(env.custom, held)
    apply_object(env.custom, ko.local_queue(env.namespace, QUEUE, cluster_queue))


def _counting_prepares(env: GangEnv) -> list[str]:
    """The pools each stack prepare was for, in order, as the driver is asked."""
    prepared: list[str] = []
    real: Callable[..., Any] = env.driver.prepare

    def prepare(spec: Any, **kw: Any) -> Any:
        prepared.append(spec.pool)
        return real(spec, **kw)

    env.driver.prepare = prepare  # type: ignore[method-assign]
    return prepared


def _events(env: GangEnv, pool: str) -> list[str]:
    core = k8s.CoreV1Api(env.custom.api_client)
    found = core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={pool}")
    return [e.reason for e in found.items]


@pytest.mark.parametrize("listed", [True, False], ids=["check listed", "check not yet listed"])
def test_a_workload_waiting_for_quota_has_its_stack_prepared_and_launches_at_once(
    gang_env_factory: Any, listed: bool
) -> None:
    env: GangEnv = gang_env_factory()
    _queue_with_our_check(env)
    # A queue whose ClusterQueue has no check of ours: its Workloads are none of ours.
    plain = f"cq-plain-{env.namespace}"
    apply_object(env.custom, ko.cluster_queue(plain, ko.FLAVOR_NAME, None, {"cpu": "8"}))
    apply_object(env.custom, ko.local_queue(env.namespace, "lq-plain", plain))
    prepared = _counting_prepares(env)
    other = ko.gang_job(env.namespace, "plain", "lq-plain", "pool-plain", 2)
    env.kueue.submit(env.namespace, other, reserve=False)
    pool = "pool-ahead"
    job = ko.gang_job(env.namespace, "ahead", QUEUE, pool, 2)
    workload = env.kueue.submit(env.namespace, job, reserve=False, listed=listed)

    # No quota yet: the pool is made unclaimed, queued for the Workload, and its stack
    # prepared; nothing is launched and our check, if listed, is left Pending.
    eventually(
        lambda: (
            ((env.pool(pool) or {}).get("status") or {}).get("lastStackOperation")
            == StackOperation.PREPARE
        ),
        120,
        lambda: f"the stack prepared ahead of quota: {env.pool(pool)}",
    )
    body = env.pool(pool) or {}
    assert body["spec"].get("claim") is None
    assert body["spec"]["queued"]["name"] == workload
    assert body["status"]["phase"] == c.Phase.IDLE
    assert env.launches() == 0
    check = env.check(workload)
    assert (check or {}).get("state") == (c.CheckState.PENDING if listed else None), check
    assert prepared == [pool], "only the Workload on our check's queue is prepared for"
    assert env.pool("pool-plain") is None
    assert c.EventReason.PREPARING_AHEAD in _events(env, pool)

    # Quota comes: the claim launches from the prepared stack, with no second prepare.
    env.kueue.reserve_quota(env.namespace, workload, 2)
    env.wait_check(workload, c.CheckState.READY, timeout=120)
    assert prepared == [pool], f"prepared again before the launch: {prepared}"
    claimed = env.pool(pool) or {}
    assert claimed["spec"]["claim"]["name"] == workload
    assert "queued" not in claimed["spec"], "the claim takes the queued mark off"
    assert len(env.live_instances(pool)) == 2
