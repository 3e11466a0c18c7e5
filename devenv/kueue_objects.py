"""The Kueue objects of the local environment: the product's builders, local quotas, and
gang Jobs.

The objects and their default names come from `provisioner.api.kueue_objects`, the one
source the bootstrap and the chart test use too; this module only adds what a local
cluster needs: a quota sized for the emulator, and Jobs for the demo, the e2e tests and the
benches (`tests/support/kueue_objects.py` re-exports them for the integration tests).
"""

from __future__ import annotations

from typing import Any, Final

from provisioner.api import constants as c
from provisioner.api import kueue_objects as product
from provisioner.api.kueue_objects import *  # noqa: F403  (the product's names, re-exported)

__all__ = [*product.__all__, "LOCAL_CLASS_SPEC", "LOCAL_QUOTAS", "gang_job"]

# What the local cluster's ClusterQueues hold: enough for the demo's and the tests' gangs,
# and, like the bootstrap's, GPUs and EFA devices by default.
LOCAL_QUOTAS: Final = {"cpu": "64", "memory": "256Gi", **c.DEFAULT_ACCELERATOR_QUOTA}
# The local default class: the emulator's cheap type, every annotation a Job's to override,
# so a Job with only the queue label is a gang, and the reference's Jobs run as before.
LOCAL_CLASS_SPEC: Final = {**product.DEFAULT_CLASS_SPEC, "instanceType": "m5.large"}


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
