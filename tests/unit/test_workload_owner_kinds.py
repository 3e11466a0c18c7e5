"""The Workload reconciler with owners of every supported kind: it reads a JobSet's,
PyTorchJob's or TrainJob's labels from that kind's cache (or, for a kind with no
informer, by a live GET), records the check's Events on that owner too, reuses one warm
set across kinds, and answers a Workload of any other kind once.

The apiserver here is a dict of objects with resourceVersions; each cache reads it live.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gang_class import GangClass
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.owners import JOB, JOBSET, PYTORCH_JOB, TRAIN_JOB, GangOwner, OwnerKind
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.controllers.workload.claim_index import claim_index
from provisioner.controllers.workload.deps import WorkloadReconcilerDeps
from provisioner.controllers.workload.reconciler import WorkloadReconciler
from provisioner.kube.errors import KubeAlreadyExists, KubeNotFound
from provisioner.kube.resources import ResourceRef
from tests.support.events import RecordedEvents
from tests.support.fake_instance_types import FakeInstanceTypes
from tests.support.owners import foreign_owner, owner
from tests.support.pools import pool as pool_body
from tests.support.pools import pool_spec
from tests.support.typed_caches import typed
from tests.support.workloads import check, condition
from tests.support.workloads import workload as wl_body
from tests.unit.test_workload_decision import ANNOTATIONS, CHECK, LABELS, NOW, SETTINGS

pytestmark = pytest.mark.unit

KINDS = [JOBSET, PYTORCH_JOB, TRAIN_JOB]
POD_SETS = {
    "JobSet": [("leader", 1), ("workers", 3)],
    "PyTorchJob": [("master", 1), ("worker", 3)],
    "TrainJob": [("node", 4)],
    "Job": [("main", 4)],
}


class Store:
    """Objects by (kind, namespace, name); every write bumps one resourceVersion."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.version = 10
        self.writes: list[str] = []
        self.gets: list[str] = []
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta.setdefault("resourceVersion", str(self.version))
        self.objects[(obj["kind"], meta.get("namespace") or "", meta["name"])] = obj

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def get(self, ref: ResourceRef, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        self.gets.append(f"{ref.kind} {namespace}/{name}")
        found = self.objects.get((ref.kind, namespace or "", name))
        if found is None or found.get("apiVersion", ref.api_version) != ref.api_version:
            raise KubeNotFound(f"{ref.plural} {name} not found", status=404)
        return copy.deepcopy(found)

    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = {"apiVersion": ref.api_version, "kind": ref.kind, **copy.deepcopy(dict(body))}
        key = (ref.kind, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        if key in self.objects:
            raise KubeAlreadyExists("exists", status=409)
        self.writes.append(f"create {ref.kind} {key[2]}")
        self.objects[key] = obj
        return self._bump(obj)

    def patch(
        self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any
    ) -> dict[str, Any]:
        obj = self.objects[(ref.kind, kw.get("namespace") or "", name)]
        self.writes.append(f"patch {ref.kind} {name}")
        for key, value in patch.get("spec", {}).items():
            if value is None:
                obj["spec"].pop(key, None)
            else:
                obj["spec"][key] = value
        return self._bump(obj)

    def json_patch(
        self, ref: ResourceRef, name: str, operations: Sequence[Mapping[str, Any]], **kw: Any
    ) -> dict[str, Any]:
        key = (ref.kind, kw.get("namespace") or "", name)
        state = next(op["value"] for op in operations if op["path"].endswith("/state"))
        self.writes.append(f"check {state}")
        self.objects[key] = jsonpatch.apply_patch(self.objects[key], list(operations))
        return self._bump(self.objects[key])

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in self.objects.items() if k == kind]


class Live:
    """A cache of one kind that always holds what the store holds (and, for owners, only
    those carrying the queue label, as the informer's selector asks)."""

    def __init__(self, store: Store, kind: str, *, labelled: bool = False) -> None:
        self._store, self._kind, self._labelled = store, kind, labelled

    def list(self) -> list[dict[str, Any]]:
        return [
            o
            for o in self._store.of_kind(self._kind)
            if not self._labelled or c.QUEUE_NAME_LABEL in o["metadata"].get("labels", {})
        ]

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next(
            (
                o
                for o in self.list()
                if o["metadata"]["name"] == name
                and (o["metadata"].get("namespace") or "") == namespace
            ),
            None,
        )


def workload_of(body: Mapping[str, Any] | None, kind_name: str = "JobSet") -> dict[str, Any]:
    return wl_body(
        "wl-1",
        uid="wl-uid",
        owner=body,
        pod_sets=POD_SETS[kind_name],
        conditions=[condition(c.WL_QUOTA_RESERVED, reason="QuotaReserved")],
        checks=[check(CHECK, c.CheckState.PENDING)],
    )


class World:
    def __init__(
        self,
        store: Store,
        informed: Sequence[OwnerKind] = (JOB, JOBSET, PYTORCH_JOB, TRAIN_JOB),
        classes: dict[str, GangClass] | None = None,
    ) -> None:
        self.store = store
        self.events = RecordedEvents()
        self.classes = classes if classes is not None else {}
        checks = Live(store, "AdmissionCheck")
        spec: dict[str, Any] = {"controllerName": SETTINGS.controller_name}
        if self.classes:
            (name,) = self.classes
            spec["parameters"] = {"apiGroup": c.GROUP, "kind": c.GANG_CLASS_KIND, "name": name}
        store.put({"kind": "AdmissionCheck", "metadata": {"name": CHECK}, "spec": spec})
        self.reconciler = WorkloadReconciler(
            WorkloadReconcilerDeps(
                kube=store,  # type: ignore[arg-type]
                workloads=typed(Live(store, "Workload"), Workload.from_dict),
                pools=typed(Live(store, c.GNP_KIND), GangNodePool.from_dict, claim_index),
                checks=typed(checks, AdmissionCheck.from_dict),
                classes=lambda name: self.classes.get(name),
                owners={
                    kind: typed(Live(store, kind.kind, labelled=True), GangOwner.from_dict)
                    for kind in informed
                },
                settings=SETTINGS,
                recorder=self.events,  # type: ignore[arg-type]
                now=lambda: NOW,
                instance_types=FakeInstanceTypes(),
            )
        )

    def one_pass(self) -> float | None:
        from provisioner.kube.resources import ObjectKey

        return self.reconciler.reconcile(ObjectKey("ml", "wl-1")).requeue_after

    def check(self) -> dict[str, Any]:
        wl = self.store.objects[("Workload", "ml", "wl-1")]
        return next(s for s in wl["status"]["admissionChecks"] if s["name"] == CHECK)

    def events_on(self, kind: str) -> list[tuple[str, str]]:
        return [
            (reason, obj.uid or "")
            for (_, reason, _), obj in zip(self.events.events, self.events.involved, strict=True)
            if obj.kind == kind
        ]


def gang_owner(kind: OwnerKind, **kw: Any) -> dict[str, Any]:
    return owner(
        kind,
        uid=f"{kind.plural}-uid",
        labels=kw.get("labels", LABELS),
        annotations=kw.get("annotations", ANNOTATIONS),
    )


@pytest.mark.parametrize("informed", [True, False], ids=["informer", "live-get"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_the_owner_of_each_kind_makes_the_pool_and_hears_of_it(
    kind: OwnerKind, informed: bool
) -> None:
    top = gang_owner(kind)
    store = Store(top, workload_of(top, kind.kind))
    world = World(store, informed=(JOB, kind) if informed else (JOB,))
    assert world.one_pass() is None
    pools = store.of_kind(c.GNP_KIND)
    assert [p["metadata"]["name"] for p in pools] == ["pool-a"]
    assert pools[0]["spec"]["count"] == 4
    assert world.check()["state"] == c.CheckState.PENDING
    # The Event is on the object its user wrote, by apiVersion, kind and uid.
    assert world.events_on(kind.kind) == [(c.EventReason.POOL_CREATED, f"{kind.plural}-uid")]
    involved = world.events.involved[-1]
    assert (involved.api_version, involved.kind, involved.namespace) == (
        kind.api_version,
        kind.kind,
        "ml",
    )
    assert (f"{kind.kind} ml/train" in store.gets) is not informed


@pytest.mark.parametrize("was", [c.CheckState.PENDING, c.CheckState.READY])
def test_a_pool_made_for_a_workload_is_told_once_to_the_pool_the_workload_and_its_owner(
    was: c.CheckState,
) -> None:
    """One PoolCreated per object per pool, whatever state the check moves from: Kueue's
    Pending, or Ready for an admitted gang whose pool was deleted under it, where the
    check's write to Pending used to tell the owner a second time."""
    top = gang_owner(JOBSET)
    wl = workload_of(top)
    wl["status"]["admissionChecks"][0]["state"] = was
    world = World(Store(top, wl))

    def told() -> list[str]:
        events = zip(world.events.events, world.events.involved, strict=True)
        return sorted(o.kind for (_, r, _), o in events if r == c.EventReason.POOL_CREATED)

    world.one_pass()
    assert world.check()["state"] == c.CheckState.PENDING
    assert told() == [c.GNP_KIND, "JobSet", "Workload"]
    world.one_pass()
    world.one_pass()
    assert told() == [c.GNP_KIND, "JobSet", "Workload"]


def test_ready_and_release_are_told_to_the_owner_and_every_pod_set_is_pinned() -> None:
    top = gang_owner(JOBSET)
    wl = workload_of(top)
    satisfied = pool_body(
        uid="pool-uid",
        resource_version="5",
        spec=pool_spec(
            owner_namespace="ml",
            claim={
                "namespace": "ml",
                "name": "wl-1",
                "uid": "wl-uid",
                "claimedAt": "2026-11-29T11:00:00Z",
            },
        ),
        status={
            "phase": Phase.SATISFIED,
            "instanceIds": [f"i-{n:017x}" for n in range(4)],
            "readyNodes": 4,
            "activeGroup": "g1",
        },
    )
    store = Store(top, wl, satisfied)
    world = World(store)
    world.one_pass()
    ours = world.check()
    assert ours["state"] == c.CheckState.READY
    assert [u["name"] for u in ours["podSetUpdates"]] == ["leader", "workers"]
    assert all(u["nodeSelector"][c.POOL_LABEL] == "pool-a" for u in ours["podSetUpdates"])
    assert world.events_on("JobSet") == [(c.EventReason.GANG_READY, "jobsets-uid")]
    # The Workload's own entry says Ready, and Kueue says Admitted on it: no Event of ours.
    assert world.events_on("Workload") == []
    # The JobSet completes: Kueue marks the Workload Finished; the claim is released.
    store.objects[("Workload", "ml", "wl-1")]["status"]["conditions"].append(
        condition(c.WL_FINISHED, reason="Succeeded")
    )
    world.one_pass()
    assert "claim" not in store.objects[(c.GNP_KIND, "", "pool-a")]["spec"]
    assert world.events_on("JobSet")[-1] == ("ClaimReleased", "jobsets-uid")


@pytest.mark.parametrize(
    "body",
    [foreign_owner("apps/v1", "ReplicaSet"), foreign_owner("kubeflow.org/v1", "TFJob"), None],
    ids=["replicaset", "tfjob", "no-owner"],
)
def test_a_workload_of_another_kind_is_rejected_once(body: dict[str, Any] | None) -> None:
    store = Store(*([body] if body else []), workload_of(body))
    world = World(store)
    # Rejected at once, and not looked at again every second.
    assert world.one_pass() is None
    ours = world.check()
    assert ours["state"] == c.CheckState.REJECTED
    assert "Supported kinds: batch/v1 Job, jobset.x-k8s.io/v1alpha2 JobSet" in ours["message"]
    assert not store.of_kind(c.GNP_KIND)
    assert world.events.reasons == [c.EventReason.UNSUPPORTED_OWNER_KIND]
    # Kueue's answer to Rejected is to deactivate; whatever comes next writes nothing.
    writes = list(store.writes)
    assert world.one_pass() is None
    assert store.writes == writes and len(world.events.events) == 1


def warm_pool_of_a_job(instance_type: str = "p4d.24xlarge") -> dict[str, Any]:
    """A pool a Job's gang left warm: its whole set, unclaimed."""
    return pool_body(
        uid="pool-uid",
        resource_version="5",
        spec=pool_spec(owner_namespace="ml", instance_type=instance_type),
        status={
            "phase": Phase.KEEP_WARM,
            "instanceIds": [f"i-{n:017x}" for n in range(4)],
            "readyNodes": 4,
            "activeGroup": "g0",
        },
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_a_warm_set_a_job_left_is_reused_by_another_kind(kind: OwnerKind) -> None:
    top = gang_owner(kind)
    store = Store(top, workload_of(top, kind.kind), warm_pool_of_a_job())
    world = World(store)
    world.one_pass()
    claim = store.objects[(c.GNP_KIND, "", "pool-a")]["spec"]["claim"]
    assert claim["uid"] == "wl-uid"
    assert any("reusing its 4 warm nodes" in m for _, _, m in world.events.events)
    assert not [w for w in store.writes if w.startswith("create")]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_a_shape_conflict_across_kinds_is_refused(kind: OwnerKind) -> None:
    top = gang_owner(kind)
    store = Store(top, workload_of(top, kind.kind), warm_pool_of_a_job("p5.48xlarge"))
    world = World(store)
    world.one_pass()
    assert world.check()["state"] == c.CheckState.REJECTED
    assert "p5.48xlarge" in world.check()["message"]
    assert "claim" not in store.objects[(c.GNP_KIND, "", "pool-a")]["spec"]
    assert world.events_on(kind.kind) == [(c.EventReason.SHAPE_CONFLICT, f"{kind.plural}-uid")]
    # Kueue's eviction resets our entry to Pending and drops its message: the Workload keeps
    # why in a Warning of its own.
    assert world.events_on("Workload") == [(c.EventReason.SHAPE_CONFLICT, "wl-uid")]
    assert world.events.events[0][0] == c.EVENT_WARNING


def _gpu(instance_type: str) -> GangClass:
    return GangClass.from_dict(
        {"metadata": {"name": "gpu"}, "spec": {"instanceType": instance_type}}
    )


def test_a_gang_of_a_class_keeps_the_derived_pool_it_holds_when_the_class_changes() -> None:
    """A JobSet with only the queue label makes a pool named for its namespace, class and
    shape; a later change of the class names another shape, but the pool the Workload
    holds stays its own: no second pool, no claim left behind on the first."""
    top = gang_owner(JOBSET, labels={c.QUEUE_NAME_LABEL: "q"}, annotations={})
    store = Store(top, workload_of(top))
    world = World(store, classes={"gpu": _gpu("p4d.24xlarge")})
    world.one_pass()
    (made,) = store.of_kind(c.GNP_KIND)
    name = made["metadata"]["name"]
    assert name.startswith("ml-gpu-p4d-24xlarge-")
    assert (made["spec"]["count"], made["spec"]["gangClass"]) == (4, "gpu")
    assert made["spec"]["claim"]["uid"] == "wl-uid"

    world.classes["gpu"] = _gpu("p5.48xlarge")
    world.one_pass()
    assert [p["metadata"]["name"] for p in store.of_kind(c.GNP_KIND)] == [name]
    assert store.of_kind(c.GNP_KIND)[0]["spec"]["claim"]["uid"] == "wl-uid"
