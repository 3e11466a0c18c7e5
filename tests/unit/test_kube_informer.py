"""The informer against a scripted list/watch: cache, handlers, bookmarks, 410 recovery.

The informer runs on its thread; the script tells the test when it has been consumed (the
informer then sits in a watch that ends only on `stop`), so nothing waits on time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.controllers.workload.claim_index import claim_index, claimant
from provisioner.kube.client import ObjectList
from provisioner.kube.errors import KubeGone, KubeUnavailable
from provisioner.kube.informer import Informer, label_index
from provisioner.kube.resources import ObjectKey

WAIT = 10.0


def cm(name: str, rv: str, data: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "data": {"v": data},
    }


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(rv: str) -> dict[str, Any]:
    return event("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": rv}})


class Script:
    """One watch request's outcome: events, then an optional exception."""

    def __init__(self, *events: dict[str, Any], raises: Exception | None = None) -> None:
        self.events = list(events)
        self.raises = raises
        self._stopped = threading.Event()
        self.idle = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.events
        if self.raises is not None:
            raise self.raises
        if self.idle:
            self._stopped.wait(WAIT)

    def stop(self) -> None:
        self._stopped.set()


class FakeListWatch:
    """Lists and watches play a script; when it runs out, the watch idles until stopped."""

    def __init__(self, lists: list[ObjectList], watches: list[Script]) -> None:
        self.lists = lists
        self.watches = watches
        self.list_calls = 0
        self.watched_from: list[str] = []
        self.idle = threading.Event()

    def reset(self) -> None:
        self.list_calls = 0
        self.watched_from.clear()
        self.idle.clear()

    def list(self) -> ObjectList:
        self.list_calls += 1
        return self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]

    def watch(self, resource_version: str, timeout_seconds: int) -> Script:
        self.watched_from.append(resource_version)
        if self.watches:
            return self.watches.pop(0)
        script = Script()
        script.idle = True
        self.idle.set()
        return script


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def add(self, obj: dict[str, Any]) -> None:
        self.seen.append(("add", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.seen.append(("update", new["metadata"]["name"], new["metadata"]["resourceVersion"]))

    def delete(self, obj: dict[str, Any]) -> None:
        self.seen.append(("delete", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))


def run(source: FakeListWatch, **options: Any) -> tuple[Informer, Recorder]:
    informer = Informer(source, name="test", backoff_initial=0.001, **options)
    recorder = Recorder()
    informer.add_handlers(recorder.add, recorder.update, recorder.delete)
    informer.start()
    assert source.idle.wait(WAIT), "the informer never consumed its script"
    return informer, recorder


def test_list_then_watch_keeps_the_cache_and_calls_handlers(informers: list[Informer]) -> None:
    source = FakeListWatch(
        [ObjectList([cm("a", "10"), cm("b", "11")], "12")],
        [
            Script(
                event("ADDED", cm("c", "13")),
                event("MODIFIED", cm("a", "14", "x")),
                event("DELETED", cm("b", "15")),
                bookmark("20"),
            )
        ],
    )
    informer, recorder = run(source)
    informers.append(informer)
    assert informer.has_synced()
    assert recorder.seen == [
        ("add", "a", "10"),
        ("add", "b", "11"),
        ("add", "c", "13"),
        ("update", "a", "14"),
        ("delete", "b", "15"),
    ]
    assert sorted(informer.list_keys()) == [ObjectKey("ns", "a"), ObjectKey("ns", "c")]
    assert informer.get("ns", "a")["data"] == {"v": "x"}  # type: ignore[index]
    assert source.watched_from == ["12", "20"]  # resumed from the bookmark
    assert informer.resource_version == "20"


@pytest.mark.parametrize(
    "expiry",
    [
        Script(event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})),
        Script(raises=KubeGone("too old resource version", status=410, reason="Expired")),
    ],
    ids=["error-event", "exception"],
)
def test_a_410_relists_and_synthesises_what_the_watch_missed(
    expiry: Script, informers: list[Informer]
) -> None:
    source = FakeListWatch(
        [
            ObjectList([cm("a", "10"), cm("b", "11"), cm("c", "12")], "12"),
            # While the watch was away: a changed, b was deleted, d appeared, c untouched.
            ObjectList([cm("a", "30"), cm("c", "12"), cm("d", "31")], "40"),
        ],
        [expiry],
    )
    informer, recorder = run(source)
    informers.append(informer)
    assert source.list_calls == 2
    assert recorder.seen[3:] == [("update", "a", "30"), ("add", "d", "31"), ("delete", "b", "11")]
    assert sorted(k.name for k in informer.list_keys()) == ["a", "c", "d"]
    assert source.watched_from == ["12", "40"]
    assert informer.relists == 2


