"""explain's verdicts, from each link that can hold a Job, on a fake reader."""

from __future__ import annotations

from typing import Any

from provisioner.api import constants as c
from provisioner.commands.explain import explain
from tests.support.fake_kube import FakeKube
from tests.support.jobs import job
from tests.support.pools import pool, pool_spec
from tests.support.workloads import check, condition, workload

NS = "team"


def _job(suspend: bool = True, **labels: str) -> dict[str, Any]:
    return job(namespace=NS, uid="u1", labels=labels, suspend=suspend)


LABELS = {c.QUEUE_NAME_LABEL: "q", c.POOL_LABEL: "p"}


def _workload(quota: bool, state: str | None = None, admitted: bool = False) -> dict[str, Any]:
    conditions = [condition("QuotaReserved", str(quota), message="no room in cq")]
    if admitted:
        conditions.append(condition("Admitted"))
    checks = [check("atomic-gang-check", state, "acquiring")] if state else []
    return workload("job-train", namespace=NS, owner=_job(), conditions=conditions, checks=checks)


def _pool(**status: Any) -> dict[str, Any]:
    return pool("p", spec=pool_spec(pool="p", instance_type="p5.48xlarge"), status=status)


def test_missing_job() -> None:
    assert explain(FakeKube(), NS, "train") == [
        f"Job, JobSet, PyTorchJob, TrainJob or MPIJob {NS}/train does not exist."
    ]


def test_job_without_queue_label_is_not_kueues() -> None:
    assert "queue-name label" in explain(FakeKube(_job()), NS, "train")[0]


def test_no_workload_points_at_the_local_queue() -> None:
    lines = explain(FakeKube(_job(**LABELS)), NS, "train")
    assert "no Workload yet" in lines[0] and f"{NS}/q" in lines[0]


def test_no_quota_quotes_kueue() -> None:
    lines = explain(FakeKube(_job(**LABELS), _workload(False)), NS, "train")
    assert "waits for quota" in lines[0] and "no room in cq" in lines[0]


