"""The Job webhook's verdicts: gang or not, the Workload path's messages, Kueue's pod count."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShapeError, parse_gang_shape
from provisioner.api.workload import Workload
from provisioner.webhook.review import ReviewError, is_gang_job, job_pod_count, review
from tests.support.backends import UNREACHED_BACKEND
from tests.support.jobs import job as job_body
from tests.support.pools import pool_lookup
from tests.support.workloads import workload as kueue_workload

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
    }
)
GANG_LABELS = {c.POOL_LABEL: "pretrain-p4d", c.QUEUE_NAME_LABEL: "atomic-gang-queue"}
GANG_ANNOTATIONS = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}


def job(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    parallelism: int | None = 4,
    completions: int | None = 4,
) -> dict[str, Any]:
    return job_body(
        "trainer",
        namespace="default",
        uid=None,
        labels=labels,
        annotations=annotations,
        parallelism=parallelism,
        completions=completions,
    )


def admission(obj: dict[str, Any], operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "operation": operation,
            "object": obj,
            "oldObject": old,
        },
    }


def answer(obj: dict[str, Any], operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    out = review(admission(obj, operation, old), SETTINGS, pools=pool_lookup())
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    return dict(out["response"])


def workload_message(labels: dict[str, str], annotations: dict[str, str], pods: int) -> str:
    """What the Workload reconciler would put in the check: Kueue's Workload for the Job."""
    workload = Workload.from_dict(
        kueue_workload("job-trainer-1a2b3", namespace="default", count=pods, queue=None)
    )
    with pytest.raises(GangShapeError) as err:
        parse_gang_shape(labels, annotations, workload.total_pod_count, SETTINGS)
    return str(err.value)


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        (None, None),
        ({"app": "web", c.QUEUE_NAME_LABEL: "other-queue"}, {"example.com/owner": "team-a"}),
        # Lookalike keys outside our prefix do not make a Job a gang Job.
        ({"atomic-gang.k8s.aws.pool": "x"}, {"atomic-gang.k8s.aws": "4"}),
    ],
)
def test_non_gang_jobs_are_allowed_untouched(
    labels: dict[str, str] | None, annotations: dict[str, str] | None
) -> None:
    obj = job(labels, annotations, parallelism=3, completions=7)
    before = copy.deepcopy(obj)
    assert answer(obj) == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert obj == before


def test_a_valid_gang_job_is_allowed() -> None:
    assert answer(job(GANG_LABELS, GANG_ANNOTATIONS))["allowed"] is True


@pytest.mark.parametrize(
    ("labels", "annotations", "pods", "field"),
    [
        # count != Kueue's pod count
        (GANG_LABELS, GANG_ANNOTATIONS, 3, f"metadata.annotations[{c.ANN_COUNT}]"),
        # instance type missing
        (
            GANG_LABELS,
            {c.ANN_COUNT: "4"},
            4,
            f"metadata.annotations[{c.ANN_INSTANCE_TYPE}]",
        ),
        # a gang by annotation only: the pool label is missing
        (
            {c.QUEUE_NAME_LABEL: "q"},
            GANG_ANNOTATIONS,
            4,
            f"metadata.labels[{c.POOL_LABEL}]",
        ),
        # a typo in a key under our prefix
        (
            GANG_LABELS,
            {**GANG_ANNOTATIONS, f"{c.PREFIX}keep-warm": "5m"},
            4,
            f"metadata.annotations[{c.PREFIX}keep-warm]",
        ),
        # the pool set as an annotation instead of a label
        (
            GANG_LABELS,
            {**GANG_ANNOTATIONS, c.POOL_LABEL: "pretrain-p4d"},
            4,
            f"metadata.annotations[{c.POOL_LABEL}]",
        ),
        # another region
        (
            GANG_LABELS,
            {**GANG_ANNOTATIONS, c.ANN_REGION: "eu-west-1"},
            4,
            f"metadata.annotations[{c.ANN_REGION}]",
        ),
    ],
)
def test_an_invalid_gang_job_is_refused_with_the_workload_paths_message(
    labels: dict[str, str], annotations: dict[str, str], pods: int, field: str
) -> None:
    verdict = answer(job(labels, annotations, parallelism=pods, completions=pods))
    assert verdict["allowed"] is False
    status = verdict["status"]
    assert status["code"] == 422
    assert status["reason"] == "Invalid"
    assert status["message"] == workload_message(labels, annotations, pods)
    assert field in [cause["field"] for cause in status["details"]["causes"]]
    assert status["details"]["kind"] == "Job"
    assert status["details"]["name"] == "trainer"
    assert "patch" not in verdict


