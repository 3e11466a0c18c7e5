"""The event recorder: Event bodies, aggregation within the window, and never raising."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from provisioner.api.clock import FakeClock
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.workload import Workload
from provisioner.kube.errors import KubeNotFound, KubeUnavailable
from provisioner.kube.events import EventRecorder, InvolvedObject
from provisioner.kube.resources import CORE_EVENTS, GANG_NODE_POOLS, WORKLOADS, ResourceRef
from tests.unit.test_workload_decision import pool, workload

POOL = InvolvedObject(
    "atomic-gang.k8s.aws/v1alpha1", "GangNodePool", "p1", uid="u-1", resource_version="7"
)
JOB_WORKLOAD = InvolvedObject(
    "kueue.x-k8s.io/v1beta2", "Workload", "w", namespace="team", uid="u-2"
)


class FakeEvents:
    """An in-memory Events endpoint with resourceVersions and a next-error switch."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.next_error: Exception | None = None

    def _fail(self) -> None:
        err, self.next_error = self.next_error, None
        if err is not None:
            raise err

    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> dict[str, Any]:
        assert ref == CORE_EVENTS
        self._fail()
        self.version += 1
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        self.events[body["metadata"]["name"]] = stored
        return stored

    def patch(
        self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any
    ) -> dict[str, Any]:
        self._fail()
        current = self.events[name]
        assert kw["resource_version"] == current["metadata"]["resourceVersion"]
        self.version += 1
        current.update(patch)
        current["metadata"]["resourceVersion"] = str(self.version)
        return current


@pytest.fixture
def sink() -> FakeEvents:
    return FakeEvents()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorder(sink: FakeEvents, clock: FakeClock) -> EventRecorder:
    return EventRecorder(sink, instance="replica-1", clock=clock, window=60)


def only(sink: FakeEvents) -> dict[str, Any]:
    assert len(sink.events) == 1
    return next(iter(sink.events.values()))


def test_an_event_names_the_object_and_lands_in_default_for_cluster_scope(
    sink: FakeEvents, recorder: EventRecorder
) -> None:
    recorder.warning(POOL, "InsufficientCapacity", "no p4d.24xlarge in us-east-1a")
    event = only(sink)
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith("p1.")
    assert event["involvedObject"] == {
        "apiVersion": "atomic-gang.k8s.aws/v1alpha1",
        "kind": "GangNodePool",
        "name": "p1",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert (event["type"], event["reason"], event["count"]) == (
        "Warning",
        "InsufficientCapacity",
        1,
    )
    assert event["source"] == {"component": "atomic-gang-provisioner", "host": "replica-1"}


def test_a_typed_object_is_named_as_its_body_would_be(
    sink: FakeEvents, recorder: EventRecorder
) -> None:
    """`InvolvedObject.of` a model's metadata names what the body it was read from names."""
    read_pool: GangNodePool = pool().model_copy(
        update={"metadata": pool().metadata.model_copy(update={"resource_version": "7"})}
    )
    read_workload: Workload = workload()
    named = []
    for ref, model in ((GANG_NODE_POOLS, read_pool), (WORKLOADS, read_workload)):
        recorder.normal(InvolvedObject.of(ref, model.metadata), "Seen", ref.kind)
        meta = model.to_dict()["metadata"]
        identity = ("name", "namespace", "uid", "resourceVersion")
        named.append(
            {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                **{key: meta[key] for key in identity if key in meta},
            }
        )
    involved = [e["involvedObject"] for e in sink.events.values()]
    assert involved == named
    assert involved[0] == {
        "apiVersion": GANG_NODE_POOLS.api_version,
        "kind": "GangNodePool",
        "name": "pool-a",
        "uid": "pool-uid",
        "resourceVersion": "7",
    }
    assert involved[1]["namespace"] == "ml"


def test_namespaced_objects_get_events_in_their_namespace(
    sink: FakeEvents, recorder: EventRecorder
) -> None:
    recorder.normal(JOB_WORKLOAD, "Claimed", "pool p1 claimed")
    assert only(sink)["metadata"]["namespace"] == "team"


def test_repeats_within_the_window_increment_the_count(
    sink: FakeEvents, recorder: EventRecorder, clock: FakeClock
) -> None:
    for _ in range(3):
        recorder.warning(POOL, "InsufficientCapacity", "short")
        clock.advance(30)
    event = only(sink)
    assert event["count"] == 3
    assert event["lastTimestamp"] > event["firstTimestamp"]


def test_a_different_message_or_an_expired_window_makes_a_new_event(
    sink: FakeEvents, recorder: EventRecorder, clock: FakeClock
) -> None:
    recorder.warning(POOL, "InsufficientCapacity", "short in a")
    recorder.warning(POOL, "InsufficientCapacity", "short in b")
    assert len(sink.events) == 2
    clock.advance(61)
    recorder.warning(POOL, "InsufficientCapacity", "short in a")
    assert len(sink.events) == 3


def test_an_event_deleted_meanwhile_is_created_anew(
    sink: FakeEvents, recorder: EventRecorder
) -> None:
    recorder.normal(POOL, "Acquired", "4 instances")
    sink.next_error = KubeNotFound("gone", status=404)
    recorder.normal(POOL, "Acquired", "4 instances")
    assert len(sink.events) == 2


def test_failures_are_logged_never_raised(
    sink: FakeEvents, recorder: EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    sink.next_error = KubeUnavailable("apiserver unreachable")
    recorder.warning(POOL, "Released", "done")
    nameless = InvolvedObject(POOL.api_version, POOL.kind, "")
    recorder.warning(nameless, "Released", "no name")  # malformed object
    assert sink.events == {}
    assert caplog.text.count("not recorded") == 2


def test_long_messages_are_truncated(sink: FakeEvents, recorder: EventRecorder) -> None:
    recorder.normal(POOL, "Long", "x" * 5000)
    assert len(only(sink)["message"]) == 1024


class SlowEvents(FakeEvents):
    """An Events endpoint whose writes wait until the test lets them through."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> dict[str, Any]:
        assert self.gate.wait(10), "the test never opened the gate"
        return super().create(ref, body)


def test_a_background_recorder_returns_before_the_write_and_close_writes_the_rest() -> None:
    api = SlowEvents()
    recorder = EventRecorder(api, clock=FakeClock(), background=True)
    recorder.normal(POOL, "Launched", "one")
    recorder.warning(JOB_WORKLOAD, "Waiting", "two")
    # Both calls returned while the API server had not answered the first write.
    assert api.events == {}
    api.gate.set()
    recorder.close()
    assert sorted(e["message"] for e in api.events.values()) == ["one", "two"]


def test_a_full_background_queue_drops_the_event_instead_of_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = SlowEvents()
    recorder = EventRecorder(api, clock=FakeClock(), background=True, max_pending=1)
    for n in range(4):  # the writer holds one, the queue one; the rest are dropped
        recorder.normal(POOL, "Launched", f"event {n}")
    api.gate.set()
    recorder.close()
    assert 1 <= len(api.events) <= 2
    assert "dropped" in caplog.text
