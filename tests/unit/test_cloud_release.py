"""Release against the emulator: terminate, then the ENI rule of DESIGN §4.8."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.cloud.release import release
from provisioner.cloud.types import LaunchResult
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def gang(world: World, count: int = 2) -> LaunchResult:
    return world.engine.acquire(world.spec(count=count))


def secondary_eni(world: World, instance_id: str, description: str = "") -> str:
    subnet = world.subnets["us-east-1a"]
    eni = world.ec2.create_network_interface(SubnetId=subnet, Description=description)
    eni_id: str = eni["NetworkInterface"]["NetworkInterfaceId"]
    world.ec2.attach_network_interface(
        NetworkInterfaceId=eni_id, InstanceId=instance_id, DeviceIndex=1
    )
    return eni_id


def eni_exists(world: World, eni_id: str) -> bool:
    found = world.ec2.describe_network_interfaces(
        Filters=[{"Name": "network-interface-id", "Values": [eni_id]}]
    )["NetworkInterfaces"]
    return bool(found)


def test_release_terminates_and_deletes_leftover_enis(world: World) -> None:
    world.emu.set_eni_detach_delay(12)
    result = gang(world)
    leftover = secondary_eni(world, result.instance_ids[0])

    report = world.engine.release(result.instance_ids, poll_seconds=5)

    assert set(report.terminated) == set(result.instance_ids)
    assert report.enis_recorded == (leftover,)
    assert report.enis_deleted == (leftover,) and report.complete
    assert not eni_exists(world, leftover)
    assert world.live_instances() == []
    # Waited on the injected clock until EC2 had detached it: 0 s, 5 s, 10 s, 15 s.
    assert world.clock.sleeps == [5, 5, 5]


def test_release_never_touches_an_eni_that_is_not_the_gangs(world: World) -> None:
    result = gang(world)
    stranger = world.ec2.create_network_interface(
        SubnetId=world.subnets["us-east-1a"], Description="aws-K8S-i-0000000000000000f"
    )["NetworkInterface"]["NetworkInterfaceId"]
    unrelated = world.engine.acquire(world.spec(pool_name="other", count=1, pool_uid="uid-2"))
    attached_elsewhere = secondary_eni(world, unrelated.instance_ids[0])

    report = world.engine.release(result.instance_ids)

    assert report.enis_deleted == () and report.complete
    assert eni_exists(world, stranger) and eni_exists(world, attached_elsewhere)
    assert len(world.live_instances()) == 1


def test_eni_still_attached_at_the_deadline_is_reported_pending(world: World) -> None:
    world.emu.set_eni_detach_delay(1_000)
    result = gang(world)
    leftover = secondary_eni(world, result.instance_ids[1])

    report = world.engine.release(result.instance_ids, eni_wait_seconds=20, poll_seconds=5)

    assert report.enis_pending == (leftover,) and not report.complete
    assert eni_exists(world, leftover)
    assert sum(world.clock.sleeps) == 20


def test_retry_recovers_a_detached_vpc_cni_eni_by_its_description(world: World) -> None:
    world.emu.set_eni_detach_delay(1_000)
    result = gang(world)
    instance_id = result.instance_ids[0]
    cni = secondary_eni(world, instance_id, description=f"aws-K8S-{instance_id}")
    plain = secondary_eni(world, result.instance_ids[1], description="made by hand")

    first = world.engine.release(result.instance_ids, eni_wait_seconds=0)
    assert set(first.enis_pending) == {cni, plain}

    world.clock.advance(2_000)  # EC2 detaches them while the controller is down
    second = world.engine.release(result.instance_ids, eni_wait_seconds=0)

    assert set(second.already_gone) == set(result.instance_ids) and second.terminated == ()
    assert second.enis_recovered == (cni,) and second.enis_deleted == (cni,)
    assert not eni_exists(world, cni)
    # Nothing links the hand-made ENI to the gang any more, so it is left alone.
    assert eni_exists(world, plain)


def test_release_is_idempotent_and_an_unknown_id_is_gone_only_once_long_known(
    world: World,
) -> None:
    result = gang(world)
    first = world.engine.release(result.instance_ids)
    unknown = "i-0123456789abcdef0"
    known_since = world.clock.now()
    again = world.engine.release([*result.instance_ids, unknown], known_since=known_since)

    assert set(first.terminated) == set(result.instance_ids) and first.all_gone
    assert again.terminated == ()
    # NotFound by id proves nothing about an id known for minutes: it may be propagating.
    assert set(again.already_gone) == set(result.instance_ids)
    assert again.unconfirmed == (unknown,) and not again.all_gone
    assert again.complete
    # Known for 10 minutes (a figure of its own, not read from the constant under test),
    # past EC2's "few minutes" of propagation: NotFound means long terminated.
    world.clock.advance(10 * 60)
    late = world.engine.release([unknown], known_since=known_since)
    assert late.already_gone == (unknown,) and late.all_gone
    assert world.engine.release([]).requested == ()


class _CniAttachesFirst:
    """EC2 as the release sees it, where the VPC CNI attaches an ENI to the gang's first
    instance just before our TerminateInstances reaches EC2: after the release's first look."""

    def __init__(self, world: World, instance_id: str) -> None:
        self._world = world
        self._instance_id = instance_id
        self.raced: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._world.ec2, name)

    def terminate_instances(self, **kwargs: Any) -> Any:
        if self.raced is None:
            self.raced = secondary_eni(
                self._world, self._instance_id, description=f"aws-K8S-{self._instance_id}"
            )
        return self._world.ec2.terminate_instances(**kwargs)


def test_an_eni_the_cni_attaches_during_the_release_is_deleted_too(world: World) -> None:
    world.emu.set_eni_detach_delay(12)
    result = gang(world)
    ec2 = _CniAttachesFirst(world, result.instance_ids[0])

    report = release(ec2, world.clock, result.instance_ids, poll_seconds=5)

    assert ec2.raced is not None
    assert report.enis_recorded == () and report.enis_recovered == (ec2.raced,)
    assert report.enis_deleted == (ec2.raced,) and report.complete
    assert not eni_exists(world, ec2.raced)


def test_the_emulator_refuses_to_attach_to_a_terminated_instance(world: World) -> None:
    # Why the release needs only one look after its terminate: EC2 refuses new attachments.
    result = gang(world, count=1)
    world.ec2.terminate_instances(InstanceIds=list(result.instance_ids))

    with pytest.raises(ClientError, match="IncorrectInstanceState"):
        secondary_eni(world, result.instance_ids[0])