def test_other_watch_failures_rewatch_from_the_same_version(informers: list[Informer]) -> None:
    source = FakeListWatch(
        [ObjectList([cm("a", "10")], "10")],
        [
            Script(event("MODIFIED", cm("a", "11")), raises=KubeUnavailable("connection refused")),
            Script(raises=KubeUnavailable("connection refused")),
        ],
    )
    informer, _ = run(source)
    informers.append(informer)
    assert source.list_calls == 1
    assert source.watched_from == ["10", "11", "11"]


def test_an_error_event_other_than_410_backs_off_without_relisting(
    informers: list[Informer],
) -> None:
    source = FakeListWatch(
        [ObjectList([], "5")],
        [Script(event("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError"}))],
    )
    informer, _ = run(source)
    informers.append(informer)
    assert source.list_calls == 1
    assert source.watched_from == ["5", "5"]


def test_a_late_handler_gets_the_cache_as_adds(informers: list[Informer]) -> None:
    source = FakeListWatch([ObjectList([cm("a", "1"), cm("b", "2")], "2")], [])
    informer, _ = run(source)
    informers.append(informer)
    late = Recorder()
    informer.add_handlers(on_add=late.add)
    assert sorted(late.seen) == [("add", "a", "1"), ("add", "b", "2")]


def test_resync_delivers_every_object_as_an_update(informers: list[Informer]) -> None:
    source = FakeListWatch([ObjectList([cm("a", "1")], "1")], [])
    informer, recorder = run(source)
    informers.append(informer)
    informer.resync()
    assert recorder.seen[-1] == ("update", "a", "1")