def test_a_gpu_workload_without_quota_shows_kueues_reason_and_the_gpu() -> None:
    workload = _workload(False)
    workload["status"]["conditions"][0].update(
        reason="Pending",
        message="couldn't assign flavors to pod set main: resource nvidia.com/gpu "
        "unavailable in ClusterQueue",
    )
    container = {"name": "t", "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "4"}}}
    workload["spec"] = {
        "podSets": [{"name": "main", "template": {"spec": {"containers": [container]}}}]
    }
    lines = explain(FakeKube(_job(**LABELS), workload), NS, "train")
    assert "Kueue says (Pending)" in lines[0] and "nvidia.com/gpu unavailable" in lines[0]
    assert "requests nvidia.com/gpu" in lines[1] and "atomic-gang doctor" in lines[1]


def test_quota_without_our_check_blames_the_cluster_queue() -> None:
    lines = explain(FakeKube(_job(**LABELS), _workload(True)), NS, "train")
    assert "carries no atomic-gang-check" in lines[0]


def test_pending_check_with_pool_error_and_shortfalls() -> None:
    pool = _pool(
        phase="Acquiring",
        consecutiveShortfalls=3,
        lastError={"reason": "InsufficientCapacity", "message": "no p5 in us-east-1a"},
    )
    event = {
        "kind": "Event",
        "metadata": {"name": "e"},
        "involvedObject": {"kind": c.GNP_KIND, "name": "p"},
        "reason": "CapacityShortfall",
        "count": 3,
        "message": "short by 4",
    }
    lines = explain(FakeKube(_job(**LABELS), _workload(True, "Pending"), pool, event), NS, "train")
    assert lines[0].startswith(f"Job {NS}/train has quota and waits on our check: Pending")
    text = "\n".join(lines)
    assert "Pool p: phase Acquiring, 0 of 4 instances, 0 Ready nodes" in text
    assert "last error: InsufficientCapacity: no p5 in us-east-1a" in text
    assert "3 in a row, 3 recorded as events; last: short by 4" in text


def test_nodes_ready_but_not_usable_say_what_they_lack() -> None:
    pool = _pool(
        phase="Joining",
        readyNodes=3,
        unusableNodes=[
            {
                "node": "ip-10-0-1-7",
                "instanceId": "i-0123456789abcdef0",
                "missing": ["nvidia.com/gpu: 0 of 8 allocatable"],
            }
        ],
    )
    lines = explain(FakeKube(_job(**LABELS), _workload(True, "Pending"), pool), NS, "train")
    assert (
        "Node ip-10-0-1-7 (i-0123456789abcdef0) is Ready but not usable yet: "
        "nvidia.com/gpu: 0 of 8 allocatable."
    ) in lines


def test_admitted_and_running() -> None:
    kube = FakeKube(_job(False, **LABELS), _workload(True, "Ready", admitted=True), _pool())
    assert "is admitted and running" in explain(kube, NS, "train")[0]


def test_finished_job() -> None:
    job = _job(False, **LABELS)
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert "has completed" in explain(FakeKube(job), NS, "train")[0]


def _class_check() -> dict[str, Any]:
    from provisioner.api import kueue_objects as ko

    return ko.admission_check("atomic-gang-check", "gpu")


def test_a_gang_of_a_class_shows_its_derived_pool_and_who_decided_each_field() -> None:
    queue_only = {c.QUEUE_NAME_LABEL: "q"}
    claimed = workload("job-train", namespace=NS, owner=_job(), checks=[])
    spec = pool_spec(
        pool="team-gpu-p5-48xlarge-0123abcd",
        instance_type="p5.48xlarge",
        claim={
            "namespace": NS,
            "name": "job-train",
            "uid": "w",
            "claimedAt": "2026-01-01T00:00:00Z",
        },
        gang_class="gpu",
        field_sources={"instance-type": "class", "count": "pods", "keep-warm-ttl": "annotation"},
    )
    derived = pool("team-gpu-p5-48xlarge-0123abcd", spec=spec)
    claimed["status"] = _workload(True, "Pending")["status"]
    lines = explain(FakeKube(_job(**queue_only), claimed, _class_check(), derived), NS, "train")
    assert not any("has no atomic-gang.k8s.aws/pool label" in line for line in lines), lines
    (shape,) = [line for line in lines if line.startswith("Shape read through")]
    assert "GangClass gpu" in shape
    assert "GangClass gpu: instance-type" in shape and "pods: count" in shape
    assert "the Job: keep-warm-ttl" in shape
    assert any(line.startswith("Pool team-gpu-p5-48xlarge-0123abcd: phase") for line in lines)


def test_a_gang_of_a_class_before_its_pool_says_how_the_pool_is_named() -> None:
    lines = explain(
        FakeKube(_job(**{c.QUEUE_NAME_LABEL: "q"}), _workload(True, "Pending"), _class_check()),
        NS,
        "train",
    )
    assert any("derives it from namespace team, GangClass gpu" in line for line in lines), lines


def test_a_gang_waiting_for_quota_shows_the_pool_prepared_ahead_for_it() -> None:
    spec = pool_spec(
        pool="team-gpu-p5-48xlarge-0123abcd",
        instance_type="p5.48xlarge",
        queued={
            "namespace": NS,
            "name": "job-train",
            "uid": "w",
            "queuedAt": "2026-01-01T00:00:00Z",
        },
        gang_class="gpu",
    )
    marked = pool("team-gpu-p5-48xlarge-0123abcd", spec=spec)
    # Another namespace's Workload of the same name is not this gang's.
    other = pool(
        "other-pool",
        spec=pool_spec(
            pool="other-pool",
            queued={"namespace": "other", "name": "job-train", "uid": "x", "queuedAt": "t"},
        ),
    )
    waiting = workload("job-train", namespace=NS, owner=_job(), checks=[])
    lines = explain(
        FakeKube(_job(**{c.QUEUE_NAME_LABEL: "q"}), waiting, _class_check(), other, marked),
        NS,
        "train",
    )
    assert "waits for quota" in lines[0], lines
    assert any(line.startswith("Pool team-gpu-p5-48xlarge-0123abcd: phase") for line in lines)
    (ahead,) = [line for line in lines if "prepared ahead" in line]
    assert f"marked for Workload {NS}/job-train" in ahead
    assert "2026-01-01T00:00:00Z" in ahead
    assert not any(line.startswith("Pool other-pool") for line in lines), lines
