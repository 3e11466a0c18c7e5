"""One AdmissionReview (admission.k8s.io/v1) for a batch/v1 Job in, its answer out.

Called by `server` for every request the apiserver sends to the Job webhook; tests call it
directly. Pure: no I/O, no Kubernetes client.

A Job is a gang Job when it carries the `atomic-gang.k8s.aws/pool` label or any
`atomic-gang.k8s.aws/` annotation. Every other Job is allowed as it came. A gang Job is
checked by `parse_gang_shape`, the function the Workload reconciler runs, with the pod count
Kueue gives the Job's one pod set, so the refusal here says exactly what the admission
check would say later, only before the Job exists. The webhook adds one rule the Workload
path cannot see: a gang Job without a Kueue queue never gets a Workload, so it would run
ungated on whatever nodes exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShapeError, Problem, parse_gang_shape

__all__ = ["ReviewError", "is_gang_job", "job_pod_count", "review"]

ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
_CHECKED_OPERATIONS: Final = ("CREATE", "UPDATE")
_CAUSE_TYPE: Final = {
    c.REASON_MISSING_LABEL: "FieldValueRequired",
    c.REASON_MISSING_ANNOTATION: "FieldValueRequired",
    c.REASON_NOT_ALLOWED: "FieldValueForbidden",
    c.REASON_UNKNOWN_ANNOTATION: "FieldValueNotSupported",
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


def _gang_inputs(job: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    ours = sorted((k, v) for k, v in annotations.items() if str(k).startswith(c.PREFIX))
    return (
        labels.get(c.POOL_LABEL),
        labels.get(c.QUEUE_NAME_LABEL),
        tuple(ours),
        job_pod_count(job.get("spec") or {}),
    )


def _queue_problem(labels: Mapping[str, str]) -> Problem | None:
    if str(labels.get(c.QUEUE_NAME_LABEL, "")).strip():
        return None
    return Problem(
        key=c.QUEUE_NAME_LABEL,
        value=None,
        reason=c.REASON_MISSING_LABEL,
        detail="a gang Job is gated by Kueue, and without a queue it would run on whatever "
        "nodes exist",
        accepted="a LocalQueue whose ClusterQueue lists the atomic-gang admission check",
        is_label=True,
    )


def _field(problem: Problem) -> str:
    # The pool key is a label, except when a Job wrongly sets it as an annotation.
    on_label = problem.is_label or (
        problem.key == c.POOL_LABEL and problem.reason != c.REASON_UNKNOWN_ANNOTATION
    )
    return f"metadata.{'labels' if on_label else 'annotations'}[{problem.key}]"


def _denied(uid: str, job: Mapping[str, Any], error: GangShapeError) -> dict[str, Any]:
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
                "group": "batch",
                "kind": "Job",
                "name": meta.get("name") or meta.get("generateName") or "",
                "causes": causes,
            },
        },
    }


def _verdict(request: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    uid = str(request["uid"])
    allowed = {"uid": uid, "allowed": True}
    job = request.get("object")
    if request.get("operation") not in _CHECKED_OPERATIONS or not isinstance(job, Mapping):
        return allowed
    meta = job.get("metadata") or {}
    if not is_gang_job(meta):
        return allowed
    old = request.get("oldObject")
    # Kueue and the Job controller update admitted Jobs (suspend, node selectors); only an
    # update that changes the gang's inputs is checked again, so a settings change cannot
    # strand a Job that was valid when it was created.
    if isinstance(old, Mapping) and _gang_inputs(old) == _gang_inputs(job):
        return allowed
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    problems: list[Problem] = []
    queue = _queue_problem(labels)
    if queue is not None:
        problems.append(queue)
    try:
        parse_gang_shape(labels, annotations, job_pod_count(job.get("spec") or {}), settings)
    except GangShapeError as err:
        problems.extend(err.problems)
    if not problems:
        return allowed
    return _denied(uid, job, GangShapeError(problems))


def review(body: Any, settings: Settings) -> dict[str, Any]:
    """The AdmissionReview answering `body`; raises `ReviewError` for a malformed one."""
    if not isinstance(body, Mapping):
        raise ReviewError("the body is not a JSON object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected an AdmissionReview of {ADMISSION_API_VERSION}")
    request = body.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ReviewError("the AdmissionReview has no request with a uid")
    try:
        response = _verdict(request, settings)
    except (TypeError, ValueError, AttributeError, OverflowError) as err:
        # A Job the apiserver accepted always has mappings where the schema says so and
        # integer counts; anything else is a request we cannot judge (a 400, not a 500),
        # and the failure policy decides.
        raise ReviewError(f"the Job in the request is malformed: {err}") from err
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
