"""Prometheus metrics of the controller, served on /metrics by the manager.

Updated by the pool reconciler (acquisitions, shortfalls, time to Ready) and the reaper's
sweep (pools by phase, instances billed, node-seconds billed and stranded). "Stranded" is
what the product exists to drive to zero: node-seconds billed while the gang could not run
(its pool not yet Satisfied, or being torn down). The work queues of the three
reconcilers report their lag, reconcile time and depth through `QueueMetrics`; the stack
executor reports how many Pulumi operations wait and how many run; the stack port
(``pulumi_driver.port.PoolStacks``) reports each stack operation through `StackMetrics`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

LAUNCH_ATTEMPTS = Counter(
    "atomic_gang_launch_attempts_total",
    "N-or-0 launch calls made, by mode.",
    ["mode"],
    registry=REGISTRY,
)
ACQUISITIONS = Counter(
    "atomic_gang_acquisitions_total",
    "Acquisition results by mode: launched, shortfall, retryable, config.",
    ["mode", "result"],
    registry=REGISTRY,
)
SHORTFALLS = Counter(
    "atomic_gang_capacity_shortfalls_total",
    "Launches EC2 refused for capacity (nothing was left running).",
    ["mode"],
    registry=REGISTRY,
)
TIME_TO_READY = Histogram(
    "atomic_gang_time_to_ready_seconds",
    "From a pool's claim to all N nodes Ready.",
    ["mode"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600),
    registry=REGISTRY,
)
POOLS = Gauge(
    "atomic_gang_pools",
    "GangNodePools by phase.",
    ["phase"],
    registry=REGISTRY,
)
INSTANCES_BILLED = Gauge(
    "atomic_gang_instances_billed",
    "Managed instances pending or running right now.",
    registry=REGISTRY,
)
NODE_SECONDS_BILLED = Counter(
    "atomic_gang_node_seconds_billed_total",
    "Instance-seconds of managed instances, sampled at each sweep.",
    registry=REGISTRY,
)
NODE_SECONDS_STRANDED = Counter(
    "atomic_gang_node_seconds_stranded_total",
    "Instance-seconds billed while their gang could not run.",
    registry=REGISTRY,
)
REAPED = Counter(
    "atomic_gang_reaped_instances_total",
    "Instances the reaper terminated, by reason.",
    ["reason"],
    registry=REGISTRY,
)
QUEUE_WAIT = Histogram(
    "atomic_gang_workqueue_wait_seconds",
    "Reconcile lag: from a key becoming ready (an event, or a requeue falling due) to a "
    "worker taking it, by controller.",
    ["controller"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "atomic_gang_reconcile_seconds",
    "Time spent in one reconcile, by controller and result (success, conflict, error).",
    ["controller", "result"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)
STACK_OPERATION_SECONDS = Histogram(
    "atomic_gang_stack_operation_seconds",
    "Pulumi stack operations through the stack port, by operation (read, prepare, record, "
    "remove, destroy, recover) and result (succeeded, or the failure's kind).",
    ["operation", "result"],
    buckets=(0.01, 0.1, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "atomic_gang_workqueue_depth",
    "Keys ready and waiting for a worker, by controller.",
    ["controller"],
    registry=REGISTRY,
)

STACK_OPERATIONS_QUEUED = Gauge(
    "atomic_gang_stack_operations_queued",
    "Pools' stack operations waiting for an executor worker.",
    registry=REGISTRY,
)
STACK_OPERATIONS_RUNNING = Gauge(
    "atomic_gang_stack_operations_in_flight",
    "Pools' stack operations running on the executor now.",
    registry=REGISTRY,
)


class QueueMetrics:
    """The work queue's `QueueObserver` for one controller, onto the histograms above."""

    def __init__(self, controller: str) -> None:
        self._controller = controller
        self._wait = QUEUE_WAIT.labels(controller)
        self._depth = QUEUE_DEPTH.labels(controller)

    def waited(self, seconds: float) -> None:
        self._wait.observe(seconds)

    def reconciled(self, seconds: float, result: str) -> None:
        RECONCILE_SECONDS.labels(self._controller, result).observe(seconds)

    def depth(self, ready: int) -> None:
        self._depth.set(ready)


class StackMetrics:
    """The stack port's `StackObserver`, onto `STACK_OPERATION_SECONDS`."""

    def finished(self, operation: str, result: str, seconds: float) -> None:
        STACK_OPERATION_SECONDS.labels(operation, result).observe(seconds)
