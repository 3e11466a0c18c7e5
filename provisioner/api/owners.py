"""The object a gang's Workload belongs to, as the Workload reconciler reads it.

Kueue makes one Workload per job and names the job in the Workload's ownerReferences (as
its controller). The job carries what the gang needs: the pool label and the gang
annotations, from which `shape.parse_gang_shape` reads the shape. A gang is submitted as
one of the `OWNER_KINDS`: a batch/v1 Job, a JobSet, a Kubeflow PyTorchJob, a Kubeflow
Trainer TrainJob or a Kubeflow MPIJob (mpi-operator v2). The label and annotations go on
that top-level object, with the same names and rules whatever its kind; its pod sets (the
replicated jobs of a JobSet, the master and workers of a PyTorchJob, the launcher and
workers of an MPIJob) are the Workload's, and the gang is all of them
(`Workload.total_pod_count`).

A Workload owned by any other kind (or by nothing) has no gang to read:
`unsupported_owner_message` says so, naming the kinds that do.

`GangOwner` is the owner in general: its kind, its identity (name, namespace, uid) and its
labels and annotations. `provisioner.kube.resources.owner_resource` gives each kind's REST
resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from provisioner.api.meta import KubeModel, ObjectMeta, OwnerReference

__all__ = [
    "DAEMON_SET",
    "JOB",
    "JOBSET",
    "MPI_JOB",
    "OWNER_KINDS",
    "PYTORCH_JOB",
    "TRAIN_JOB",
    "GangOwner",
    "OwnerKind",
    "owner_kind",
    "owner_of",
    "supported_kinds",
    "unsupported_owner_message",
]


@dataclass(frozen=True)
class OwnerKind:
    """A kind a gang can be submitted as: its API group, the version this controller reads,
    its kind and plural, and the name of Kueue's integration framework for it (what Kueue's
    `integrations.frameworks` must list). `DAEMON_SET` is the one other kind: an owner the
    webhook reads, with no framework."""

    group: str
    version: str
    kind: str
    plural: str
    framework: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def display_name(self) -> str:
        """As a person reads it in a message: "jobset.x-k8s.io/v1alpha2 JobSet"."""
        return f"{self.api_version} {self.kind}"

    def matches(self, api_version: str, kind: str) -> bool:
        """Whether an object of that apiVersion and kind is of this kind (any version of
        the group: the apiserver serves one object at each of its group's versions)."""
        return kind == self.kind and _group_of(api_version) == self.group


JOB: Final = OwnerKind("batch", "v1", "Job", "jobs", "batch/job")
JOBSET: Final = OwnerKind(
    "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "jobset.x-k8s.io/jobset"
)
PYTORCH_JOB: Final = OwnerKind(
    "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", "kubeflow.org/pytorchjob"
)
TRAIN_JOB: Final = OwnerKind(
    "trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", "trainer.kubeflow.org/trainjob"
)
# mpi-operator v2's MPIJob (the kind AWS's EFA samples use): Kueue makes a pod set of its
# Launcher and one of its Workers, so the launcher holds a gang node like any worker.
MPI_JOB: Final = OwnerKind("kubeflow.org", "v2beta1", "MPIJob", "mpijobs", "kubeflow.org/mpijob")
# The kinds a gang's shape is read from, in the order messages name them.
OWNER_KINDS: Final = (JOB, JOBSET, PYTORCH_JOB, TRAIN_JOB, MPI_JOB)
# Not a gang kind (no Kueue framework): the webhook proves a pod's DaemonSet exists before
# it lets the pod onto a gang node (`webhook.pods`).
DAEMON_SET: Final = OwnerKind("apps", "v1", "DaemonSet", "daemonsets", "")


def _group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def owner_kind(api_version: str, kind: str) -> OwnerKind | None:
    """The supported kind an object of that apiVersion and kind is, or None."""
    return next((k for k in OWNER_KINDS if k.matches(api_version, kind)), None)


def supported_kinds() -> str:
    """The supported kinds, for a message: "batch/v1 Job, ..., and ... TrainJob"."""
    names = [k.display_name for k in OWNER_KINDS]
    return ", ".join(names[:-1]) + f" and {names[-1]}"


class GangOwner(KubeModel):
    """The top-level object that owns a gang's Workload (a Job, JobSet, PyTorchJob,
    TrainJob or MPIJob): only its identity and metadata are read; its spec is Kueue's to count."""

    api_version: str = JOB.api_version
    kind: str = JOB.kind
    metadata: ObjectMeta

    @property
    def owner_kind(self) -> OwnerKind | None:
        return owner_kind(self.api_version, self.kind)

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


def _controller(references: tuple[OwnerReference, ...]) -> OwnerReference | None:
    return next((ref for ref in references if ref.controller), None)


def owner_of(references: tuple[OwnerReference, ...]) -> OwnerReference | None:
    """The reference to the gang's owner: the controller reference when it is of a
    supported kind; without a controller reference, the first of a supported kind."""
    controller = _controller(references)
    candidates = (controller,) if controller is not None else references
    return next((r for r in candidates if owner_kind(r.api_version, r.kind) is not None), None)


def unsupported_owner_message(workload: str, references: tuple[OwnerReference, ...]) -> str | None:
    """Why the Workload named `workload` has no gang to read — its owner is of a kind
    this controller does not read, or it has none — or None when its owner is supported."""
    if owner_of(references) is not None:
        return None
    ref = _controller(references) or (references[0] if references else None)
    owned_by = (
        f"is owned by {ref.api_version} {ref.kind} {ref.name}, a kind atomic-gang does not "
        "read a gang from"
        if ref is not None
        else "has no owner (no ownerReferences), so there is no object to read a gang from"
    )
    return (
        f"Workload {workload} {owned_by}. Supported kinds: {supported_kinds()}. Submit the "
        "gang as one of these, with the pool label and gang annotations on it, or send this "
        "workload to a queue whose ClusterQueue does not use the atomic-gang admission check."
    )
