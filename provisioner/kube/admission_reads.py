"""`node_pool_lookup` and `owner_lookup`: what the pod and Job webhook reads, live.

The webhook runs on every replica, leader or not, so it has no informer cache to read;
it asks the apiserver, on the controller's own credentials, for the one Node a pod names
(its pool label) and for the one owner a controller reference names (its uid). The
chart's ClusterRole grants `get` on nodes and on each owner kind read (permissions.py).
Built by `assembly.build_webhook` and `python -m provisioner.webhook` around their
`KubeClient`; `webhook.pods` and `webhook.review` call them.
"""

from __future__ import annotations

from collections.abc import Callable

from provisioner.api import constants as c
from provisioner.api.owners import OwnerKind
from provisioner.api.tenancy import ClusterReadError
from provisioner.kube.errors import KubeError, KubeNotFound
from provisioner.kube.resources import NODES, owner_resource
from provisioner.kube.status import ObjectStore

__all__ = ["node_pool_lookup", "owner_lookup"]


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
