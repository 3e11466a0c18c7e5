"""The work queues' and reconcilers' metrics, under controller-runtime's names and labels.

A platform team that runs Kueue, Karpenter or any other controller-runtime controller already
charts these families (sigs.k8s.io/controller-runtime ``pkg/metrics/workqueue.go`` and
``pkg/internal/controller/metrics``), so their dashboards and alerts apply here unchanged:

- ``workqueue_depth``, ``workqueue_adds_total``, ``workqueue_queue_duration_seconds``,
  ``workqueue_work_duration_seconds``, ``workqueue_retries_total``,
  ``workqueue_unfinished_work_seconds`` and ``workqueue_longest_running_processor_seconds``,
  labelled ``name`` (the controller: admissioncheck, workload, gangnodepool);
- ``controller_runtime_reconcile_total{controller,result}`` with controller-runtime's results
  (success, requeue_after, requeue, error; a conflict and a pass the leadership fence stopped
  go back on the queue without being failures, so they count as requeue),
  ``controller_runtime_reconcile_errors_total{controller}`` and
  ``controller_runtime_reconcile_time_seconds{controller}``.

The three gauges that describe the queue right now (depth, unfinished work, the longest
running reconcile) are read from the queue when Prometheus scrapes (`_QueueGauges`), as
client-go's periodic update would give them: a reconcile stuck for an hour shows as an hour
although the queue heard nothing in that hour. Every label value is a controller's name: three.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from provisioner.kube.workqueue import Outcome, QueueStats

__all__ = ["QueueMetrics", "RuntimeMetrics"]

# client-go's workqueue buckets: 10ns to 1000s by tens (ExponentialBuckets(10e-9, 10, 12)).
QUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(12))
# controller-runtime's reconcile_time_seconds buckets.
RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5),
    *(0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5),
    *(6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
)

# A reconcile's outcome as controller-runtime's `result` label says it.
RESULT_LABEL: dict[Outcome, str] = {
    Outcome.SUCCESS: "success",
    Outcome.REQUEUE_AFTER: "requeue_after",
    Outcome.CONFLICT: "requeue",
    Outcome.FENCED: "requeue",
    Outcome.ERROR: "error",
}


class _QueueGauges(Collector):
    """The queues' state-now gauges, read from each queue at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, Callable[[], QueueStats]] = {}

    def follow(self, name: str, stats: Callable[[], QueueStats]) -> None:
        with self._lock:
            self._queues[name] = stats

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        depth, unfinished, longest = self._families()
        with self._lock:
            queues = sorted(self._queues.items())
        for name, stats in queues:
            now = stats()
            depth.add_metric([name], now.depth)
            unfinished.add_metric([name], now.unfinished_seconds)
            longest.add_metric([name], now.longest_running_seconds)
        yield from (depth, unfinished, longest)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("workqueue_depth", "Current depth of workqueue.", labels=["name"]),
            GaugeMetricFamily(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been "
                "observed by work_duration. Large values indicate stuck threads.",
                labels=["name"],
            ),
            GaugeMetricFamily(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                labels=["name"],
            ),
        )


class RuntimeMetrics:
    """The controller-runtime families, on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.adds = Counter(
            "workqueue_adds", "Total number of adds handled by workqueue.", ["name"], registry=r
        )
        self.retries = Counter(
            "workqueue_retries",
            "Total number of retries handled by workqueue.",
            ["name"],
            registry=r,
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested: from "
            "becoming ready (an event, or a requeue falling due) to a worker taking it.",
            ["name"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            ["name"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.reconciles = Counter(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller, by result.",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller.",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller.",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.gauges = _QueueGauges()
        r.register(self.gauges)


class QueueMetrics:
    """The work queue's `QueueObserver` for one controller, onto `RuntimeMetrics`."""

    def __init__(self, metrics: RuntimeMetrics, controller: str) -> None:
        self._name = controller
        self._gauges = metrics.gauges
        self._adds = metrics.adds.labels(controller)
        self._retries = metrics.retries.labels(controller)
        self._queued = metrics.queue_duration.labels(controller)
        self._worked = metrics.work_duration.labels(controller)
        self._time = metrics.reconcile_time.labels(controller)
        self._errors = metrics.reconcile_errors.labels(controller)
        # As controller-runtime does: every result's series exists at 0 from the start, so
        # a rate over the first error is not lost to a series that appeared with it.
        self._results = {
            label: metrics.reconciles.labels(controller, label)
            for label in sorted(set(RESULT_LABEL.values()))
        }

    def follow(self, stats: Callable[[], QueueStats]) -> None:
        self._gauges.follow(self._name, stats)

    def added(self) -> None:
        self._adds.inc()

    def retried(self) -> None:
        self._retries.inc()

    def waited(self, seconds: float) -> None:
        self._queued.observe(seconds)

    def worked(self, seconds: float) -> None:
        self._worked.observe(seconds)

    def reconciled(self, seconds: float, outcome: Outcome) -> None:
        self._time.observe(seconds)
        self._results[RESULT_LABEL[outcome]].inc()
        if outcome is Outcome.ERROR:
            self._errors.inc()
