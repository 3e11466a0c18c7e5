"""Preconditioned writes against the real apiserver: a stale resourceVersion is refused
with KubeConflict, a fresh one goes through, unchanged writes send nothing. The typed
helpers of `kube.status` write a test-only custom resource (`Widget`) and Nodes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.meta import KubeObject, ObjectMeta
from provisioner.api.nodes import Node, NodeCondition, NodeStatus
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeAlreadyExists, KubeConflict, KubeNotFound
from provisioner.kube.events import EventRecorder, InvolvedObject
from provisioner.kube.resources import CONFIG_MAPS, CORE_EVENTS, NODES, ResourceRef
from provisioner.kube.status import create_object, read_object, update_object, update_status
from tests.support.widgets import Widget, WidgetSpec, WidgetStatus, new_widget


@pytest.fixture
def widget(kube_client: KubeClient, widgets: ResourceRef, namespace: str) -> Widget:
    return create_object(kube_client, widgets, new_widget("w1", namespace, size=3))


@pytest.fixture
def node(kube_client: KubeClient) -> Iterator[Node]:
    name = f"node-{uuid.uuid4().hex[:8]}"
    yield create_object(kube_client, NODES, Node(metadata=ObjectMeta(name=name)))
    kube_client.delete(NODES, name, resource_version=None)


def stored(kube_client: KubeClient, ref: ResourceRef, obj: KubeObject) -> dict[str, Any]:
    """The object's body as the apiserver holds it now, with what no model keeps."""
    return kube_client.get(ref, obj.metadata.name, namespace=obj.metadata.namespace)


def managers(obj: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m["manager"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]}


def test_a_stale_status_write_conflicts_and_a_fresh_one_succeeds(
    kube_client: KubeClient, widgets: ResourceRef, widget: Widget
) -> None:
    first = update_status(
        kube_client, widgets, widget, WidgetStatus(phase="Acquiring"), c.FIELD_MANAGER
    )
    assert first.fields_read()["status"] == {"phase": "Acquiring"}
    assert first.metadata.resource_version != widget.metadata.resource_version
    assert (c.FIELD_MANAGER, "status") in managers(stored(kube_client, widgets, first))

    with pytest.raises(KubeConflict):  # `widget` is what we read before our own write
        update_status(kube_client, widgets, widget, WidgetStatus(phase="Joining"), c.FIELD_MANAGER)

    fresh = read_object(kube_client, widgets, "w1", widget.metadata.namespace, Widget.from_dict)
    second = update_status(
        kube_client, widgets, fresh, WidgetStatus(phase="Joining"), c.FIELD_MANAGER
    )
    assert second.fields_read()["status"] == {"phase": "Joining"}
    assert second.spec == WidgetSpec(size=3)  # the status subresource never touches spec


def test_an_unchanged_status_write_sends_nothing(
    kube_client: KubeClient, widgets: ResourceRef, widget: Widget
) -> None:
    written = update_status(
        kube_client, widgets, widget, WidgetStatus(phase="Idle"), c.FIELD_MANAGER
    )
    again = update_status(
        kube_client, widgets, written, WidgetStatus(phase="Idle"), c.FIELD_MANAGER
    )
    assert again.metadata.resource_version == written.metadata.resource_version
    # Even a stale object is fine when nothing would change: no request, no conflict.
    update_status(kube_client, widgets, widget, widget.status, c.FIELD_MANAGER)


def test_status_fields_cleared_are_removed(
    kube_client: KubeClient, widgets: ResourceRef, widget: Widget
) -> None:
    written = update_status(
        kube_client, widgets, widget, WidgetStatus(phase="Idle", ids=("i-1",)), c.FIELD_MANAGER
    )
    without_ids = written.status.model_copy(update={"ids": None})
    cleared = update_status(kube_client, widgets, written, without_ids, c.FIELD_MANAGER)
    assert cleared.fields_read()["status"] == {"phase": "Idle"}


def test_finalizer_writes_are_preconditioned_too(
    kube_client: KubeClient, widgets: ResourceRef, widget: Widget
) -> None:
    guarded = update_object(
        kube_client, widgets, widget, widget.with_finalizers(c.FINALIZER), c.FIELD_MANAGER
    )
    assert guarded.metadata.finalizers == (c.FINALIZER,)

    with pytest.raises(KubeConflict):  # a pass on the stale read adds it again
        update_object(
            kube_client, widgets, widget, widget.with_finalizers(c.FINALIZER), c.FIELD_MANAGER
        )
    released = update_object(
        kube_client, widgets, guarded, guarded.with_finalizers(), c.FIELD_MANAGER
    )
    assert released.metadata.finalizers == ()
    assert "finalizers" not in stored(kube_client, widgets, released)["metadata"]


def test_cluster_scoped_status_is_written_through_the_subresource(
    kube_client: KubeClient, node: Node
) -> None:
    ready = NodeStatus(conditions=(NodeCondition(type="Ready", status="True"),))
    written = update_status(kube_client, NODES, node, ready, c.FIELD_MANAGER)
    assert written.status.conditions[0].status == "True"
    not_ready = NodeStatus(conditions=(NodeCondition(type="Ready", status="False"),))
    with pytest.raises(KubeConflict):
        update_status(kube_client, NODES, node, not_ready, c.FIELD_MANAGER)


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
    kube_client: KubeClient, widgets: ResourceRef, widget: Widget
) -> None:
    recorder = EventRecorder(kube_client.with_timeout(5))
    involved = InvolvedObject.of(widgets, widget.metadata)
    for _ in range(3):
        recorder.warning(involved, "InsufficientCapacity", "no capacity in us-east-1a")
    recorder.normal(involved, "Acquired", "2 instances")
    events = kube_client.list(
        CORE_EVENTS,
        namespace=widget.metadata.namespace,
        field_selector=f"involvedObject.uid={widget.metadata.uid}",
    ).items
    by_reason = {event["reason"]: event for event in events}
    assert set(by_reason) == {"InsufficientCapacity", "Acquired"}
    assert by_reason["InsufficientCapacity"]["count"] == 3
    assert by_reason["InsufficientCapacity"]["type"] == "Warning"
    assert by_reason["Acquired"]["involvedObject"]["kind"] == widgets.kind
