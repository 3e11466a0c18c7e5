"""The runtime end to end: an informer feeds a Controller whose reconcile writes status
from the (possibly stale) typed cache through `update_status`; conflicts requeue and
converge."""

from __future__ import annotations

import threading

from provisioner.api.constants import FIELD_MANAGER
from provisioner.kube.cache import TypedCache
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeConflict
from provisioner.kube.informer import Informer
from provisioner.kube.resources import ObjectKey, ResourceRef
from provisioner.kube.status import create_object, update_status
from provisioner.kube.workqueue import Controller, Result, WorkQueue
from tests.support.waiting import eventually
from tests.support.widgets import Widget, new_widget

DEADLINE = 30.0


def test_a_controller_converges_status_despite_conflicts(
    kube_client: KubeClient, widgets: ResourceRef, namespace: str
) -> None:
    informer = Informer(kube_client.list_watch(widgets, namespace=namespace), name="widgets")
    cache = TypedCache(informer, Widget.from_dict)
    lock = threading.Lock()
    in_flight: set[ObjectKey] = set()
    overlaps: list[ObjectKey] = []

    def reconcile(key: ObjectKey) -> Result | None:
        with lock:
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
        try:
            widget = cache.get(key.namespace, key.name)
            if widget is None:
                return None
            observed = widget.status.model_copy(update={"observed_size": widget.spec.size})
            # A stale cache read surfaces here as KubeConflict; the Controller requeues.
            update_status(kube_client, widgets, widget, observed, FIELD_MANAGER)
            return Result()
        finally:
            with lock:
                in_flight.discard(key)

    controller = Controller(
        "widgets", reconcile, max_concurrent=3, queue=WorkQueue(base_delay=0.01, max_delay=1.0)
    )
    controller.watch(informer)
    informer.start()
    assert informer.wait_for_sync(DEADLINE)
    controller.start()
    try:
        names = [f"w{i}" for i in range(6)]
        for name in names:
            create_object(kube_client, widgets, new_widget(name, namespace, size=1))

        # Keep changing spec while the controller writes status: its cached reads go stale.
        # This writer is preconditioned too, so a status write between its read and its
        # patch conflicts it as well: it reads again, as any client must.
        def set_size(name: str, size: int) -> None:
            for _ in range(20):
                current = kube_client.get(widgets, name, namespace=namespace)
                try:
                    kube_client.patch(
                        widgets,
                        name,
                        {"spec": {"size": size}},
                        namespace=namespace,
                        resource_version=current["metadata"]["resourceVersion"],
                    )
                    return
                except KubeConflict:
                    continue
            raise AssertionError(f"{name}: 20 conflicts in a row setting size {size}")

        for size in range(2, 6):
            for name in names:
                set_size(name, size)

        def converged() -> bool:
            items = kube_client.list(widgets, namespace=namespace).items
            return len(items) == len(names) and all(
                (item.get("status") or {}).get("observedSize") == 5 for item in items
            )

        eventually(
            converged, DEADLINE, "every widget's status to reflect its final spec", every=0.05
        )
    finally:
        controller.stop(drain=False, timeout=10)
        informer.stop()
    assert overlaps == []
