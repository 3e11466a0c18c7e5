"""One AdmissionReview (admission.k8s.io/v1) for a gang job object in, its answer out.

The objects are the kinds a user submits a gang as (`GANG_KINDS`: Job, JobSet, PyTorchJob,
TrainJob, MPIJob), each judged on its own metadata with the pod count Kueue gives its
Workload (`GangKind.pod_count`): the same rules and messages for every kind. Called by
`server` per request; tests call it directly. No Kubernetes client: its I/O is the ports it
is handed (`PoolLookup`, `ImageOwners`, ...).

An object is a gang job when it carries the `atomic-gang.k8s.aws/pool` label or any
`atomic-gang.k8s.aws/` annotation; every other object is allowed as it came (one with only
a queue label is a gang of its queue's GangClass, judged when its Workload is). A gang job
is checked by `read_gang_shape`, as the Workload reconciler checks it: through the GangClass
behind its queue (`QueueClasses`: LocalQueue, ClusterQueue, our AdmissionCheck, its
parameters; a broken chain is Kueue's to answer, not ours), with the pod count Kueue gives
its Workload, so the refusal here (an annotation the class forbids, naming the class and the
fix, included) is the admission check's later one, before the Job exists. One rule only the
webhook can see: a gang Job without a Kueue queue would run ungated on any nodes.

A gang Job naming another namespace's pool is refused with the admission check's sentence
(`api.tenancy`). The pool and the queue's class are read live (every replica serves, leader
or not: no cache); a failed read is answered with an error: the failurePolicy decides. A
Job's own AMI must come from an allowed owner (`api.ami_policy`, the `ImageOwners` port),
and a capacity reservation it names must be tagged for this cluster (and namespace, when it
names namespaces: `api.reservation_policy`); both fail closed. A gang
whose pods cannot fit one node of its instance type is refused with EC2's figures
(`api.pod_fit`, the `InstanceTypes` port); a port that cannot answer lets it through (fail
open): the Workload path asks EC2 again and launches nothing before it has the answer.

Two kinds are made by another controller from an object already judged here, and are
allowed as they come: a Job whose controller is a JobSet (JobSet v0.12.0 copies a replicated
job's template labels and annotations, the pool label included, onto each child Job, which
has no queue of its own: Kueue admits it through its JobSet's Workload) and a JobSet whose
controller is a TrainJob (Trainer builds it from the TrainJob and its runtime). Only a
proven controller counts (`controller_refs`): the owner must exist in the object's
namespace with the reference's uid, read through the `OwnerLookup` port; a Job naming a
JobSet that does not exist, or lives in another namespace, is judged like any Job.

A TrainJob's pod count is decided by the runtime it names, which the webhook does not read:
its count must be a whole number within limits.maxGangSize, and the admission check
compares it with the Workload's pods.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.api import owners
from provisioner.api.ami_policy import ImageOwners, ami_problem
from provisioner.api.fields import AMI_PATTERN
from provisioner.api.gang_class import read_gang_shape
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.owners import OwnerKind
from provisioner.api.pod_fit import (
    InstanceTypeLookupError,
    InstanceTypes,
    UnknownInstanceType,
    fit_problems,
    unknown_instance_type_problem,
)
from provisioner.api.pod_requests import QuantityError, gang_pod_requests
from provisioner.api.reservation_policy import ReservationTags, job_reservation_problem
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape, GangShapeError, Problem
from provisioner.api.tenancy import foreign_pool_problem
from provisioner.webhook.controller_refs import OwnerLookup, no_owners, proven_controller
from provisioner.webhook.gang_queue import QueueClasses, no_classes, queue_problem

__all__ = [
    "GANG_KINDS",
    "JOB",
    "TRAINING_KINDS",
    "GangKind",
    "PoolLookup",
    "QueueClasses",
    "ReviewError",
    "gang_kind_of",
    "gang_pod_count",
    "is_gang_job",
    "job_pod_count",
    "jobset_pod_count",
    "mpijob_pod_count",
    "pytorchjob_pod_count",
    "review",
]

log = logging.getLogger(__name__)

# The GangNodePool of a name as the apiserver holds it now, None when there is none;
# raises `api.tenancy.PoolLookupError` when it cannot be read.
PoolLookup = Callable[[str], GangNodePool | None]
# A pool label that could name a GangNodePool; any other is refused by the shape rules.
_POOL_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
_CHECKED_OPERATIONS: Final = ("CREATE", "UPDATE")
_CAUSE_TYPE: Final = {
    c.REASON_MISSING_LABEL: "FieldValueRequired",
    c.REASON_MISSING_ANNOTATION: "FieldValueRequired",
    c.REASON_NOT_ALLOWED: "FieldValueForbidden",
    c.REASON_UNKNOWN_ANNOTATION: "FieldValueNotSupported",
    c.REASON_POOL_OF_ANOTHER_NAMESPACE: "FieldValueForbidden",
}


class ReviewError(ValueError):
    """The request is not an AdmissionReview this webhook can answer (an HTTP 400)."""


def is_gang_job(meta: Mapping[str, Any]) -> bool:
    """True when the Job opts into the gang controller by label or annotation."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return c.POOL_LABEL in labels or any(str(k).startswith(c.PREFIX) for k in annotations)


