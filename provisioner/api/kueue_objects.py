"""The objects a gang queue needs, and their default names: the one source.

A GangClass (the queue's shape defaults), the AdmissionCheck (ours, by controller name,
naming the class in `spec.parameters`), ResourceFlavor, ClusterQueue (gated by the check)
and one LocalQueue per namespace. Built here as plain dicts; used by the bootstrap
(``infra/kueue.py``, which passes Pulumi outputs for the names so resources are created in
order), the local environment (``devenv/kueue_objects.py``), and the operator commands'
defaults (``doctor``, ``explain``, the CLI). The chart's ``templates/kueue.yaml`` renders
the same objects from the same default names; ``tests/chart`` compares the two.

The ClusterQueue lists the check for all its flavors (no onFlavors): Kueue puts a check on
a Workload only when it covers every flavor of the Workload's ClusterQueue. Its covered
resources are cpu and memory first, then any other quota in name order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from provisioner.api import constants as c

__all__ = [
    "CHECK_NAME",
    "CLASS_NAME",
    "CLUSTER_QUEUE_NAME",
    "DEFAULT_CLASS_SPEC",
    "FLAVOR_NAME",
    "KUEUE_API",
    "PLURALS",
    "QUEUE_NAME",
    "admission_check",
    "cluster_queue",
    "cluster_queue_spec",
    "default_objects",
    "gang_class",
    "local_queue",
    "quota_order",
    "resource_flavor",
]

KUEUE_API: Final = f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"

# The default names (the chart's values.yaml `kueue.*`, the bootstrap's config defaults).
CHECK_NAME: Final = "atomic-gang-check"
CLASS_NAME: Final = "default"
# The default class decides nothing and lets a Job set every annotation, so an install's
# Jobs keep working as the reference's did; a platform team fills in the shape.
DEFAULT_CLASS_SPEC: Final = {
    "jobOverrides": [key.removeprefix(c.PREFIX) for key in c.GANG_ANNOTATIONS]
}
FLAVOR_NAME: Final = "atomic-gang-flavor"
CLUSTER_QUEUE_NAME: Final = "atomic-gang-cluster-queue"
QUEUE_NAME: Final = "atomic-gang-queue"

PLURALS: Final = {
    "AdmissionCheck": "admissionchecks",
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Workload": "workloads",
    c.GANG_CLASS_KIND: c.GANG_CLASS_PLURAL,
}

_FIRST: Final = ("cpu", "memory")


def quota_order(names: Any) -> list[str]:
    """cpu and memory first (when present), then every other resource in name order."""
    rest = sorted(n for n in names if n not in _FIRST)
    return [n for n in _FIRST if n in names] + rest


def admission_check(name: str = CHECK_NAME, gang_class: Any | None = None) -> dict[str, Any]:
    """Our AdmissionCheck; with `gang_class`, naming that GangClass in its parameters."""
    spec: dict[str, Any] = {"controllerName": c.CONTROLLER_NAME}
    if gang_class is not None:
        spec["parameters"] = {"apiGroup": c.GROUP, "kind": c.GANG_CLASS_KIND, "name": gang_class}
    return {
        "apiVersion": KUEUE_API,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": spec,
    }


def gang_class(name: str = CLASS_NAME, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.GANG_CLASS_KIND,
        "metadata": {"name": name},
        "spec": dict(DEFAULT_CLASS_SPEC if spec is None else spec),
    }


def resource_flavor(name: str = FLAVOR_NAME) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {},
    }


def cluster_queue_spec(
    flavor: Any,
    check: Any | None,
    quotas: Mapping[str, str],
    namespace_selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One resource group over ``quotas``' resources on one flavor, gated by ``check``
    (None: a plain queue, the benchmarks' baseline). ``flavor`` and ``check`` are names,
    or anything standing for one (the bootstrap passes Pulumi outputs)."""
    names = quota_order(quotas)
    spec: dict[str, Any] = {
        "namespaceSelector": dict(namespace_selector or {}),
        "resourceGroups": [
            {
                "coveredResources": names,
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": name, "nominalQuota": str(quotas[name])} for name in names
                        ],
                    }
                ],
            }
        ],
    }
    if check is not None:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return spec


def cluster_queue(
    name: str,
    flavor: Any,
    check: Any | None,
    quotas: Mapping[str, str],
    namespace_selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": cluster_queue_spec(flavor, check, quotas, namespace_selector),
    }


def local_queue(
    namespace: str, name: str = QUEUE_NAME, cluster_queue_name: Any = CLUSTER_QUEUE_NAME
) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def default_objects(
    namespaces: tuple[str, ...],
    quotas: Mapping[str, str],
    *,
    check_name: str = CHECK_NAME,
    flavor_name: str = FLAVOR_NAME,
    cluster_queue_name: str = CLUSTER_QUEUE_NAME,
    queue_name: str = QUEUE_NAME,
    namespace_selector: Mapping[str, Any] | None = None,
    class_name: str | None = CLASS_NAME,
    class_spec: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The objects an install creates, in the order they must exist; `class_name` None
    makes no GangClass and leaves the check without parameters (Jobs carry the shape)."""
    classes = [gang_class(class_name, class_spec)] if class_name is not None else []
    return [
        admission_check(check_name, class_name),
        # After the check: a check whose class is not there yet is only not Active yet.
        *classes,
        resource_flavor(flavor_name),
        cluster_queue(cluster_queue_name, flavor_name, check_name, quotas, namespace_selector),
        *(local_queue(ns, queue_name, cluster_queue_name) for ns in namespaces),
    ]
