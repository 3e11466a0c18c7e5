"""A gang Workload waiting for quota gets its pool's stack prepared before its claim
(`controllers/workload/prepare_ahead.py`): which pools it creates or marks, which it leaves
alone, what it reads of its queue, and what the Workload reconciler writes for it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gang_class import read_gang_shape
from provisioner.api.gangnodepool import Claim, GangNodePool, QueuedWorkload
from provisioner.api.owners import JOB, GangOwner
from provisioner.api.tenancy import ClusterReadError
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.controllers.workload.claim_index import claim_index
from provisioner.controllers.workload.decision import PoolChange, WorkloadDecision
from provisioner.controllers.workload.deps import WorkloadReconcilerDeps
from provisioner.controllers.workload.prepare_ahead import (
    LOOK_AGAIN_SECONDS,
    QUEUE_READ_TTL_SECONDS,
    QUEUE_RETRY_SECONDS,
    AheadChange,
    QueueChecks,
    ahead_change,
    waits_for_quota,
)
from provisioner.controllers.workload.reconciler import WorkloadReconciler
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import ObjectKey, ResourceRef
from tests.support.events import RecordedEvents
from tests.support.fake_instance_types import FakeInstanceTypes
from tests.support.informers import FakeInformer
from tests.support.jobs import job as job_body
from tests.support.typed_caches import typed
from tests.support.workloads import condition
from tests.support.workloads import workload as wl_body
from tests.unit.test_workload_decision import ANNOTATIONS, CHECK, LABELS, NOW, SETTINGS, pool

pytestmark = pytest.mark.unit

READ = read_gang_shape(LABELS, ANNOTATIONS, 4, SETTINGS)


def waiting(
    uid: str = "uid-1", annotations: Mapping[str, str] = ANNOTATIONS, **conditions: str
) -> Workload:
    """A Workload in namespace `ml` of the decision tests' Job, no quota unless told."""
    body = wl_body(
        uid=uid,
        resource_version="7",
        owner=job_body(labels=LABELS, annotations=dict(annotations)),
        conditions=[condition(t, s, reason="R") for t, s in conditions.items()],
    )
    return Workload.model_validate(body)


def queued(pool_: GangNodePool, uid: str) -> GangNodePool:
    mark = QueuedWorkload(namespace="ml", name=f"wl-{uid}", uid=uid, queued_at=NOW)
    return pool_.model_copy(update={"spec": pool_.spec.model_copy(update={"queued": mark})})


CREATE = WorkloadDecision(PoolChange.CREATE, "pool-a", shape=READ.shape)
CLAIM = WorkloadDecision(PoolChange.CLAIM, "pool-a", shape=READ.shape)


@pytest.mark.parametrize(
    ("decision", "given", "alive", "expected"),
    [
        pytest.param(CREATE, None, False, AheadChange.CREATE, id="no pool yet: created"),
        pytest.param(CLAIM, pool(), False, AheadChange.QUEUE, id="an unclaimed Idle pool"),
        pytest.param(
            WorkloadDecision(PoolChange.NONE, "pool-a"),
            pool(),
            False,
            AheadChange.NONE,
            id="the claim would be refused or wait",
        ),
        pytest.param(CLAIM, pool(claim_uid="other"), False, AheadChange.NONE, id="claimed"),
        pytest.param(
            CLAIM, pool(phase=Phase.KEEP_WARM, instances=4), False, AheadChange.NONE, id="warm"
        ),
        pytest.param(CLAIM, pool(owner="team-b"), False, AheadChange.NONE, id="another ns's"),
        pytest.param(CLAIM, pool(owner=None), False, AheadChange.NONE, id="no namespace's"),
        pytest.param(
            CLAIM,
            pool(instance_type="p5.48xlarge"),
            False,
            AheadChange.NONE,
            id="an idle pool the claim would reshape",
        ),
        pytest.param(CLAIM, queued(pool(), "uid-1"), False, AheadChange.NONE, id="already ours"),
        pytest.param(CLAIM, queued(pool(), "uid-2"), True, AheadChange.NONE, id="another waits"),
        pytest.param(
            CLAIM, queued(pool(), "uid-2"), False, AheadChange.QUEUE, id="its waiter is gone"
        ),
    ],
)
def test_which_pools_are_prepared_ahead(
    decision: WorkloadDecision, given: GangNodePool | None, alive: bool, expected: AheadChange
) -> None:
    assert ahead_change(waiting(), decision, given, alive) is expected


