"""What a resource is (`ResourceRef`), how an object is keyed (`ObjectKey`), and the
resources the controllers use.

`KubeClient` builds request paths from a `ResourceRef`; informers and the work queue key
objects by `ObjectKey`. Controllers import the refs below rather than spelling group,
version and plural at each call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote

from provisioner.api import constants as c
from provisioner.api.owners import (
    JOB,
    JOBSET,
    MPI_JOB,
    OWNER_KINDS,
    PYTORCH_JOB,
    TRAIN_JOB,
    OwnerKind,
)

__all__ = [
    "ADMISSION_CHECKS",
    "CLUSTER_QUEUES",
    "CONFIG_MAPS",
    "CORE_EVENTS",
    "CRDS",
    "DEPLOYMENTS",
    "GANG_CLASSES",
    "GANG_NODE_POOLS",
    "JOBS",
    "JOBSETS",
    "LEASES",
    "LOCAL_QUEUES",
    "MPI_JOBS",
    "NAMESPACES",
    "NODES",
    "OWNER_RESOURCES",
    "PYTORCH_JOBS",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    "TRAIN_JOBS",
    "VALIDATING_WEBHOOKS",
    "WORKLOADS",
    "ObjectKey",
    "ResourceRef",
    "key_of",
    "owner_resource",
]


@dataclass(frozen=True)
class ResourceRef:
    """One REST resource: `group` is "" for the core API (`/api/v1`)."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The request path; a namespaced resource without a namespace means all of them."""
        parts = [f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        elif self.namespaced and name:
            raise ValueError(f"{self.kind} {name!r}: a namespaced resource needs a namespace")
        parts.append(self.plural)
        if name:
            parts.append(quote(name, safe=""))
        elif subresource:
            raise ValueError(f"{self.kind}: a subresource needs an object name")
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


class ObjectKey(NamedTuple):
    """(namespace, name); namespace is "" for cluster-scoped objects."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return ObjectKey(meta.get("namespace") or "", meta.get("name") or "")


NAMESPACES = ResourceRef("", "v1", "namespaces", False, "Namespace")
NODES = ResourceRef("", "v1", "nodes", False, "Node")
CONFIG_MAPS = ResourceRef("", "v1", "configmaps", True, "ConfigMap")
CORE_EVENTS = ResourceRef("", "v1", "events", True, "Event")
SERVICE_ACCOUNTS = ResourceRef("", "v1", "serviceaccounts", True, "ServiceAccount")
SECRETS = ResourceRef("", "v1", "secrets", True, "Secret")
DEPLOYMENTS = ResourceRef("apps", "v1", "deployments", True, "Deployment")
CRDS = ResourceRef(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
VALIDATING_WEBHOOKS = ResourceRef(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    False,
    "ValidatingWebhookConfiguration",
)
LEASES = ResourceRef("coordination.k8s.io", "v1", "leases", True, "Lease")


def owner_resource(kind: OwnerKind) -> ResourceRef:
    """The REST resource of a kind a gang can be submitted as (all are namespaced)."""
    return ResourceRef(kind.group, kind.version, kind.plural, True, kind.kind)


JOBS = owner_resource(JOB)
JOBSETS = owner_resource(JOBSET)
PYTORCH_JOBS = owner_resource(PYTORCH_JOB)
TRAIN_JOBS = owner_resource(TRAIN_JOB)
MPI_JOBS = owner_resource(MPI_JOB)
# The resource of each kind a gang's Workload may belong to, in `OWNER_KINDS` order.
OWNER_RESOURCES = tuple(owner_resource(kind) for kind in OWNER_KINDS)
GANG_NODE_POOLS = ResourceRef(c.GROUP, c.VERSION, c.GNP_PLURAL, False, c.GNP_KIND)
WORKLOADS = ResourceRef(c.KUEUE_GROUP, c.KUEUE_VERSION, "workloads", True, "Workload")
ADMISSION_CHECKS = ResourceRef(
    c.KUEUE_GROUP, c.KUEUE_VERSION, "admissionchecks", False, "AdmissionCheck"
)
GANG_CLASSES = ResourceRef(c.GROUP, c.VERSION, c.GANG_CLASS_PLURAL, False, c.GANG_CLASS_KIND)
LOCAL_QUEUES = ResourceRef(c.KUEUE_GROUP, c.KUEUE_VERSION, "localqueues", True, "LocalQueue")
CLUSTER_QUEUES = ResourceRef(c.KUEUE_GROUP, c.KUEUE_VERSION, "clusterqueues", False, "ClusterQueue")
