"""The Node and gang-owner views: what the reconcilers read of a Node and of a Job."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.meta import OwnerReference
from provisioner.api.nodes import Node
from provisioner.api.owners import GangOwner, owner_of
from tests.support.jobs import job as job_body
from tests.support.nodes import node

pytestmark = pytest.mark.unit

INSTANCE = "i-0123456789abcdef0"


def node_body() -> dict[str, Any]:
    """A pool's Node as the kubelet writes it, with fields the view does not model."""
    body = node(INSTANCE, pool="p1")
    body["metadata"]["resourceVersion"] = "12"
    body["spec"]["taints"] = []
    body["status"]["conditions"].insert(
        0, {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"}
    )
    body["status"]["capacity"] = {"cpu": "96"}
    return body


def test_a_node_reads_as_its_instance_labels_and_readiness() -> None:
    node = Node.from_dict(node_body())
    assert node.name == f"node-{INSTANCE}"
    assert node.instance_id == INSTANCE
    assert node.labels[c.POOL_LABEL] == "p1"
    assert node.ready
    assert node.metadata.resource_version == "12"


def test_a_node_without_a_provider_id_or_readiness() -> None:
    bare = Node.from_dict({"metadata": {"name": "n"}})
    assert bare.instance_id == "" and not bare.ready
    not_ready = Node.from_dict(node(INSTANCE, ready=False))
    assert not not_ready.ready


def test_labelling_a_node_changes_only_its_labels() -> None:
    node = Node.from_dict(node_body())
    labelled = node.with_label(c.GROUP_LABEL, "g2")
    assert labelled.labels == {**node.labels, c.GROUP_LABEL: "g2"}
    assert labelled.spec == node.spec and labelled.status == node.status
    assert node.labels[c.GROUP_LABEL] == "gen-1"


def test_a_job_reads_as_a_gang_owner() -> None:
    job = GangOwner.from_dict(
        job_body(uid="j1", labels={c.POOL_LABEL: "p1"}, annotations={c.ANN_COUNT: "4"})
    )
    assert (job.name, job.uid, job.kind) == ("train", "j1", "Job")
    assert job.labels == {c.POOL_LABEL: "p1"} and job.annotations == {c.ANN_COUNT: "4"}


@pytest.mark.parametrize(
    ("api_version", "kind", "owns"),
    [
        ("batch/v1", "Job", True),
        ("batch/v2", "Job", True),
        ("apps/v1", "ReplicaSet", False),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", True),
        ("kubeflow.org/v1", "PyTorchJob", True),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", True),
        ("kubeflow.org/v1", "TFJob", False),
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", False),
        ("v1", "Job", False),
    ],
)
def test_only_the_owner_kinds_own_a_gang(api_version: str, kind: str, owns: bool) -> None:
    ref = OwnerReference(api_version=api_version, kind=kind, name="x", uid="u")
    assert (owner_of((ref,)) is ref) is owns
