"""Whether a Kueue object of the cluster (an AdmissionCheck, a ClusterQueue) is Active, read
from a real apiserver, and a wait until it is.

Kueue marks a ClusterQueue Active once its flavors and admission checks exist and those
checks are Active; our AdmissionCheck reconciler marks our check Active. Both are the
condition type "Active" with status "True".
"""

from __future__ import annotations

from typing import Final

from kubernetes import client as k8s

from provisioner.api import constants as c
from tests.support.waiting import eventually

ADMISSION_CHECKS: Final = "admissionchecks"
CLUSTER_QUEUES: Final = "clusterqueues"


def is_active(custom: k8s.CustomObjectsApi, plural: str, name: str) -> bool:
    """Whether the Kueue object `plural`/`name` has Active=True now."""
    found = custom.get_cluster_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, plural, name)
    return any(
        cond["type"] == c.AC_ACTIVE and cond["status"] == "True"
        for cond in found.get("status", {}).get("conditions", [])
    )


def wait_until_active(
    custom: k8s.CustomObjectsApi, plural: str, name: str, *, what: str, timeout: float = 90
) -> None:
    """Poll until `is_active`; `what` names it in the timeout's message."""
    eventually(lambda: is_active(custom, plural, name), timeout=timeout, what=what)
