"""doctor without --queue: the LocalQueues it checks, and their lines, on a fake reader.

The chart's default queue is healthy in every case; a second team's LocalQueue, on a
ClusterQueue that lists our check but covers no GPU, holds a GPU gang. doctor must find that
queue by itself and fail naming it and the resource.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from devenv import kueue_objects as ko
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.commands.doctor import QUEUES_CHECK, Doctor
from provisioner.commands.doctor_queues import gang_queues
from provisioner.kube.resources import WORKLOADS
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_kube import FakeKube
from tests.support.workloads import condition, workload

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
TEAM_QUEUE = "team-a/gpu-queue"
OURS = {ko.CHECK_NAME}


def _healthy() -> list[dict[str, Any]]:
    objects = ko.default_objects(("default",), ko.LOCAL_QUOTAS)
    objects[0]["status"] = {"conditions": [{"type": "Active", "status": "True"}]}
    lease = {
        "kind": "Lease",
        "metadata": {"name": "atomic-gang-provisioner", "namespace": "atomic-gang-system"},
        "spec": {
            "holderIdentity": "replica-1",
            "leaseDurationSeconds": 15,
            "renewTime": (NOW - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }
    return [*objects, lease]


def _team_queue(check: str = ko.CHECK_NAME) -> list[dict[str, Any]]:
    """team-a's LocalQueue on a ClusterQueue listing `check` that covers cpu and memory."""
    cq = ko.cluster_queue("team-a-cq", ko.FLAVOR_NAME, check, {"cpu": "64", "memory": "256Gi"})
    return [cq, ko.local_queue("team-a", "gpu-queue", "team-a-cq")]


def _gpu_gang(
    namespace: str = "team-a",
    queue: str = "gpu-queue",
    *,
    checks: list[dict[str, Any]] | None = None,
    admitted: bool = False,
) -> dict[str, Any]:
    container = {"name": "trainer", "resources": {"limits": {c.RESOURCE_GPU: "8"}}}
    conditions = [
        condition(
            c.WL_QUOTA_RESERVED,
            "True" if admitted else "False",
            reason="Pending",
            message=f"couldn't assign flavors to pod set main: resource {c.RESOURCE_GPU} "
            "unavailable in ClusterQueue",
        )
    ]
    if admitted:
        conditions.append(condition(c.WL_ADMITTED, "True"))
    return workload(
        "job-train-9f8e7",
        namespace=namespace,
        count=2,
        queue=queue,
        template={"spec": {"containers": [container]}},
        conditions=conditions,
        checks=checks,
    )


def _doctor(objects: list[dict[str, Any]], queue: str | None = None) -> Doctor:
    settings = Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {
                "region": "us-east-1",
                "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes",
            },
            "pulumi": UNREACHED_BACKEND,
        }
    )
    return Doctor(FakeKube(*objects), None, None, settings, queue=queue, now=lambda: NOW)


def _split(objects: list[dict[str, Any]]) -> tuple[list[Any], list[Any], list[Any]]:
    kinds: dict[str, list[Any]] = {"Workload": [], "LocalQueue": [], "ClusterQueue": []}
    for obj in objects:
        kinds.setdefault(obj["kind"], []).append(obj)
    return kinds["Workload"], kinds["LocalQueue"], kinds["ClusterQueue"]


def test_without_queue_doctor_fails_on_a_gpu_gang_on_another_queue_naming_queue_and_gpu() -> None:
    objects = [*_healthy(), *_team_queue(), _gpu_gang()]
    results = _doctor(objects).run()
    failed = [r for r in results if not r.ok]
    assert failed, [r.render() for r in results]
    covers = next(r for r in failed if r.name.startswith("ClusterQueue covers pending requests"))
    assert TEAM_QUEUE in covers.name
    assert TEAM_QUEUE in covers.detail and c.RESOURCE_GPU in covers.detail, covers.render()
    assert "team-a-cq" in covers.detail and c.RESOURCE_GPU in covers.fix
    # The gang's queue is the one checked: its other links pass.
    names = {r.name: r for r in results}
    assert names[f"LocalQueue ({TEAM_QUEUE})"].ok
    assert names[f"ClusterQueue lists our check ({TEAM_QUEUE})"].ok
    assert names["AdmissionCheck"].ok and names["leader Lease"].ok


