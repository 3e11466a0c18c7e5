"""The Node and gang-owner views: what the reconcilers read of a Node and of a Job."""

from __future__ import annotations

import pytest

from provisioner.api import constants as c
from provisioner.api.meta import OwnerReference
from provisioner.api.nodes import Node
from provisioner.api.owners import GangOwner, owner_of

pytestmark = pytest.mark.unit

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "ip-10-0-1-5.ec2.internal",
        "resourceVersion": "12",
        "labels": {c.POOL_LABEL: "p1", "kubernetes.io/os": "linux"},
    },
    "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0", "taints": []},
    "status": {
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"},
        ],
        "capacity": {"cpu": "96"},
    },
}


def test_a_node_reads_as_its_instance_labels_and_readiness() -> None:
    node = Node.from_dict(NODE)
    assert node.name == "ip-10-0-1-5.ec2.internal"
    assert node.instance_id == "i-0123456789abcdef0"
    assert node.labels[c.POOL_LABEL] == "p1"
    assert node.ready
    assert node.metadata.resource_version == "12"


def test_a_node_without_a_provider_id_or_readiness() -> None:
    node = Node.from_dict({"metadata": {"name": "n"}})
    assert node.instance_id == "" and not node.ready
    not_ready = Node.from_dict(
        {
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        }
    )
    assert not not_ready.ready


def test_labelling_a_node_changes_only_its_labels() -> None:
    node = Node.from_dict(NODE)
    labelled = node.with_label(c.GROUP_LABEL, "g1")
    assert labelled.labels == {**node.labels, c.GROUP_LABEL: "g1"}
    assert labelled.spec == node.spec and labelled.status == node.status
    assert node.labels.get(c.GROUP_LABEL) is None


def test_a_job_reads_as_a_gang_owner() -> None:
    job = GangOwner.from_dict(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "train",
                "namespace": "ml",
                "uid": "j1",
                "labels": {c.POOL_LABEL: "p1"},
                "annotations": {c.ANN_COUNT: "4"},
            },
            "spec": {"parallelism": 4},
        }
    )
    assert (job.name, job.uid, job.kind) == ("train", "j1", "Job")
    assert job.labels == {c.POOL_LABEL: "p1"} and job.annotations == {c.ANN_COUNT: "4"}


@pytest.mark.parametrize(
    ("api_version", "kind", "owns"),
    [
        ("batch/v1", "Job", True),
        ("batch/v2", "Job", True),
        ("apps/v1", "ReplicaSet", False),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", False),  # not a gang owner yet
        ("v1", "Job", False),
    ],
)
def test_only_the_owner_kinds_own_a_gang(api_version: str, kind: str, owns: bool) -> None:
    ref = OwnerReference(api_version=api_version, kind=kind, name="x", uid="u")
    assert (owner_of((ref,)) is ref) is owns
