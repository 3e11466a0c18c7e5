"""A wait until a Kueue object of the cluster (an AdmissionCheck, a ClusterQueue) is Active,
read from a real apiserver (`devenv.kueue_objects.is_active`, which the benches use too).

Kueue marks a ClusterQueue Active once its flavors and admission checks exist and those
checks are Active; our AdmissionCheck reconciler marks our check Active. Both are the
condition type "Active" with status "True".
"""

from __future__ import annotations

from typing import Final

from kubernetes import client as k8s

from devenv.kueue_objects import is_active
from tests.support.waiting import eventually

ADMISSION_CHECKS: Final = "admissionchecks"
CLUSTER_QUEUES: Final = "clusterqueues"


def wait_until_active(
    custom: k8s.CustomObjectsApi, plural: str, name: str, *, what: str, timeout: float = 90
) -> None:
    """Poll until `is_active`; `what` names it in the timeout's message."""
    eventually(lambda: is_active(custom, plural, name), timeout=timeout, what=what)
