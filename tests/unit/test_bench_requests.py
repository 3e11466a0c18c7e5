"""What the admission bench counts of the API server's requests (`bench/api_requests.py`):
a request keyed as the API server keys it, writes and reads per admission by resource
with the clock's renewals left out, our requests by component, and the figures a baseline
keeps of them."""

from __future__ import annotations

from typing import Any

import pytest

from bench.api_requests import (
    ProductRequests,
    SeriesRequests,
    component_of,
    report,
    request_key,
)
from provisioner.kube.client import KubeClient
from provisioner.kube.resources import GANG_NODE_POOLS, WORKLOADS

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        ("PATCH", "/apis/atomic-gang.k8s.aws/v1alpha1/gangnodepools/p1", "PATCH gangnodepools"),
        (
            "PATCH",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/w/status",
            "PATCH workloads/status",
        ),
        ("POST", "/api/v1/namespaces/default/events", "POST events"),
        ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/localqueues/q", "GET localqueues"),
        ("GET", "/api/v1/nodes", "LIST nodes"),
        ("GET", "/api/v1/namespaces/ml", "GET namespaces"),
        ("GET", "/version", "GET /version"),
    ],
)
def test_a_request_is_keyed_as_the_api_server_counts_it(method: str, path: str, key: str) -> None:
    assert request_key(method, path) == key


@pytest.mark.parametrize(
    ("thread", "component"),
    [
        ("workload-worker-3", "workload"),
        ("gangnodepool-worker-0", "gangnodepool"),
        ("event-writer", "event-writer"),
        ("AnyIO worker thread", "webhook"),
        ("webhook-certs", "webhook-certs"),
        ("informer-workloads", "informers"),
        ("informer-jobsim-jobs", None),  # the Job simulator's, not ours
    ],
)
def test_a_request_is_ours_by_the_thread_that_made_it(thread: str, component: str | None) -> None:
    assert component_of(thread) == component


class _Transport:
    def call_api(self, resource_path: str, method: str, **_: Any) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


def test_our_requests_are_counted_only_while_counting() -> None:
    counted = ProductRequests.new()
    kube = KubeClient(_Transport())
    with counted.counting():
        kube.patch(GANG_NODE_POOLS, "p1", {"spec": {}}, resource_version="7")
        kube.get(WORKLOADS, "w", namespace="ml")
    kube.get(WORKLOADS, "w", namespace="ml")  # after: not counted
    assert counted.snapshot() == {
        "MainThread PATCH gangnodepools": 1.0,
        "MainThread GET workloads": 1.0,
    }


def _series() -> SeriesRequests:
    return SeriesRequests(
        admissions=2,
        seconds=4.0,
        apiserver={
            "PATCH gangnodepools": 4.0,
            "PATCH workloads/status": 6.0,
            "POST events": 10.0,
            "PUT leases": 8.0,  # the clock's, not the admissions'
            "GET workloads": 20.0,
            "GET ": 2.0,  # /metrics: no resource
            "watch event Workload": 30.0,
        },
        ours={
            "workload PATCH gangnodepools": 4.0,
            "workload PATCH workloads/status": 2.0,
            "event-writer POST events": 6.0,
            "webhook GET localqueues": 2.0,
            "webhook-certs GET secrets": 8.0,  # by the clock
        },
        passes={"workload success": 18.0, "workload requeue": 2.0, "gangnodepool success": 8.0},
    )


def test_writes_and_reads_are_per_admission_by_resource_without_the_clocks() -> None:
    series = _series()
    assert series.writes() == {"gangnodepools": 2.0, "workloads/status": 3.0, "events": 5.0}
    assert series.writes(ours=True) == {
        "gangnodepools": 2.0,
        "workloads/status": 1.0,
        "events": 3.0,
    }
    assert series.reads(ours=True) == {"localqueues": 1.0}
    assert series.by_the_clock() == {"PUT leases": 2.0, "webhook-certs GET secrets": 2.0}
    assert series.passes_per_admission()["workload"] == 10.0
    assert series.passes_per_admission()["workload requeue"] == 1.0


def test_the_report_puts_every_clients_writes_beside_ours() -> None:
    text = report({"warm": _series()})
    writes, reads = [line for line in text.splitlines() if line.startswith("total")]
    assert writes.split()[1:] == ["10.00", "(6.00)"] and reads.split()[1:] == ["1.00"]
    assert "webhook GET localqueues" in text and "PUT leases 2.00/s" in text


def test_the_admission_bench_keeps_its_writes_per_admission() -> None:
    from bench.bench_admission import key_figures

    figures = key_figures({"warm": [{"admission": 0.1, "raw": 0.1}]}, {"warm": _series()})
    assert figures["warm: writes per admission"] == 10.0
    assert figures["warm: our writes per admission"] == 6.0
    assert figures["warm: our reads per admission"] == 1.0
    assert figures["warm: our gangnodepools writes per admission"] == 2.0
    assert figures["warm: our gangnodepools/status writes per admission"] == 0.0
    assert figures["warm: workload passes per admission"] == 10.0
