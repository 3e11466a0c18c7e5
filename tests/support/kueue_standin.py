"""Plays Kueue's part on a Workload for the controller's integration tests.

The integration suite pins what OUR reconcilers do with a Workload in each state, so it
writes Kueue's fields itself (QuotaReserved, our check Pending, Finished, Evicted) on real
Workload objects in the real apiserver. The e2e suite runs the real Kueue manager instead.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client as k8s

from devenv.kueue_objects import admission_check, apply_object
from provisioner.api import constants as c

KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
NOW = "2026-01-01T00:00:00Z"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class KueueStandIn:
    def __init__(self, api: k8s.ApiClient, check_name: str) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.batch = k8s.BatchV1Api(api)
        self.check = check_name

    def admission_check(self) -> None:
        """Our AdmissionCheck as the reference runs it: naming no GangClass."""
        apply_object(self.custom, admission_check(self.check))

    def submit(
        self, namespace: str, job: dict[str, Any], *, reserve: bool = True, listed: bool = False
    ) -> str:
        """Create the Job (suspended, as Kueue's webhook would) and its Workload with quota
        reserved and our check Pending (`reserve=False`: waiting for quota, no check yet,
        until `reserve_quota`; with `listed`, our check Pending already, as Kueue v0.19
        lists a check that applies to every flavor on a Workload it queues). A listed
        Workload is made inactive, given the check, then activated, so the controller's
        first look at it finds the check there. Returns the Workload's name."""
        job = {**job, "spec": {**job["spec"], "suspend": True}}
        created = self.batch.create_namespaced_job(namespace, job)
        name = f"job-{created.metadata.name}"
        count = int(job["spec"]["parallelism"])
        workload: dict[str, Any] = {
            "apiVersion": f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}",
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": created.metadata.name,
                        "uid": created.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "queueName": job["metadata"]["labels"][c.QUEUE_NAME_LABEL],
                "podSets": [
                    {
                        "name": "main",
                        "count": count,
                        "template": job["spec"]["template"],
                    }
                ],
            },
        }
        if listed and not reserve:
            workload["spec"]["active"] = False
        self.custom.create_namespaced_custom_object(*KUEUE, namespace, "workloads", workload)
        if reserve:
            self.reserve_quota(namespace, name, count)
        elif listed:
            self._set_status(namespace, name, {"admissionChecks": [self._pending()]})
            self.custom.patch_namespaced_custom_object(
                *KUEUE, namespace, "workloads", name, {"spec": {"active": True}}
            )
        return name

    def reserve_quota(self, namespace: str, name: str, count: int) -> None:
        status = {
            "conditions": [_cond(c.WL_QUOTA_RESERVED, "True", "QuotaReserved")],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "main", "flavors": {"cpu": "default"}, "count": count}
                ],
            },
            "admissionChecks": [self._pending()],
        }
        self._set_status(namespace, name, status)

    def _pending(self) -> dict[str, Any]:
        return {
            "name": self.check,
            "state": c.CheckState.PENDING,
            "message": "",
            "lastTransitionTime": _now(),
        }

    def _set_status(self, namespace: str, name: str, fields: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            *KUEUE, namespace, "workloads", name, {"status": fields}
        )

    def finish(self, namespace: str, name: str) -> None:
        self._add_condition(namespace, name, _cond(c.WL_FINISHED, "True", "Succeeded"))

    def evict(self, namespace: str, name: str) -> None:
        self._add_condition(namespace, name, _cond(c.WL_EVICTED, "True", "Preempted"))

    def _add_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        current = self.workload(namespace, name)
        conditions = [
            x for x in current["status"].get("conditions", []) if x["type"] != condition["type"]
        ]
        self._set_status(namespace, name, {"conditions": [*conditions, condition]})

    def workload(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(*KUEUE, namespace, "workloads", name)

    def check_state(self, namespace: str, name: str) -> dict[str, Any] | None:
        checks = self.workload(namespace, name).get("status", {}).get("admissionChecks", [])
        return next((x for x in checks if x["name"] == self.check), None)


def _cond(type_: str, status: str, reason: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "set by the test's Kueue stand-in",
        "lastTransitionTime": _now(),
    }
