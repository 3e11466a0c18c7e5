"""Builders for the Kueue objects: our AdmissionCheck, a flavor, the queues, gang Jobs.

The one Python source of the objects the bootstrap creates (`infra/kueue.py`, the chart's
`kueue.yaml`): `LocalEnvironment` applies `default_objects()` to the embedded default, the
demo and the e2e tests build Jobs and private queues with the same functions, and
`tests/support/kueue_objects.py` re-exports them for the integration tests.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    name: str,
    flavor: str,
    check: str | None,
    cpu: str = "64",
    memory: str = "256Gi",
    extra: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue gated by our `check`; with None, a plain queue (the benchmarks'
    baseline: what Kueue's admission costs without us). `extra` covers more resources
    (e.g. GPUs) with those quotas; without it, only cpu and memory are covered."""
    quotas = {"cpu": cpu, "memory": memory, **(extra or {})}
    queue: dict[str, Any] = {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(quotas),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": r, "nominalQuota": q} for r, q in quotas.items()
                            ],
                        }
                    ],
                }
            ],
        },
    }
    if check is not None:
        queue["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return queue


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


# The chart's default names (values.yaml `kueue.*`), so the local env matches an install.
CHECK_NAME = "atomic-gang-check"
FLAVOR_NAME = "atomic-gang-flavor"
CLUSTER_QUEUE_NAME = "atomic-gang-cluster-queue"
QUEUE_NAME = "atomic-gang-queue"


def default_objects(
    namespaces: tuple[str, ...] = ("default",), cpu: str = "64", memory: str = "256Gi"
) -> list[dict[str, Any]]:
    """The bootstrap's Kueue objects, in the order they must exist; like the bootstrap's,
    the ClusterQueue covers GPUs and EFA devices by default."""
    return [
        admission_check(CHECK_NAME),
        resource_flavor(FLAVOR_NAME),
        cluster_queue(
            CLUSTER_QUEUE_NAME, FLAVOR_NAME, CHECK_NAME, cpu, memory, c.DEFAULT_ACCELERATOR_QUOTA
        ),
        *(local_queue(ns, QUEUE_NAME, CLUSTER_QUEUE_NAME) for ns in namespaces),
    ]


PLURALS = {
    "AdmissionCheck": "admissionchecks",
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Workload": "workloads",
}
