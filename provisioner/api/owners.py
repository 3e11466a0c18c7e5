"""The object a gang's Workload belongs to, as the Workload reconciler reads it.

Kueue makes one Workload per job and names the job in the Workload's ownerReferences. The
job carries what the gang needs: the pool label and the gang annotations, from which
`shape.parse_gang_shape` reads the shape. Today that job is a batch/v1 Job, and its one pod
set ("main") is the whole gang.

`GangOwner` is the owner in general: its kind, its identity (name, namespace, uid) and its
labels and annotations. Another kind of owner (a JobSet, a PyTorchJob) is another
`OWNER_KINDS` entry read from its own informer; its several pod sets (replicated jobs,
master and workers) would be added here as `pod_sets`, each matched to the Workload's pod
set of the same name.
"""

from __future__ import annotations

from typing import Final

from provisioner.api.meta import KubeModel, ObjectMeta, OwnerReference

__all__ = ["JOB_KIND", "OWNER_KINDS", "GangOwner", "owner_of"]

JOB_KIND: Final = ("batch", "Job")
# (API group, kind) of the owners a gang's shape is read from.
OWNER_KINDS: Final = frozenset({JOB_KIND})


class GangOwner(KubeModel):
    """The job that owns a gang's Workload (a batch/v1 Job)."""

    api_version: str = "batch/v1"
    kind: str = "Job"
    metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def uid(self) -> str:
        return self.metadata.uid or ""

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations


def owner_of(references: tuple[OwnerReference, ...]) -> OwnerReference | None:
    """The first owner reference of a kind a gang's shape is read from."""
    for ref in references:
        group = ref.api_version.split("/", 1)[0] if "/" in ref.api_version else ""
        if (group, ref.kind) in OWNER_KINDS:
            return ref
    return None
