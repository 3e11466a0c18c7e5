"""`node_pool_lookup`, `owner_lookup` and `queue_class_lookup`: what the pod and Job
webhook reads, live.

The webhook runs on every replica, leader or not, so it has no informer cache to read;
it asks the apiserver, on the controller's own credentials, for the one Node a pod names
(its pool label), for the one owner a controller reference names (its uid), and for the
GangClass behind a Job's queue: its LocalQueue, that queue's ClusterQueue, the
ClusterQueue's AdmissionChecks, ours among them, and the class its parameters name. The
chart's ClusterRole grants `get` on each (permissions.py).
Built by `assembly.build_webhook` and `python -m provisioner.webhook` around their
`KubeClient`; `webhook.pods` and `webhook.review` call them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provisioner.api import constants as c
from provisioner.api.gang_class import GangClass
from provisioner.api.owners import OwnerKind
from provisioner.api.tenancy import ClusterReadError
from provisioner.kube.cache import TypedCache
from provisioner.kube.errors import KubeError, KubeNotFound
from provisioner.kube.resources import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    GANG_CLASSES,
    LOCAL_QUEUES,
    NODES,
    ResourceRef,
    owner_resource,
)
from provisioner.kube.status import ObjectStore

__all__ = [
    "class_lookup",
    "node_pool_lookup",
    "owner_lookup",
    "queue_check_lookup",
    "queue_class_lookup",
]


def node_pool_lookup(kube: ObjectStore) -> Callable[[str], str | None]:
    """A reader of a Node's pool label by node name: None for a node of no pool or no
    such node, `ClusterReadError` when the apiserver did not answer or refused."""

    def read(name: str) -> str | None:
        try:
            node = kube.get(NODES, name)
        except KubeNotFound:
            return None
        except KubeError as err:
            raise ClusterReadError(
                f"could not read Node {name} to check which pool it belongs to: {err}"
            ) from err
        labels = (node.get("metadata") or {}).get("labels") or {}
        pool = labels.get(c.POOL_LABEL)
        return str(pool) if pool else None

    return read


def owner_lookup(kube: ObjectStore) -> Callable[[OwnerKind, str, str], str | None]:
    """A reader of an owner's uid by kind, namespace and name: None when there is none,
    `ClusterReadError` when the apiserver did not answer or refused."""

    def read(kind: OwnerKind, namespace: str, name: str) -> str | None:
        try:
            owner = kube.get(owner_resource(kind), name, namespace=namespace)
        except KubeNotFound:
            return None
        except KubeError as err:
            raise ClusterReadError(
                f"could not read {kind.kind} {namespace}/{name}, which an object names as "
                f"its controller: {err}"
            ) from err
        uid = (owner.get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    return read


def _read(kube: ObjectStore, ref: ResourceRef, name: str, namespace: str | None = None) -> Any:
    """The object; None when there is no such object (Kueue will not admit a Job
    whose queue chain is broken either: not the webhook's to refuse)."""
    try:
        obj = kube.get(ref, name, namespace=namespace)
    except KubeNotFound:
        return None
    except KubeError as err:
        where = f"{namespace}/{name}" if namespace else name
        raise ClusterReadError(
            f"could not read {ref.kind} {where} to find the GangClass of a Job's queue: {err}"
        ) from err
    return obj


def _spec(obj: Any) -> Any:
    return (obj or {}).get("spec") or {}


def _check_names(queue_spec: Any) -> list[str]:
    """A ClusterQueue's AdmissionChecks: v1beta2's strategy list, or the older plain list."""
    strategy = (queue_spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    names = [str(entry.get("name")) for entry in strategy if entry.get("name")]
    return names or [str(name) for name in queue_spec.get("admissionChecks") or []]


def queue_check_lookup(kube: ObjectStore) -> Callable[[str, str], tuple[str, ...]]:
    """A reader of the AdmissionChecks behind LocalQueue `name` in `namespace` (its
    ClusterQueue's, ours or not): empty when the chain is broken, `ClusterReadError` when
    the apiserver did not answer. The Workload reconciler asks it for a Workload that waits
    for quota and carries no check of ours yet (`workload.prepare_ahead`)."""

    def read(namespace: str, name: str) -> tuple[str, ...]:
        return tuple(_queue_check_names(kube, namespace, name))

    return read


def _queue_check_names(kube: ObjectStore, namespace: str, name: str) -> list[str]:
    """The checks of the ClusterQueue behind LocalQueue `name`: [] when either is missing."""
    local = _spec(_read(kube, LOCAL_QUEUES, name, namespace))
    cluster_queue = str(local.get("clusterQueue") or "")
    queue = _spec(_read(kube, CLUSTER_QUEUES, cluster_queue)) if cluster_queue else {}
    return _check_names(queue)


def queue_class_lookup(
    kube: ObjectStore, controller_name: str = c.CONTROLLER_NAME
) -> Callable[[str, str], GangClass | None]:
    """A reader of the GangClass behind LocalQueue `name` in `namespace`: None when the
    chain (LocalQueue, ClusterQueue, one of our AdmissionChecks naming a GangClass, the
    class) is broken anywhere, `ClusterReadError` when the apiserver did not answer."""

    def read(namespace: str, name: str) -> GangClass | None:
        for check_name in _queue_check_names(kube, namespace, name):
            check = _spec(_read(kube, ADMISSION_CHECKS, check_name))
            if check.get("controllerName") != controller_name:
                continue
            params = check.get("parameters") or {}
            if (params.get("apiGroup"), params.get("kind")) != (c.GROUP, c.GANG_CLASS_KIND):
                return None
            class_name = str(params.get("name") or "")
            body = _read(kube, GANG_CLASSES, class_name) if class_name else None
            return GangClass.from_dict(body) if body else None
        return None

    return read


def class_lookup(
    kube: ObjectStore, cache: TypedCache[GangClass] | None
) -> Callable[[str], GangClass | None]:
    """The controller's reader of a GangClass by name: from the informer's cache when the
    controller has one, else by a live GET. The informer exists only when discovery said
    at start-up that the CRD is served; a CRD installed later (a CRD chart upgraded after
    the controller) or a discovery that failed under load must not leave every class unread
    for the life of the process, as owners of an unserved kind are read live too. A GET of
    a resource the apiserver does not serve is NotFound: no class. Any other failure is
    `ClusterReadError`, so the pass fails and is retried instead of deciding without it."""

    def read(name: str) -> GangClass | None:
        if cache is not None:
            return cache.get("", name)
        body = _read(kube, GANG_CLASSES, name)
        return GangClass.from_dict(body) if body else None

    return read
