"""The Kueue objects of the local environment: the product's builders, local quotas, and
gang Jobs.

The objects and their default names come from `provisioner.api.kueue_objects`, the one
source the bootstrap and the chart test use too; this module only adds what a local
cluster needs: a quota sized for the emulator, and Jobs for the demo, the e2e tests and the
benches (`tests/support/kueue_objects.py` re-exports them for the integration tests).
"""

from __future__ import annotations

from typing import Any, Final

from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.api import kueue_objects as product
from provisioner.api.kueue_objects import *  # noqa: F403  (the product's names, re-exported)

__all__ = [
    *product.__all__,
    "LOCAL_CLASS_SPEC",
    "LOCAL_QUOTAS",
    "apply_object",
    "gang_job",
    "is_active",
]

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


# The objects two environments of one session make under one name but not alike: our
# AdmissionCheck (the integration stand-in's names no GangClass, the local default's does)
# and the class itself. The queues and the flavor are the same in every environment.
_CONVERGED: Final = ("AdmissionCheck", c.GANG_CLASS_KIND)


def apply_object(custom: k8s.CustomObjectsApi, obj: dict[str, Any]) -> None:
    """Create a Kueue object or GangClass, or make the one of that name what `obj` says.

    The local environments of one session share an apiserver: an object another
    environment made under the same name (the integration stand-in's AdmissionCheck names
    no GangClass; the local default's does) must not be kept as it was, or a test's queue
    behaves by whichever environment started first. So an existing AdmissionCheck or class
    whose spec is not `obj`'s is replaced, as `kubectl apply` would converge it; the queues
    and the flavor, alike in every environment, are left as they are (Kueue defaults fields
    of their specs that `obj` leaves out)."""
    group, version = obj["apiVersion"].split("/")
    plural = PLURALS[obj["kind"]]  # noqa: F405  (the product's, re-exported)
    name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace")
    where = (group, version, namespace, plural) if namespace else (group, version, plural)
    try:
        if namespace:
            custom.create_namespaced_custom_object(*where, obj)
        else:
            custom.create_cluster_custom_object(*where, obj)
        return
    except k8s.ApiException as err:
        if err.status != 409:  # made before, by this environment or another
            raise
    existing = (
        custom.get_namespaced_custom_object(*where, name)
        if namespace
        else custom.get_cluster_custom_object(*where, name)
    )
    if obj["kind"] not in _CONVERGED or existing.get("spec") == obj.get("spec"):
        return
    metadata = {**obj["metadata"], "resourceVersion": existing["metadata"]["resourceVersion"]}
    if namespace:
        custom.replace_namespaced_custom_object(*where, name, {**obj, "metadata": metadata})
    else:
        custom.replace_cluster_custom_object(*where, name, {**obj, "metadata": metadata})


def is_active(custom: k8s.CustomObjectsApi, plural: str, name: str) -> bool:
    """Whether the cluster's Kueue object `plural`/`name` (an AdmissionCheck, a ClusterQueue)
    has Active=True now: Kueue marks a ClusterQueue so once its flavors and checks exist and
    those checks are Active."""
    found = custom.get_cluster_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, plural, name)
    return any(
        cond["type"] == c.AC_ACTIVE and cond["status"] == "True"
        for cond in (found.get("status") or {}).get("conditions") or []
    )