@pytest.mark.parametrize(
    ("conditions", "active", "expected"),
    [
        ({}, None, True),
        ({c.WL_QUOTA_RESERVED: "False"}, None, True),
        ({c.WL_QUOTA_RESERVED: "True"}, None, False),
        ({c.WL_FINISHED: "True"}, None, False),
        ({}, False, False),
    ],
)
def test_only_a_live_workload_without_quota_waits_for_it(
    conditions: dict[str, str], active: bool | None, expected: bool
) -> None:
    wl = waiting(**conditions)
    if active is not None:
        wl = wl.model_copy(update={"spec": wl.spec.model_copy(update={"active": active})})
    assert waits_for_quota(wl) is expected


def test_a_queue_is_read_once_per_ttl_and_an_unanswered_read_is_not_kept() -> None:
    reads: list[tuple[str, str]] = []
    answers: list[tuple[str, ...] | Exception] = [ClusterReadError("timeout"), ("ours",), ("x",)]
    clock = [0.0]

    def read(namespace: str, queue: str) -> tuple[str, ...]:
        reads.append((namespace, queue))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    checks = QueueChecks(read, clock=lambda: clock[0])
    assert checks("ml", "q") is None  # unanswered: not kept, asked again next time
    assert checks("ml", "q") == ("ours",)
    clock[0] += QUEUE_READ_TTL_SECONDS - 1
    assert checks("ml", "q") == ("ours",)
    assert len(reads) == 2
    clock[0] += 1
    assert checks("ml", "q") == ("x",)
    assert len(reads) == 3


def test_a_claim_by_the_workload_it_was_queued_for_clears_the_mark() -> None:
    spec = queued(pool(), "uid-1").spec
    mine = Claim(namespace="ml", name="wl-uid-1", uid="uid-1", claimed_at=NOW)
    other = Claim(namespace="ml", name="wl-uid-3", uid="uid-3", claimed_at=NOW)
    assert spec.with_claim(mine).queued is None
    assert spec.with_claim(other).queued is not None  # another's wait is still its own


class Apiserver:
    """Pools by name: created, or merge-patched at their resourceVersion."""

    def __init__(self, pools: Mapping[str, GangNodePool] = {}) -> None:
        self.pools = {name: p.to_dict() for name, p in pools.items()}
        for body in self.pools.values():
            body["metadata"]["resourceVersion"] = "1"
        self.writes: list[str] = []
        self.workload: dict[str, Any] = {}

    def json_patch(self, ref: ResourceRef, name: str, ops: Any, **kw: Any) -> dict[str, Any]:
        """Our check's write on the Workload: recorded, answered with the Workload."""
        self.writes.append(f"check {name}")
        return copy.deepcopy(self.workload)

    def get(self, ref: ResourceRef, name: str, **kw: Any) -> dict[str, Any]:
        raise KubeNotFound(f"{ref.plural} {name}")  # the live read of an owner not cached

    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> dict[str, Any]:
        made = copy.deepcopy(dict(body))
        made["metadata"]["resourceVersion"] = "1"
        self.pools[made["metadata"]["name"]] = made
        self.writes.append(f"create {made['metadata']['name']}")
        return copy.deepcopy(made)

    def patch(
        self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any
    ) -> dict[str, Any]:
        obj = self.pools[name]
        for key, value in patch.get("spec", {}).items():
            obj["spec"][key] = value
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"].get("resourceVersion", 1)) + 1)
        self.writes.append(f"patch {name} {sorted(patch.get('spec', {}))}")
        return copy.deepcopy(obj)


