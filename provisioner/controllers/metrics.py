"""Prometheus metrics of the controller, on a registry the `Manager` owns and serves.

`ControllerMetrics` builds every metric on its own `CollectorRegistry` (never the
process-global one): two controllers in one process (a test harness, a bench) each count
only their own work, and a test reads before and after values on the registry of the
controller it drives. The composition root (``assembly.build_system``) makes one and hands
it to the Manager, which passes it to the pool reconciler (acquisitions, shortfalls, time
to Ready), the pool reconciler's instance index (its DescribeInstances listings), the
reaper's sweep (pools by phase, instances billed, node-seconds billed and stranded), the
stack executor (operations waiting and running) and the work queues (`QueueMetrics`, under
controller-runtime's names: ``runtime_metrics``); the stack port
(``pulumi_driver.port.PoolStacks``) reports each stack operation through `StackMetrics`.
The Manager sets the leader gauge as it starts and stops leading; the webhook counts each
admission answer through `WebhookMetrics`; the engine's AWS clients count and time each
call, by service, action and error code, through `AwsCallMetrics`
(``cloud.ec2api.watch_calls``). ``atomic_gang_build_info`` is 1, labelled with the version.
The process's own series (CPU, memory, file descriptors) are collected onto the same
registry.

Cardinality is bounded by construction; no label carries a pool's, a Job's or an
instance's name:

- ``instance_type`` (acquisitions, shortfalls, time to Ready, pools by phase): only types a
  pool was admitted with, so at most the settings' ``allowedInstanceTypes`` (exact names,
  or globs over EC2's families), and without an allowlist the types this cluster's pools
  actually use; ``atomic_gang_pools`` removes a phase and type pair no pool has any more.
- ``mode``, ``phase``, ``result``, ``reason``, ``kind``, ``operation``: fixed sets in code.
- AWS ``service`` and ``action``: the calls listed in ``cloud.ec2api`` (a few dozen);
  ``error_code``: AWS's documented codes for those calls, or an exception's class name.
- ``controller`` / ``name`` on the queue families: the three reconcilers.
- Per-pool and per-zone labels are deliberately absent: pools come and go with workloads
  (one series per pool would grow without bound on counters and histograms, which
  Prometheus cannot forget), and a zone is chosen per launch inside EC2's answer; ``atomic-gang
  pools`` and the pool's status answer "which pool, which zone".

"Stranded" is what the product exists to drive to zero; the reaper computes it with
``provisioner.cloud.billing``, the one definition the demo and the benchmarks
use: node-seconds billed outside the time the whole gang ran.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from provisioner.controllers.runtime_metrics import QueueMetrics, RuntimeMetrics

# The package whose version `atomic_gang_build_info` reports.
DISTRIBUTION = "atomic-gang-provisioner"

__all__ = [
    "AwsCallMetrics",
    "ControllerMetrics",
    "QueueMetrics",
    "RuntimeMetrics",
    "StackMetrics",
    "WebhookMetrics",
]


class ControllerMetrics:
    """Every product metric, registered on `registry` (this object's own)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.launch_attempts = Counter(
            "atomic_gang_launch_attempts_total",
            "N-or-0 launch calls made, by mode.",
            ["mode"],
            registry=r,
        )
        self.acquisitions = Counter(
            "atomic_gang_acquisitions_total",
            "Acquisition results by mode and instance type: launched, adopted (a set this "
            "generation had already launched, found by tag), shortfall, not-active, retryable, "
            "config.",
            ["mode", "instance_type", "result"],
            registry=r,
        )
        self.shortfalls = Counter(
            "atomic_gang_capacity_shortfalls_total",
            "Launches EC2 refused for capacity (nothing was left running), by mode and "
            "instance type.",
            ["mode", "instance_type"],
            registry=r,
        )
        self.time_to_ready = Histogram(
            "atomic_gang_time_to_ready_seconds",
            "From a pool's claim to all N nodes Ready, by mode and instance type.",
            ["mode", "instance_type"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600),
            registry=r,
        )
        self.pools = Gauge(
            "atomic_gang_pools",
            "GangNodePools by phase and instance type (a pair no pool has is removed).",
            ["phase", "instance_type"],
            registry=r,
        )
        self.instances_billed = Gauge(
            "atomic_gang_instances_billed",
            "Managed instances pending or running right now.",
            registry=r,
        )
        self.node_seconds_billed = Counter(
            "atomic_gang_node_seconds_billed_total",
            "Instance-seconds EC2 bills for managed instances (60-second minimum included), "
            "from its launch and termination times.",
            registry=r,
        )
        self.node_seconds_stranded = Counter(
            "atomic_gang_node_seconds_stranded_total",
            "Of those, instance-seconds billed outside the time the instance's whole gang ran "
            "(partial sets and rolled-back instances included).",
            registry=r,
        )
        self.block_fees = Counter(
            "atomic_gang_capacity_block_fees_usd_total",
            "Upfront fees of the Capacity Blocks the controller bought, in USD, by pool: "
            "counted when a pool records the block (bought, or found by its intent's tag).",
            ["pool"],
            registry=r,
        )
        self.block_seconds_stranded = Gauge(
            "atomic_gang_capacity_block_seconds_stranded",
            "Of the Capacity Block bought for each pool, the instance-seconds paid for so far "
            "that no gang of the pool ran on (`cloud.block_bill`), by pool.",
            ["pool"],
            registry=r,
        )
        self.instance_index_describes = Counter(
            "atomic_gang_instance_index_describes_total",
            "Paged DescribeInstances listings the pool reconciler's instance index made, by "
            "kind: snapshot (every pool at once, for pools in a steady phase), changes (every "
            "pool's instances that are not running, between snapshots) or pool (one pool, "
            "fresh: in flight, or after our own launch or release).",
            ["kind"],
            registry=r,
        )
        self.reaped = Counter(
            "atomic_gang_reaped_instances_total",
            "Instances the reaper terminated, by reason.",
            ["reason"],
            registry=r,
        )
        self.reaper_sweeps_skipped = Counter(
            "atomic_gang_reaper_sweeps_skipped_total",
            "Reaper sweeps that terminated nothing because a cache they read could not be "
            "trusted (not synced, list/watch failing, or stale), by reason.",
            ["reason"],
            registry=r,
        )
        self.instances_unproven = Gauge(
            "atomic_gang_instances_unproven",
            "Live instances tagged as this cluster's gangs whose EC2 record does not prove the "
            "controller launched them, at the last sweep: left alone, by reason.",
            ["reason"],
            registry=r,
        )
        self.leftovers_unproven = Gauge(
            "atomic_gang_leftovers_unproven",
            "Launch templates and placement groups tagged as a gone pool's that no stack of "
            "that pool records, at the last sweep: left alone, by kind.",
            ["kind"],
            registry=r,
        )
        self.stack_operation_seconds = Histogram(
            "atomic_gang_stack_operation_seconds",
            "Pulumi stack operations through the stack port, by operation (read, prepare, "
            "record, remove, destroy, recover) and result (succeeded, or the failure's kind).",
            ["operation", "result"],
            buckets=(0.01, 0.1, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.stack_operations_queued = Gauge(
            "atomic_gang_stack_operations_queued",
            "Pools' stack operations waiting for an executor worker.",
            registry=r,
        )
        self.stack_operations_running = Gauge(
            "atomic_gang_stack_operations_in_flight",
            "Pools' stack operations running on the executor now.",
            registry=r,
        )
        self.leader = Gauge(
            "atomic_gang_leader",
            "1 while this replica holds the leader Lease and runs the reconcilers, else 0.",
            registry=r,
        )
        self.webhook_requests = Counter(
            "atomic_gang_webhook_requests_total",
            "Admission requests the webhook answered, by the object's kind (Job, JobSet, "
            "PyTorchJob, TrainJob, MPIJob; other) and result: allowed, denied, bad-request, "
            "too-large, "
            "unavailable (the pool could not be read: the failurePolicy decides), error.",
            ["kind", "result"],
            registry=r,
        )
        self.aws_calls = Counter(
            "atomic_gang_aws_calls_total",
            "AWS API calls the controller's clients made, after botocore's retries, by service, "
            "action and error code (none when the call succeeded; the exception's name when "
            "no answer came back).",
            ["service", "action", "error_code"],
            registry=r,
        )
        self.aws_call_seconds = Histogram(
            "atomic_gang_aws_call_duration_seconds",
            "Wall time of the controller's AWS API calls, botocore's retries and their "
            "back-off included, by service and action.",
            ["service", "action"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.build_info = Gauge(
            "atomic_gang_build_info",
            "1, labelled with the controller's version (its package's), the source revision "
            "it was built from (empty when unknown) and the Python it runs on.",
            ["version", "revision", "python_version"],
            registry=r,
        )
        self.build_info.labels(*build_labels()).set(1)
        # The work queues' and reconcilers' families, under controller-runtime's names.
        self.runtime = RuntimeMetrics(r)
        # The standard process_* and python_info series (CPU, memory, open files, start
        # time), on this registry: what every controller's dashboard expects, under the
        # names every dashboard uses.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)


class StackMetrics:
    """The stack port's `StackObserver`, onto `metrics.stack_operation_seconds`."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self._seconds = metrics.stack_operation_seconds

    def finished(self, operation: str, result: str, seconds: float) -> None:
        self._seconds.labels(operation, result).observe(seconds)


class WebhookMetrics:
    """The webhook's `ReviewObserver`, onto `metrics.webhook_requests`."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self._requests = metrics.webhook_requests

    def reviewed(self, kind: str, result: str) -> None:
        self._requests.labels(kind, result).inc()


class AwsCallMetrics:
    """The AWS clients' `AwsCallObserver` (``cloud.ec2api.watch_calls``), onto
    `metrics.aws_calls` and `metrics.aws_call_seconds`."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self._calls = metrics.aws_calls
        self._seconds = metrics.aws_call_seconds

    def called(
        self, service: str, action: str, error_code: str | None, seconds: float | None
    ) -> None:
        self._calls.labels(service, action, error_code or "none").inc()
        if seconds is not None:
            self._seconds.labels(service, action).observe(seconds)


def build_labels() -> tuple[str, str, str]:
    """(version, revision, python_version): the installed package's version, the commit an
    install from version control recorded (PEP 610's direct_url.json; else empty), and the
    interpreter's version."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown", "", platform.python_version()
    revision = ""
    try:
        recorded = json.loads(dist.read_text("direct_url.json") or "{}")
        revision = str((recorded.get("vcs_info") or {}).get("commit_id") or "")
    except (ValueError, AttributeError):
        pass  # no record, or not one of version control: the revision stays unknown
    return str(dist.version), revision, platform.python_version()
