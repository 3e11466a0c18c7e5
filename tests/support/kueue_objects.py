"""Builders for the Kueue objects the tests create: flavor, queues, our AdmissionCheck, Jobs.

Shared by the e2e tests and the integration tests that only exercise Kueue's API types.
"""

from __future__ import annotations

from typing import Any

from provisioner.api import constants as c

KUEUE_API = f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"


def admission_check(name: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": c.CONTROLLER_NAME},
    }


def resource_flavor(name: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name}}


def cluster_queue(
    name: str, flavor: str, check: str, cpu: str = "64", memory: str = "256Gi"
) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": memory},
                            ],
                        }
                    ],
                }
            ],
            "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
        },
    }


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def gang_job(
    namespace: str,
    name: str,
    queue: str,
    pool: str,
    count: int,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {c.QUEUE_NAME_LABEL: queue, c.POOL_LABEL: pool},
            "annotations": {
                c.ANN_COUNT: str(count),
                c.ANN_INSTANCE_TYPE: "m5.large",
                **(annotations or {}),
            },
        },
        "spec": {
            "parallelism": count,
            "completions": count,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.local/trainer:latest",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                }
            },
        },
    }