def reconciler(
    api: Apiserver,
    wl: Workload,
    queue_checks: tuple[str, ...] | Exception,
    *,
    owner_cached: bool = True,
    annotations: Mapping[str, str] = ANNOTATIONS,
) -> tuple[WorkloadReconciler, RecordedEvents]:
    events = RecordedEvents()
    api.workload = wl.to_dict()
    ours = {"metadata": {"name": CHECK}, "spec": {"controllerName": SETTINGS.controller_name}}
    owner = job_body(labels=LABELS, annotations=dict(annotations))
    deps = WorkloadReconcilerDeps(
        kube=api,  # type: ignore[arg-type]
        workloads=typed(FakeInformer(wl.to_dict()), Workload.from_dict),
        pools=typed(FakeInformer(*api.pools.values()), GangNodePool.from_dict, claim_index),
        checks=typed(FakeInformer(ours), AdmissionCheck.from_dict),
        classes=lambda _name: None,
        owners={JOB: typed(FakeInformer(*([owner] if owner_cached else [])), GangOwner.from_dict)},
        settings=SETTINGS,
        recorder=events,  # type: ignore[arg-type]
        now=lambda: NOW,
        instance_types=FakeInstanceTypes(),
        queue_checks=lambda _ns, _queue: _answer(queue_checks),
    )
    return WorkloadReconciler(deps), events


def _answer(checks: tuple[str, ...] | Exception) -> tuple[str, ...]:
    if isinstance(checks, Exception):
        raise checks
    return checks


@pytest.mark.parametrize(
    ("checks", "owner_cached", "again"),
    [
        pytest.param(ClusterReadError("timeout"), True, QUEUE_RETRY_SECONDS, id="queue unread"),
        pytest.param((CHECK,), False, LOOK_AGAIN_SECONDS, id="owner not seen yet"),
        pytest.param(("theirs",), False, None, id="not our queue: never again"),
    ],
)
def test_a_waiting_workload_nothing_else_brings_back_is_looked_at_again(
    checks: tuple[str, ...] | Exception, owner_cached: bool, again: float | None
) -> None:
    """Kueue may not touch a waiting Workload again for hours: a pass that could not decide
    asks to be run again itself."""
    wl = waiting()
    api = Apiserver()
    rec, _ = reconciler(api, wl, checks, owner_cached=owner_cached)
    assert rec.reconcile(ObjectKey("ml", wl.metadata.name)).requeue_after == again
    assert api.writes == []


def test_a_pool_queued_for_a_workload_brings_that_workload_back() -> None:
    wl = waiting()
    rec, _ = reconciler(Apiserver(), wl, (CHECK,))
    assert rec.keys_for_pool(queued(pool(), "uid-1")) == [ObjectKey("ml", "wl-uid-1")]
    assert rec.keys_for_pool(pool()) == []


def test_a_workload_waiting_on_our_queue_creates_its_pool_unclaimed_and_queued() -> None:
    wl = waiting()
    api = Apiserver()
    rec, events = reconciler(api, wl, ("other-check", CHECK))
    rec.reconcile(ObjectKey("ml", wl.metadata.name))
    assert api.writes == ["create pool-a"]
    made = GangNodePool.from_dict(api.pools["pool-a"])
    assert made.spec.claim is None and made.spec.owner_namespace == "ml"
    assert made.spec.queued == QueuedWorkload(
        namespace="ml", name=wl.metadata.name, uid="uid-1", queued_at=NOW
    )
    assert made.spec.count == 4 and made.spec.instance_type == "p4d.24xlarge"
    # Told once to each of the pool, the Workload and the Job, as a claim's pool is.
    assert events.reasons == [c.EventReason.POOL_CREATED] * 3
    assert [o.kind for o in events.involved] == ["GangNodePool", "Workload", "Job"]


def test_a_gang_its_claim_would_refuse_prepares_nothing() -> None:
    """A type EC2 does not know: the claim would be Rejected, so nothing is made for it."""
    unknown = {**ANNOTATIONS, c.ANN_INSTANCE_TYPE: "x9.nonesuch"}
    wl = waiting(annotations=unknown)
    api = Apiserver()
    rec, events = reconciler(api, wl, (CHECK,), annotations=unknown)
    assert rec.reconcile(ObjectKey("ml", wl.metadata.name)).requeue_after is None
    assert api.writes == [] and events.reasons == []


def test_a_workload_on_a_queue_without_our_check_prepares_nothing() -> None:
    wl = waiting()
    api = Apiserver()
    rec, _ = reconciler(api, wl, ("someone-elses-check",))
    rec.reconcile(ObjectKey("ml", wl.metadata.name))
    assert api.writes == []


