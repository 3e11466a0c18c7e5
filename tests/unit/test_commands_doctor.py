"""doctor's Kubernetes links, table by table, on a fake reader and a fixed clock.

Each case breaks one link of a healthy setup and expects that link's line to fail with
a fix; the AWS links are exercised against the EC2 emulator in tests/e2e/test_doctor.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devenv import kueue_objects as ko
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.commands.doctor import Doctor
from provisioner.commands.doctor_kube import requested_resources
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_kube import FakeKube
from tests.support.workloads import condition, workload
from tests.unit.test_doctor_daemonsets import NVIDIA_CHART, daemonset

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _lease(renewed: datetime, duration: int = 15) -> dict[str, Any]:
    return {
        "kind": "Lease",
        "metadata": {"name": "atomic-gang-provisioner", "namespace": "atomic-gang-system"},
        "spec": {
            "holderIdentity": "replica-1",
            "leaseDurationSeconds": duration,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }


def _healthy() -> list[dict[str, Any]]:
    objects = ko.default_objects(("default",), ko.LOCAL_QUOTAS)
    objects[0]["status"] = {"conditions": [{"type": "Active", "status": "True"}]}
    return [*objects, _lease(NOW - timedelta(seconds=5))]


def _doctor(
    objects: list[dict[str, Any]], queue: str | None = f"default/{ko.QUEUE_NAME}"
) -> Doctor:
    role = "arn:aws:iam::123456789012:role/nodes"
    settings = Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {"region": "us-east-1", "nodeRoleArn": role},
            "pulumi": UNREACHED_BACKEND,
        }
    )
    return Doctor(FakeKube(*objects), None, None, settings, queue=queue, now=lambda: NOW)


def _drop(kind: str) -> Callable[[list[dict[str, Any]]], None]:
    def edit(objects: list[dict[str, Any]]) -> None:
        objects[:] = [o for o in objects if o["kind"] != kind]

    return edit


def _edit(kind: str, change: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
    def edit(objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            if obj["kind"] == kind:
                change(obj)

    return edit


CASES = [
    ("no LocalQueue", _drop("LocalQueue"), "LocalQueue", "does not exist"),
    ("no ClusterQueue", _drop("ClusterQueue"), "ClusterQueue lists our check", "does not exist"),
    (
        "check on some flavors only",
        _edit(
            "ClusterQueue",
            lambda o: o["spec"]["admissionChecksStrategy"]["admissionChecks"][0].update(
                onFlavors=[ko.FLAVOR_NAME]
            ),
        ),
        "ClusterQueue lists our check",
        "remove onFlavors",
    ),
    (
        "queue lists another check",
        _edit(
            "ClusterQueue",
            lambda o: o["spec"]["admissionChecksStrategy"].update(
                admissionChecks=[{"name": "someone-elses"}]
            ),
        ),
        "ClusterQueue lists our check",
        "admissionChecksStrategy",
    ),
    ("no AdmissionCheck", _drop("AdmissionCheck"), "AdmissionCheck", "does not exist"),
    (
        "another controller",
        _edit("AdmissionCheck", lambda o: o["spec"].update(controllerName="x.io/other")),
        "AdmissionCheck",
        c.CONTROLLER_NAME,
    ),
    (
        "not Active",
        _edit("AdmissionCheck", lambda o: o.pop("status")),
        "AdmissionCheck",
        "start the controller",
    ),
    ("no Lease", _drop("Lease"), "leader Lease", "no replica has ever led"),
    (
        "stale Lease",
        _edit("Lease", lambda o: o.update(_lease(NOW - timedelta(seconds=31)))),
        "leader Lease",
        "more than twice its 15s duration",
    ),
    (
        "a device plugin without the gang toleration",
        lambda objects: objects.append(daemonset("nvidia-device-plugin-daemonset", NVIDIA_CHART)),
        "DaemonSets on gang nodes",
        "kubectl -n kube-system patch daemonset nvidia-device-plugin-daemonset",
    ),
]


def test_a_healthy_setup_passes_every_kubernetes_link() -> None:
    results = _doctor(_healthy()).run()
    assert all(r.ok for r in results[:6]), [r.render() for r in results[:6]]
    # No AWS clients given: those lines fail with a fix rather than stop the run; but with
    # buying off (the default) the purchase line asks nothing of AWS and passes.
    assert [r.ok for r in results[6:]] == [False] * 5 + [True]


@pytest.mark.parametrize(("case", "breaks", "line", "words"), CASES, ids=[c[0] for c in CASES])
def test_each_broken_link_fails_its_line_with_a_fix(
    case: str, breaks: Callable[[list[dict[str, Any]]], None], line: str, words: str
) -> None:
    objects = copy.deepcopy(_healthy())
    breaks(objects)
    results = {r.name: r for r in _doctor(objects).run()}
    assert not results[line].ok
    assert results[line].fix
    assert words in results[line].detail + results[line].fix
    assert "fix:" in results[line].render()


def test_a_lease_renewed_within_twice_its_duration_passes() -> None:
    objects = [o for o in _healthy() if o["kind"] != "Lease"]
    objects.append(_lease(NOW - timedelta(seconds=29)))
    results = {r.name: r for r in _doctor(objects).run()}
    assert results["leader Lease"].ok


def _gpu_workload(name: str = "job-train-1a2b3", quota: str = "False") -> dict[str, Any]:
    container = {
        "name": "trainer",
        "resources": {
            "requests": {"cpu": "96", "memory": "1Ti"},
            "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
        },
    }
    quota_reserved = condition(
        "QuotaReserved",
        quota,
        reason="Pending",
        message="couldn't assign flavors to pod set main: resource "
        "nvidia.com/gpu unavailable in ClusterQueue",
    )
    return workload(
        name,
        namespace="default",
        count=2,
        queue="atomic-gang-queue",
        template={"spec": {"containers": [container]}},
        conditions=[quota_reserved],
    )


def _cover(*names: str) -> Callable[[dict[str, Any]], None]:
    def change(cq: dict[str, Any]) -> None:
        group = cq["spec"]["resourceGroups"][0]
        group["coveredResources"] = [*group["coveredResources"], *names]
        for name in names:
            group["flavors"][0]["resources"].append({"name": name, "nominalQuota": "64"})

    return change


def test_requested_resources_read_requests_and_limits() -> None:
    assert sorted(requested_resources(_gpu_workload())) == [
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "vpc.amazonaws.com/efa",
    ]


def _cpu_only(cq: dict[str, Any]) -> None:
    cq.update(
        ko.cluster_queue(
            ko.CLUSTER_QUEUE_NAME, ko.FLAVOR_NAME, ko.CHECK_NAME, {"cpu": "64", "memory": "256Gi"}
        )
    )


def test_the_default_queue_covers_gpu_and_efa() -> None:
    objects = [*copy.deepcopy(_healthy()), _gpu_workload()]
    line = {r.name: r for r in _doctor(objects).run()}["ClusterQueue covers pending requests"]
    assert line.ok and "1 pending" in line.detail, line.render()


def test_a_queue_without_gpu_coverage_fails_naming_the_resource() -> None:
    objects = [*copy.deepcopy(_healthy()), _gpu_workload()]
    _edit("ClusterQueue", _cpu_only)(objects)
    line = {r.name: r for r in _doctor(objects).run()}["ClusterQueue covers pending requests"]
    assert not line.ok
    assert "nvidia.com/gpu" in line.detail and "vpc.amazonaws.com/efa" in line.detail
    assert "job-train-1a2b3" in line.detail
    assert "acceleratorQuota" in line.fix


def test_a_queue_covering_gpu_and_efa_passes() -> None:
    objects = [*copy.deepcopy(_healthy()), _gpu_workload()]
    _edit("ClusterQueue", _cpu_only)(objects)
    _edit("ClusterQueue", _cover("nvidia.com/gpu", "vpc.amazonaws.com/efa"))(objects)
    line = {r.name: r for r in _doctor(objects).run()}["ClusterQueue covers pending requests"]
    assert line.ok, line.render()


def test_an_admitted_workload_is_not_pending() -> None:
    objects = [*copy.deepcopy(_healthy()), _gpu_workload(quota="True")]
    line = {r.name: r for r in _doctor(objects).run()}["ClusterQueue covers pending requests"]
    assert line.ok and "0 pending" in line.detail
