"""Adoption after a crash takes only a set EC2's record proves was launched for this very
pool object and generation, and only if it is the shape asked for.

Tags alone used to decide: a pool deleted and recreated under the same name (a new UID,
the same generation 1) adopted its predecessor's set, whatever its instance type; so did a
set someone launched by hand and tagged as the pool's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from provisioner.api import constants as c
from provisioner.cloud import naming
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.tags import launch_tags
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit

OTHER_TYPE = "p5.48xlarge"
KEY_BYTES = b"adoption-test-key-with-32-bytes!"


@pytest.fixture(params=["unsigned", "signed"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    with emulated_aws() as w:
        if request.param == "signed":
            w.engine = Ec2Engine(w.clients, w.clock, naming.OwnershipKey(KEY_BYTES))
        yield w


def _live(world: World) -> dict[str, str]:
    return {i["InstanceId"]: i["InstanceType"] for i in world.live_instances()}


@pytest.mark.parametrize("mode", [c.MODE_RUNINSTANCES, c.MODE_FLEET])
def test_a_recreated_pool_does_not_adopt_its_predecessors_set(world: World, mode: str) -> None:
    kwargs = (
        {"mode": mode, "launch_template": world.launch_template()} if mode == c.MODE_FLEET else {}
    )
    before = world.engine.acquire(world.spec(count=2, pool_uid="uid-before", **kwargs))

    spec = world.spec(count=2, pool_uid="uid-after", instance_type=OTHER_TYPE, **kwargs)
    after = world.engine.acquire(spec)

    assert not after.adopted
    assert set(after.instance_ids).isdisjoint(before.instance_ids)
    live = _live(world)
    assert {live[i] for i in after.instance_ids} == {OTHER_TYPE}
    # The predecessor's set is not this launch's to terminate (the reaper proves it an orphan).
    assert set(before.instance_ids) <= set(live)


def test_a_set_launched_by_hand_with_the_pools_tags_is_neither_adopted_nor_touched(
    world: World,
) -> None:
    spec = world.spec(count=2)
    tags = [{"Key": k, "Value": v} for k, v in launch_tags(spec).items()]
    by_hand = world.ec2.run_instances(
        ImageId=world.ami_id(),
        InstanceType=spec.instance_type,
        MinCount=2,
        MaxCount=2,
        SubnetId=spec.subnets[0].subnet_id,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    hand_ids = {i["InstanceId"] for i in by_hand["Instances"]}

    result = world.engine.acquire(spec)

    assert not result.adopted and hand_ids.isdisjoint(result.instance_ids)
    assert hand_ids <= set(_live(world))


def test_a_proven_set_of_another_shape_is_refused_and_released(world: World) -> None:
    """Same pool object, same generation, but the shape asked for is not the set's (the
    pool's recorded shape changed between the crash and the retry): no adoption."""
    first = world.engine.acquire(world.spec(count=2))

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec(count=2, instance_type=OTHER_TYPE))

    assert caught.value.kind is ErrorKind.MALFORMED
    assert caught.value.reason == "AdoptionShapeMismatch"
    assert "instance type p4d.24xlarge where p5.48xlarge is asked" in caught.value.message
    assert set(first.instance_ids).isdisjoint(_live(world))


def test_a_proven_set_outside_the_planned_subnets_is_refused(world: World) -> None:
    world.engine.acquire(world.spec(count=2, subnets=world.subnet_refs("us-east-1a")))

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec(count=2, subnets=world.subnet_refs("us-east-1b")))

    assert caught.value.reason == "AdoptionShapeMismatch"
    assert "outside the planned" in caught.value.message


@pytest.mark.parametrize("mode", [c.MODE_RUNINSTANCES, c.MODE_FLEET])
def test_a_crash_retry_still_adopts_its_own_set(world: World, mode: str) -> None:
    kwargs = (
        {"mode": mode, "launch_template": world.launch_template()} if mode == c.MODE_FLEET else {}
    )
    first = world.engine.acquire(world.spec(count=2, **kwargs))
    again = world.engine.acquire(world.spec(count=2, **kwargs))
    assert again.adopted and set(again.instance_ids) == set(first.instance_ids)
