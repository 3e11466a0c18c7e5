"""The Workload reconciler writes a warm claim's Workload once and its pool once, whatever
its informer caches lag.

A warm claim in a 200-pool wave was written five times (an audit of the API server showed
it): the claim pass, then a pass the claim's own watch event brought, which saw the pool
not yet answered and wrote a "reusing warm nodes" message; the Ready write, planned from a
Workload cache from before that message, met a conflict; and once written, Ready was
written again by a pass whose cache did not hold it yet, meeting another. Each of those
is a request the API server validates, sends through Kueue's webhook and refuses or fans
out to every watcher, in the wave whose CPU it shares.

Here the apiserver is a dict with resourceVersions and 409s, and each informer answers
with the object as it was when frozen until told it caught up.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.owners import JOB, GangOwner
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.controllers.workload.claim_index import claim_index
from provisioner.controllers.workload.deps import WorkloadReconcilerDeps
from provisioner.controllers.workload.reconciler import WorkloadReconciler
from provisioner.kube.errors import KubeConflict
from provisioner.kube.own_writes import WAIT_FOR_OWN_WRITE_SECONDS
from provisioner.kube.resources import GANG_NODE_POOLS, ObjectKey, ResourceRef
from tests.support.events import RecordedEvents
from tests.support.fake_instance_types import FakeInstanceTypes
from tests.support.informers import FakeInformer, LaggingCache
from tests.support.jobs import job as job_body
from tests.support.typed_caches import typed
from tests.support.workloads import check, condition
from tests.support.workloads import workload as kueue_workload
from tests.unit.test_workload_decision import ANNOTATIONS, CHECK, LABELS, NOW, SETTINGS, pool

pytestmark = pytest.mark.unit

KEY = ObjectKey("ml", "job-train-abc")


def job() -> dict[str, Any]:
    return job_body(labels=LABELS, annotations=ANNOTATIONS)


def workload() -> dict[str, Any]:
    return kueue_workload(
        KEY.name,
        namespace=KEY.namespace,
        uid="wl-uid",
        resource_version="1",
        owner=job(),
        conditions=[
            condition(c.WL_QUOTA_RESERVED, reason="QuotaReserved", at="2026-12-02T11:59:00Z")
        ],
        checks=[check(CHECK, c.CheckState.PENDING)],
    )


def warm_pool() -> dict[str, Any]:
    """A pool kept warm with its whole set: 4 instances, 4 Ready Nodes."""
    body = pool(phase=Phase.KEEP_WARM, instances=4, ready=4, group="gen-0").to_dict()
    body["metadata"]["resourceVersion"] = "1"
    return body


def _apply(obj: dict[str, Any], operations: Sequence[Mapping[str, Any]]) -> None:
    """The RFC 6902 operations our check patch uses: test, add and replace."""
    for op in operations:
        *parents, leaf = op["path"].strip("/").split("/")
        at: Any = obj
        for part in parents:
            at = at[int(part)] if isinstance(at, list) else at[part]
        if op["op"] == "test":
            assert at[leaf] == op["value"], f"test failed at {op['path']}"
        else:
            at[leaf] = copy.deepcopy(op["value"])


class Apiserver:
    """Objects by (resource, name), each write bumping one resourceVersion counter; a write
    at an older version is refused with a conflict, as the API server does."""

    def __init__(self) -> None:
        self.objects = {"workloads": workload(), "gangnodepools": warm_pool()}
        self.version = 1
        self.writes: list[str] = []  # "<resource>:<what>", refused ones included
        self.conflicts = 0

    def _write(
        self, ref: ResourceRef, version: str, change: Any, what: str | None
    ) -> dict[str, Any]:
        if what is not None:  # None: another controller's write
            self.writes.append(f"{ref.plural}:{what}")
        obj = self.objects[ref.plural]
        if obj["metadata"]["resourceVersion"] != version:
            self.conflicts += 1
            raise KubeConflict(f"{ref.plural}: the object has been modified")
        change(obj)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def patch(
        self, ref: ResourceRef, _name: str, patch: Mapping[str, Any], **kw: Any
    ) -> dict[str, Any]:
        def merge(obj: dict[str, Any]) -> None:
            for key, value in patch.get("spec", {}).items():
                if value is None:
                    obj["spec"].pop(key, None)
                else:
                    obj["spec"][key] = value

        return self._write(ref, kw["resource_version"], merge, "spec")

    def json_patch(
        self, ref: ResourceRef, _name: str, operations: Sequence[Mapping[str, Any]], **kw: Any
    ) -> dict[str, Any]:
        state = next(op["value"] for op in operations if op["path"].endswith("/state"))
        return self._write(
            ref, kw["resource_version"], lambda obj: _apply(obj, operations), f"check {state}"
        )

    def pool_answers(self, phase: str) -> None:
        """The pool reconciler writes the pool's status (its own write, not ours)."""
        pool = self.objects["gangnodepools"]
        self._write(
            GANG_NODE_POOLS,
            pool["metadata"]["resourceVersion"],
            lambda obj: obj["status"].update(phase=phase),
            None,
        )