def test_queue_narrows_doctor_to_that_queue() -> None:
    objects = [*_healthy(), *_team_queue(), _gpu_gang()]
    results = {r.name: r for r in _doctor(objects, queue=f"default/{ko.QUEUE_NAME}").run()}
    assert results["ClusterQueue covers pending requests"].ok
    assert not any(TEAM_QUEUE in name for name in results)
    narrowed = {r.name: r for r in _doctor(objects, queue=TEAM_QUEUE).run()}
    assert not narrowed["ClusterQueue covers pending requests"].ok


def test_a_gang_carrying_our_check_is_found_even_if_its_queue_no_longer_lists_it() -> None:
    carried = [{"name": ko.CHECK_NAME, "state": c.CheckState.PENDING, "message": ""}]
    objects = [*_team_queue(check="someone-elses"), _gpu_gang(checks=carried)]
    choice = gang_queues(*_split(objects), OURS)
    assert choice.queues == (TEAM_QUEUE,) and choice.pending
    results = {r.name: r for r in _doctor([*_healthy(), *objects]).run()}
    assert not results[f"ClusterQueue lists our check ({TEAM_QUEUE})"].ok


def test_pending_work_that_is_not_a_gang_does_not_choose_its_queue() -> None:
    objects = [*_team_queue(check="someone-elses"), _gpu_gang()]
    choice = gang_queues(*_split([*_healthy(), *objects]), OURS)
    assert choice.queues == (f"default/{ko.QUEUE_NAME}",) and not choice.pending


def test_admitted_and_finished_gangs_are_not_pending() -> None:
    objects = [*_healthy(), *_team_queue(), _gpu_gang(admitted=True)]
    choice = gang_queues(*_split(objects), OURS)
    # No gang waits: every LocalQueue leading to our check is checked instead.
    assert choice.queues == (f"default/{ko.QUEUE_NAME}", TEAM_QUEUE) and not choice.pending


def test_a_quiet_healthy_cluster_passes_every_kubernetes_line() -> None:
    results = _doctor(_healthy()).run()
    kube = [r for r in results if r.name.startswith(("LocalQueue", "ClusterQueue", "Admission"))]
    assert len(kube) == 4 and all(r.ok for r in kube), [r.render() for r in kube]
    assert kube[0].name == f"LocalQueue (default/{ko.QUEUE_NAME})"


def test_no_queue_leading_to_our_check_fails_with_the_fix() -> None:
    objects = [o for o in _healthy() if o["kind"] not in ("LocalQueue", "ClusterQueue")]
    results = {r.name: r for r in _doctor(objects).run()}
    line = results[QUEUES_CHECK]
    assert not line.ok and ko.CHECK_NAME in line.detail and "admissionChecksStrategy" in line.fix


class _ListFails(FakeKube):
    def list(self, ref: Any, **kwargs: Any) -> Any:
        if ref == WORKLOADS:
            from provisioner.kube.errors import KubeForbidden

            raise KubeForbidden("workloads is forbidden", status=403)
        return super().list(ref, **kwargs)


def test_a_queue_listing_that_fails_is_a_failed_line_not_a_crash() -> None:
    doctor = _doctor(copy.deepcopy(_healthy()))
    doctor.kube = _ListFails(*_healthy())
    results = {r.name: r for r in doctor.run()}
    assert not results[QUEUES_CHECK].ok and "forbidden" in results[QUEUES_CHECK].detail
    assert results["AdmissionCheck"].ok
