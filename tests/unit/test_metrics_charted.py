"""The metrics a platform team already charts, read back from the controller's registry:
``atomic_gang_build_info``, AWS call latency beside the call counter, the work queue and
reconcile families under controller-runtime's names, and pools by phase and instance type
(a pair no pool has any more is removed, so the label stays bounded)."""

from __future__ import annotations

import importlib.metadata
import platform

import boto3
import pytest
from moto import mock_aws
from prometheus_client import generate_latest

from provisioner.api.clock import FakeClock
from provisioner.api.constants import Phase
from provisioner.cloud.ec2api import build_clients
from provisioner.controllers.metrics import AwsCallMetrics, ControllerMetrics, QueueMetrics
from provisioner.controllers.reaper import PoolFacts
from provisioner.kube.errors import KubeConflict
from provisioner.kube.resources import ObjectKey
from provisioner.kube.workqueue import Controller, Result, WorkQueue
from tests.unit.test_reaper_stranded import Sweeps

pytestmark = pytest.mark.unit


def _value(metrics: ControllerMetrics, metric: str, /, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(metric, labels)


def test_build_info_is_one_labelled_with_the_package_version_and_python() -> None:
    metrics = ControllerMetrics()
    samples = [
        s
        for family in metrics.registry.collect()
        if family.name == "atomic_gang_build_info"
        for s in family.samples
    ]
    assert len(samples) == 1 and samples[0].value == 1
    labels = samples[0].labels
    assert labels["version"] == importlib.metadata.version("atomic-gang-provisioner")
    assert labels["python_version"] == platform.python_version()
    assert set(labels) == {"version", "revision", "python_version"}


def test_each_aws_call_is_timed_by_service_and_action_beside_its_count() -> None:
    metrics = ControllerMetrics()
    with mock_aws():
        session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s")
        clients = build_clients(
            session, "us-east-1", max_attempts=1, observer=AwsCallMetrics(metrics)
        )
        clients.ec2.describe_instances()
        clients.ec2.describe_instances()
        with pytest.raises(Exception, match="InvalidInstanceID"):
            clients.ec2.terminate_instances(InstanceIds=["i-0123456789abcdef0"])
    timed = "atomic_gang_aws_call_duration_seconds"
    ec2 = {"service": "ec2"}
    assert _value(metrics, f"{timed}_count", **ec2, action="DescribeInstances") == 2
    # A refused call is timed too: its latency is part of what the operator waits on.
    assert _value(metrics, f"{timed}_count", **ec2, action="TerminateInstances") == 1
    assert (_value(metrics, f"{timed}_sum", **ec2, action="DescribeInstances") or -1) >= 0
    code = "InvalidInstanceID.NotFound"
    counted = _value(
        metrics, "atomic_gang_aws_calls_total", **ec2, action="TerminateInstances", error_code=code
    )
    assert counted == 1


def test_a_call_with_no_answer_is_timed_under_its_action() -> None:
    metrics = ControllerMetrics()
    session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s")
    clients = build_clients(
        session,
        "us-east-1",
        "http://127.0.0.1:1",  # nothing listens: the connection is refused
        max_attempts=1,
        connect_timeout=1,
        observer=AwsCallMetrics(metrics),
    )
    with pytest.raises(Exception, match="Could not connect"):
        clients.ec2.describe_subnets()
    timed = "atomic_gang_aws_call_duration_seconds_count"
    assert _value(metrics, timed, service="ec2", action="DescribeSubnets") == 1


def _controller(metrics: ControllerMetrics, clock: FakeClock, outcomes: list[object]) -> Controller:
    queue_metrics = QueueMetrics(metrics.runtime, "gangnodepool")
    steps = iter(outcomes)

    def reconcile(key: ObjectKey) -> Result | None:
        step = next(steps)
        if isinstance(step, Exception):
            raise step
        return step if isinstance(step, Result) else None

    queue: WorkQueue[ObjectKey] = WorkQueue(clock=clock, observer=queue_metrics)
    return Controller("gangnodepool", reconcile, queue=queue, observer=queue_metrics)


KEY = ObjectKey("", "pool-a")
NAME = {"name": "gangnodepool"}
CONTROLLER = {"controller": "gangnodepool"}


def test_the_queue_and_reconciles_are_counted_under_controller_runtimes_names() -> None:
    metrics = ControllerMetrics()
    clock = FakeClock()
    controller = _controller(
        metrics,
        clock,
        [KubeConflict("moved", status=409), RuntimeError("boom"), Result(requeue_after=60), None],
    )

    # Before any reconcile, every result's series is there at 0 (as controller-runtime).
    def reconciles(result: str) -> float | None:
        return _value(metrics, "controller_runtime_reconcile_total", **CONTROLLER, result=result)

    for result in ("success", "error", "requeue", "requeue_after"):
        assert reconciles(result) == 0
    assert _value(metrics, "controller_runtime_reconcile_errors_total", **CONTROLLER) == 0

    controller.enqueue(KEY)
    controller.enqueue(KEY)  # already waiting: one add
    assert _value(metrics, "workqueue_adds_total", **NAME) == 1
    assert _value(metrics, "workqueue_depth", **NAME) == 1
    for _ in range(4):
        clock.advance(400)  # past any backoff or requeue
        assert controller.process_one(timeout=0)
    assert reconciles("requeue") == 1  # the conflict: back through the rate limiter
    assert reconciles("error") == 1
    assert reconciles("requeue_after") == 1
    assert reconciles("success") == 1
    assert _value(metrics, "controller_runtime_reconcile_errors_total", **CONTROLLER) == 1
    assert _value(metrics, "controller_runtime_reconcile_time_seconds_count", **CONTROLLER) == 4
    assert _value(metrics, "workqueue_retries_total", **NAME) == 2  # conflict and error
    assert _value(metrics, "workqueue_queue_duration_seconds_count", **NAME) == 4
    assert _value(metrics, "workqueue_work_duration_seconds_count", **NAME) == 4
    assert _value(metrics, "workqueue_depth", **NAME) == 0


def test_a_stuck_reconcile_shows_in_the_longest_running_gauge_at_scrape_time() -> None:
    metrics = ControllerMetrics()
    clock = FakeClock()
    controller = _controller(metrics, clock, [])
    controller.enqueue(KEY)
    assert controller.queue.get(timeout=0) == KEY  # taken, never done: stuck
    clock.advance(90)
    assert _value(metrics, "workqueue_longest_running_processor_seconds", **NAME) == 90
    assert _value(metrics, "workqueue_unfinished_work_seconds", **NAME) == 90
    exposed = generate_latest(metrics.registry).decode()
    assert 'workqueue_longest_running_processor_seconds{name="gangnodepool"} 90.0' in exposed


def test_pools_are_counted_by_phase_and_instance_type_and_a_gone_pair_is_removed() -> None:
    pools = {
        "a": PoolFacts(Phase.SATISFIED, claimed=True, instance_type="p5.48xlarge"),
        "b": PoolFacts(Phase.SATISFIED, claimed=True, instance_type="p5.48xlarge"),
        "c": PoolFacts(Phase.KEEP_WARM, claimed=False, instance_type="m5.large"),
    }
    sweeps = Sweeps(pools)
    sweeps.gained(0)

    def pools_of(phase: str, instance_type: str) -> float | None:
        return _value(sweeps.metrics, "atomic_gang_pools", phase=phase, instance_type=instance_type)

    assert pools_of(Phase.SATISFIED, "p5.48xlarge") == 2
    assert pools_of(Phase.KEEP_WARM, "m5.large") == 1
    del pools["c"]
    pools["a"] = PoolFacts(Phase.KEEP_WARM, claimed=False, instance_type="p5.48xlarge")
    sweeps.gained(30)
    assert pools_of(Phase.KEEP_WARM, "m5.large") is None  # no pool of that pair: no series
    assert pools_of(Phase.SATISFIED, "p5.48xlarge") == 1
    assert pools_of(Phase.KEEP_WARM, "p5.48xlarge") == 1
