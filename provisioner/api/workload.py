"""Typed views of Kueue v1beta2 Workloads and AdmissionChecks.

Only the fields this controller reads or writes are modelled (names from Kueue v0.19's
`apis/kueue/v1beta2`); anything else in the body is ignored, so a newer Kueue does not
break parsing. The Workload reconciler reads `Workload` and writes our one entry in
`status.admissionChecks` (`provisioner.kube.check_state`); the AdmissionCheck reconciler
reads `AdmissionCheck` to filter on our controllerName.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from provisioner.api import constants as c
from provisioner.api.constants import CheckState
from provisioner.api.meta import (
    Condition,
    KubeModel,
    KubeTime,
    ObjectMeta,
    OmitEmptyModel,
    OwnerReference,
    condition_is_true,
)
from provisioner.api.owners import owner_of
from provisioner.api.pod_requests import ResourceAmounts, gang_pod_requests

__all__ = [
    "Admission",
    "AdmissionCheck",
    "AdmissionCheckParameters",
    "AdmissionCheckSpec",
    "AdmissionCheckState",
    "AdmissionCheckStatus",
    "CheckState",
    "PodSet",
    "PodSetAssignment",
    "PodSetUpdate",
    "PodTemplate",
    "TemplateMeta",
    "Toleration",
    "Workload",
    "WorkloadSpec",
    "WorkloadStatus",
    "gang_pod_set_updates",
]


class TemplateMeta(OmitEmptyModel):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class PodTemplate(KubeModel):
    metadata: TemplateMeta = TemplateMeta()
    # The pod spec as Kueue copied it from the owner, kept whole and as read (None when the
    # body has none): `api.pod_requests` reads its containers' resources, and a write of
    # the Workload carries it back unchanged.
    spec: dict[str, Any] | None = None


class PodSet(KubeModel):
    # Kueue defaults the name to "main" for single-pod-set Jobs; a JobSet's or TrainJob's
    # are named after its replicated jobs, a PyTorchJob's after its lowercased replica types.
    name: str = "main"
    count: int = Field(ge=0)
    min_count: int | None = None
    template: PodTemplate = PodTemplate()


class WorkloadSpec(KubeModel):
    pod_sets: tuple[PodSet, ...]
    queue_name: str | None = None
    # None and True both mean active; False is how Kueue deactivates a Workload.
    active: bool | None = None


class PodSetAssignment(KubeModel):
    name: str
    flavors: dict[str, str] = Field(default_factory=dict)
    count: int | None = None


class Admission(KubeModel):
    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...] = ()


class Toleration(KubeModel):
    """corev1.Toleration."""

    # Plain strings: other checks' entries are parsed too, and "" is a valid effect.
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


class PodSetUpdate(OmitEmptyModel):
    """Additions Kueue makes to a pod set's template when the Workload is admitted."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


class AdmissionCheckState(KubeModel):
    name: str
    state: CheckState
    last_transition_time: KubeTime | None = None
    message: str = ""
    requeue_after_seconds: int | None = None
    retry_count: int | None = None
    pod_set_updates: tuple[PodSetUpdate, ...] = ()


class WorkloadStatus(KubeModel):
    conditions: tuple[Condition, ...] = ()
    admission: Admission | None = None
    admission_checks: tuple[AdmissionCheckState, ...] = ()


class Workload(KubeModel):
    metadata: ObjectMeta
    spec: WorkloadSpec
    status: WorkloadStatus = WorkloadStatus()

    def is_true(self, condition_type: str) -> bool:
        """Whether the Workload has that condition (constants.WL_*) with status True."""
        return condition_is_true(self.status.conditions, condition_type)

    def check(self, name: str) -> AdmissionCheckState | None:
        """The entry for that admission check, if Kueue has added one."""
        return next((s for s in self.status.admission_checks if s.name == name), None)

    @property
    def total_pod_count(self) -> int:
        return sum(ps.count for ps in self.spec.pod_sets)

    def pod_requests(self) -> ResourceAmounts:
        """Resource by resource, the most one pod of any of its pod sets requests, as the
        scheduler counts it (`api.pod_requests`). Raises `QuantityError` for a quantity the
        apiserver would not have taken."""
        return gang_pod_requests(ps.template.spec or {} for ps in self.spec.pod_sets)

    @property
    def is_active(self) -> bool:
        return self.spec.active is not False

    @property
    def owner(self) -> OwnerReference | None:
        """The reference to the object of a supported kind (`owners.OWNER_KINDS`: a Job,
        JobSet, PyTorchJob or TrainJob) that owns this Workload, if any."""
        return owner_of(self.metadata.owner_references)


class AdmissionCheckParameters(KubeModel):
    api_group: str
    kind: str
    name: str


class AdmissionCheckSpec(KubeModel):
    controller_name: str
    parameters: AdmissionCheckParameters | None = None


class AdmissionCheckStatus(KubeModel):
    conditions: tuple[Condition, ...] = ()


class AdmissionCheck(KubeModel):
    metadata: ObjectMeta
    spec: AdmissionCheckSpec
    status: AdmissionCheckStatus = AdmissionCheckStatus()

    def is_ours(self, controller_name: str = c.CONTROLLER_NAME) -> bool:
        return self.spec.controller_name == controller_name

    def is_true(self, condition_type: str) -> bool:
        return condition_is_true(self.status.conditions, condition_type)


def gang_pod_set_updates(workload: Workload, pool: str, group: str) -> tuple[PodSetUpdate, ...]:
    """Pin every pod set to the pool's active group and tolerate the pool's gang taint."""
    toleration = Toleration(key=c.GANG_TAINT_KEY, operator="Equal", value=pool, effect="NoSchedule")
    return tuple(
        PodSetUpdate(
            name=ps.name,
            node_selector={c.POOL_LABEL: pool, c.GROUP_LABEL: group},
            tolerations=(toleration,),
        )
        for ps in workload.spec.pod_sets
    )
