"""Which owner kinds get an informer: those the apiserver serves when the controller
starts. A kind whose CRD is not installed, or whose discovery fails, is read by a live GET
instead, so its informer can never keep the controller from syncing (and Ready)."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3.exceptions
from kubernetes.client.rest import ApiException

from provisioner.api.owners import JOB, JOBSET, PYTORCH_JOB, TRAIN_JOB
from provisioner.kube.client import KubeClient
from provisioner.kube.discovery import served_owner_kinds
from provisioner.kube.resources import JOBSETS

pytestmark = pytest.mark.unit


class Discovery:
    """An apiserver's discovery: group-version path -> the plurals it serves, or an error."""

    def __init__(self, served: dict[str, Any]) -> None:
        self.served = served
        self.paths: list[str] = []

    def call_api(self, resource_path: str, method: str, **_: Any) -> Any:
        assert method == "GET"
        self.paths.append(resource_path)
        answer = self.served.get(resource_path)
        if answer is None:
            raise ApiException(status=404, reason="Not Found")
        if isinstance(answer, BaseException):
            raise answer
        return {"kind": "APIResourceList", "resources": [{"name": p} for p in answer]}

    def close(self) -> None:
        pass


def test_a_served_resource_is_one_its_group_version_lists() -> None:
    api = Discovery({"/apis/jobset.x-k8s.io/v1alpha2": ["jobsets", "jobsets/status"]})
    assert KubeClient(api).serves(JOBSETS)
    assert api.paths == ["/apis/jobset.x-k8s.io/v1alpha2"]
    assert not KubeClient(Discovery({"/apis/jobset.x-k8s.io/v1alpha2": ["other"]})).serves(JOBSETS)
    assert not KubeClient(Discovery({})).serves(JOBSETS)


def test_only_the_served_kinds_get_informers() -> None:
    api = Discovery(
        {
            "/apis/jobset.x-k8s.io/v1alpha2": ["jobsets"],
            # The training operator's group, without the Trainer's.
            "/apis/kubeflow.org/v1": ["pytorchjobs", "tfjobs"],
        }
    )
    assert served_owner_kinds(KubeClient(api)) == (JOB, JOBSET, PYTORCH_JOB)
    # Jobs are always served: their group is never asked.
    assert "/apis/batch/v1" not in api.paths


def test_nothing_but_jobs_when_no_training_crd_is_installed() -> None:
    assert served_owner_kinds(KubeClient(Discovery({}))) == (JOB,)


def test_discovery_that_fails_leaves_the_kind_to_a_live_get() -> None:
    api = Discovery(
        {
            "/apis/jobset.x-k8s.io/v1alpha2": urllib3.exceptions.ProtocolError("reset"),
            "/apis/kubeflow.org/v1": ["pytorchjobs"],
            "/apis/trainer.kubeflow.org/v1alpha1": ApiException(status=503, reason="down"),
        }
    )
    assert served_owner_kinds(KubeClient(api)) == (JOB, PYTORCH_JOB)
    assert TRAIN_JOB not in served_owner_kinds(KubeClient(api))
