"""With the real Kueue manager, JobSet controller and training operator, and our controller
and webhook: gangs that carry only the `kueue.x-k8s.io/queue-name` label, on the embedded
default's queue, whose AdmissionCheck names the local default GangClass (m5.large, every
annotation a Job's to override: `devenv.kueue_objects.LOCAL_CLASS_SPEC`).

A plain Job, a JobSet and a PyTorchJob each run as a gang of the pods Kueue counts, on a
pool named for the namespace, the class and the shape; a second gang of the same shape
takes the warm set, with no second launch. On a queue whose class lets a Job override
nothing, an annotation is refused at apply, naming the class and the fix. One environment
for all of it: the machine running these is shared.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.e2e.conftest import (
    GNP,
    KUEUE,
    conditions,
    eventually,
    gang_pods,
    launched,
    phase,
    pool,
    workload_of,
)
from tests.support import gang_kinds
from tests.support.kueue_status import ADMISSION_CHECKS, wait_until_active

GANG_CLASSES = (c.GROUP, c.VERSION, c.GANG_CLASS_PLURAL)
STRICT = "strict"  # a class that lets a Job set nothing but its count


def _queue_only_job(namespace: str, name: str, pods: int) -> dict[str, Any]:
    body = ko.gang_job(namespace, name, ko.QUEUE_NAME, "unused", pods)
    body["metadata"]["labels"] = {c.QUEUE_NAME_LABEL: ko.QUEUE_NAME}
    body["metadata"]["annotations"] = {}
    return body


def _submit_job(env: LocalEnvironment, body: dict[str, Any]) -> None:
    api = k8s.BatchV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    api.create_namespaced_job(body["metadata"]["namespace"], body)


def _pool_of(env: LocalEnvironment, namespace: str, name: str, kind: str) -> str:
    """The pool the gang's Workload claims (none is named by the object)."""

    def claimed() -> str | None:
        wl = workload_of(env, namespace, name, kind)
        if wl is None:
            return None
        custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
        for gnp in custom.list_cluster_custom_object(*GNP)["items"]:
            claim = gnp["spec"].get("claim") or {}
            if (claim.get("namespace"), claim.get("name")) == (namespace, wl["metadata"]["name"]):
                return str(gnp["metadata"]["name"])
        return None

    return eventually(claimed, 120, f"the pool {kind} {name} claims")


def _runs_as_a_gang(env: LocalEnvironment, namespace: str, name: str, kind: str, pods: int) -> str:
    """Admitted on a derived pool of the class, every Pod on its `pods` nodes, then done
    and the set kept warm. Returns the pool's name."""
    pool_name = _pool_of(env, namespace, name, kind)
    assert re.fullmatch(rf"{namespace}-default-m5-large-[0-9a-f]{{8}}", pool_name), pool_name
    eventually(
        lambda: conditions(workload_of(env, namespace, name, kind)).get("Admitted") == "True",
        180,
        f"{kind} {name} admitted",
    )
    spec = (pool(env, pool_name) or {})["spec"]
    assert spec["count"] == pods and spec["instanceType"] == "m5.large"
    assert spec["gangClass"] == ko.CLASS_NAME
    sources = spec["fieldSources"]
    assert (sources["pool"], sources["count"], sources["instance-type"]) == (
        "derived",
        "pods",
        "class",
    )
    nodes = {
        n.metadata.name
        for n in k8s.CoreV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
        .list_node(label_selector=f"{c.POOL_LABEL}={pool_name}")
        .items
    }
    assert len(nodes) == pods

    def placed() -> list[Any] | None:
        found = gang_pods(env, namespace, kind, name)
        return found if len(found) == pods and all(p.spec.node_name for p in found) else None

    on = eventually(placed, 120, f"every Pod of {kind} {name} placed")
    assert {p.spec.node_name for p in on} == nodes, "one Pod per gang node"
    eventually(
        lambda: conditions(workload_of(env, namespace, name, kind)).get("Finished") == "True",
        180,
        f"{kind} {name} finished",
    )
    eventually(lambda: phase(env, pool_name) == Phase.KEEP_WARM, 90, "the set kept warm")
    return pool_name


