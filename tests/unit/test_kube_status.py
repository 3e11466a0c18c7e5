"""The status/object write helpers: no write when nothing changed, a minimal merge patch,
and the precondition on the resourceVersion that was read."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FIELD_MANAGER, FINALIZER
from provisioner.api.workload import Workload
from provisioner.kube.errors import KubeConflict
from provisioner.kube.resources import GANG_NODE_POOLS, WORKLOADS, ResourceRef
from provisioner.kube.status import (
    merge_patch,
    patch_status_entries,
    write_object,
    write_status,
)
from tests.support.stored_objects import StoredObjects
from tests.support.workloads import check, workload


class FakeWriter:
    """Records patches; answers like the apiserver (merged object, next resourceVersion)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.conflict = False

    def reset(self) -> None:
        self.calls.clear()
        self.conflict = False

    def _answer(self, verb: str, name: str, patch: Mapping[str, Any], **kw: Any) -> dict[str, Any]:
        self.calls.append({"verb": verb, "name": name, "patch": copy.deepcopy(patch), **kw})
        if self.conflict:
            raise KubeConflict("the object has been modified", status=409, reason="Conflict")
        return {
            "metadata": {"name": name, "resourceVersion": str(int(kw["resource_version"]) + 1)},
            **patch,
        }

    def patch(
        self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any
    ) -> dict[str, Any]:
        return self._answer("patch", name, patch, ref=ref, **kw)

    def patch_status(
        self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any
    ) -> dict[str, Any]:
        return self._answer("patch_status", name, patch, ref=ref, **kw)

    def json_patch(self, ref: ResourceRef, name: str, operations: Any, **kw: Any) -> dict[str, Any]:
        return self._answer("json_patch", name, {"ops": list(operations)}, ref=ref, **kw)


POOL: dict[str, Any] = {
    "apiVersion": "atomic-gang.k8s.aws/v1alpha1",
    "kind": "GangNodePool",
    "metadata": {"name": "p1", "resourceVersion": "41", "finalizers": [FINALIZER]},
    "spec": {"count": 4},
    "status": {"phase": "Idle", "instanceIds": [], "conditions": [{"type": "Ready"}]},
}


def test_nothing_is_written_when_mutate_reports_no_change() -> None:
    writer = FakeWriter()
    result = write_status(writer, GANG_NODE_POOLS, POOL, lambda status: False, FIELD_MANAGER)
    assert writer.calls == []
    assert result == POOL


def test_nothing_is_written_when_mutate_claims_a_change_that_is_not_one() -> None:
    writer = FakeWriter()

    def same_phase(status: dict[str, Any]) -> bool:
        status["phase"] = "Idle"
        return True

    write_status(writer, GANG_NODE_POOLS, POOL, same_phase, FIELD_MANAGER)
    assert writer.calls == []


def test_a_change_is_one_status_patch_preconditioned_on_the_version_read() -> None:
    writer = FakeWriter()

    def acquire(status: dict[str, Any]) -> bool:
        status["phase"] = "Acquiring"
        status["instanceIds"] = ["i-1"]
        return True

    result = write_status(writer, GANG_NODE_POOLS, POOL, acquire, FIELD_MANAGER)
    assert writer.calls == [
        {
            "verb": "patch_status",
            "name": "p1",
            "patch": {"status": {"phase": "Acquiring", "instanceIds": ["i-1"]}},
            "ref": GANG_NODE_POOLS,
            "namespace": None,
            "resource_version": "41",
            "field_manager": FIELD_MANAGER,
        }
    ]
    assert result["metadata"]["resourceVersion"] == "42"
    assert POOL["status"]["phase"] == "Idle"  # the object read is never modified


def test_removed_status_fields_are_sent_as_null() -> None:
    writer = FakeWriter()

    def clear(status: dict[str, Any]) -> bool:
        del status["conditions"]
        return True

    write_status(writer, GANG_NODE_POOLS, POOL, clear, FIELD_MANAGER)
    assert writer.calls[0]["patch"] == {"status": {"conditions": None}}


def test_a_conflict_reaches_the_caller() -> None:
    writer = FakeWriter()
    writer.conflict = True

    def change(status: dict[str, Any]) -> bool:
        status["phase"] = "Joining"
        return True

    with pytest.raises(KubeConflict):
        write_status(writer, GANG_NODE_POOLS, POOL, change, FIELD_MANAGER)


