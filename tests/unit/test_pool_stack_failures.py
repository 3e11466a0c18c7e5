"""A stack failure's kind decides the pool's wait: config waits for a fix, transient retries.

The GangNodePool reconciler runs against small fakes (an in-memory pool object, an engine
that answers the cluster and AMI lookups, and a stack port whose `prepare` fails with a
`StackError` of a given kind): one pass submits the prepare, the stack executor runs it on
the test's thread, and the pass the executor asks for saves the result. The kind has to
survive from the port to the requeue delay and the pool's status: before issue 16, every
stack failure came back as retryable.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind, Phase
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from provisioner.pulumi_driver.port import StackError
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.pool_reconciler import NODE_ROLE_ARN, pool_deps, reconciler_settings
from tests.support.pools import claim, pool, pool_spec

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ROLE = NODE_ROLE_ARN
SETTINGS = reconciler_settings()
POOL = pool(
    uid="pool-uid",
    resource_version="1",
    finalizers=[c.FINALIZER],
    spec=pool_spec(
        count=2,
        instance_type="m5.large",
        node_role_arn=ROLE,
        ami_variant="standard",
        claim=claim(),
    ),
    status={"phase": Phase.ACQUIRING},
)


def failing_stacks(kind: FailureKind) -> FakeStacks:
    """Stacks not prepared yet, whose `prepare` fails with a `StackError` of `kind`."""
    error = StackError(
        "InstanceProfileNotFound" if kind is FailureKind.CONFIG else "AwsUnavailable",
        "The node instance profile does not exist; create it.",
        kind=kind,
        pool="pool-a",
        operation="prepare",
    )
    return FakeStacks(failing={"prepare": error})


def reconciler(
    store: FakePoolStore,
    stacks: FakeStacks,
    executor: StackExecutor,
    recorder: RecordedEvents,
    now: Callable[[], datetime] = lambda: NOW,
) -> GangNodePoolReconciler:
    return GangNodePoolReconciler(
        pool_deps(
            settings=SETTINGS,
            kube=store,
            pools=store,
            nodes=FakeInformer(),
            engine=FakeEngine(),
            stacks=stacks,
            executor=executor,
            recorder=recorder,
            now=now,
        )
    )


def test_a_pass_while_the_prepare_runs_neither_asks_the_stack_nor_plans_on_it() -> None:
    store, recorder = FakePoolStore(POOL), RecordedEvents()
    stacks = failing_stacks(FailureKind.RETRYABLE)
    executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=ControllerMetrics())
    pools = reconciler(store, stacks, executor, recorder)
    pools.reconcile(ObjectKey("", "pool-a"))
    asked, before = stacks.asked, copy.deepcopy(store.obj)

    again = pools.reconcile(ObjectKey("", "pool-a"))  # a Node or status event meanwhile
    assert again.requeue_after is None
    assert stacks.asked == asked, "asking would wait on the stack's lock"
    assert store.obj == before, "nothing to write while it runs"
    assert executor.run_next(timeout=0) and stacks.prepared != []
    assert not executor.run_next(timeout=0), "one operation, not two"


def one_pass(kind: FailureKind) -> tuple[float | None, dict[str, Any], RecordedEvents]:
    store, recorder = FakePoolStore(POOL), RecordedEvents()
    stacks = failing_stacks(kind)
    requeued: list[str] = []
    executor = StackExecutor(1, on_finished=requeued.append, metrics=ControllerMetrics())
    pools = reconciler(store, stacks, executor, recorder)
    submitted = pools.reconcile(ObjectKey("", "pool-a"))
    assert submitted.requeue_after is None, "the executor queues the pool, not a timer"
    assert stacks.prepared == [], "the pass itself must not run Pulumi"
    assert executor.run_next(timeout=0)
    assert len(stacks.prepared) == 1, "the executor must have tried to prepare the stack"
    assert requeued == ["pool-a"]
    result = pools.reconcile(ObjectKey("", "pool-a"))
    assert executor.state("pool-a").finished is None, "the result is read once"
    return result.requeue_after, store.obj["status"], recorder


def test_a_config_failure_during_prepare_waits_the_config_delay() -> None:
    requeue, status, recorder = one_pass(FailureKind.CONFIG)
    config_delay = SETTINGS.retry_backoff.max.total_seconds() / 5
    assert requeue == config_delay
    assert status["lastError"]["reason"] == "InstanceProfileNotFound"
    assert "config" in status["lastError"]["message"]
    assert any(reason == "InstanceProfileNotFound" for _, reason, _ in recorder.events)


def test_a_transient_failure_during_prepare_takes_the_retry_backoff() -> None:
    requeue, status, _ = one_pass(FailureKind.RETRYABLE)
    assert requeue == SETTINGS.retry_backoff.initial.total_seconds()
    assert requeue != SETTINGS.retry_backoff.max.total_seconds() / 5
    assert "config" not in status["lastError"]["message"]


@pytest.mark.parametrize("kind", list(FailureKind))
def test_every_kind_reaches_the_status_as_itself(kind: FailureKind) -> None:
    _, status, _ = one_pass(kind)
    assert f"({kind.value} failure)" in status["lastError"]["message"]


@pytest.mark.parametrize("kind", [FailureKind.RETRYABLE, FailureKind.CONFIG])
def test_the_pass_the_failures_own_write_wakes_waits_out_the_backoff(kind: FailureKind) -> None:
    # Saving the failure changes the pool, so its watch event queues the pool again at once;
    # that pass must not submit the same step before the wait the failure asked for.
    store, recorder = FakePoolStore(POOL), RecordedEvents()
    stacks = failing_stacks(kind)
    executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=ControllerMetrics())
    now = [NOW]
    pools = reconciler(store, stacks, executor, recorder, lambda: now[0])
    key = ObjectKey("", "pool-a")
    pools.reconcile(key)
    assert executor.run_next(timeout=0)
    asked = pools.reconcile(key).requeue_after  # saves the failure
    assert asked

    woken = pools.reconcile(key)  # the failure's own status event
    assert not executor.run_next(timeout=0), "retried before its backoff"
    assert woken.requeue_after == pytest.approx(asked)
    assert len(stacks.prepared) == 1

    now[0] = NOW + timedelta(seconds=asked)
    pools.reconcile(key)
    assert executor.run_next(timeout=0) and len(stacks.prepared) == 2
