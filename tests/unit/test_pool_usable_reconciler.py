"""The pool reconciler counts a Ready gang node only once it is usable, and says per node
what is missing: a pass over small fakes (the pool as apiserver and cache hold it, its
Nodes, a prepared stack, EC2 holding the set) with Nodes whose device plugins register
their GPUs after the kubelet reports Ready, and a configured startup taint.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.clock import FakeClock
from provisioner.api.constants import Phase
from provisioner.api.settings import StartupTaint
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.instance_views import managed_instance
from tests.support.nodes import node
from tests.support.pool_reconciler import NODE_ROLE_ARN, pool_deps, reconciler_settings
from tests.support.pools import claim, pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ROLE = NODE_ROLE_ARN
STARTUP = StartupTaint(key="example.com/agent-not-ready", effect="NoExecute")
SETTINGS = reconciler_settings(
    startup_taints=(STARTUP,),
)
IDS = ("i-00000000000000001", "i-00000000000000002")
JOINING = {
    "phase": Phase.JOINING,
    "acquireGeneration": 2,
    "activeGroup": "gen-1",
    "instanceIds": list(IDS),
    "lastStackOperation": "record",
    "recordedGroup": "gen-1",
    "joinDeadline": "2026-11-30T12:05:00Z",
}
REGISTERED = {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": "8"}


def gang_node(iid: str, allocatable: Mapping[str, str], taints: tuple[Any, ...] = ()) -> Any:
    body = node(iid)
    body["spec"]["taints"] = [
        {"key": c.GANG_TAINT_KEY, "value": "pool-a", "effect": "NoSchedule"},
        *taints,
    ]
    body["status"]["allocatable"] = dict(allocatable)
    return body


def one_pass(*nodes: Any) -> dict[str, Any]:
    spec = pool_spec(
        count=2,
        instance_type="p4d.24xlarge",
        node_role_arn=ROLE,
        claim=claim(),
        pod_requests={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
    )
    store = FakePoolStore(
        pool(
            uid="pool-uid", resource_version="1", finalizers=[c.FINALIZER], spec=spec,
            status=JOINING,
        )
    )  # fmt: skip
    engine: Any = FakeEngine(
        [managed_instance(iid, cluster="demo", pool="pool-a", state="running") for iid in IDS]
    )
    metrics = ControllerMetrics()
    reconciler = GangNodePoolReconciler(
        pool_deps(
            settings=SETTINGS,
            kube=store,
            pools=store,
            nodes=FakeInformer(*nodes),
            engine=engine,
            index=InstanceIndex(engine, "demo", 10, FakeClock(), metrics),
            stacks=FakeStacks(["pool-a"]),
            executor=StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics),
            recorder=RecordedEvents(),
            now=lambda: NOW,
            metrics=metrics,
        )
    )
    reconciler.reconcile(ObjectKey("", "pool-a"))
    return dict(store.obj["status"])


def test_a_ready_node_without_its_gpus_is_not_counted_and_the_status_says_why() -> None:
    status = one_pass(
        gang_node(IDS[0], REGISTERED),
        gang_node(IDS[1], {"cpu": "95", "memory": "1100Gi"}),  # the device plugin not there
    )
    assert status["phase"] == Phase.JOINING
    assert status["readyNodes"] == 1
    assert status["unusableNodes"] == [
        {
            "node": f"node-{IDS[1]}",
            "instanceId": IDS[1],
            "missing": ["nvidia.com/gpu: 0 of 8 allocatable"],
        }
    ]


def test_a_remaining_startup_taint_keeps_a_node_out() -> None:
    taint = {"key": STARTUP.key, "effect": STARTUP.effect}
    status = one_pass(gang_node(IDS[0], REGISTERED), gang_node(IDS[1], REGISTERED, (taint,)))
    assert status["readyNodes"] == 1
    (unusable,) = status["unusableNodes"]
    assert unusable["missing"] == [f"taint {STARTUP.key}:NoExecute"]


def test_the_set_is_satisfied_once_every_node_is_usable() -> None:
    status = one_pass(gang_node(IDS[0], REGISTERED), gang_node(IDS[1], REGISTERED))
    assert status["phase"] == Phase.SATISFIED
    assert status["readyNodes"] == 2
    assert "unusableNodes" not in status
