"""EC2 did it, the answer was lost: the product's own code, not the emulator, keeps N-or-0.

Each test arms a fault with `after=True` (the emulator runs the call, then answers 500), so
the side effect exists while the product sees a failure; the product must neither launch a
second set nor report a release that did not happen. Faults scoped to another client are
left for that client, and every consumed switch names the client that took it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from provisioner.cloud.errors import CloudError, ErrorKind
from tests.unit.test_cloud_fleet import fleet_spec
from tests.unit.test_cloud_helpers import World, _session, emulated_aws

pytestmark = pytest.mark.unit

TEST_KEY = "testing"  # the access key id every client of these tests signs with


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def test_a_lost_runinstances_answer_is_retried_into_the_same_set(world: World) -> None:
    world.emu.inject_fault("RunInstances", "InternalError", after=True)
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec())
    assert caught.value.kind is ErrorKind.RETRYABLE
    launched = {i["InstanceId"] for i in world.live_instances()}
    assert len(launched) == 4, "the emulator ran the call before losing the answer"

    again = world.engine.acquire(world.spec())

    assert set(again.instance_ids) == launched
    assert len(world.live_instances()) == 4
    assert [e["by"] for e in world.emu.consumed()] == [TEST_KEY]


def test_a_lost_create_fleet_answer_is_retried_into_the_same_set(world: World) -> None:
    spec = fleet_spec(world)
    world.emu.inject_fault("CreateFleet", "InternalError", after=True)
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec)
    assert caught.value.kind is ErrorKind.RETRYABLE
    launched = {i["InstanceId"] for i in world.live_instances()}
    assert len(launched) == 4

    again = world.engine.acquire(spec)

    assert set(again.instance_ids) == launched
    assert len(world.live_instances()) == 4


def test_a_lost_terminate_answer_is_not_reported_as_a_release(world: World) -> None:
    ids = world.engine.acquire(world.spec()).instance_ids
    world.emu.inject_fault("TerminateInstances", "InternalError", after=True)

    with pytest.raises(CloudError):
        world.engine.release(ids, eni_wait_seconds=0)
    report = world.engine.release(ids, eni_wait_seconds=0)

    assert set(report.terminated) >= set(ids) or world.live_instances() == []
    assert world.live_instances() == []


def test_a_fault_scoped_to_another_client_is_left_for_it(world: World) -> None:
    world.emu.inject_fault("RunInstances", "InsufficientInstanceCapacity", client="AKIDNODESIM")

    result = world.engine.acquire(world.spec())

    assert len(result.instance_ids) == 4
    assert world.emu.consumed() == []
    assert world.emu.snapshot()["faults"][0]["client"] == "AKIDNODESIM"


def test_a_delay_is_consumed_by_the_call_it_holds(world: World) -> None:
    world.emu.delay_calls("RunInstances", 0.05, after=True, client=TEST_KEY)

    world.engine.acquire(world.spec())

    (entry,) = world.emu.consumed()
    assert (entry["switch"], entry["action"], entry["after"], entry["by"]) == (
        "delay",
        "RunInstances",
        True,
        TEST_KEY,
    )


def test_s3_object_calls_take_the_same_switches(world: World) -> None:
    s3 = _session().client("s3", config=Config(retries={"max_attempts": 1, "mode": "standard"}))
    s3.create_bucket(Bucket="state")
    # botocore's S3 client retries a 500 once more whatever its retry setting: arm enough.
    world.emu.inject_fault("PutObject", "InternalError", count=4)

    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket="state", Key="a", Body=b"1")
    assert refused.value.response["Error"]["Code"] == "InternalError"
    assert "Contents" not in s3.list_objects_v2(Bucket="state")

    world.emu.clear_faults()
    world.emu.inject_fault("PutObject", "InternalError", count=4, after=True)
    with pytest.raises(ClientError):
        s3.put_object(Bucket="state", Key="b", Body=b"2")
    world.emu.clear_faults()
    # Stored, and the answer lost.
    assert s3.get_object(Bucket="state", Key="b")["Body"].read() == b"2"
    assert {c["action"] for c in world.emu.consumed()} == {"PutObject"}
