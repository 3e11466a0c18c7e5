"""The kinds a gang can be submitted as: which owner reference a Workload's gang is read
from, what a Workload of any other kind is told, each kind's REST resource, and the pod
sets of a many-pod-set Workload (a JobSet's replicated jobs, a PyTorchJob's master and
workers) all counted and all pinned."""

from __future__ import annotations

import pytest

from provisioner.api import constants as c
from provisioner.api.meta import OwnerReference
from provisioner.api.owners import (
    JOB,
    JOBSET,
    MPI_JOB,
    OWNER_KINDS,
    PYTORCH_JOB,
    TRAIN_JOB,
    GangOwner,
    owner_kind,
    owner_of,
    supported_kinds,
    unsupported_owner_message,
)
from provisioner.api.workload import Workload, gang_pod_set_updates
from provisioner.kube.resources import (
    JOBSETS,
    MPI_JOBS,
    OWNER_RESOURCES,
    PYTORCH_JOBS,
    TRAIN_JOBS,
)
from tests.support.owners import owner
from tests.support.workloads import workload

pytestmark = pytest.mark.unit


def ref(api_version: str, kind: str, *, controller: bool | None = True) -> OwnerReference:
    return OwnerReference(
        api_version=api_version, kind=kind, name=kind.lower(), uid="u", controller=controller
    )


def test_the_supported_kinds_and_their_kueue_frameworks() -> None:
    assert [(k.api_version, k.kind, k.framework) for k in OWNER_KINDS] == [
        ("batch/v1", "Job", "batch/job"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobset.x-k8s.io/jobset"),
        ("kubeflow.org/v1", "PyTorchJob", "kubeflow.org/pytorchjob"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainer.kubeflow.org/trainjob"),
        ("kubeflow.org/v2beta1", "MPIJob", "kubeflow.org/mpijob"),
    ]
    assert supported_kinds() == (
        "batch/v1 Job, jobset.x-k8s.io/v1alpha2 JobSet, kubeflow.org/v1 PyTorchJob, "
        "trainer.kubeflow.org/v1alpha1 TrainJob and kubeflow.org/v2beta1 MPIJob"
    )


def test_each_kind_has_its_rest_resource() -> None:
    assert (
        JOBSETS.path("ml", "train") == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/train"
    )
    assert PYTORCH_JOBS.path("ml", "t") == "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/t"
    assert TRAIN_JOBS.path("ml", "t") == (
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/t"
    )
    assert MPI_JOBS.path("ml", "m") == "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/m"
    assert [(r.api_version, r.kind) for r in OWNER_RESOURCES] == [
        (k.api_version, k.kind) for k in OWNER_KINDS
    ]


@pytest.mark.parametrize("kind", [JOB, JOBSET, PYTORCH_JOB, TRAIN_JOB, MPI_JOB])
def test_each_kind_reads_as_a_gang_owner(kind: object) -> None:
    assert isinstance(kind, type(JOB))
    body = owner(kind, uid="o1", labels={c.POOL_LABEL: "p"}, annotations={c.ANN_COUNT: "4"})
    read = GangOwner.from_dict(body)
    assert (read.kind, read.api_version, read.uid) == (kind.kind, kind.api_version, "o1")
    assert read.owner_kind == kind
    assert read.labels == {c.POOL_LABEL: "p"} and read.annotations == {c.ANN_COUNT: "4"}
    assert owner_kind(kind.api_version, kind.kind) == kind


def test_the_controller_reference_is_the_owner() -> None:
    job = ref("batch/v1", "Job", controller=None)
    lws = ref("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    jobset = ref("jobset.x-k8s.io/v1alpha2", "JobSet")
    # A supported reference that is not the controller does not make the gang its own.
    assert owner_of((job, lws)) is None
    assert owner_of((job, jobset)) is jobset
    # Without a controller reference, the first of a supported kind (as before kinds).
    assert owner_of((ref("apps/v1", "ReplicaSet", controller=None), job)) is job


@pytest.mark.parametrize(
    ("refs", "named"),
    [
        ((ref("apps/v1", "ReplicaSet"),), "is owned by apps/v1 ReplicaSet replicaset"),
        ((ref("kubeflow.org/v1", "TFJob"),), "is owned by kubeflow.org/v1 TFJob tfjob"),
        ((ref("v1", "Pod"),), "is owned by v1 Pod pod"),
        ((), "has no owner (no ownerReferences)"),
    ],
)
def test_any_other_owner_is_told_which_kinds_are_supported(
    refs: tuple[OwnerReference, ...], named: str
) -> None:
    message = unsupported_owner_message("ml/wl", refs)
    assert message is not None
    assert message.startswith(f"Workload ml/wl {named}")
    assert f"Supported kinds: {supported_kinds()}." in message
    assert "queue whose ClusterQueue does not use the atomic-gang admission check" in message


@pytest.mark.parametrize("kind", OWNER_KINDS)
def test_a_supported_owner_needs_no_message(kind: object) -> None:
    assert isinstance(kind, type(JOB))
    assert unsupported_owner_message("ml/wl", (ref(kind.api_version, kind.kind),)) is None


def test_a_jobset_workload_counts_and_pins_every_pod_set() -> None:
    wl = Workload.from_dict(workload(owner=owner(JOBSET), pod_sets=[("leader", 1), ("workers", 3)]))
    assert wl.owner is not None and wl.owner.kind == "JobSet"
    assert wl.total_pod_count == 4
    updates = gang_pod_set_updates(wl, "pool-a", "g1")
    assert [u.name for u in updates] == ["leader", "workers"]
    for update in updates:
        assert update.node_selector == {c.POOL_LABEL: "pool-a", c.GROUP_LABEL: "g1"}
        assert [(t.key, t.value, t.effect) for t in update.tolerations] == [
            (c.GANG_TAINT_KEY, "pool-a", "NoSchedule")
        ]
