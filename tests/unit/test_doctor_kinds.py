"""doctor on the kinds a gang is submitted as: a pending Workload named with the JobSet,
PyTorchJob or TrainJob it was made for, and `--launch-job` reading any of the four kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShapeError
from provisioner.commands.checks import Failed
from provisioner.commands.doctor_kube import KubeLinks, workload_and_owner
from provisioner.commands.doctor_launch import shape_of_job
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_kube import FakeKube
from tests.support.workloads import condition, workload

pytestmark = pytest.mark.unit

SETTINGS = Settings.model_validate(
    {
        "clusterName": "demo",
        "defaults": {"region": "us-east-1", "nodeRoleArn": "arn:aws:iam::123456789012:role/n"},
        "pulumi": UNREACHED_BACKEND,
    }
)


def _pending_gpu_workload_of(kind: str, api_version: str) -> dict[str, Any]:
    container = {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    body = workload(
        f"{kind.lower()}-pretrain-1a2b3",
        namespace="default",
        queue=ko.QUEUE_NAME,
        template={"spec": {"containers": [container]}},
        conditions=[condition("QuotaReserved", "False")],
    )
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "pretrain", "uid": "u",
         "controller": True}
    ]  # fmt: skip
    return body


def test_a_queue_that_cannot_admit_a_pending_jobset_names_the_jobset() -> None:
    objects = ko.default_objects(("default",), {"cpu": "64", "memory": "256Gi"})
    pending = _pending_gpu_workload_of("JobSet", "jobset.x-k8s.io/v1alpha2")
    links = KubeLinks(FakeKube(*objects, pending), SETTINGS, queue=f"default/{ko.QUEUE_NAME}")
    with pytest.raises(Failed) as failed:
        links.covered_resources()
    assert "nvidia.com/gpu by jobset-pretrain-1a2b3 (JobSet pretrain)" in str(failed.value)


def test_a_workload_without_a_controller_owner_is_named_alone() -> None:
    body = workload("wl-1", namespace="default")
    assert workload_and_owner(body) == "wl-1"


def _manifest(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _jobset(count: str) -> dict[str, Any]:
    template = {"spec": {"parallelism": 3, "completions": 3, "template": {"spec": {}}}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "pretrain",
            "labels": {c.POOL_LABEL: "pretrain-p4d"},
            "annotations": {c.ANN_COUNT: count, c.ANN_INSTANCE_TYPE: "p4d.24xlarge"},
        },
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
                {"name": "workers", "replicas": 1, "template": template},
            ]
        },
    }


def test_the_launch_check_reads_a_jobset_manifest_as_the_webhook_does(tmp_path: Path) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "pretrain"}}
    shape = shape_of_job(_manifest(tmp_path, service, _jobset("4")), SETTINGS)
    assert (shape.count, shape.instance_type) == (4, "p4d.24xlarge")
    with pytest.raises(GangShapeError, match="Use 4 "):
        shape_of_job(_manifest(tmp_path, _jobset("3")), SETTINGS)


def test_the_launch_check_wants_exactly_one_gang_job(tmp_path: Path) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "pretrain"}}
    with pytest.raises(ValueError, match="exactly one Job, JobSet, PyTorchJob, TrainJob or MPIJob"):
        shape_of_job(_manifest(tmp_path, service), SETTINGS)
