"""The emulator enforces EC2's documented throttling ("Request throttling for the Amazon EC2
API"): a request bucket per API, the RunInstances resource bucket, `RequestLimitExceeded`
when either is empty, a count of refused calls, and a control to size or turn them off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devenv.emulator.model import EmulatorInputError
from devenv.emulator.throttling import BucketSizes, instances_of, throttling_from_body
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def _run(world: World, count: int = 1) -> Any:
    return world.ec2.run_instances(
        ImageId=world.ami_id(),
        InstanceType="m5.large",
        MinCount=count,
        MaxCount=count,
        SubnetId=next(iter(world.subnets.values())),
    )


def _refused(world: World, count: int = 1) -> str:
    with pytest.raises(ClientError) as caught:
        _run(world, count)
    return str(caught.value.response["Error"]["Code"])


def test_the_documented_defaults_are_on() -> None:
    with emulated_aws() as world:
        report = world.emu.throttling_report()
    assert report["enabled"] and report["total"] == 0
    assert report["mutating"] == {"size": 50, "refill": 5}
    assert report["non_mutating"] == {"size": 100, "refill": 20}
    assert report["resources"]["RunInstances"] == {"size": 1000, "refill": 2}


def test_an_empty_request_bucket_refuses_the_call_until_it_refills(world: World) -> None:
    world.emu.set_throttling(mutating=BucketSizes(2, 1))
    _run(world)
    _run(world)
    assert _refused(world) == "RequestLimitExceeded"
    # Other APIs have buckets of their own.
    world.ec2.describe_instances()
    world.clock.sleep(1.0)
    _run(world)
    report = world.emu.throttling_report()
    assert report["throttled"] == {"RunInstances": 1} and report["total"] == 1


def test_the_resource_bucket_counts_instances_and_a_refused_launch_gives_them_back(
    world: World,
) -> None:
    world.emu.set_throttling(resources={"RunInstances": BucketSizes(10, 2)})
    _run(world, 8)
    assert _refused(world, 4) == "RequestLimitExceeded"  # 2 left
    world.clock.sleep(1.0)
    _run(world, 4)  # 2 + 2 refilled in a second: 0 left
    # A launch EC2 refuses for capacity launches nothing: its tokens come back.
    for zone in world.subnets:
        world.emu.set_capacity(zone, "m5.large", 0)
    world.clock.sleep(5.0)  # full again
    assert _refused(world, 10) == "InsufficientInstanceCapacity"
    for zone in world.subnets:
        world.emu.set_capacity(zone, "m5.large", 100)
    _run(world, 10)


def test_throttling_can_be_turned_off(world: World) -> None:
    world.emu.set_throttling(enabled=False, mutating=BucketSizes(1, 1))
    for _ in range(3):
        _run(world)
    assert world.emu.throttling_report()["total"] == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"enabled": "yes"}, "enabled"),
        ({"mutating": {"size": 0, "refill": 5}}, "mutating"),
        ({"mutating": {"size": 50}}, "mutating"),
        ({"resources": {"StartInstances": {"size": 1, "refill": 1}}}, "resources"),
    ],
)
def test_a_bad_control_request_names_its_field(body: dict[str, Any], field: str) -> None:
    with emulated_aws() as world, pytest.raises(EmulatorInputError) as caught:
        throttling_from_body(world.emu, body)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("action", "query", "tokens"),
    [
        ("RunInstances", {"MaxCount": ["8"]}, 8),
        ("TerminateInstances", {"InstanceId.1": ["i-1"], "InstanceId.2": ["i-2"]}, 2),
        ("DescribeInstances", {}, 0),
    ],
)
def test_what_a_call_spends_of_its_resource_bucket(
    action: str, query: dict[str, Any], tokens: int
) -> None:
    assert instances_of(action, query) == tokens
