"""Informers against the real apiserver: ConfigMaps, a custom resource, Nodes by label,
recovery from an expired resourceVersion, and reconnection after an apiserver outage."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from provisioner.kube.client import KubeClient, ObjectList, ResourceListWatch
from provisioner.kube.errors import KubeGone
from provisioner.kube.informer import Informer, WatchSource
from provisioner.kube.resources import CONFIG_MAPS, NODES, ResourceRef
from tests.support.waiting import eventually

if TYPE_CHECKING:  # imported at runtime by pytest_plugins, which must come first
    from tests.integration.conftest_kube import FlakyClient


DEADLINE = 20.0
POLL = 0.05


class Seen:
    """Handler calls as (verb, name), safe to read from the test thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[tuple[str, str]] = []

    def attach(self, informer: Informer) -> None:
        informer.add_handlers(
            on_add=lambda obj: self._note("add", obj),
            on_update=lambda old, new: self._note("update", new),
            on_delete=lambda obj: self._note("delete", obj),
        )

    def _note(self, verb: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._calls.append((verb, obj["metadata"]["name"]))

    def calls(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._calls)

    def has(self, verb: str, name: str) -> bool:
        return (verb, name) in self.calls()


def start(informers: list[Informer], source: Any, name: str) -> tuple[Informer, Seen]:
    informer = Informer(source, name=name, backoff_initial=0.1, backoff_max=1.0)
    seen = Seen()
    seen.attach(informer)
    informer.start()
    informers.append(informer)
    assert informer.wait_for_sync(DEADLINE)
    return informer, seen


def configmap(namespace: str, name: str, value: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "data": {"v": value}}


def test_informer_follows_configmaps(
    kube_client: KubeClient, namespace: str, informers: list[Informer]
) -> None:
    kube_client.create(CONFIG_MAPS, configmap(namespace, "before"))
    source = kube_client.list_watch(CONFIG_MAPS, namespace=namespace)
    informer, seen = start(informers, source, "configmaps")
    assert seen.has("add", "before")

    created = kube_client.create(CONFIG_MAPS, configmap(namespace, "a"))
    eventually(lambda: seen.has("add", "a"), DEADLINE, "add of a", every=POLL)
    kube_client.patch(
        CONFIG_MAPS,
        "a",
        {"data": {"v": "2"}},
        namespace=namespace,
        resource_version=created["metadata"]["resourceVersion"],
    )
    eventually(lambda: seen.has("update", "a"), DEADLINE, "update of a", every=POLL)
    assert informer.get(namespace, "a")["data"] == {"v": "2"}  # type: ignore[index]
    kube_client.delete(CONFIG_MAPS, "a", namespace=namespace, resource_version=None)
    eventually(lambda: seen.has("delete", "a"), DEADLINE, "delete of a", every=POLL)
    assert informer.get(namespace, "a") is None
    assert [k.name for k in informer.list_keys()] == ["before"]


def test_informer_follows_a_custom_resource(
    kube_client: KubeClient, widgets: ResourceRef, namespace: str, informers: list[Informer]
) -> None:
    informer, seen = start(informers, kube_client.list_watch(widgets, namespace=namespace), "w")
    body = {"metadata": {"name": "w1", "namespace": namespace}, "spec": {"size": 1}}
    created = kube_client.create(widgets, body)
    eventually(lambda: seen.has("add", "w1"), DEADLINE, "add of w1", every=POLL)
    kube_client.patch_status(
        widgets,
        "w1",
        {"status": {"ready": True}},
        namespace=namespace,
        resource_version=created["metadata"]["resourceVersion"],
    )
    eventually(lambda: seen.has("update", "w1"), DEADLINE, "status update of w1", every=POLL)
    assert informer.get(namespace, "w1")["status"] == {"ready": True}  # type: ignore[index]
    kube_client.delete(widgets, "w1", namespace=namespace, resource_version=None)
    eventually(lambda: seen.has("delete", "w1"), DEADLINE, "delete of w1", every=POLL)


def test_a_node_informer_with_a_label_selector_sees_nodes_enter_and_leave_it(
    kube_client: KubeClient, informers: list[Informer]
) -> None:
    pool = f"pool-{uuid.uuid4().hex[:8]}"
    names = [f"node-{pool}-{i}" for i in range(2)]
    source = kube_client.list_watch(NODES, label_selector=f"atomic-gang.k8s.aws/pool={pool}")
    informer, seen = start(informers, source, "nodes")
    try:
        kube_client.create(
            NODES, {"metadata": {"name": names[0], "labels": {"atomic-gang.k8s.aws/pool": pool}}}
        )
        other = kube_client.create(NODES, {"metadata": {"name": names[1]}})
        eventually(lambda: seen.has("add", names[0]), DEADLINE, "the labelled node", every=POLL)
        labelled = kube_client.patch(
            NODES,
            names[1],
            {"metadata": {"labels": {"atomic-gang.k8s.aws/pool": pool}}},
            resource_version=other["metadata"]["resourceVersion"],
        )
        eventually(lambda: seen.has("add", names[1]), DEADLINE, "the relabelled node", every=POLL)
        kube_client.patch(
            NODES,
            names[1],
            {"metadata": {"labels": {"atomic-gang.k8s.aws/pool": None}}},
            resource_version=labelled["metadata"]["resourceVersion"],
        )
        eventually(
            lambda: seen.has("delete", names[1]),
            DEADLINE,
            "the node leaving the selector",
            every=POLL,
        )
        assert [k.name for k in informer.list_keys()] == [names[0]]
    finally:
        for name in names:
            kube_client.delete(NODES, name, resource_version=None)


class ExpiredOnce:
    """The real list/watch, except that the informer first gets an older snapshot and its
    first watch meets an expired resourceVersion (as an ERROR event or as `KubeGone`).

    The expiry is injected because this apiserver's watch cache keeps at least 75 s of
    events, so a compacted version cannot be reached from a test in reasonable time.
    """

    def __init__(self, real: ResourceListWatch, stale: ObjectList, raised: bool) -> None:
        self.real = real
        self.stale: ObjectList | None = stale
        self.raised = raised
        self.watches = 0

    def list(self) -> ObjectList:
        if self.stale is not None:
            stale, self.stale = self.stale, None
            return stale
        return self.real.list()

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchSource:
        self.watches += 1
        if self.watches == 1:
            return InjectedGone(self.raised)
        return self.real.watch(resource_version, timeout_seconds)


class InjectedGone:
    def __init__(self, raised: bool) -> None:
        self.raised = raised

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.raised:
            raise KubeGone("too old resource version", status=410, reason="Expired")
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        yield {"type": "ERROR", "object": status}

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("raised", [False, True], ids=["error-event", "raised-gone"])
def test_a_410_relist_converges_the_cache(
    kube_client: KubeClient, namespace: str, informers: list[Informer], raised: bool
) -> None:
    for name in ("keep", "change", "remove"):
        kube_client.create(CONFIG_MAPS, configmap(namespace, name))
    real = kube_client.list_watch(CONFIG_MAPS, namespace=namespace)
    stale = real.list()
    # What the informer misses while its watch is away.
    current = kube_client.get(CONFIG_MAPS, "change", namespace=namespace)
    kube_client.patch(
        CONFIG_MAPS,
        "change",
        {"data": {"v": "2"}},
        namespace=namespace,
        resource_version=current["metadata"]["resourceVersion"],
    )
    kube_client.delete(CONFIG_MAPS, "remove", namespace=namespace, resource_version=None)
    kube_client.create(CONFIG_MAPS, configmap(namespace, "new"))

    informer, seen = start(informers, ExpiredOnce(real, stale, raised), "expired")
    eventually(lambda: informer.relists >= 2, DEADLINE, "the re-list after 410", every=POLL)
    assert seen.has("update", "change") and seen.has("delete", "remove") and seen.has("add", "new")
    assert not seen.has("update", "keep")
    truth = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in real.list().items}
    cached = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in informer.list()}
    assert cached == truth
    # And it follows the real watch after the recovery.
    kube_client.create(CONFIG_MAPS, configmap(namespace, "after"))
    eventually(lambda: seen.has("add", "after"), DEADLINE, "an add after the recovery", every=POLL)


