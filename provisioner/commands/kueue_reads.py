"""What the operator commands read off Kueue's objects as the API server returns them.

Used by `doctor_queues`, `explain` and `drain`: they list Workloads, AdmissionChecks and
ClusterQueues of every namespace and read a few fields of each, so they keep the raw
objects (a Workload another tool wrote may lack what the typed views in `provisioner.api`
require) and read them through these, one reading for all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["checks_of_controller", "condition_true", "lists_check"]


def condition_true(obj: Mapping[str, Any], condition_type: str) -> bool:
    """Whether `obj` has the condition `condition_type` with status True."""
    return any(
        x.get("type") == condition_type and x.get("status") == "True"
        for x in (obj.get("status") or {}).get("conditions") or []
    )


def checks_of_controller(
    admission_checks: Iterable[Mapping[str, Any]], controller_name: str
) -> set[str]:
    """The names of the AdmissionChecks whose spec.controllerName is `controller_name`."""
    return {
        str(ac["metadata"]["name"])
        for ac in admission_checks
        if (ac.get("spec") or {}).get("controllerName") == controller_name
    }


def lists_check(cluster_queue: Mapping[str, Any], checks: set[str]) -> bool:
    """Whether the ClusterQueue lists one of `checks`. Kueue's v1beta2 ClusterQueue names
    its checks only in spec.admissionChecksStrategy (v1beta1's spec.admissionChecks is
    gone from that version's schema)."""
    strategy = (cluster_queue.get("spec") or {}).get("admissionChecksStrategy") or {}
    return any(x.get("name") in checks for x in strategy.get("admissionChecks") or [])
