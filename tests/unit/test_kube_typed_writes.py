"""The typed write helpers: the model read in, the model written out; no request when
nothing changed, a merge patch of only the difference, on the resourceVersion read."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.gangnodepool import Claim, GangNodePool, GangNodePoolStatus
from provisioner.api.meta import ObjectMeta
from provisioner.api.owners import GangOwner
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.kube.errors import KubeConflict, KubeNotFound
from provisioner.kube.resources import ADMISSION_CHECKS, GANG_NODE_POOLS, JOBS, WORKLOADS
from provisioner.kube.status import create_object, read_object, update_object, update_status
from tests.support.jobs import job
from tests.support.pools import claim, pool_spec
from tests.support.pools import pool as pool_body
from tests.support.stored_objects import StoredObjects
from tests.support.workloads import check, workload

pytestmark = pytest.mark.unit

CLAIM = Claim.from_dict(claim(claimed_at="2026-01-01T00:00:00Z"))
# As the Workload reconciler writes a spec: every field, durations as the model writes them.
SPEC: dict[str, Any] = pool_spec(
    pool="p1",
    keep_warm_ttl="10m0s",
    max_lifetime="4h0m0s",
    availability_zones=[],
    subnets=[],
    efa=False,
    placement_group="none",
)
# As the pool reconciler writes its status: every field the model knows.
POOL: dict[str, Any] = pool_body(
    "p1",
    spec=SPEC,
    status=GangNodePoolStatus(phase=c.Phase.ACQUIRING).to_dict(),
    uid="p1-uid",
    resource_version="41",
)


def stored_pool(body: dict[str, Any] = POOL) -> tuple[StoredObjects, GangNodePool]:
    store = StoredObjects()
    return store, GangNodePool.from_dict(store.put(GANG_NODE_POOLS, body))


def test_a_status_change_is_one_merge_patch_of_the_difference_on_the_version_read() -> None:
    store, pool = stored_pool()
    wanted = pool.status.model_copy(update={"phase": c.Phase.JOINING, "ready_nodes": 2})
    written = update_status(store, GANG_NODE_POOLS, pool, wanted, c.FIELD_MANAGER)
    assert store.calls == [
        {
            "verb": "patch_status",
            "ref": GANG_NODE_POOLS,
            "name": "p1",
            "patch": {"status": {"phase": "Joining", "readyNodes": 2}},
            "namespace": None,
            "resource_version": "41",
            "field_manager": c.FIELD_MANAGER,
        }
    ]
    assert written.status == wanted and written.metadata.resource_version == "42"
    assert pool.status.phase == c.Phase.ACQUIRING  # the model read is never modified


def test_status_fields_cleared_are_sent_as_null() -> None:
    """Removed from the stored status, not left behind, as RFC 7386 says."""
    last_error = {"reason": "InsufficientCapacity", "message": "short in us-east-1a"}
    store, pool = stored_pool(
        {**POOL, "status": {**POOL["status"], "activeGroup": "gen-1", "lastError": last_error}}
    )
    wanted = pool.status.model_copy(update={"active_group": None, "last_error": None})
    written = update_status(store, GANG_NODE_POOLS, pool, wanted, c.FIELD_MANAGER)
    assert store.calls[0]["patch"] == {"status": {"activeGroup": None, "lastError": None}}
    stored = store.body(GANG_NODE_POOLS, "p1")["status"]
    assert "activeGroup" not in stored and "lastError" not in stored
    assert written.status == wanted


def test_an_unchanged_status_or_object_writes_nothing() -> None:
    store, pool = stored_pool()
    assert update_status(store, GANG_NODE_POOLS, pool, pool.status, "m") is pool
    assert update_object(store, GANG_NODE_POOLS, pool, pool, "m") is pool
    # Built anew but equal to what was read: still nothing to write.
    same_status = pool.status.model_copy(update={"phase": pool.status.phase})
    same_pool = pool.model_copy(update={"spec": pool.spec.model_copy(), "status": same_status})
    assert update_status(store, GANG_NODE_POOLS, pool, same_status, "m") is pool
    assert update_object(store, GANG_NODE_POOLS, pool, same_pool, "m") is pool
    assert store.calls == []


def test_a_default_the_stored_status_lacks_is_written() -> None:
    """As a diff of the stored body would: the PHASE column reads the stored phase."""
    store, pool = stored_pool({**POOL, "status": {}})
    wanted = pool.status.model_copy(update={"ready_nodes": 1})
    update_status(store, GANG_NODE_POOLS, pool, wanted, "m")
    assert store.calls[0]["patch"]["status"]["phase"] == "Idle"


def test_an_object_change_patches_spec_and_metadata_only() -> None:
    store, pool = stored_pool()
    claimed = pool.model_copy(update={"spec": pool.spec.with_claim(CLAIM)})
    written = update_object(store, GANG_NODE_POOLS, pool, claimed, c.FIELD_MANAGER)
    (call,) = store.calls
    assert call["verb"] == "patch" and call["resource_version"] == "41"
    assert call["patch"] == {"spec": {"claim": CLAIM.to_dict()}}
    assert written.spec.claim == CLAIM and written.status == pool.status
    released = written.model_copy(update={"spec": written.spec.with_claim(None)})
    update_object(store, GANG_NODE_POOLS, written, released, c.FIELD_MANAGER)
    assert store.calls[1]["patch"] == {"spec": {"claim": None}}
    assert store.calls[1]["resource_version"] == "42"


def test_an_object_write_leaves_status_to_its_subresource() -> None:
    """A status changed in `wanted` is not sent with the main resource, which ignores it."""
    store, pool = stored_pool(
        {**POOL, "metadata": {**POOL["metadata"], "finalizers": [c.FINALIZER]}}
    )
    released = pool.model_copy(
        update={
            "metadata": pool.metadata.model_copy(update={"finalizers": ()}),
            "status": pool.status.model_copy(update={"phase": c.Phase.IDLE}),
        }
    )
    written = update_object(store, GANG_NODE_POOLS, pool, released, c.FIELD_MANAGER)
    (call,) = store.calls
    assert call["verb"] == "patch" and call["resource_version"] == "41"
    assert call["patch"] == {"metadata": {"finalizers": None}}
    assert written.metadata.finalizers == () and written.status == pool.status


def test_writes_to_a_namespaced_object_name_its_namespace() -> None:
    store = StoredObjects()
    body = workload(
        "wl",
        namespace="team",
        resource_version="9",
        template={"metadata": {}},  # as Kueue writes it: a pod set always has one
        checks=[check("ours", c.CheckState.PENDING)],
    )
    read = Workload.from_dict(store.put(WORKLOADS, body))
    labels = {**read.metadata.labels, "a": "b"}
    labelled = read.model_copy(
        update={"metadata": read.metadata.model_copy(update={"labels": labels})}
    )
    written = update_object(store, WORKLOADS, read, labelled, c.FIELD_MANAGER)
    unchecked = written.status.model_copy(update={"admission_checks": ()})
    update_status(store, WORKLOADS, written, unchecked, c.FIELD_MANAGER)
    assert [(call["verb"], call["namespace"]) for call in store.calls] == [
        ("patch", "team"),
        ("patch_status", "team"),
    ]
    assert store.calls[0]["patch"] == {"metadata": {"labels": {"a": "b"}}}
    assert store.calls[1]["patch"] == {"status": {"admissionChecks": []}}


def test_a_write_from_a_stale_read_is_a_conflict() -> None:
    store, pool = stored_pool()
    update_status(
        store, GANG_NODE_POOLS, pool, pool.status.model_copy(update={"phase": c.Phase.IDLE}), "m"
    )
    with pytest.raises(KubeConflict):
        update_object(
            store,
            GANG_NODE_POOLS,
            pool,
            pool.model_copy(update={"spec": pool.spec.with_claim(CLAIM)}),
            "m",
        )
    with pytest.raises(KubeConflict):
        update_status(
            store,
            GANG_NODE_POOLS,
            pool,
            pool.status.model_copy(update={"phase": c.Phase.JOINING}),
            "m",
        )


def test_a_write_needs_the_resource_version_read() -> None:
    check = AdmissionCheck.from_dict({"metadata": {"name": "c"}, "spec": {"controllerName": "x"}})
    with pytest.raises(ValueError, match="resourceVersion"):
        update_status(
            StoredObjects(),
            ADMISSION_CHECKS,
            check,
            check.status.model_copy(update={"conditions": ()}),
            "m",
        )
    labelled = check.metadata.model_copy(update={"labels": {"a": "b"}})
    with pytest.raises(ValueError, match="resourceVersion"):
        update_object(
            StoredObjects(),
            ADMISSION_CHECKS,
            check,
            check.model_copy(update={"metadata": labelled}),
            "m",
        )


def test_a_created_object_is_sent_without_status_and_read_back() -> None:
    store = StoredObjects()
    new = GangNodePool(
        metadata=ObjectMeta(name="p2", finalizers=(c.FINALIZER,)),
        spec=GangNodePool.from_dict(POOL).spec.with_claim(CLAIM),
    )
    created = create_object(store, GANG_NODE_POOLS, new)
    (call,) = store.calls
    assert call["body"] == {
        "apiVersion": c.API_VERSION,
        "kind": c.GNP_KIND,
        "metadata": {"name": "p2", "finalizers": [c.FINALIZER]},
        "spec": {**SPEC, "claim": CLAIM.to_dict()},
    }
    assert created.metadata.uid == "uid-p2" and created.spec == new.spec


def test_a_live_read_parses_or_says_not_found() -> None:
    store = StoredObjects()
    store.put(JOBS, job("train", uid="j1"))
    read = read_object(store, JOBS, "train", "ml", GangOwner.from_dict)
    assert (read.name, read.uid) == ("train", "j1")
    with pytest.raises(KubeNotFound):
        read_object(store, JOBS, "gone", "ml", GangOwner.from_dict)
