"""What the engine does with EC2's ClientToken answers ("Ensuring idempotency in Amazon EC2
API requests"): a replay returns the original instances whatever their state now, and the
same token with other parameters is refused with IdempotentParameterMismatch.

Both are answers a pool can meet after a lost launch answer: the set it bought may have
terminated since (a replay then returns a set that can never join), or the launch's shape
may have changed (a new AMI in SSM, a new template version). Neither may keep the pool on
its generation: the first would wait out the join deadline, the second would replay the
refused token forever.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.types import LaunchSpec
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit

MODES = ("runinstances", "fleet")


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


_TEMPLATE: list[tuple[World, Any]] = []


def spec(world: World, mode: str, **overrides: Any) -> LaunchSpec:
    fields: dict[str, Any] = {"mode": mode, "subnets": world.subnet_refs("us-east-1a")}
    if mode == "fleet":
        # The pool's one launch template, made on the first fleet launch of this world.
        if not _TEMPLATE or _TEMPLATE[0][0] is not world:
            _TEMPLATE[:] = [(world, world.launch_template())]
        fields.update(launch_template=_TEMPLATE[0][1], user_data=None)
    fields.update(overrides)
    return world.spec(**fields)


@pytest.mark.parametrize("mode", MODES)
def test_a_replay_of_a_set_that_has_terminated_starts_a_new_generation(
    world: World, mode: str
) -> None:
    first = world.engine.acquire(spec(world, mode))
    world.ec2.terminate_instances(InstanceIds=list(first.instance_ids))

    # The same generation again (a lost answer): nothing live to adopt, so the token is
    # replayed, and EC2 returns the set it launched, now shutting down.
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec(world, mode))

    err = caught.value
    assert err.kind is ErrorKind.MALFORMED and err.ends_generation
    assert err.reason == "ReplayedEndedSet"
    assert first.instance_ids[0] in err.message
    replay = world.emu.launch_requests()[-1]
    assert (
        replay["params"]["ClientToken"] == world.emu.launch_requests()[0]["params"]["ClientToken"]
    )
    assert sorted(replay["instance_ids"]) == sorted(first.instance_ids), "a replay, no launch"
    assert world.live_instances() == []

    fresh = world.engine.acquire(spec(world, mode, acquire_generation=2))
    assert len(fresh.instance_ids) == 4 and not set(fresh.instance_ids) & set(first.instance_ids)


@pytest.mark.parametrize("mode", MODES)
def test_a_token_refused_for_other_parameters_moves_the_generation_once_its_set_is_gone(
    world: World, mode: str
) -> None:
    first = world.engine.acquire(spec(world, mode))
    world.ec2.terminate_instances(InstanceIds=list(first.instance_ids))

    # The shape changed under the same generation (here the count): EC2 refuses the token.
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec(world, mode, count=3))

    err = caught.value
    assert err.code == "IdempotentParameterMismatch"
    assert err.kind is ErrorKind.MALFORMED and err.ends_generation
    assert "new generation" in err.message
    assert world.emu.launch_requests()[-1]["error"] == "IdempotentParameterMismatch"
    assert world.live_instances() == []
    assert (
        len(world.engine.acquire(spec(world, mode, count=3, acquire_generation=2)).instance_ids)
        == 3
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_token_refused_while_its_set_lives_keeps_the_generation(world: World, mode: str) -> None:
    """The set of the refused token is alive but the first listing missed it (EC2's
    listings are eventually consistent): the generation stays, so the next pass adopts
    the set or rolls the part back, and nothing is launched meanwhile."""
    world.emu.set_listing_lag(30)
    first = world.engine.acquire(spec(world, mode))

    def lag_over(**_: Any) -> None:
        world.clock.sleep(31)

    action = "CreateFleet" if mode == "fleet" else "RunInstances"
    world.ec2.meta.events.register(f"after-call.ec2.{action}", lag_over)
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec(world, mode, count=3))

    err = caught.value
    assert err.code == "IdempotentParameterMismatch"
    assert err.kind is ErrorKind.RETRYABLE and not err.ends_generation
    assert err.reason == "EarlierLaunchAlive"
    assert {i["InstanceId"] for i in world.live_instances()} == set(first.instance_ids)