def test_every_problem_becomes_a_cause_naming_its_field() -> None:
    annotations = {c.ANN_COUNT: "zero", c.ANN_MODE: "spot"}
    verdict = answer(job(GANG_LABELS, annotations))
    causes = verdict["status"]["details"]["causes"]
    assert [cause["field"] for cause in causes] == [
        f"metadata.annotations[{c.ANN_COUNT}]",
        f"metadata.annotations[{c.ANN_INSTANCE_TYPE}]",
        f"metadata.annotations[{c.ANN_MODE}]",
    ]
    assert [cause["type"] for cause in causes] == [
        "FieldValueInvalid",
        "FieldValueRequired",
        "FieldValueInvalid",
    ]
    assert " ".join(cause["message"] for cause in causes) == verdict["status"]["message"]


def test_a_gang_job_without_a_kueue_queue_is_refused() -> None:
    labels = {c.POOL_LABEL: "pretrain-p4d"}
    verdict = answer(job(labels, GANG_ANNOTATIONS))
    assert verdict["allowed"] is False
    cause = verdict["status"]["details"]["causes"][0]
    assert cause == {
        "type": "FieldValueRequired",
        "field": f"metadata.labels[{c.QUEUE_NAME_LABEL}]",
        "message": cause["message"],
    }
    assert cause["message"].startswith(f"Label {c.QUEUE_NAME_LABEL} is not set: ")


@pytest.mark.parametrize(
    ("parallelism", "completions", "pods"),
    [
        (None, None, 1),  # the apiserver's default parallelism
        (4, None, 4),  # work-queue Job: no completions
        (4, 4, 4),
        (8, 4, 4),  # Kueue takes completions when smaller
        (2, 4, 2),
        (0, 4, 0),
    ],
)
def test_pod_count_is_kueues(parallelism: int | None, completions: int | None, pods: int) -> None:
    spec = job(parallelism=parallelism, completions=completions)["spec"]
    assert job_pod_count(spec) == pods


def test_count_is_checked_against_kueues_pod_count() -> None:
    annotations = {**GANG_ANNOTATIONS, c.ANN_COUNT: "4"}
    assert answer(job(GANG_LABELS, annotations, parallelism=8, completions=4))["allowed"]
    assert answer(job(GANG_LABELS, annotations, parallelism=4, completions=None))["allowed"]
    assert not answer(job(GANG_LABELS, annotations, parallelism=4, completions=2))["allowed"]


def test_updates_that_keep_the_gang_inputs_are_allowed_even_if_now_invalid() -> None:
    # Valid when created under looser settings; Kueue now unsuspends it and adds a selector.
    old = job(GANG_LABELS, {**GANG_ANNOTATIONS, c.ANN_COUNT: "3"}, parallelism=4)
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    new["spec"]["template"]["spec"]["nodeSelector"] = {c.POOL_LABEL: "pretrain-p4d"}
    assert answer(new, "UPDATE", old)["allowed"] is True


def test_updates_that_change_the_gang_inputs_are_checked() -> None:
    old = job(GANG_LABELS, GANG_ANNOTATIONS)
    new = job(GANG_LABELS, {**GANG_ANNOTATIONS, c.ANN_COUNT: "5"})
    assert answer(new, "UPDATE", old)["allowed"] is False
    # Opting an existing Job into the gang controller is checked too.
    assert answer(new, "UPDATE", job())["allowed"] is False


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_are_allowed(operation: str) -> None:
    assert answer(job(GANG_LABELS, {c.ANN_COUNT: "nope"}), operation)["allowed"] is True


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}},
        admission(job(GANG_LABELS, GANG_ANNOTATIONS, parallelism="many")),  # type: ignore[arg-type]
    ],
)
def test_malformed_reviews_are_errors(body: Any) -> None:
    with pytest.raises(ReviewError):
        review(body, SETTINGS, pools=pool_lookup())


def test_is_gang_job() -> None:
    assert is_gang_job({"labels": {c.POOL_LABEL: "p"}})
    assert is_gang_job({"annotations": {c.ANN_COUNT: "4"}})
    assert not is_gang_job({"labels": {c.QUEUE_NAME_LABEL: "q"}})
    assert not is_gang_job({})
