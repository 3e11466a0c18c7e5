"""explain on the kinds a gang is submitted as besides a Job: the JobSet, PyTorchJob or
TrainJob found by name, followed to the Workload Kueue owns by it and on to its pool."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.commands.explain import explain
from tests.support.fake_kube import FakeKube
from tests.support.jobs import job
from tests.support.pools import pool, pool_spec
from tests.support.workloads import check, condition, workload

NS = "team"
LABELS = {c.QUEUE_NAME_LABEL: "q", c.POOL_LABEL: "p"}
API = {
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "PyTorchJob": "kubeflow.org/v1",
    "TrainJob": "trainer.kubeflow.org/v1alpha1",
}


def gang(kind: str, suspend: bool = True, labels: dict[str, str] = LABELS) -> dict[str, Any]:
    spec: dict[str, Any] = (
        {"runPolicy": {"suspend": suspend}} if kind == "PyTorchJob" else {"suspend": suspend}
    )
    return {
        "apiVersion": API[kind],
        "kind": kind,
        "metadata": {"name": "pretrain", "namespace": NS, "uid": f"{kind}-uid",
                     "labels": dict(labels)},
        "spec": spec,
    }  # fmt: skip


def owned_workload(owner: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    body = workload(f"{owner['kind'].lower()}-pretrain-1", namespace=NS, **kwargs)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True,
         "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
    ]  # fmt: skip
    return body


def held(owner: dict[str, Any]) -> dict[str, Any]:
    return owned_workload(
        owner,
        conditions=[condition("QuotaReserved", "True")],
        checks=[check("atomic-gang-check", "Pending", "waiting for 4 p5.48xlarge")],
    )


def short_pool() -> list[dict[str, Any]]:
    body = pool(
        "p",
        spec=pool_spec(pool="p", instance_type="p5.48xlarge"),
        status={
            "phase": "Acquiring",
            "consecutiveShortfalls": 2,
            "lastError": {"reason": "InsufficientCapacity", "message": "short by 4 p5.48xlarge"},
        },
    )
    event = {
        "kind": "Event",
        "metadata": {"name": "e"},
        "involvedObject": {"kind": c.GNP_KIND, "name": "p"},
        "reason": "CapacityShortfall",
        "count": 2,
        "message": "got 0 of 4 p5.48xlarge in us-east-1a",
    }
    return [body, event]


@pytest.mark.parametrize("kind", ["JobSet", "PyTorchJob", "TrainJob"])
def test_a_held_gang_of_each_kind_is_followed_to_its_workload_and_shortfall(kind: str) -> None:
    obj = gang(kind)
    lines = explain(FakeKube(obj, held(obj), *short_pool()), NS, "pretrain")
    assert lines[0] == (
        f"{kind} {NS}/pretrain has quota and waits on our check: Pending — "
        "waiting for 4 p5.48xlarge"
    )
    text = "\n".join(lines)
    assert f"Workload {kind.lower()}-pretrain-1: quota reserved, not admitted." in text
    assert "last error: InsufficientCapacity: short by 4 p5.48xlarge" in text
    assert "2 in a row, 2 recorded as events; last: got 0 of 4 p5.48xlarge" in text


def test_a_workload_owned_by_another_kind_of_the_same_uid_is_not_taken() -> None:
    jobset = gang("JobSet")
    other = held(jobset)
    other["metadata"]["ownerReferences"][0]["kind"] = "Job"
    lines = explain(FakeKube(jobset, other), NS, "pretrain")
    assert lines[0].startswith(f"JobSet {NS}/pretrain: no Workload yet")


def test_each_kind_reads_its_own_suspend_and_finished_conditions() -> None:
    running = gang("PyTorchJob", suspend=False)
    admitted = owned_workload(
        running,
        conditions=[condition("QuotaReserved", "True"), condition("Admitted")],
        checks=[check("atomic-gang-check", "Ready", "")],
    )
    assert "is admitted and running" in explain(FakeKube(running, admitted), NS, "pretrain")[0]
    suspended = gang("PyTorchJob", suspend=True)
    assert (
        "is admitted and running"
        not in explain(
            FakeKube(suspended, owned_workload(suspended, conditions=[condition("Admitted")])),
            NS,
            "pretrain",
        )[0]
    )
    for kind, done in (
        ("JobSet", "Completed"),
        ("PyTorchJob", "Succeeded"),
        ("TrainJob", "Complete"),
    ):
        obj = gang(kind, suspend=False)
        obj["status"] = {"conditions": [{"type": done, "status": "True"}]}
        assert explain(FakeKube(obj), NS, "pretrain") == [
            f"{kind} {NS}/pretrain has completed; it is not waiting on anything."
        ]


def test_a_jobset_without_a_queue_is_named_as_a_jobset() -> None:
    lines = explain(FakeKube(gang("JobSet", labels={c.POOL_LABEL: "p"})), NS, "pretrain")
    assert lines == [
        f"JobSet {NS}/pretrain has no {c.QUEUE_NAME_LABEL} label: Kueue does not manage it and "
        "this controller never sees it; add the label with your LocalQueue's name."
    ]


def test_a_job_a_jobset_runs_is_followed_to_the_jobset() -> None:
    jobset = gang("JobSet")
    child = job("pretrain-workers-0", namespace=NS, uid="child", labels={c.POOL_LABEL: "p"})
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": API["JobSet"], "kind": "JobSet", "name": "pretrain", "uid": "JobSet-uid",
         "controller": True}
    ]  # fmt: skip
    lines = explain(FakeKube(jobset, child, held(jobset), *short_pool()), NS, "pretrain-workers-0")
    assert lines[0] == (
        f"Job {NS}/pretrain-workers-0 is run by JobSet {NS}/pretrain, which Kueue admits as "
        "one gang; explaining that:"
    )
    assert lines[1].startswith(f"JobSet {NS}/pretrain has quota and waits on our check: Pending")


def test_a_name_two_kinds_share_asks_for_the_kind() -> None:
    jobset = gang("JobSet")
    same_name = job("pretrain", namespace=NS, uid="u", labels=LABELS)
    kube = FakeKube(jobset, same_name, held(jobset))
    assert explain(kube, NS, "pretrain") == [
        f"{NS}/pretrain names a Job, JobSet: say which, e.g. "
        f"`atomic-gang explain -n {NS} job/pretrain`."
    ]
    assert explain(kube, NS, "pretrain", kind="jobsets")[0].startswith(f"JobSet {NS}/pretrain")
    assert explain(kube, NS, "pretrain", kind="JobSet")[0].startswith(f"JobSet {NS}/pretrain")
    assert explain(kube, NS, "pretrain", kind="deployment") == [
        "explain follows Job, JobSet, PyTorchJob, TrainJob, MPIJob; 'deployment' is none of them."
    ]
    assert explain(FakeKube(), NS, "pretrain", kind="pytorchjob") == [
        f"PyTorchJob {NS}/pretrain does not exist."
    ]