def test_an_informer_reconnects_after_an_apiserver_outage(
    kube_client: KubeClient,
    flaky_kube_client: FlakyClient,
    namespace: str,
    informers: list[Informer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky = flaky_kube_client
    source = flaky.client.list_watch(CONFIG_MAPS, namespace=namespace)
    informer, seen = start(informers, source, "outage")
    kube_client.create(CONFIG_MAPS, configmap(namespace, "before-outage"))
    eventually(
        lambda: seen.has("add", "before-outage"), DEADLINE, "the add before the outage", every=POLL
    )

    flaky.proxy.outage()
    # Written while the informer cannot reach the apiserver.
    kube_client.create(CONFIG_MAPS, configmap(namespace, "during-outage"))
    kube_client.delete(CONFIG_MAPS, "before-outage", namespace=namespace, resource_version=None)
    eventually(
        lambda: "retrying" in caplog.text, DEADLINE, "the informer noticing the outage", every=POLL
    )
    assert not seen.has("add", "during-outage")
    flaky.proxy.restore()

    eventually(
        lambda: seen.has("add", "during-outage"),
        DEADLINE,
        "the add made during the outage",
        every=POLL,
    )
    eventually(
        lambda: seen.has("delete", "before-outage"),
        DEADLINE,
        "the delete made during the outage",
        every=POLL,
    )
    assert informer.relists == 1  # resumed from its resourceVersion, no re-list needed
