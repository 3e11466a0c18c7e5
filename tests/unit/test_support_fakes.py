"""The shared fakes of `tests/support` answer as what they stand in for, and `reset()` puts
each back as it was built: a test that trusts a fake trusts these rows."""

from __future__ import annotations

import pytest

from provisioner.api import constants as c
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.events import InvolvedObject
from provisioner.kube.resources import CORE_EVENTS, GANG_NODE_POOLS, JOBS, WORKLOADS
from tests.support.clocks import RecordingClock, SecondsClock
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_kube import FakeKube
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore, LaggingCache
from tests.support.instance_views import managed_instance
from tests.support.jobs import job
from tests.support.nodes import node
from tests.support.pools import claim, pool, pool_spec
from tests.support.workloads import workload

pytestmark = pytest.mark.unit


def test_the_pool_builders_make_a_body_the_models_accept() -> None:
    body = pool(spec=pool_spec(count=2, keep_warm_ttl="15m", claim=claim()), status={})
    parsed = GangNodePool.from_dict(body)
    assert parsed.spec.count == 2 and parsed.spec.claim is not None
    assert body["spec"]["keepWarmTTL"] == "15m" and "capacityReservationId" not in body["spec"]


def test_the_engine_lists_by_cluster_pool_and_state_and_resets_its_fleet() -> None:
    engine = FakeEngine([managed_instance("i-1", cluster="demo", pool="a")])
    engine.fleet["i-2"] = managed_instance("i-2", cluster="other", pool="a")
    engine.release(["i-1"])
    assert engine.find_managed("demo", "a") == [], "shutting down is not live"
    engine.failing["describe"] = CloudError(ErrorKind.RETRYABLE, None, "Throttled", "slow")
    with pytest.raises(CloudError):
        engine.describe(["i-1"])
    engine.reset()
    assert [v.instance_id for v in engine.find_managed("demo", "a")] == ["i-1"]
    assert engine.released == [] and engine.calls == ["a"]


def test_the_stacks_prepare_destroy_and_reset() -> None:
    stacks = FakeStacks(["a"])
    stacks.destroy("a")
    assert not stacks.is_prepared("a") and stacks.outputs("a") is None
    stacks.reset()
    assert stacks.is_prepared("a") and stacks.destroyed == [] and stacks.asked == 1


def test_the_reader_matches_kind_namespace_and_selectors() -> None:
    ours = job(namespace="ml", labels={"team": "a"})
    kube = FakeKube(ours, workload(namespace="ml"), pool("p"))
    event = {"kind": "Event", "metadata": {"name": "e"}, "involvedObject": {"name": "p"}}
    kube.objects.append(event)
    assert kube.get(JOBS, "train", namespace="ml") is ours
    with pytest.raises(KubeNotFound):
        kube.get(JOBS, "train", namespace="other")
    assert kube.get(GANG_NODE_POOLS, "p")["kind"] == c.GNP_KIND
    assert kube.list(WORKLOADS, namespace="other").items == []
    assert kube.list(JOBS, label_selector="team=b").items == []
    assert kube.list(CORE_EVENTS, field_selector="involvedObject.name=p").items == [event]
    kube.reset()
    assert kube.list(CORE_EVENTS).items == []


def test_informers_copy_their_answers_and_the_lagging_one_lags() -> None:
    nodes = FakeInformer(node("i-1", pool="a"), node("i-2", pool="b"))
    assert [n["metadata"]["name"] for n in nodes.list_indexed("a")] == ["node-i-1"]
    store = FakePoolStore(pool(resource_version="1", status={"phase": "Idle"}))
    got = store.get("", "pool-a")
    assert got is not None
    got["status"]["phase"] = "edited"
    assert store.obj["status"]["phase"] == "Idle", "an answer is a copy"
    cache = LaggingCache(lambda: store.obj)
    cache.freeze()
    store.patch_status(GANG_NODE_POOLS, "pool-a", {"status": {"phase": "Acquiring"}})
    assert cache.list()[0]["status"]["phase"] == "Idle"
    cache.catch_up()
    assert cache.get("", "pool-a")["status"]["phase"] == "Acquiring"  # type: ignore[index]
    store.reset()
    assert store.obj["metadata"]["resourceVersion"] == "1"


def test_events_and_clocks_record_and_reset() -> None:
    events = RecordedEvents()
    events.warning(InvolvedObject(c.API_VERSION, c.GNP_KIND, "pool-a"), "Short", "m")
    assert events.reasons == ["Short"]
    events.reset()
    clock = RecordingClock()
    clock.sleep(5)
    assert clock.sleeps == [5] and clock.monotonic() == 1005
    with pytest.raises(AssertionError, match="never"):
        RecordingClock(never_sleeps="this never sleeps").sleep(1)
    seconds = SecondsClock(10)
    seconds.now += 5
    assert seconds() == 15
    seconds.reset()
    assert seconds() == 10 and events.events == []
