"""Our admission-check entry on a Workload: the JSON-patch operations that set it, and the
write, preconditioned on the version read and skipped when the entry already says it."""

from __future__ import annotations

import copy

import pytest

from provisioner.api import constants as c
from provisioner.api.workload import Workload
from provisioner.kube.check_state import check_state_operations, write_check_state
from provisioner.kube.resources import WORKLOADS
from tests.support.stored_objects import StoredObjects, apply_json_patch
from tests.unit.test_api_workload import CHECK, NOW, UPDATES, WORKLOAD

pytestmark = pytest.mark.unit


def stored() -> StoredObjects:
    store = StoredObjects()
    store.put(WORKLOADS, WORKLOAD)
    return store


def test_ready_is_written_on_the_version_read_and_touches_only_our_entry() -> None:
    store = stored()
    wl = Workload.from_dict(WORKLOAD)
    written = write_check_state(
        store,
        wl,
        CHECK,
        state=c.CheckState.READY,
        message="4 of 4 nodes Ready",
        pod_set_updates=UPDATES,
        now=NOW,
        field_manager=c.FIELD_MANAGER,
    )
    (call,) = store.calls
    assert (call["verb"], call["subresource"]) == ("json_patch", "status")
    assert (call["namespace"], call["resource_version"]) == ("default", "918273")
    assert call["field_manager"] == c.FIELD_MANAGER
    ops = call["patch"]
    assert ops[0] == {"op": "test", "path": "/status/admissionChecks/1/name", "value": CHECK}
    assert {op["path"] for op in ops[1:]} == {
        "/status/admissionChecks/1/state",
        "/status/admissionChecks/1/message",
        "/status/admissionChecks/1/lastTransitionTime",
        "/status/admissionChecks/1/podSetUpdates",
    }
    patched = store.body(WORKLOADS, wl.metadata.name, "default")
    assert written is not None and written == Workload.from_dict(patched)
    ours = written.check(CHECK)
    assert ours is not None
    assert ours.state == c.CheckState.READY
    assert ours.message == "4 of 4 nodes Ready"
    assert ours.last_transition_time == NOW
    assert ours.pod_set_updates == UPDATES
    assert ours.retry_count == 1  # Kueue's field is left alone
    assert patched["status"]["admissionChecks"][0] == WORKLOAD["status"]["admissionChecks"][0]
    # Writing it again changes nothing, so nothing is sent.
    again = write_check_state(
        store,
        written,
        CHECK,
        state=c.CheckState.READY,
        message="4 of 4 nodes Ready",
        pod_set_updates=UPDATES,
        now=NOW,
        field_manager=c.FIELD_MANAGER,
    )
    assert again is None and len(store.calls) == 1


def test_message_change_keeps_transition_time() -> None:
    wl = Workload.from_dict(WORKLOAD)
    ops = check_state_operations(
        wl, CHECK, state=c.CheckState.PENDING, message="acquiring 4 p4d", now=NOW
    )
    assert ops is not None
    assert not any(op["path"].endswith("lastTransitionTime") for op in ops)
    assert Workload.from_dict(apply_json_patch(WORKLOAD, ops)).check(CHECK) == wl.check(
        CHECK
    ).model_copy(update={"message": "acquiring 4 p4d"})  # type: ignore[union-attr]


def test_retry_after_ready_removes_pod_set_updates() -> None:
    wl = Workload.from_dict(WORKLOAD)
    ready = apply_json_patch(
        WORKLOAD,
        check_state_operations(
            wl, CHECK, state=c.CheckState.READY, message="", pod_set_updates=UPDATES, now=NOW
        )
        or [],
    )
    ops = check_state_operations(
        Workload.from_dict(ready), CHECK, state=c.CheckState.RETRY, message="nodes lost", now=NOW
    )
    assert ops is not None
    assert {"op": "remove", "path": "/status/admissionChecks/1/podSetUpdates"} in ops
    ours = Workload.from_dict(apply_json_patch(ready, ops)).check(CHECK)
    assert ours is not None and ours.state == c.CheckState.RETRY and ours.pod_set_updates == ()


def test_long_messages_are_cut_to_kueues_limit() -> None:
    wl = Workload.from_dict(WORKLOAD)
    ops = check_state_operations(
        wl, CHECK, state=c.CheckState.REJECTED, message="x" * 40000, now=NOW
    )
    (message,) = [op["value"] for op in ops or [] if op["path"].endswith("/message")]
    assert len(message) == c.CHECK_MESSAGE_MAX_LENGTH


def test_the_write_needs_our_entry_and_a_resource_version() -> None:
    store = stored()
    wl = Workload.from_dict(WORKLOAD)
    with pytest.raises(LookupError, match="no admission check 'not-ours'"):
        write_check_state(
            store, wl, "not-ours", state=c.CheckState.READY, message="", now=NOW, field_manager="m"
        )
    body = copy.deepcopy(WORKLOAD)
    del body["metadata"]["resourceVersion"]
    with pytest.raises(ValueError, match="resourceVersion"):
        write_check_state(
            store,
            Workload.from_dict(body),
            CHECK,
            state=c.CheckState.READY,
            message="",
            now=NOW,
            field_manager="m",
        )
    assert store.calls == []
