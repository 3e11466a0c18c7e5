"""`kube.status`'s pieces beside the update helpers (tested in test_kube_typed_writes.py):
the merge patch they send, and our entry of a shared status list written as JSON-patch
operations on the resourceVersion read."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FIELD_MANAGER
from provisioner.api.workload import Workload
from provisioner.kube.errors import KubeConflict
from provisioner.kube.resources import WORKLOADS
from provisioner.kube.status import merge_patch, patch_status_entries
from tests.support.stored_objects import StoredObjects
from tests.support.workloads import check, workload


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


# -- our entry of a shared status list --------------------------------------------------------

WORKLOAD: dict[str, Any] = workload(
    "wl",
    count=1,
    resource_version="7",
    checks=[check("other", c.CheckState.READY), check("ours", c.CheckState.PENDING)],
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
