"""The Job webhook and the GangClass behind a Job's queue: the chain it reads (LocalQueue,
ClusterQueue, our AdmissionCheck, its parameters, the class), an annotation the class
forbids refused naming the class and the fix, and a broken chain left to Kueue."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko
from provisioner.api.gang_class import GangClass
from provisioner.api.tenancy import ClusterReadError
from provisioner.kube.admission_reads import class_lookup, queue_class_lookup
from provisioner.kube.errors import KubeError
from provisioner.kube.resources import ResourceRef
from provisioner.webhook.review import review
from tests.support.fake_kube import FakeKube
from tests.support.pools import pool_lookup
from tests.unit.test_webhook_review import SETTINGS, admission, job

pytestmark = pytest.mark.unit

QUEUE = "gpu-queue"
GPU_BODY = {
    "apiVersion": c.API_VERSION,
    "kind": c.GANG_CLASS_KIND,
    "metadata": {"name": "gpu"},
    "spec": {"instanceType": "p4d.24xlarge", "jobOverrides": ["keep-warm-ttl"]},
}
GPU = GangClass.from_dict(GPU_BODY)


def _check(params: dict[str, str] | None, controller: str = c.CONTROLLER_NAME) -> dict[str, Any]:
    body = ko.admission_check("gpu-check")
    body["spec"]["controllerName"] = controller
    if params is not None:
        body["spec"]["parameters"] = params
    return body


PARAMS = {"apiGroup": c.GROUP, "kind": c.GANG_CLASS_KIND, "name": "gpu"}


def _chain(*, check: dict[str, Any] | None = None, gang_class: bool = True) -> FakeKube:
    objects = [
        ko.local_queue("default", QUEUE, "gpu-cq"),
        ko.cluster_queue("gpu-cq", "flavor", "gpu-check", {"cpu": "1"}),
        check if check is not None else _check(PARAMS),
    ]
    if gang_class:
        objects.append(GPU_BODY)
    return FakeKube(*objects)


@pytest.mark.parametrize(
    ("kube", "found"),
    [
        (_chain(), True),
        (_chain(gang_class=False), False),
        (_chain(check=_check(None)), False),
        (_chain(check=_check(PARAMS, controller="kueue.x-k8s.io/provisioning-request")), False),
        (FakeKube(), False),
    ],
    ids=["whole-chain", "no-class", "no-parameters", "not-our-check", "no-local-queue"],
)
def test_the_class_behind_a_queue(kube: FakeKube, found: bool) -> None:
    read = queue_class_lookup(kube)  # type: ignore[arg-type]
    assert (read("default", QUEUE) == GPU) is found
    assert read("other-namespace", QUEUE) is None


class Unreachable:
    def get(self, ref: ResourceRef, name: str, *, namespace: str | None = None) -> Any:
        raise KubeError(f"{ref.kind} {name}: connection refused")


def test_an_unreadable_chain_is_an_error_for_the_failure_policy() -> None:
    with pytest.raises(ClusterReadError, match="LocalQueue default/gpu-queue"):
        queue_class_lookup(Unreachable())("default", QUEUE)  # type: ignore[arg-type]


def _answer(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    classes = {("default", QUEUE): GPU}
    out = review(
        admission(job(labels, annotations)),
        SETTINGS,
        pools=pool_lookup(),
        classes=lambda namespace, queue: classes.get((namespace, queue)),
    )
    return dict(out["response"])


def test_an_annotation_the_class_forbids_is_refused_naming_the_class_and_the_fix() -> None:
    response = _answer({c.QUEUE_NAME_LABEL: QUEUE}, {c.ANN_INSTANCE_TYPE: "m5.large"})
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert f"Annotation {c.ANN_INSTANCE_TYPE}" in message
    assert "GangClass gpu" in message and "spec.jobOverrides" in message
    (cause,) = response["status"]["details"]["causes"]
    assert cause["type"] == "FieldValueForbidden"
    assert cause["field"] == f"metadata.annotations[{c.ANN_INSTANCE_TYPE}]"


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        # Allowed by the class: judged on the class's shape with it.
        ({c.QUEUE_NAME_LABEL: QUEUE}, {c.ANN_KEEP_WARM_TTL: "5m"}),
        # The count is always the Job's to write, and it matches the pods.
        ({c.QUEUE_NAME_LABEL: QUEUE}, {c.ANN_COUNT: "4"}),
        # The reference's pool label still names the pool; the class fills the rest.
        ({c.QUEUE_NAME_LABEL: QUEUE, c.POOL_LABEL: "team-pool"}, {}),
    ],
    ids=["allowed-override", "count", "pool-label"],
)
def test_what_the_class_allows_is_admitted(
    labels: dict[str, str], annotations: dict[str, str]
) -> None:
    assert _answer(labels, annotations)["allowed"] is True


def test_a_count_that_is_not_the_pods_is_still_refused() -> None:
    response = _answer({c.QUEUE_NAME_LABEL: QUEUE}, {c.ANN_COUNT: "3"})
    assert response["allowed"] is False
    assert "the Job runs 4 pods" in response["status"]["message"]


def test_a_queue_without_a_class_judges_the_job_as_the_reference_does() -> None:
    response = _answer({c.QUEUE_NAME_LABEL: "other-queue"}, {c.ANN_INSTANCE_TYPE: "m5.large"})
    assert response["allowed"] is False
    assert c.POOL_LABEL in response["status"]["message"]


def test_without_an_informer_the_controller_reads_a_class_live() -> None:
    """Discovery that said "not served" (or failed) at start-up leaves no informer: the class
    is still read, by GET, once it exists; a class that does not exist is None; an apiserver
    that does not answer fails the pass instead of deciding there is no class."""
    assert class_lookup(_chain(), None)("gpu") == GPU  # type: ignore[arg-type]
    assert class_lookup(_chain(gang_class=False), None)("gpu") is None  # type: ignore[arg-type]
    with pytest.raises(ClusterReadError, match="GangClass gpu"):
        class_lookup(Unreachable(), None)("gpu")  # type: ignore[arg-type]