def test_a_failing_handler_does_not_stop_the_informer(informers: list[Informer]) -> None:
    def broken(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    source = FakeListWatch(
        [ObjectList([cm("a", "1")], "1")], [Script(event("ADDED", cm("b", "2")))]
    )
    informer = Informer(source, name="test", backoff_initial=0.001)
    informer.add_handlers(on_add=broken)
    informer.start()
    informers.append(informer)
    assert source.idle.wait(WAIT)
    assert sorted(k.name for k in informer.list_keys()) == ["a", "b"]


def test_stop_ends_the_thread_promptly() -> None:
    source = FakeListWatch([ObjectList([], "1")], [])
    informer, _ = run(source)
    informer.stop(timeout=WAIT)
    assert not any(thread.is_alive() for thread in informer._threads)


def labelled(name: str, rv: str, pool: str | None) -> dict[str, Any]:
    obj = cm(name, rv)
    if pool is not None:
        obj["metadata"]["labels"] = {"pool": pool}
    return obj


def names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def test_the_label_index_follows_adds_relabels_deletes_and_relists(
    informers: list[Informer],
) -> None:
    source = FakeListWatch(
        [
            ObjectList([labelled("a", "1", "p"), labelled("b", "2", "q")], "3"),
            ObjectList([labelled("a", "30", "q"), labelled("d", "31", "p")], "32"),
        ],
        [
            Script(
                event("ADDED", labelled("c", "4", "p")),
                event("MODIFIED", labelled("b", "5", "p")),  # moved from q to p
                event("MODIFIED", labelled("a", "6", None)),  # lost its label
                event("DELETED", labelled("c", "7", "p")),
            ),
            Script(raises=KubeGone("too old resource version", status=410, reason="Expired")),
        ],
    )
    informer, recorder = run(source, index=label_index("pool"))
    informers.append(informer)
    assert informer.relists == 2, "the 410 made it list again"
    assert ("update", "b", "5") in recorder.seen, "the watch's events were applied first"
    # After the relist the index holds what the second listing says, nothing of the first.
    assert names(informer.list_indexed("p")) == ["d"]
    assert names(informer.list_indexed("q")) == ["a"]


def test_the_label_index_follows_a_watch(informers: list[Informer]) -> None:
    source = FakeListWatch(
        [ObjectList([labelled("a", "1", "p"), labelled("b", "2", "q")], "3")],
        [
            Script(
                event("ADDED", labelled("c", "4", "p")),
                event("MODIFIED", labelled("b", "5", "p")),  # moved from q to p
                event("MODIFIED", labelled("a", "6", None)),  # lost its label
                event("DELETED", labelled("c", "7", "p")),
            )
        ],
    )
    informer, _ = run(source, index=label_index("pool"))
    informers.append(informer)
    assert names(informer.list_indexed("p")) == ["b"]
    assert informer.list_indexed("q") == []


def claimed(name: str, rv: str, workload: str | None) -> dict[str, Any]:
    """A GangNodePool held by the Workload ml/`workload` (None: by nobody)."""
    spec = {"claim": {"namespace": "ml", "name": workload, "uid": f"{workload}-uid"}}
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": spec if workload else {}}


def test_the_claimant_index_follows_claims_released_and_taken(informers: list[Informer]) -> None:
    """The pools one Workload claims, as the Workload reconciler reads them to give up the
    claims of a Workload gone or no longer ours: a release leaves the entry, a new
    claimant's claim moves the pool to its own."""
    source = FakeListWatch(
        [ObjectList([claimed("p1", "1", "a"), claimed("p2", "2", None)], "3")],
        [
            Script(
                event("MODIFIED", claimed("p1", "4", None)),  # a released
                event("MODIFIED", claimed("p2", "5", "a")),  # a claims another pool
                event("MODIFIED", claimed("p1", "6", "b")),  # b takes the first
            )
        ],
    )
    informer, _ = run(source, index=claim_index)
    informers.append(informer)
    assert names(informer.list_indexed(claimant("ml", "a"))) == ["p2"]
    assert names(informer.list_indexed(claimant("ml", "b"))) == ["p1"]
    assert informer.list_indexed(claimant("other", "a")) == []


def test_an_informer_without_an_index_says_so() -> None:
    informer = Informer(FakeListWatch([ObjectList([], "1")], []), name="plain")
    with pytest.raises(RuntimeError, match="keeps no index"):
        informer.list_indexed("p")


def test_the_cache_keeps_no_managed_fields(informers: list[Informer]) -> None:
    """Listed or watched, an object is cached without `metadata.managedFields` (no reader
    uses it; it is often most of an object's size) and with the rest of its metadata."""

    def managed(obj: dict[str, Any]) -> dict[str, Any]:
        entries = [{"manager": "kueue", "operation": "Apply", "fieldsV1": {"f:status": {}}}]
        obj["metadata"] |= {"managedFields": entries, "labels": {"app": "x"}}
        return obj

    source = FakeListWatch(
        [ObjectList([managed(cm("a", "10"))], "12")],
        [Script(event("ADDED", managed(cm("b", "13"))))],
    )
    informer, _ = run(source)
    informers.append(informer)
    for name in ("a", "b"):
        metadata = informer.get("ns", name)["metadata"]  # type: ignore[index]
        assert "managedFields" not in metadata and metadata["labels"] == {"app": "x"}
