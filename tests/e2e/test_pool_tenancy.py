"""With the real Kueue manager, the chart's webhook and our controller: a pool belongs to
the namespace of the Job that created it.

A Job in namespace B naming namespace A's pool is refused at `kubectl apply` by the
webhook, naming the pool, its namespace and the fix. With the webhook out of the way (not
installed, or failurePolicy Ignore during an outage), the same Job gets our check Rejected
with that sentence, once, and nothing is launched for it: the pool stays A's, with A's
claim. When the installer shares the pool with B (`tenancy.sharedPools`), B's Job is
admitted onto the pool's warm nodes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.e2e.conftest import (
    check_state,
    conditions,
    eventually,
    launched,
    phase,
    pool,
    submit,
    workload_of,
)


@pytest.fixture
def other_namespace(control_plane: Any) -> Iterator[str]:
    """Namespace B, with a LocalQueue on the environment's ClusterQueue."""
    api = control_plane.api_client()
    core = k8s.CoreV1Api(api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    custom = k8s.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        c.KUEUE_GROUP, c.KUEUE_VERSION, name, "localqueues", ko.local_queue(name)
    )
    yield name
    # Before the environment's own teardown releases the pools: B's claims go first.
    k8s.BatchV1Api(api).delete_collection_namespaced_job(name, propagation_policy="Background")
    custom.delete_collection_namespaced_custom_object(
        c.KUEUE_GROUP, c.KUEUE_VERSION, name, "workloads"
    )
    core.delete_namespace(name)


def _ready_owner_pool(env: LocalEnvironment, namespace: str, pool_name: str) -> None:
    submit(env, namespace, "owner", pool_name)
    eventually(
        lambda: check_state(workload_of(env, namespace, "owner")) == c.CheckState.READY,
        120,
        "namespace A's gang Ready",
    )
    assert launched(env, pool_name) == 2


def _events(env: LocalEnvironment, namespace: str, workload: str, reason: str) -> list[Any]:
    core = k8s.CoreV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    selector = f"involvedObject.name={workload},reason={reason}"
    return list(core.list_namespaced_event(namespace, field_selector=selector).items)


def _create_past_a_stopped_webhook(
    batch: k8s.BatchV1Api, namespace: str, body: dict[str, Any]
) -> Any:
    """The apiserver drops a deleted webhook configuration asynchronously: until it does, a
    create is still sent to the (stopped) webhook and refused by its failurePolicy."""

    def create() -> Any:
        try:
            return batch.create_namespaced_job(namespace, body)
        except k8s.ApiException as err:
            if "validate-job.atomic-gang.k8s.aws" in str(err.body):
                return None
            raise

    return eventually(create, 30, "the webhook configuration gone from the apiserver")


def test_a_job_naming_another_namespaces_pool_is_refused_at_apply_and_rejected_at_the_check(
    gang_local: Any, namespace: str, other_namespace: str
) -> None:
    # A's Job runs for the whole test: its claim stands while B tries the pool.
    env = gang_local(job_run_seconds=600.0)
    batch = k8s.BatchV1Api(env.control_plane.api_client())
    pool_name = f"tn-{uuid.uuid4().hex[:6]}"
    _ready_owner_pool(env, namespace, pool_name)
    owner_claim = (pool(env, pool_name) or {})["spec"]["claim"]
    assert owner_claim["namespace"] == namespace

    # At apply: the webhook reads the pool and refuses, naming the pool, A and the fix.
    intruder = ko.gang_job(other_namespace, "intruder", ko.QUEUE_NAME, pool_name, 2)
    with pytest.raises(k8s.ApiException) as refused:
        batch.create_namespaced_job(other_namespace, intruder)
    status = json.loads(refused.value.body)
    assert status["code"] == 422
    (cause,) = status["details"]["causes"]
    assert cause["field"] == f"metadata.labels[{c.POOL_LABEL}]"
    assert f"pool {pool_name} belongs to namespace {namespace}" in status["message"]
    assert f"a Job in namespace {other_namespace} may not claim it" in status["message"]
    assert "a pool name of your own" in status["message"]
    assert "tenancy.sharedPools" in status["message"]
    assert batch.list_namespaced_job(other_namespace).items == []
    assert (pool(env, pool_name) or {})["spec"]["ownerNamespace"] == namespace

    # Past the webhook (an install without it, or failurePolicy Ignore in an outage): the
    # admission check rejects the Workload with the same sentence, once.
    assert env.webhook is not None
    env.webhook.stop()
    _create_past_a_stopped_webhook(batch, other_namespace, intruder)
    workload = eventually(
        lambda: (
            (wl := workload_of(env, other_namespace, "intruder"))
            and _events(env, other_namespace, wl["metadata"]["name"], "PoolOfAnotherNamespace")
            and wl
        ),
        120,
        "namespace B's Workload rejected at our check",
    )
    wl_name = workload["metadata"]["name"]
    # Kueue deactivates a Workload whose check is Rejected: it will not come back.
    eventually(
        lambda: (
            (workload_of(env, other_namespace, "intruder") or {})["spec"].get("active") is False
        ),
        60,
        "Kueue deactivating the rejected Workload",
    )
    (event,) = _events(env, other_namespace, wl_name, "PoolOfAnotherNamespace")
    assert event.type == "Warning" and (event.count or 1) == 1
    assert f"pool {pool_name} belongs to namespace {namespace}" in event.message
    assert "tenancy.sharedPools" in event.message

    # Nothing for B: no launch, A's claim and ownership untouched, B's Job never ran.
    assert launched(env, pool_name) == 2
    after = pool(env, pool_name) or {}
    assert after["spec"]["ownerNamespace"] == namespace
    assert after["spec"]["claim"]["uid"] == owner_claim["uid"]
    assert conditions(workload_of(env, other_namespace, "intruder")).get("Admitted") != "True"
    assert batch.read_namespaced_job("intruder", other_namespace).spec.suspend is True
    assert check_state(workload_of(env, namespace, "owner")) == c.CheckState.READY


def test_a_pool_the_installer_shares_admits_the_other_namespace_onto_its_warm_nodes(
    gang_local: Any, namespace: str, other_namespace: str
) -> None:
    pool_name = f"tn-shared-{uuid.uuid4().hex[:6]}"
    env = gang_local(
        tenancy={"sharedPools": [{"pool": "tn-shared-*", "namespaces": [other_namespace]}]}
    )
    _ready_owner_pool(env, namespace, pool_name)
    eventually(
        lambda: conditions(workload_of(env, namespace, "owner")).get("Finished") == "True",
        60,
        "namespace A's Job finished",
    )
    eventually(lambda: phase(env, pool_name) == Phase.KEEP_WARM, 60, "the pool kept warm")

    # Accepted by the webhook (it is registered: the create goes through it), admitted.
    submit(env, other_namespace, "guest", pool_name)
    eventually(
        lambda: conditions(workload_of(env, other_namespace, "guest")).get("Admitted") == "True",
        120,
        "namespace B's Workload admitted on the shared pool",
    )
    assert check_state(workload_of(env, other_namespace, "guest")) == c.CheckState.READY
    # Sharing a pool shares its warm nodes: no launch for B, and the pool stays A's.
    assert launched(env, pool_name) == 2
    shared = pool(env, pool_name) or {}
    assert shared["spec"]["ownerNamespace"] == namespace
    assert shared["spec"]["claim"]["namespace"] == other_namespace
