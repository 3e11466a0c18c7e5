"""The group label on a pool's Nodes: written by the pool reconciler in a step of its own
after the plan, never while it observes.

A launch template outlives generations, so a Node of the active set may join without the
group label; the pass that sees it gives it the label, and counts it Ready on the pass that
label change triggers. The fakes are those of `test_pool_instance_reads`, with an apiserver
that also holds the Nodes and records each write to one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.clock import FakeClock
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.resources import NODES, ObjectKey, ResourceRef
from tests.support.events import RecordedEvents
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.nodes import node
from tests.support.pool_reconciler import pool_deps
from tests.support.stored_objects import apply_merge_patch
from tests.unit.test_pool_instance_reads import (
    IDS,
    INTERVAL,
    JOINING,
    NOW,
    SETTINGS,
    fake_engine,
    pool_object,
)

pytestmark = pytest.mark.unit

OTHER = "i-000000000000000ff"  # a Node of the pool whose instance is not in the set


class Apiserver:
    """The pool (`pools`) and the Nodes (`nodes`, the informer's copies, patched in place),
    with every Node patch recorded in `node_writes`."""

    def __init__(self, pools: FakePoolStore, nodes: FakeInformer) -> None:
        self.pools = pools
        self.nodes = nodes
        self.node_writes: list[tuple[str, Mapping[str, Any]]] = []

    def patch_status(self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any) -> Any:
        return self.pools.patch_status(ref, name, patch, **kw)

    def patch(self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any) -> Any:
        if ref != NODES:
            return self.pools.patch(ref, name, patch, **kw)
        self.node_writes.append((name, patch))
        for i, obj in enumerate(self.nodes.objects):
            if obj["metadata"]["name"] == name:
                written = apply_merge_patch(obj, patch)
                meta = written["metadata"]
                meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
                self.nodes.objects[i] = written
                return copy.deepcopy(self.nodes.objects[i])
        raise AssertionError(f"no Node {name}")


def reconciler_over(api: Apiserver) -> GangNodePoolReconciler:
    metrics = ControllerMetrics()
    engine: Any = fake_engine()
    return GangNodePoolReconciler(
        pool_deps(
            settings=SETTINGS,
            kube=api,
            pools=api.pools,
            nodes=api.nodes,
            engine=engine,
            index=InstanceIndex(engine, "demo", INTERVAL, FakeClock(), metrics),
            stacks=FakeStacks(["pool-a"]),
            executor=StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics),
            recorder=RecordedEvents(),
            now=lambda: NOW,
            metrics=metrics,
        )
    )


def unlabelled_set() -> Apiserver:
    """A joining set of group gen-1 whose two Nodes joined Ready with an older group label,
    beside a Node of the pool that is not in the set."""
    bodies = [node(iid, group="gen-0") for iid in (*IDS, OTHER)]
    for body in bodies:
        body["metadata"]["resourceVersion"] = "1"
    nodes = FakeInformer(*bodies)
    return Apiserver(FakePoolStore(pool_object(JOINING)), nodes)


def test_observing_a_pool_writes_nothing() -> None:
    api = unlabelled_set()
    pools = reconciler_over(api)
    view, _ = pools._observe(GangNodePool.from_dict(api.pools.obj), None)
    assert api.node_writes == []
    assert view.ready_instance_ids == frozenset(), "a Node without the group is not counted"


def test_the_pass_labels_the_sets_nodes_after_its_plan_and_counts_them_on_the_next() -> None:
    api = unlabelled_set()
    pools = reconciler_over(api)
    pools.reconcile(ObjectKey("", "pool-a"))
    written = {name: patch for name, patch in api.node_writes}
    assert written == {
        f"node-{iid}": {"metadata": {"labels": {c.GROUP_LABEL: "gen-1"}}} for iid in IDS
    }, "the set's Nodes, and only those, get the group"
    status = api.pools.obj["status"]
    assert (status["phase"], status.get("readyNodes", 0)) == (Phase.JOINING, 0)

    pools.reconcile(ObjectKey("", "pool-a"))  # the pass the label change triggers
    assert api.pools.obj["status"]["phase"] == Phase.SATISFIED
    assert len(api.node_writes) == 2, "a labelled Node is not written again"