@pytest.fixture
def strict_queue(gang_local: Any, namespace: str) -> Iterator[LocalEnvironment]:
    """The embedded default, plus a queue whose AdmissionCheck names a class that lets a
    Job override nothing; those cluster-wide objects are removed at the end."""
    env: LocalEnvironment = gang_local(training_controllers=True)
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    check, queue = f"{STRICT}-check", f"{STRICT}-cq"
    custom.create_cluster_custom_object(
        *GANG_CLASSES, ko.gang_class(STRICT, {"instanceType": "m5.large"})
    )
    custom.create_cluster_custom_object(
        *KUEUE, "admissionchecks", ko.admission_check(check, STRICT)
    )
    custom.create_cluster_custom_object(
        *KUEUE, "clusterqueues", ko.cluster_queue(queue, ko.FLAVOR_NAME, check, ko.LOCAL_QUOTAS)
    )
    custom.create_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", ko.local_queue(namespace, STRICT, queue)
    )
    try:
        wait_until_active(custom, ADMISSION_CHECKS, check, what="the strict class's check Active")
        yield env
    finally:
        custom.delete_namespaced_custom_object(*KUEUE, namespace, "localqueues", STRICT)
        custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", queue)
        custom.delete_cluster_custom_object(*KUEUE, "admissionchecks", check)
        custom.delete_cluster_custom_object(*GANG_CLASSES, STRICT)


def test_gangs_with_only_the_queue_label_run_on_derived_pools_of_their_class(
    strict_queue: LocalEnvironment, namespace: str
) -> None:
    env = strict_queue
    api = env.control_plane.api_client()  # type: ignore[union-attr]

    # Refused at apply: the class behind the strict queue decides the instance type.
    forbidden = _queue_only_job(namespace, "forbidden", 2)
    forbidden["metadata"]["labels"][c.QUEUE_NAME_LABEL] = STRICT
    forbidden["metadata"]["annotations"] = {c.ANN_INSTANCE_TYPE: "m5.xlarge"}
    with pytest.raises(ApiException) as refused:
        _submit_job(env, forbidden)
    assert refused.value.status in (400, 403, 422), refused.value
    body = str(refused.value.body)
    assert f"GangClass {STRICT}" in body and c.ANN_INSTANCE_TYPE in body, body
    assert "spec.jobOverrides" in body, body

    # A plain Job of 2 pods, then another of the same shape: one set, launched once.
    _submit_job(env, _queue_only_job(namespace, "solo", 2))
    solo_pool = _runs_as_a_gang(env, namespace, "solo", "Job", 2)
    assert launched(env, solo_pool) == 2
    _submit_job(env, _queue_only_job(namespace, "solo-again", 2))
    assert _runs_as_a_gang(env, namespace, "solo-again", "Job", 2) == solo_pool
    assert launched(env, solo_pool) == 2, "the warm set was reused, nothing new launched"

    # A JobSet of 1 + 3 pods: a gang of 4, another shape, so another pool.
    gang_kinds.create(
        api, gang_kinds.jobset(namespace, "pretrain", ko.QUEUE_NAME, None, leaders=1, workers=3)
    )
    four_pool = _runs_as_a_gang(env, namespace, "pretrain", "JobSet", 4)
    assert four_pool != solo_pool and launched(env, four_pool) == 4

    # A PyTorchJob of Master + 3 Workers: the same shape, so the JobSet's warm set.
    gang_kinds.create(
        api, gang_kinds.pytorchjob(namespace, "torch", ko.QUEUE_NAME, None, workers=3)
    )
    assert _runs_as_a_gang(env, namespace, "torch", "PyTorchJob", 4) == four_pool
    assert launched(env, four_pool) == 4, "the warm set was reused, nothing new launched"
