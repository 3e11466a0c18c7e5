"""The Kubernetes API calls the controller makes, as RBAC rows: the one list its RBAC is
checked against.

The Helm chart's ClusterRole and Role are written by hand; a chart test renders them and
compares their rules with these rows in both directions, so a verb the code needs and the
chart lacks (a 403 in production) or a verb the chart grants and the code never uses (more
privilege than needed) fails the build. Whoever adds a call to `provisioner/kube` or the
controllers adds its row here, and then to the chart's templates.

Pure data: importing this module imports no Kubernetes client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from provisioner.api import constants as c

__all__ = [
    "CLUSTER_PERMISSIONS",
    "NAMESPACE_PERMISSIONS",
    "OWNERSHIP_KEY_PERMISSIONS",
    "WEBHOOK_CERT_CLUSTER_PERMISSIONS",
    "WEBHOOK_CERT_NAMESPACE_PERMISSIONS",
    "Permission",
    "as_triples",
]


@dataclass(frozen=True)
class Permission:
    """One RBAC row: the verbs used on one resource (or subresource) of one API group."""

    api_group: str
    resource: str
    verbs: tuple[str, ...]


_READ: Final = ("get", "list", "watch")
_STATUS: Final = ("get", "patch", "update")

# Granted cluster-wide (ClusterRole): Workloads live in every user namespace, and the
# GangNodePool, AdmissionCheck, ClusterQueue, ResourceFlavor and Node are cluster-scoped.
CLUSTER_PERMISSIONS: Final[tuple[Permission, ...]] = (
    # Kueue: the Workload reconciler reads Workloads and writes its check state; the
    # AdmissionCheck reconciler writes the Active condition; `doctor` reads the queues.
    Permission(c.KUEUE_GROUP, "workloads", (*_READ, "patch", "update")),
    Permission(c.KUEUE_GROUP, "workloads/status", _STATUS),
    Permission(c.KUEUE_GROUP, "admissionchecks", _READ),
    Permission(c.KUEUE_GROUP, "admissionchecks/status", _STATUS),
    Permission(c.KUEUE_GROUP, "localqueues", _READ),
    Permission(c.KUEUE_GROUP, "clusterqueues", _READ),
    Permission(c.KUEUE_GROUP, "resourceflavors", _READ),
    # Our own record of each pool: spec from the Workload reconciler, status and the
    # release finalizer from the GangNodePool reconciler.
    Permission(c.GROUP, c.GNP_PLURAL, (*_READ, "create", "update", "patch", "delete")),
    Permission(c.GROUP, f"{c.GNP_PLURAL}/status", _STATUS),
    Permission(c.GROUP, f"{c.GNP_PLURAL}/finalizers", ("update",)),
    # The GangClass an AdmissionCheck of ours names: read for the check's Active condition,
    # the gang's shape, and the webhook's refusal of an annotation the class forbids.
    Permission(c.GROUP, c.GANG_CLASS_PLURAL, _READ),
    # A Workload's owner carries the gang's label and annotations: a Job, JobSet,
    # PyTorchJob, TrainJob or MPIJob (`owners.OWNER_KINDS`), each read by an informer or a GET.
    Permission("batch", "jobs", _READ),
    Permission("jobset.x-k8s.io", "jobsets", _READ),
    Permission("kubeflow.org", "pytorchjobs", _READ),
    Permission("trainer.kubeflow.org", "trainjobs", _READ),
    Permission("kubeflow.org", "mpijobs", _READ),
    # The webhook proves a pod's DaemonSet exists before letting it onto a gang node
    # (a JobSet or TrainJob named as a controller is read with the rows above).
    Permission("apps", "daemonsets", ("get",)),
    # Join tracking reads Nodes; the pool reconciler labels only its own; the webhook
    # reads the one Node a pod names. RBAC cannot narrow patch to a field: the chart's
    # ValidatingAdmissionPolicy (templates/node-writes.yaml) lets this account change only
    # the group label, and only on a Node labelled with a pool.
    Permission("", "nodes", (*_READ, "patch")),
    # Events on Workloads, their owners and pools, in whichever namespace the object lives.
    Permission("", "events", ("create", "patch")),
    Permission("events.k8s.io", "events", ("create", "patch")),
)

# Granted only in the controller's own namespace (Role): the leader-election Lease.
# `LeaseLock.update` renews with a preconditioned merge patch, so the verb is patch.
NAMESPACE_PERMISSIONS: Final[tuple[Permission, ...]] = (
    Permission("coordination.k8s.io", "leases", ("get", "create", "patch")),
)

# -- webhook certificates (issue #30, certs) ---------------------------------------------------
# Granted only with the chart's webhook.certMode=selfSigned, in roles of their own whose every
# rule names its one object with resourceNames: the rotator (kube/webhook_certs.py) reads and
# replaces the release's certificate Secret, which the chart creates empty (so no create),
# and reads and patches the caBundle of the chart's ValidatingWebhookConfiguration.
WEBHOOK_CERT_NAMESPACE_PERMISSIONS: Final[tuple[Permission, ...]] = (
    Permission("", "secrets", ("get", "update")),
)
WEBHOOK_CERT_CLUSTER_PERMISSIONS: Final[tuple[Permission, ...]] = (
    Permission("admissionregistration.k8s.io", "validatingwebhookconfigurations", ("get", "patch")),
)


# The self-managed ownership key (issue #30, ownkey), scoped by resourceNames to its one
# Secret: `kube/ownership_key.py` reads it and fills it once (the chart creates it empty).
OWNERSHIP_KEY_PERMISSIONS: Final[tuple[Permission, ...]] = (
    Permission("", "secrets", ("get", "update")),
)


def as_triples(rows: tuple[Permission, ...]) -> set[tuple[str, str, str]]:
    """{(apiGroup, resource, verb)}: the form in which two rule lists can be compared."""
    return {(row.api_group, row.resource, verb) for row in rows for verb in row.verbs}