def job_pod_count(spec: Mapping[str, Any]) -> int:
    """Pods in the Job's pod set as Kueue counts them: parallelism, or completions when
    smaller. The apiserver defaults parallelism to 1 before any webhook runs."""
    parallelism = spec.get("parallelism")
    count = 1 if parallelism is None else int(parallelism)
    completions = spec.get("completions")
    if completions is not None and int(completions) < count:
        count = int(completions)
    return count


def jobset_pod_count(spec: Mapping[str, Any]) -> int:
    """Pods of a JobSet as Kueue v0.19 counts its Workload: over every replicated job,
    replicas (the CRD defaults it to 1) times the pods of one of its Jobs (as for a Job)."""
    total = 0
    for replicated in spec.get("replicatedJobs") or []:
        replicas = replicated.get("replicas")
        job_spec = (replicated.get("template") or {}).get("spec") or {}
        total += (1 if replicas is None else int(replicas)) * job_pod_count(job_spec)
    return total


# The replica types Kueue v0.19 makes pod sets of for a PyTorchJob; any other is not counted.
_PYTORCH_REPLICA_TYPES: Final = ("Master", "Worker")


def _replica_count(replica_specs: Mapping[str, Any], replica_types: tuple[str, ...]) -> int:
    """The replicas (each 1 when unset) of those of `replica_types` the job has."""
    present = [replica_specs[t] for t in replica_types if replica_specs.get(t) is not None]
    return sum(1 if r.get("replicas") is None else int(r["replicas"]) for r in present)


def pytorchjob_pod_count(spec: Mapping[str, Any]) -> int:
    """Pods of a PyTorchJob as Kueue v0.19 counts its Workload: the Master's and the
    Workers' replicas (each 1 when unset)."""
    return _replica_count(spec.get("pytorchReplicaSpecs") or {}, _PYTORCH_REPLICA_TYPES)


# The replica types of an MPIJob Kueue v0.19 makes pod sets of. The launcher is one whether
# or not `runLauncherAsWorker` makes it an MPI rank too: a pod, so it needs a gang node.
_MPI_REPLICA_TYPES: Final = ("Launcher", "Worker")


def mpijob_pod_count(spec: Mapping[str, Any]) -> int:
    """Pods of an MPIJob as Kueue v0.19 counts its Workload: Launcher + Worker replicas."""
    return _replica_count(spec.get("mpiReplicaSpecs") or {}, _MPI_REPLICA_TYPES)


