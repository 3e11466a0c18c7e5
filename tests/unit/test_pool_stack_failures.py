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
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.settings import Defaults, LeaderElection, PulumiSettings, Settings
from provisioner.cloud.types import AmiChoice, ClusterInfo, InstanceView
from provisioner.controllers.gangnodepool import GangNodePoolReconciler
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from provisioner.pulumi_driver.port import PoolOutputs, PoolSpec, StackError
from tests.support.backends import UNREACHED_BACKEND
from tests.support.pool_reconciler import pool_deps

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/node"
SETTINGS = Settings(
    cluster_name="demo",
    defaults=Defaults(region="us-east-1", node_role_arn=ROLE),
    leader_election=LeaderElection(enabled=False),
    pulumi=PulumiSettings.model_validate(UNREACHED_BACKEND),
)
POOL: dict[str, Any] = {
    "apiVersion": c.API_VERSION,
    "kind": c.GNP_KIND,
    "metadata": {
        "name": "pool-a",
        "uid": "pool-uid",
        "resourceVersion": "1",
        "finalizers": [c.FINALIZER],
    },
    "spec": {
        "pool": "pool-a",
        "count": 2,
        "instanceType": "m5.large",
        "mode": "runinstances",
        "region": "us-east-1",
        "nodeRoleArn": ROLE,
        "keepWarmTTL": "10m",
        "maxLifetime": "4h",
        "amiVariant": "standard",
        "claim": {
            "namespace": "ml",
            "name": "wl",
            "uid": "wl-uid",
            "claimedAt": "2026-11-30T11:59:00Z",
        },
    },
    "status": {"phase": c.PHASE_ACQUIRING},
}
CLUSTER = ClusterInfo(
    name="demo",
    arn=None,
    status="ACTIVE",
    version="1.33",
    endpoint="https://demo.example",
    certificate_authority="Q0E=",
    service_cidr="10.100.0.0/16",
    vpc_id="vpc-1",
    subnet_ids=("subnet-1",),
    security_group_ids=("sg-1",),
)


class Store:
    """The pool object as the apiserver and the informer cache both hold it."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = copy.deepcopy(dict(obj))

    def get(self, _namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj) if name == self.obj["metadata"]["name"] else None

    def list(self) -> list[dict[str, Any]]:
        return []

    def list_labelled(self, _value: str) -> list[dict[str, Any]]:
        return []

    def patch_status(self, _ref: Any, _name: str, patch: Mapping[str, Any], **_: Any) -> Any:
        status = self.obj.setdefault("status", {})
        for key, value in patch["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        self.obj["metadata"]["resourceVersion"] = str(
            int(self.obj["metadata"]["resourceVersion"]) + 1
        )
        return copy.deepcopy(self.obj)


class Engine:
    def find_managed(self, *_: Any, **__: Any) -> list[InstanceView]:
        return []

    def describe(self, _ids: Sequence[str]) -> list[InstanceView]:
        return []

    def cluster(self, _name: str) -> ClusterInfo:
        return CLUSTER

    def resolve_ami(self, **_: Any) -> AmiChoice:
        return AmiChoice(ami_id="ami-1", source="explicit")


class FailingStacks:
    def __init__(self, kind: FailureKind) -> None:
        self.kind = kind
        self.prepared: list[PoolSpec] = []
        self.asked = 0

    def is_prepared(self, _pool: str) -> bool:
        self.asked += 1
        return False

    def outputs(self, _pool: str) -> PoolOutputs | None:
        return None

    def prepare(self, spec: PoolSpec) -> PoolOutputs:
        self.prepared.append(spec)
        raise StackError(
            "InstanceProfileNotFound" if self.kind is FailureKind.CONFIG else "AwsUnavailable",
            "The node instance profile does not exist; create it.",
            kind=self.kind,
            pool=spec.pool,
            operation="prepare",
        )


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, _obj: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))


def reconciler(
    store: Store,
    stacks: FailingStacks,
    executor: StackExecutor,
    recorder: Recorder,
    now: Callable[[], datetime] = lambda: NOW,
) -> GangNodePoolReconciler:
    return GangNodePoolReconciler(
        pool_deps(
            settings=SETTINGS,
            kube=store,
            pools=store,
            nodes=store,
            engine=Engine(),
            stacks=stacks,
            executor=executor,
            recorder=recorder,
            now=now,
        )
    )


def test_a_pass_while_the_prepare_runs_neither_asks_the_stack_nor_plans_on_it() -> None:
    store, recorder = Store(POOL), Recorder()
    stacks = FailingStacks(FailureKind.RETRYABLE)
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


def one_pass(kind: FailureKind) -> tuple[float | None, dict[str, Any], Recorder]:
    store, recorder = Store(POOL), Recorder()
    stacks = FailingStacks(kind)
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
    store, recorder = Store(POOL), Recorder()
    stacks = FailingStacks(kind)
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
