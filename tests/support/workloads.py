"""Kueue Workload bodies for tests, as Kueue writes them for a batch/v1 Job.

`workload()` returns the JSON body (hand it to a fake reader or `Workload.model_validate`);
`condition()` and `check()` build the entries of its status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.api.meta import kube_alias

WHEN: Final = "2026-11-29T11:00:00Z"


def condition(
    type_: str, status: str = "True", *, reason: str = "", message: str = "", at: str = WHEN
) -> dict[str, Any]:
    """A metav1.Condition of the Workload's status."""
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def check(name: str, state: str, message: str = "") -> dict[str, Any]:
    """One entry of the Workload's `status.admissionChecks`."""
    return {"name": name, "state": state, "message": message}


def workload(
    name: str = "job-train-abc",
    *,
    namespace: str = "ml",
    count: int = 4,
    queue: str | None = "q",
    template: Mapping[str, Any] | None = None,
    owner: Mapping[str, Any] | None = None,
    pod_sets: Iterable[tuple[str, int]] | None = None,
    conditions: Iterable[Mapping[str, Any]] = (),
    checks: Iterable[Mapping[str, Any]] | None = None,
    active: bool | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """A Workload of one pod set `main` of `count` pods in LocalQueue `queue` (or of
    `pod_sets`, (name, count) pairs, as Kueue writes them for a JobSet or PyTorchJob), owned
    by `owner` when given (a Job unless its body says another apiVersion and kind);
    `metadata` overrides by Python name (`uid=`,
    `resource_version=`). A status only when conditions or checks are given (checks=[]
    writes an empty list)."""
    meta = {kube_alias(k): v for k, v in {"name": name, "namespace": namespace, **metadata}.items()}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner.get("apiVersion", "batch/v1"),
                "kind": owner.get("kind", "Job"),
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    sets: list[dict[str, Any]] = [
        {"name": name, "count": n} for name, n in (pod_sets or [("main", count)])
    ]
    if template is not None:
        for pod_set in sets:
            pod_set["template"] = dict(template)
    spec: dict[str, Any] = {"podSets": sets}
    if queue is not None:
        spec["queueName"] = queue
    if active is not None:
        spec["active"] = active
    body: dict[str, Any] = {
        "apiVersion": f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": meta,
        "spec": spec,
    }
    conditions = [dict(x) for x in conditions]
    if conditions or checks is not None:
        body["status"] = {
            "conditions": conditions,
            "admissionChecks": [dict(x) for x in checks or ()],
        }
    return body