def _template_spec(template: Any) -> Mapping[str, Any]:
    spec = (template or {}).get("spec") if isinstance(template, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def job_pod_specs(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [_template_spec(spec.get("template"))]


def jobset_pod_specs(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        _template_spec(_template_spec(replicated.get("template")).get("template"))
        for replicated in spec.get("replicatedJobs") or []
    ]


def _replica_pod_specs(
    replica_specs: Mapping[str, Any], replica_types: tuple[str, ...]
) -> list[Mapping[str, Any]]:
    return [
        _template_spec((replica_specs.get(kind) or {}).get("template"))
        for kind in replica_types
        if replica_specs.get(kind) is not None
    ]


def pytorchjob_pod_specs(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return _replica_pod_specs(spec.get("pytorchReplicaSpecs") or {}, _PYTORCH_REPLICA_TYPES)


def mpijob_pod_specs(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return _replica_pod_specs(spec.get("mpiReplicaSpecs") or {}, _MPI_REPLICA_TYPES)


def trainjob_pod_specs(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A TrainJob's pods come from its runtime; what it says itself is the trainer's
    `resourcesPerNode`, the least each trainer pod requests."""
    resources = (spec.get("trainer") or {}).get("resourcesPerNode")
    return [{"containers": [{"resources": resources}]}] if resources else []


@dataclass(frozen=True)
class GangKind:
    """A kind users submit a gang as: how the webhook finds it in a request, counts its
    pods as Kueue does (None: Kueue counts them from something the object only names),
    finds its pods' specs (for their requests), and which controller's children of it are
    not judged again."""

    owner: OwnerKind
    pod_count: Callable[[Mapping[str, Any]], int] | None
    made_by: tuple[OwnerKind, ...] = ()  # controllers whose objects of this kind are theirs
    pod_specs: Callable[[Mapping[str, Any]], list[Mapping[str, Any]]] = lambda _spec: []

    @property
    def group(self) -> str:
        return self.owner.group

    @property
    def kind(self) -> str:
        return self.owner.kind


JOB: Final = GangKind(owners.JOB, job_pod_count, (owners.JOBSET,), job_pod_specs)
JOBSET: Final = GangKind(owners.JOBSET, jobset_pod_count, (owners.TRAIN_JOB,), jobset_pod_specs)
PYTORCHJOB: Final = GangKind(owners.PYTORCH_JOB, pytorchjob_pod_count, (), pytorchjob_pod_specs)
TRAINJOB: Final = GangKind(owners.TRAIN_JOB, None, (), trainjob_pod_specs)
MPIJOB: Final = GangKind(owners.MPI_JOB, mpijob_pod_count, (), mpijob_pod_specs)
TRAINING_KINDS: Final = (JOBSET, PYTORCHJOB, TRAINJOB, MPIJOB)
GANG_KINDS: Final = (JOB, *TRAINING_KINDS)


def gang_kind_of(obj: Mapping[str, Any]) -> GangKind | None:
    """The gang kind of a manifest by its apiVersion's group and kind; None for another."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    return next((k for k in GANG_KINDS if k.owner.matches(api_version, kind)), None)


def _kind_of(request: Mapping[str, Any], accepted: tuple[GangKind, ...]) -> GangKind:
    """The request's kind among `accepted`; a request without one is a Job's (the Job path
    served only Jobs before the other kinds, and tests of it send none)."""
    raw = request.get("kind")
    if raw is None and JOB in accepted:
        return JOB
    raw = raw if isinstance(raw, Mapping) else {}
    group, name = str(raw.get("group", "")), str(raw.get("kind", ""))
    for kind in accepted:
        if (kind.group, kind.kind) == (group, name):
            return kind
    names = ", ".join(f"{k.kind} ({k.group})" for k in accepted)
    raise ReviewError(f"this webhook judges {names}, not {name or 'an unnamed kind'} ({group})")


def _made_by_controller(
    request: Mapping[str, Any], meta: Mapping[str, Any], kind: GangKind, owners: OwnerLookup
) -> bool:
    """True when the object's controller, one whose children are judged on the parent,
    exists: a reference alone proves nothing."""
    if not kind.made_by:
        return False
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    return proven_controller(meta, namespace, kind.made_by, owners) is not None


def gang_pod_count(kind: GangKind, obj: Mapping[str, Any], annotations: Mapping[str, str]) -> int:
    """The pods the count annotation must equal. For a kind whose count the object does not
    hold (a TrainJob), the annotation's own number, so only its form and limit are checked
    before the Workload exists."""
    if kind.pod_count is not None:
        return kind.pod_count(obj.get("spec") or {})
    raw = str(annotations.get(c.ANN_COUNT, "")).strip()
    # A number too long to be a count is the shape rules' to refuse, not int()'s.
    return int(raw) if raw.isdigit() and raw.isascii() and len(raw) <= 9 else 0


def _gang_inputs(kind: GangKind, job: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    ours = sorted((k, v) for k, v in annotations.items() if str(k).startswith(c.PREFIX))
    return (
        labels.get(c.POOL_LABEL),
        labels.get(c.QUEUE_NAME_LABEL),
        tuple(ours),
        gang_pod_count(kind, job, {str(k): str(v) for k, v in annotations.items()}),
    )


def _runtime_counted(kind: GangKind, problem: Problem, settings: Settings) -> Problem:
    """A count problem of a kind whose pods the runtime decides, saying so instead of
    naming a pod count the webhook does not know."""
    if kind.pod_count is not None or problem.key != c.ANN_COUNT:
        return problem
    limit = settings.limits.max_gang_size
    accepted = (
        f"a whole number from 1 to {limit}: the {kind.kind}'s pod count, which its "
        "training runtime decides"
    )
    return problem.model_copy(update={"accepted": accepted})


# --- amiPolicy (limits): a Job's own AMI, checked with EC2 ---------------------------------
def _ami_problem(
    annotations: Mapping[str, str], settings: Settings, images: ImageOwners | None
) -> Problem | None:
    """The refusal of the Job's ami-id, when it names a well-formed one not allowed (a
    malformed one is the shape parser's to refuse)."""
    raw = annotations.get(c.ANN_AMI_ID, "").strip()
    if not re.fullmatch(AMI_PATTERN, raw):
        return None
    return ami_problem(raw, settings.ami_policy, images)


# --- pod requests against the instance type, with EC2's figures ---------------------------
def _fit_problems(
    kind: GangKind, job: Mapping[str, Any], shape: GangShape, types: InstanceTypes | None
) -> list[Problem]:
    """The refusals of a gang whose pods cannot fit one node of its type (`api.pod_fit`).
    Without EC2's answer the object is let through: the Workload path checks again, with
    EC2's answer, before anything is launched."""
    if types is None:
        return []
    try:
        figures = types.figures(shape.instance_type)
    except UnknownInstanceType:
        return [unknown_instance_type_problem(shape.instance_type, shape.region)]
    except InstanceTypeLookupError as err:
        log.info("pod requests not checked against %s: %s", shape.instance_type, err)
        return []
    try:
        requests = gang_pod_requests(kind.pod_specs(job.get("spec") or {}))
    except QuantityError:
        return []  # the apiserver refuses the object for it, with its own words
    return fit_problems(requests, figures, shape.efa)


def _field(problem: Problem) -> str:
    # The pool key is a label, except when a Job wrongly sets it as an annotation.
    on_label = problem.is_label or (
        problem.key == c.POOL_LABEL and problem.reason != c.REASON_UNKNOWN_ANNOTATION
    )
    return f"metadata.{'labels' if on_label else 'annotations'}[{problem.key}]"


def _denied(
    uid: str, kind: GangKind, job: Mapping[str, Any], error: GangShapeError
) -> dict[str, Any]:
    meta = job.get("metadata") or {}
    causes = [
        {
            "type": _CAUSE_TYPE.get(p.reason, "FieldValueInvalid"),
            "field": _field(p),
            "message": p.message,
        }
        for p in error.problems
    ]
    return {
        "uid": uid,
        "allowed": False,
        "status": {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": str(error),
            "details": {
                "group": kind.group,
                "kind": kind.kind,
                "name": meta.get("name") or meta.get("generateName") or "",
                "causes": causes,
            },
        },
    }


def _pool_problem(
    request: Mapping[str, Any], labels: Mapping[str, str], settings: Settings, pools: PoolLookup
) -> Problem | None:
    name = labels.get(c.POOL_LABEL, "")
    if len(name) > 63 or not _POOL_NAME.match(name):
        return None
    pool = pools(name)
    if pool is None:
        return None
    namespace = str(request.get("namespace") or "")
    return foreign_pool_problem(name, pool.spec.owner_namespace, namespace, settings.tenancy)


def _verdict(
    request: Mapping[str, Any],
    settings: Settings,
    pools: PoolLookup,
    images: ImageOwners | None,
    kind: GangKind,
    types: InstanceTypes | None,
    owners: OwnerLookup,
    reservations: ReservationTags | None,
    classes: QueueClasses,
) -> dict[str, Any]:
    uid = str(request["uid"])
    allowed = {"uid": uid, "allowed": True}
    job = request.get("object")
    if request.get("operation") not in _CHECKED_OPERATIONS or not isinstance(job, Mapping):
        return allowed
    meta = job.get("metadata") or {}
    if not is_gang_job(meta) or _made_by_controller(request, meta, kind, owners):
        return allowed
    old = request.get("oldObject")
    # Kueue and the job controllers update admitted objects (suspend, node selectors); only
    # an update that changes the gang's inputs is checked again, so a settings change cannot
    # strand an object that was valid when it was created.
    if isinstance(old, Mapping) and _gang_inputs(kind, old) == _gang_inputs(kind, job):
        return allowed
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    problems: list[Problem] = []
    queue = queue_problem(labels)
    if queue is not None:
        problems.append(queue)
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    queue_name = labels.get(c.QUEUE_NAME_LABEL)
    gang_class = classes(namespace, queue_name.strip()) if queue_name else None
    pods = gang_pod_count(kind, job, annotations)
    if gang_class is not None and kind.pod_count is None and c.ANN_COUNT not in annotations:
        pods = 1  # the runtime decides: the admission check compares Kueue's count
    try:
        read = read_gang_shape(
            labels, annotations, pods, settings, kind=kind.kind, gang_class=gang_class
        )
    except GangShapeError as err:
        problems.extend(_runtime_counted(kind, p, settings) for p in err.problems)
    else:
        problems.extend(_fit_problems(kind, job, read.shape, types))
    foreign = _pool_problem(request, labels, settings, pools)
    if foreign is not None:
        problems.append(foreign)
    ami = _ami_problem(annotations, settings, images)
    if ami is not None:
        problems.append(ami)
    reserved = job_reservation_problem(annotations, settings.cluster_name, namespace, reservations)
    if reserved is not None:
        problems.append(reserved)
    if not problems:
        return allowed
    return _denied(uid, kind, job, GangShapeError(problems))


def review(
    body: Any,
    settings: Settings,
    *,
    pools: PoolLookup,
    images: ImageOwners | None = None,
    kinds: tuple[GangKind, ...] = GANG_KINDS,
    instance_types: InstanceTypes | None = None,
    owners: OwnerLookup = no_owners,
    reservations: ReservationTags | None = None,
    classes: QueueClasses = no_classes,
) -> dict[str, Any]:
    """The AdmissionReview answering `body`, reading the pool a gang job names through
    `pools`; raises `ReviewError` for a malformed one or a kind not in `kinds`,
    `ClusterReadError` when the pool or an owner cannot be read. `images` answers who owns
    a Job's AMI; without it, only amiPolicy.allowedImageIds are admitted. `instance_types`
    answers what one node of a type offers (`api.pod_fit`); without it, pod requests are not
    checked. `owners` proves a child's controller exists; without it, every child is judged
    on its own. `reservations` answers how a named capacity reservation is tagged; without
    it, a Job naming one is refused. `classes` finds the GangClass behind a Job's queue;
    without it, Jobs are judged on their annotations alone, as the reference judges them."""
    if not isinstance(body, Mapping):
        raise ReviewError("the body is not a JSON object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected an AdmissionReview of {ADMISSION_API_VERSION}")
    request = body.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ReviewError("the AdmissionReview has no request with a uid")
    kind = _kind_of(request, kinds)
    try:
        response = _verdict(
            request, settings, pools, images, kind, instance_types, owners, reservations, classes
        )
    except (TypeError, ValueError, AttributeError, OverflowError) as err:
        # An object the apiserver accepted always has mappings where the schema says so and
        # integer counts; anything else is a request we cannot judge (a 400, not a 500),
        # and the failure policy decides.
        raise ReviewError(f"the object in the request is malformed: {err}") from err
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