def test_a_write_without_a_resource_version_is_refused() -> None:
    unread = {"metadata": {"name": "p1"}, "status": {}}

    def change(status: dict[str, Any]) -> bool:
        status["phase"] = "Joining"
        return True

    with pytest.raises(ValueError, match="resourceVersion"):
        write_status(FakeWriter(), GANG_NODE_POOLS, unread, change, FIELD_MANAGER)


def test_write_object_patches_metadata_and_spec_only_with_the_precondition() -> None:
    writer = FakeWriter()

    def drop_finalizer(obj: dict[str, Any]) -> bool:
        obj["metadata"]["finalizers"].remove(FINALIZER)
        return True

    write_object(writer, GANG_NODE_POOLS, POOL, drop_finalizer, FIELD_MANAGER)
    assert writer.calls[0]["verb"] == "patch"
    assert writer.calls[0]["patch"] == {"metadata": {"finalizers": []}}
    assert writer.calls[0]["resource_version"] == "41"


def test_write_object_passes_the_namespace_of_namespaced_objects() -> None:
    writer = FakeWriter()
    workload = {"metadata": {"name": "w", "namespace": "team", "resourceVersion": "9"}}

    def label(obj: dict[str, Any]) -> bool:
        obj["metadata"]["labels"] = {"a": "b"}
        return True

    write_object(writer, WORKLOADS, workload, label, FIELD_MANAGER)
    assert writer.calls[0]["namespace"] == "team"
    assert writer.calls[0]["patch"] == {"metadata": {"labels": {"a": "b"}}}


def test_write_object_skips_when_unchanged() -> None:
    writer = FakeWriter()
    write_object(writer, GANG_NODE_POOLS, POOL, lambda obj: False, FIELD_MANAGER)
    assert writer.calls == []


@pytest.mark.parametrize(
    ("before", "after", "patch"),
    [
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        ({"a": 1}, {}, {"a": None}),
        ({}, {"a": {"b": 1}}, {"a": {"b": 1}}),
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}, {"a": {"c": 3}}),
        ({"a": {"b": 1}}, {"a": {}}, {"a": {"b": None}}),
        ({"a": [1, 2]}, {"a": [1]}, {"a": [1]}),
        ({"a": {"b": 1}}, {"a": "flat"}, {"a": "flat"}),
    ],
)
def test_merge_patch(before: dict[str, Any], after: dict[str, Any], patch: dict[str, Any]) -> None:
    assert merge_patch(before, after) == patch


# -- typed writes ------------------------------------------------------------------------------

WORKLOAD: dict[str, Any] = workload(
    "wl",
    count=1,
    resource_version="7",
    checks=[check("other", c.CHECK_READY), check("ours", c.CHECK_PENDING)],
)
OPS = [{"op": "add", "path": "/status/admissionChecks/1/state", "value": "Ready"}]


def test_a_shared_status_entry_is_written_as_operations_on_the_version_read() -> None:
    store = StoredObjects()
    store.put(WORKLOADS, WORKLOAD)
    written = patch_status_entries(
        store, WORKLOADS, Workload.from_dict(WORKLOAD), OPS, FIELD_MANAGER
    )
    (call,) = store.calls
    assert call["verb"] == "json_patch" and call["patch"] == OPS
    assert (call["namespace"], call["resource_version"]) == ("ml", "7")
    assert (call["subresource"], call["field_manager"]) == ("status", FIELD_MANAGER)
    ours = written.check("ours")
    assert ours is not None and ours.state == "Ready"
    assert written.metadata.resource_version == "8"


def test_no_operations_write_nothing() -> None:
    store = StoredObjects()
    workload = Workload.from_dict(WORKLOAD)
    assert patch_status_entries(store, WORKLOADS, workload, None, FIELD_MANAGER) is workload
    assert patch_status_entries(store, WORKLOADS, workload, [], FIELD_MANAGER) is workload
    assert store.calls == []


def test_a_stale_read_of_a_shared_entry_is_a_conflict() -> None:
    store = StoredObjects()
    store.put(WORKLOADS, WORKLOAD)
    store.conflict_next = True
    with pytest.raises(KubeConflict):
        patch_status_entries(store, WORKLOADS, Workload.from_dict(WORKLOAD), OPS, FIELD_MANAGER)
