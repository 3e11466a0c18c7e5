"""The engine's own N-or-0 guard against answers AWS can give and the emulator never gave
unasked: a launch that says success with fewer than N, a rollback whose terminate fails,
and a crash-retry whose listing has not caught up with the set its lost answer launched.

Each test arms the emulator's switch, shows the world it makes (so the guard is what keeps
the invariant, not the emulator), and checks that at most N of a generation ever lived.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from provisioner.cloud.errors import CloudError, ErrorKind
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit

N = 4


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def launched_ids(world: World) -> set[str]:
    """Every instance the emulator ever launched, live or not, read from moto's own record
    (an API listing would be subject to the listing lag these tests arm)."""
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][world.ec2.meta.region_name]
    return {i.id for r in backend.reservations.values() for i in r.instances}


def test_a_short_runinstances_answer_is_terminated_whole(world: World) -> None:
    world.emu.set_short_answer("RunInstances", missing=1)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec(count=N))

    err = caught.value
    assert err.kind is ErrorKind.MALFORMED and err.reason == "MalformedLaunch", err
    assert f"returned {N - 1} instances" in err.message and "All 3 were terminated" in err.message
    assert len(launched_ids(world)) == N - 1, "the switch did not make a short answer"
    assert world.live_instances() == []
    assert not err.instance_ids  # nothing left that may still run
    assert len(err.rolled_back) == N - 1  # but their ENIs are still the pool's to delete


def test_a_short_fleet_answer_is_terminated_whole(world: World) -> None:
    world.emu.set_short_answer("CreateFleet", missing=2)
    template = world.launch_template(world.engine.render_user_data(world.cluster, "p", "g"))
    spec = world.spec(
        count=N, mode="fleet", launch_template=template, user_data=None, instance_profile=None
    )

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec)

    assert caught.value.kind is ErrorKind.MALFORMED, caught.value
    assert len(launched_ids(world)) == N - 2
    assert world.live_instances() == []


def test_a_rollback_whose_terminate_fails_hands_the_ids_to_the_caller(world: World) -> None:
    world.emu.set_short_answer("RunInstances", missing=1)
    # The rollback terminates twice before it hands the ids over.
    world.emu.inject_fault("TerminateInstances", "InternalError", count=2)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec(count=N))

    err = caught.value
    assert "is not confirmed" in err.message and "InternalError" in err.message, err
    live = {i["InstanceId"] for i in world.live_instances()}
    assert len(live) == N - 1, "the fault did not stop the rollback"
    assert set(err.instance_ids) == live
    # What the reconciler does with them: a release, which this time goes through.
    world.engine.release(err.instance_ids, eni_wait_seconds=0)
    assert world.live_instances() == []


def test_a_partial_set_found_on_retry_is_terminated_even_if_the_first_rollback_failed(
    world: World,
) -> None:
    # The reconciler crashed before it could release what the failed rollback left: the
    # next acquire of the same generation finds the partial set by its tags.
    world.emu.set_short_answer("RunInstances", missing=1)
    world.emu.inject_fault("TerminateInstances", "InternalError", count=2)
    with pytest.raises(CloudError):
        world.engine.acquire(world.spec(count=N))
    assert len(world.live_instances()) == N - 1

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec(count=N))

    assert caught.value.reason == "PartialGroupFound", caught.value
    assert world.live_instances() == []


def _attach_cni_eni(world: World, instance_id: str) -> str:
    """What the VPC CNI does on a node that joined: a secondary ENI named after the
    instance, attached without DeleteOnTermination (EC2 then takes false)."""
    instance = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0][
        "Instances"
    ][0]
    eni = world.ec2.create_network_interface(
        SubnetId=instance["SubnetId"], Description=f"aws-K8S-{instance_id}"
    )["NetworkInterface"]["NetworkInterfaceId"]
    world.ec2.attach_network_interface(
        NetworkInterfaceId=eni, InstanceId=instance_id, DeviceIndex=1
    )
    return eni


def _eni_status(world: World, eni: str) -> str | None:
    found = world.ec2.describe_network_interfaces(
        Filters=[{"Name": "network-interface-id", "Values": [eni]}]
    )["NetworkInterfaces"]
    return found[0]["Status"] if found else None


def test_a_rolled_back_set_whose_node_joined_hands_its_ids_over_for_the_eni_cleanup(
    world: World,
) -> None:
    # A partial set that lived long enough for a node to join (here: its first rollback
    # failed; in the chaos suite: a crash, then the replayed token answering short). The
    # second rollback terminates it, and the joined node's VPC CNI ENI outlives it.
    world.emu.set_short_answer("RunInstances", missing=1)
    world.emu.inject_fault("TerminateInstances", "InternalError", count=2)
    with pytest.raises(CloudError):
        world.engine.acquire(world.spec(count=N))
    joined = sorted(i["InstanceId"] for i in world.live_instances())[0]
    eni = _attach_cni_eni(world, joined)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec(count=N))

    err = caught.value
    assert world.live_instances() == []
    assert not err.instance_ids  # every terminate confirmed
    assert joined in err.rolled_back and len(err.rolled_back) == N - 1, err.rolled_back
    # The rollback terminated; it did not release: the ENI is detached and still there.
    assert _eni_status(world, eni) == "available", "the world leaked no ENI to clean"
    # What the pool does with them on its next pass: a release by id, which deletes it.
    report = world.engine.release(err.rolled_back, eni_wait_seconds=5, poll_seconds=0.1)
    assert eni in report.enis_deleted, report
    assert _eni_status(world, eni) is None


def test_a_lost_answer_and_a_stale_listing_do_not_launch_twice(world: World) -> None:
    # EC2 launched the set and the answer was lost; the retry's listing cannot see the set
    # yet, so adoption finds nothing. Only the ClientToken stands between it and 2N.
    world.emu.set_listing_lag(60)
    world.emu.inject_fault("RunInstances", "InternalError", after=True, count=1)
    spec = world.spec(count=N)

    with pytest.raises(CloudError) as lost:
        world.engine.acquire(spec)
    assert lost.value.kind is not ErrorKind.CAPACITY, lost.value
    first = launched_ids(world)
    assert len(first) == N, "the lost answer's launch did not happen"
    assert world.engine.find_managed(spec.cluster_name, spec.pool_name) == [], "listing not stale"

    result = world.engine.acquire(spec)

    assert not result.adopted  # the listing said nothing; the token replayed the launch
    assert set(result.instance_ids) == first
    assert launched_ids(world) == first