class World:
    def __init__(self) -> None:
        self.apiserver = Apiserver()
        self.workloads = LaggingCache(lambda: self.apiserver.objects.get("workloads"))
        self.pools = LaggingCache(lambda: self.apiserver.objects.get("gangnodepools"))
        checks = FakeInformer(
            {"metadata": {"name": CHECK}, "spec": {"controllerName": SETTINGS.controller_name}}
        )
        self.events = RecordedEvents()
        self.reconciler = WorkloadReconciler(
            WorkloadReconcilerDeps(
                kube=self.apiserver,  # type: ignore[arg-type]
                workloads=typed(self.workloads, Workload.from_dict),
                pools=typed(self.pools, GangNodePool.from_dict, claim_index),
                checks=typed(checks, AdmissionCheck.from_dict),
                classes=lambda _name: None,
                owners={JOB: typed(FakeInformer(job()), GangOwner.from_dict)},
                settings=SETTINGS,
                recorder=self.events,  # type: ignore[arg-type]
                now=lambda: NOW,
                instance_types=FakeInstanceTypes(),
            )
        )

    def one_pass(self) -> float | None:
        """A pass, as the work queue runs it: a conflict ends it like any other error."""
        try:
            return self.reconciler.reconcile(KEY).requeue_after
        except KubeConflict:
            return None

    def claimed_and_satisfied(self) -> None:
        """Our claim on the pool, and the pool's Satisfied answer to it."""
        self.apiserver.pool_answers(Phase.SATISFIED)
        self.apiserver.objects["gangnodepools"]["spec"]["claim"] = {
            "namespace": KEY.namespace,
            "name": KEY.name,
            "uid": "wl-uid",
            "claimedAt": "2026-12-02T11:59:30Z",
        }

    def check(self) -> str:
        return str(self.apiserver.objects["workloads"]["status"]["admissionChecks"][0]["state"])


def test_a_warm_claim_writes_its_pool_once_and_its_workload_once_through_lagging_caches() -> None:
    world = World()
    world.workloads.freeze()
    world.pools.freeze()
    world.one_pass()
    assert world.apiserver.writes == ["gangnodepools:spec"], "the claim, and no message"

    # Events come in before the caches hold the claim: nothing is claimed again.
    assert world.one_pass() == WAIT_FOR_OWN_WRITE_SECONDS
    assert world.apiserver.writes == ["gangnodepools:spec"]

    # The claim's own event: the pool holds our claim, its pass has not answered yet.
    world.pools.catch_up()
    world.one_pass()
    assert world.apiserver.writes == ["gangnodepools:spec"], "no 'reusing warm nodes' write"

    # The pool answers Satisfied: one Ready write.
    world.apiserver.pool_answers(Phase.SATISFIED)
    world.one_pass()
    assert world.check() == c.CheckState.READY
    assert world.apiserver.writes == ["gangnodepools:spec", "workloads:check Ready"]

    # Another event (Kueue's, the pool's) before the Workload cache holds Ready.
    assert world.one_pass() == WAIT_FOR_OWN_WRITE_SECONDS
    world.workloads.catch_up()
    world.one_pass()
    assert world.apiserver.writes == ["gangnodepools:spec", "workloads:check Ready"]
    assert world.apiserver.conflicts == 0


def _told(world: World) -> list[tuple[str, str]]:
    """Each Event as (kind of the object it is about, reason), in the order recorded."""
    events = world.events
    return [(o.kind, reason) for o, reason in zip(events.involved, events.reasons, strict=True)]


def test_a_warm_claim_tells_its_owner_once_with_the_ready_check() -> None:
    """The pool hears it is claimed and reused; the owner (the Job its user watches) hears
    Ready, a pass later, and not first "held until Ready" for the milliseconds between.
    The Workload hears nothing from us: its check entry says Ready, and Kueue says
    Admitted on it. Two Events per warm admission, not three."""
    world = World()
    world.one_pass()
    world.apiserver.pool_answers(Phase.SATISFIED)
    world.one_pass()
    assert world.check() == c.CheckState.READY
    told = _told(world)
    assert told == [
        (c.GNP_KIND, c.EventReason.CLAIMED),
        ("Job", c.EventReason.GANG_READY),
    ]
    assert "reusing its 4 warm nodes" in world.events.events[0][2]


def test_a_claim_that_must_wait_for_nodes_tells_its_owner_it_is_held() -> None:
    world = World()
    idle = pool(phase=Phase.IDLE).to_dict()
    idle["metadata"]["resourceVersion"] = "1"
    world.apiserver.objects["gangnodepools"] = idle
    world.one_pass()
    told = _told(world)
    assert told[:2] == [(c.GNP_KIND, c.EventReason.CLAIMED), ("Job", c.EventReason.CLAIMED)]
    assert "held until all 4 nodes are Ready" in world.events.events[1][2]


def test_a_workload_cache_that_moved_past_our_write_is_decided_from_at_once() -> None:
    """Someone else wrote after us (Kueue, say): the cache holds neither our write's
    version nor the one it replaced, and the pass decides from it without waiting."""
    world = World()
    world.claimed_and_satisfied()
    world.workloads.freeze()
    world.one_pass()
    assert world.check() == c.CheckState.READY
    kueue_write = world.apiserver.objects["workloads"]
    kueue_write["metadata"]["resourceVersion"] = "99"  # Kueue admitted it meanwhile
    world.workloads.catch_up()
    assert world.one_pass() is None
    assert world.apiserver.writes == ["workloads:check Ready"]
    assert len(world.reconciler._own_workload_writes) == 0, "nothing left to wait for"


def test_a_deleted_workload_leaves_nothing_waited_for() -> None:
    world = World()
    world.claimed_and_satisfied()
    world.workloads.freeze()
    world.one_pass()
    assert len(world.reconciler._own_workload_writes) == 1
    world.workloads.frozen = None
    del world.apiserver.objects["workloads"]  # deleted: the informer answers None
    world.one_pass()
    assert len(world.reconciler._own_workload_writes) == 0
    # The pool it claimed, found by the claimant index, is released.
    assert world.apiserver.writes[-1] == "gangnodepools:spec"
    assert "claim" not in world.apiserver.objects["gangnodepools"]["spec"]