def test_an_idle_pool_of_the_shape_is_marked_once_and_a_held_one_not_at_all() -> None:
    wl = waiting()
    api = Apiserver({"pool-a": pool()})
    rec, _ = reconciler(api, wl, (CHECK,))
    rec.reconcile(ObjectKey("ml", wl.metadata.name))
    assert api.writes == ["patch pool-a ['queued']"]

    # Its cache caught up: the pool is queued for it, nothing more is written.
    rec2, _ = reconciler(api, wl, (CHECK,))
    rec2.reconcile(ObjectKey("ml", wl.metadata.name))
    assert api.writes == ["patch pool-a ['queued']"]

    held = Apiserver({"pool-a": pool(claim_uid="other")})
    rec3, _ = reconciler(held, wl, (CHECK,))
    rec3.reconcile(ObjectKey("ml", wl.metadata.name))
    assert held.writes == []


def test_a_workload_with_quota_claims_instead_and_takes_the_mark_off() -> None:
    wl = waiting(**{c.WL_QUOTA_RESERVED: "True"})
    body = wl.to_dict()
    body["status"]["admissionChecks"] = [
        {"name": CHECK, "state": "Pending", "lastTransitionTime": "2026-11-29T11:59:00Z"}
    ]
    wl = Workload.from_dict(body)
    api = Apiserver({"pool-a": queued(pool(), "uid-1")})
    rec, _ = reconciler(api, wl, (CHECK,))
    rec.reconcile(ObjectKey("ml", wl.metadata.name))
    claimed = GangNodePool.from_dict(api.pools["pool-a"])
    assert claimed.spec.claim is not None and claimed.spec.claim.uid == "uid-1"
    assert claimed.spec.queued is None
    assert timedelta(0) <= NOW - claimed.spec.claim.claimed_at


def listing_our_check(wl: Workload) -> Workload:
    """`wl` as Kueue (v0.19) queues it on a ClusterQueue whose check applies to every
    flavor: our check listed, Pending, before any quota."""
    body = wl.to_dict()
    body["status"]["admissionChecks"] = [
        {"name": CHECK, "state": "Pending", "lastTransitionTime": "2026-11-29T11:59:00Z"}
    ]
    return Workload.from_dict(body)


def test_a_workload_kueue_lists_our_check_on_before_quota_is_prepared_for_all_the_same() -> None:
    """Routed through our check, it holds no claim (no quota) and its pool is made
    unclaimed and queued, as for one whose check is not listed yet; the check it lists
    names ours, so its queue is not read (a queue read that fails changes nothing)."""
    wl = listing_our_check(waiting())
    api = Apiserver()
    rec, events = reconciler(api, wl, ClusterReadError("not asked: the check is listed"))
    assert rec.reconcile(ObjectKey("ml", wl.metadata.name)).requeue_after is None
    assert api.writes == ["create pool-a"], "nothing written on the Workload's check"
    made = GangNodePool.from_dict(api.pools["pool-a"])
    assert made.spec.claim is None
    assert made.spec.queued is not None and made.spec.queued.uid == "uid-1"
    assert events.reasons == [c.EventReason.POOL_CREATED] * 3

    # An Idle pool of the shape is marked for it instead, once.
    idle = Apiserver({"pool-a": pool()})
    rec2, _ = reconciler(idle, wl, (CHECK,))
    rec2.reconcile(ObjectKey("ml", wl.metadata.name))
    assert idle.writes == ["patch pool-a ['queued']"]


def test_a_listed_check_on_a_workload_that_lost_its_quota_releases_its_claim_first() -> None:
    """Evicted and requeued, our check still listed: the claim is released (the decision's
    release, with its Events), and nothing is prepared for it in the same pass."""
    wl = listing_our_check(waiting(**{c.WL_EVICTED: "True"}))
    mine = Claim(namespace="ml", name=wl.metadata.name, uid="uid-1", claimed_at=NOW)
    held = pool(claim_uid="uid-1")
    held = held.model_copy(update={"spec": held.spec.model_copy(update={"claim": mine})})
    api = Apiserver({"pool-a": held})
    rec, events = reconciler(api, wl, (CHECK,))
    rec.reconcile(ObjectKey("ml", wl.metadata.name))
    assert api.writes == ["patch pool-a ['claim']"]
    assert GangNodePool.from_dict(api.pools["pool-a"]).spec.claim is None
    assert c.EventReason.CLAIM_RELEASED in events.reasons
