"""Preconditioned writes against the real apiserver: a stale resourceVersion is refused
with KubeConflict, a fresh one goes through, unchanged writes send nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeAlreadyExists, KubeConflict, KubeNotFound
from provisioner.kube.events import EventRecorder
from provisioner.kube.resources import CONFIG_MAPS, CORE_EVENTS, NODES, ResourceRef
from provisioner.kube.status import write_object, write_status


def set_status(**fields: Any) -> Callable[[dict[str, Any]], bool]:
    def mutate(status: dict[str, Any]) -> bool:
        changed = any(status.get(key) != value for key, value in fields.items())
        status.update(fields)
        return changed

    return mutate


@pytest.fixture
def widget(kube_client: KubeClient, widgets: ResourceRef, namespace: str) -> dict[str, Any]:
    body = {"metadata": {"name": "w1", "namespace": namespace}, "spec": {"size": 3}}
    return kube_client.create(widgets, body)


@pytest.fixture
def node(kube_client: KubeClient) -> Iterator[dict[str, Any]]:
    name = f"node-{uuid.uuid4().hex[:8]}"
    yield kube_client.create(NODES, {"metadata": {"name": name}})
    kube_client.delete(NODES, name, resource_version=None)


def managers(obj: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m["manager"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]}


def test_a_stale_status_write_conflicts_and_a_fresh_one_succeeds(
    kube_client: KubeClient, widgets: ResourceRef, widget: dict[str, Any]
) -> None:
    first = write_status(
        kube_client, widgets, widget, set_status(phase="Acquiring"), c.FIELD_MANAGER
    )
    assert first["status"] == {"phase": "Acquiring"}
    assert first["metadata"]["resourceVersion"] != widget["metadata"]["resourceVersion"]
    assert (c.FIELD_MANAGER, "status") in managers(first)

    with pytest.raises(KubeConflict):  # `widget` is what we read before our own write
        write_status(kube_client, widgets, widget, set_status(phase="Joining"), c.FIELD_MANAGER)

    fresh = kube_client.get(widgets, "w1", namespace=widget["metadata"]["namespace"])
    second = write_status(kube_client, widgets, fresh, set_status(phase="Joining"), c.FIELD_MANAGER)
    assert second["status"] == {"phase": "Joining"}
    assert second["spec"] == {"size": 3}  # the status subresource never touches spec


def test_an_unchanged_status_write_sends_nothing(
    kube_client: KubeClient, widgets: ResourceRef, widget: dict[str, Any]
) -> None:
    written = write_status(kube_client, widgets, widget, set_status(phase="Idle"), c.FIELD_MANAGER)
    again = write_status(kube_client, widgets, written, set_status(phase="Idle"), c.FIELD_MANAGER)
    assert again["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
    # Even a stale object is fine when nothing would change: no request, no conflict.
    write_status(kube_client, widgets, widget, lambda status: False, c.FIELD_MANAGER)


def test_status_fields_removed_by_mutate_are_removed(
    kube_client: KubeClient, widgets: ResourceRef, widget: dict[str, Any]
) -> None:
    written = write_status(
        kube_client, widgets, widget, set_status(phase="Idle", ids=["i-1"]), c.FIELD_MANAGER
    )

    def drop_ids(status: dict[str, Any]) -> bool:
        return status.pop("ids", None) is not None

    cleared = write_status(kube_client, widgets, written, drop_ids, c.FIELD_MANAGER)
    assert cleared["status"] == {"phase": "Idle"}


def test_finalizer_writes_are_preconditioned_too(
    kube_client: KubeClient, widgets: ResourceRef, widget: dict[str, Any]
) -> None:
    def add_finalizer(obj: dict[str, Any]) -> bool:
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if c.FINALIZER in finalizers:
            return False
        finalizers.append(c.FINALIZER)
        return True

    guarded = write_object(kube_client, widgets, widget, add_finalizer, c.FIELD_MANAGER)
    assert guarded["metadata"]["finalizers"] == [c.FINALIZER]

    def drop_finalizer(obj: dict[str, Any]) -> bool:
        obj["metadata"]["finalizers"] = []
        return True

    with pytest.raises(KubeConflict):
        write_object(kube_client, widgets, widget, drop_finalizer, c.FIELD_MANAGER)
    released = write_object(kube_client, widgets, guarded, drop_finalizer, c.FIELD_MANAGER)
    assert "finalizers" not in released["metadata"]


def test_cluster_scoped_status_is_written_through_the_subresource(
    kube_client: KubeClient, node: dict[str, Any]
) -> None:
    def ready(status: dict[str, Any]) -> bool:
        status["conditions"] = [{"type": "Ready", "status": "True", "reason": "Test"}]
        return True

    written = write_status(kube_client, NODES, node, ready, c.FIELD_MANAGER)
    assert written["status"]["conditions"][0]["status"] == "True"
    with pytest.raises(KubeConflict):
        write_status(kube_client, NODES, node, set_status(phase="Running"), c.FIELD_MANAGER)


def test_every_write_verb_refuses_a_stale_version(kube_client: KubeClient, namespace: str) -> None:
    created = kube_client.create(
        CONFIG_MAPS, {"metadata": {"name": "cm", "namespace": namespace}, "data": {"v": "1"}}
    )
    stale = created["metadata"]["resourceVersion"]
    current = kube_client.patch(
        CONFIG_MAPS, "cm", {"data": {"v": "2"}}, namespace=namespace, resource_version=stale
    )
    with pytest.raises(KubeConflict):
        kube_client.patch(
            CONFIG_MAPS, "cm", {"data": {"v": "3"}}, namespace=namespace, resource_version=stale
        )
    with pytest.raises(KubeConflict):
        kube_client.json_patch(
            CONFIG_MAPS,
            "cm",
            [{"op": "add", "path": "/data/v", "value": "3"}],
            namespace=namespace,
            resource_version=stale,
        )
    with pytest.raises(KubeConflict):
        kube_client.replace(CONFIG_MAPS, {**created, "data": {"v": "3"}})
    with pytest.raises(KubeConflict):
        kube_client.delete(CONFIG_MAPS, "cm", namespace=namespace, resource_version=stale)
    with pytest.raises(KubeAlreadyExists):
        kube_client.create(CONFIG_MAPS, {"metadata": {"name": "cm", "namespace": namespace}})

    patched = kube_client.json_patch(
        CONFIG_MAPS,
        "cm",
        [{"op": "add", "path": "/data/v", "value": "3"}],
        namespace=namespace,
        resource_version=current["metadata"]["resourceVersion"],
    )
    assert patched["data"] == {"v": "3"}
    kube_client.delete(
        CONFIG_MAPS,
        "cm",
        namespace=namespace,
        resource_version=patched["metadata"]["resourceVersion"],
    )
    with pytest.raises(KubeNotFound):
        kube_client.get(CONFIG_MAPS, "cm", namespace=namespace)


def test_server_side_apply_conflicts_unless_forced(kube_client: KubeClient, namespace: str) -> None:
    body = {"metadata": {"name": "applied", "namespace": namespace}, "data": {"owner": "them"}}
    kube_client.apply(CONFIG_MAPS, body, force=False, field_manager="someone-else")
    ours = {"metadata": {"name": "applied", "namespace": namespace}, "data": {"owner": "us"}}
    with pytest.raises(KubeConflict):
        kube_client.apply(CONFIG_MAPS, ours, force=False)
    taken = kube_client.apply(CONFIG_MAPS, ours, force=True)
    assert taken["data"] == {"owner": "us"}
    assert (c.FIELD_MANAGER, "") in managers(taken)


def test_events_are_recorded_and_aggregated(
    kube_client: KubeClient, widgets: ResourceRef, widget: dict[str, Any]
) -> None:
    recorder = EventRecorder(kube_client.with_timeout(5))
    for _ in range(3):
        recorder.warning(widget, "InsufficientCapacity", "no capacity in us-east-1a")
    recorder.normal(widget, "Acquired", "2 instances")
    namespace = widget["metadata"]["namespace"]
    events = kube_client.list(
        CORE_EVENTS,
        namespace=namespace,
        field_selector=f"involvedObject.uid={widget['metadata']['uid']}",
    ).items
    by_reason = {event["reason"]: event for event in events}
    assert set(by_reason) == {"InsufficientCapacity", "Acquired"}
    assert by_reason["InsufficientCapacity"]["count"] == 3
    assert by_reason["InsufficientCapacity"]["type"] == "Warning"
    assert by_reason["Acquired"]["involvedObject"]["kind"] == widgets.kind
