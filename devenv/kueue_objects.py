"""The Kueue objects of the local environment: the product's builders with local quotas,
and gang Jobs.

The objects and their default names come from `provisioner.api.kueue_objects`, the one
source the bootstrap and the chart test use too; this module only adds what a local
cluster needs: a quota sized for the emulator, and Jobs for the demo, the e2e tests and the
benches (`tests/support/kueue_objects.py` re-exports them for the integration tests).
"""

from __future__ import annotations

from typing import Any

from provisioner.api import constants as c
from provisioner.api import kueue_objects as product
from provisioner.api.kueue_objects import (
    CHECK_NAME,
    CLUSTER_QUEUE_NAME,
    FLAVOR_NAME,
    KUEUE_API,
    PLURALS,
    QUEUE_NAME,
    admission_check,
    local_queue,
    resource_flavor,
)

__all__ = [
    "CHECK_NAME",
    "CLUSTER_QUEUE_NAME",
    "FLAVOR_NAME",
    "KUEUE_API",
    "PLURALS",
    "QUEUE_NAME",
    "admission_check",
    "cluster_queue",
    "default_objects",
    "gang_job",
    "local_queue",
    "resource_flavor",
]


def cluster_queue(
    name: str, flavor: str, check: str | None, cpu: str = "64", memory: str = "256Gi"
) -> dict[str, Any]:
    """A ClusterQueue over cpu and memory gated by our `check`; with None, a plain queue
    (the benchmarks' baseline: what Kueue's admission costs without us)."""
    return product.cluster_queue(name, flavor, check, {"cpu": cpu, "memory": memory})


def default_objects(
    namespaces: tuple[str, ...] = ("default",), cpu: str = "64", memory: str = "256Gi"
) -> list[dict[str, Any]]:
    """An install's Kueue objects under their default names, in the order they must exist."""
    return product.default_objects(namespaces, {"cpu": cpu, "memory": memory})


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
