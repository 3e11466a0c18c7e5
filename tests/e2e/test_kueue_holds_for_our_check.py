"""With the real Kueue manager: a queued Job is suspended and held on our Pending check.

This pins the contract the whole product stands on, before any of our controllers run: the
AdmissionCheck with our controllerName is Active (written here as the AdmissionCheck
reconciler would), so Kueue reserves quota and puts our check on the Workload as Pending.
And, on a ClusterQueue that holds its Workloads (`stopPolicy: Hold`), Kueue lists our
check (one that applies to every flavor) on the Workload, Pending, before any quota: the
Workload reconciler prepares such a gang's stack ahead of quota all the same
(`controllers/workload/prepare_ahead.py`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client as k8s

from provisioner.api import constants as c
from tests.support import kueue_objects as ko
from tests.support.kueue_status import CLUSTER_QUEUES, wait_until_active
from tests.support.waiting import eventually

T = TypeVar("T")
KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)


def _activate(custom: k8s.CustomObjectsApi, check: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "ControllerReady",
                    "message": "test stands in for the AdmissionCheck reconciler",
                    "lastTransitionTime": now,
                }
            ]
        }
    }
    custom.patch_cluster_custom_object_status(*KUEUE, "admissionchecks", check, status)


@dataclass(frozen=True)
class _Queue:
    custom: k8s.CustomObjectsApi
    batch: k8s.BatchV1Api
    check: str
    cq: str
    lq: str


@contextmanager
def _queue_with_our_check(
    kube_api: Any, namespace: str, *, stop_policy: str | None = None
) -> Iterator[_Queue]:
    """Our AdmissionCheck, Active, on a ClusterQueue (`stop_policy` when given) and its
    LocalQueue in `namespace`; all of it, and the namespace's Jobs and Workloads, removed
    afterwards."""
    custom = k8s.CustomObjectsApi(kube_api)
    batch = k8s.BatchV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    check, flavor, cq, lq = (f"{p}-{suffix}" for p in ("check", "flavor", "cq", "lq"))

    custom.create_cluster_custom_object(*KUEUE, "admissionchecks", ko.admission_check(check))
    try:
        _activate(custom, check)
        custom.create_cluster_custom_object(*KUEUE, "resourceflavors", ko.resource_flavor(flavor))
        queue = ko.cluster_queue(cq, flavor, check, ko.LOCAL_QUOTAS)
        if stop_policy is not None:
            queue["spec"]["stopPolicy"] = stop_policy
        custom.create_cluster_custom_object(*KUEUE, "clusterqueues", queue)
        custom.create_namespaced_custom_object(
            *KUEUE, namespace, "localqueues", ko.local_queue(namespace, lq, cq)
        )
        yield _Queue(custom, batch, check, cq, lq)
    finally:
        _remove(custom, batch, namespace, check, flavor, cq, lq)


def test_queued_job_is_suspended_and_its_workload_waits_on_our_check(
    kube_api: Any, kueue: Any, namespace: str
) -> None:
    with _queue_with_our_check(kube_api, namespace) as queue:
        _hold_a_job_on_our_check(queue, namespace)


def _remove(
    custom: k8s.CustomObjectsApi,
    batch: k8s.BatchV1Api,
    namespace: str,
    check: str,
    flavor: str,
    cq: str,
    lq: str,
) -> None:
    """Nothing of this test may outlive it: no namespace controller runs here, so a deleted
    namespace keeps its objects, and a later test's controller would take this Workload,
    under a check with our controllerName, as a gang to provision."""
    batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")
    custom.delete_collection_namespaced_custom_object(*KUEUE, namespace, "workloads")
    custom.delete_namespaced_custom_object(*KUEUE, namespace, "localqueues", lq)
    for plural, name in (("clusterqueues", cq), ("resourceflavors", flavor)):
        custom.delete_cluster_custom_object(*KUEUE, plural, name)
    custom.delete_cluster_custom_object(*KUEUE, "admissionchecks", check)


def _hold_a_job_on_our_check(queue: _Queue, namespace: str) -> None:
    custom, batch, check, lq = queue.custom, queue.batch, queue.check, queue.lq
    wait_until_active(custom, CLUSTER_QUEUES, queue.cq, timeout=60, what="ClusterQueue Active")

    created = batch.create_namespaced_job(
        namespace, ko.gang_job(namespace, "train", lq, "pool-a", 2)
    )
    # Kueue's mutating webhook suspends the Job at admission time.
    assert created.spec.suspend is True

    def workload() -> dict[str, Any] | None:
        items = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
        return items[0] if items else None

    wl = eventually(workload, 60, what="a Workload for the Job")
    assert wl["metadata"]["ownerReferences"][0]["name"] == "train"

    def quota_reserved_with_pending_check() -> dict[str, Any] | None:
        current = workload()
        if not current:
            return None
        conditions = {
            x["type"]: x["status"] for x in current.get("status", {}).get("conditions", [])
        }
        checks = {
            x["name"]: x["state"] for x in current.get("status", {}).get("admissionChecks", [])
        }
        if conditions.get("QuotaReserved") == "True" and checks.get(check) == c.CheckState.PENDING:
            return current
        return None

    held = eventually(
        quota_reserved_with_pending_check, what="QuotaReserved with our check Pending"
    )
    conditions = {x["type"]: x["status"] for x in held["status"]["conditions"]}
    assert conditions.get("Admitted") != "True"
    # Held, not admitted: the Job stays suspended while our check is Pending.
    time.sleep(1)
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True


def test_kueue_lists_our_check_on_a_workload_waiting_for_quota(
    kube_api: Any, kueue: Any, namespace: str
) -> None:
    with _queue_with_our_check(kube_api, namespace, stop_policy="Hold") as queue:
        job = ko.gang_job(namespace, "waits", queue.lq, "pool-w", 2)
        queue.batch.create_namespaced_job(namespace, job)

        def listed_without_quota() -> dict[str, Any] | None:
            items = queue.custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")[
                "items"
            ]
            status = (items[0].get("status") or {}) if items else {}
            checks = {x["name"]: x["state"] for x in status.get("admissionChecks", [])}
            return status if checks.get(queue.check) == c.CheckState.PENDING else None

        status = eventually(listed_without_quota, 60, what="our check listed, Pending")
        reserved = {x["type"]: x["status"] for x in status.get("conditions", [])}
        assert reserved.get("QuotaReserved") != "True", status
        assert "admission" not in status, "no quota on a held ClusterQueue"
