"""`Ec2Engine.launch_tokens` names the ClientTokens its `acquire` then sends, in order, as
the requests reaching the emulator carry them (the pool's launch marker records them):
signed with the engine's key, one per subnet of the runinstances sweep, one per fleet.
Narrowed to a reservation's zone: `tests/unit/test_cloud_reservations.py`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from provisioner.api import constants as c
from provisioner.cloud import naming
from provisioner.cloud.engine import Ec2Engine
from tests.unit.test_cloud_helpers import CLUSTER, GPU_TYPE, POOL, World, emulated_aws

pytestmark = pytest.mark.unit

KEY = naming.OwnershipKey(b"launch-token-test-key-32-bytes!!")


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        w.engine = Ec2Engine(w.clients, w.clock, KEY)
        yield w


def test_runinstances_sends_the_named_tokens_in_order(world: World) -> None:
    world.emu.set_capacity("us-east-1a", GPU_TYPE, 0)  # the sweep's first try is refused
    spec = world.spec()
    named = world.engine.launch_tokens(spec)

    result = world.engine.acquire(spec)

    sent = [p["ClientToken"] for p in world.captured.of("RunInstances")]
    assert len(named) == 3 and sent == list(named[:2])
    assert result.client_token == named[1]
    # Signed for this cluster and pool: the reaper's proof that the instances are ours.
    assert all(naming.signed_generation(t, KEY, CLUSTER, POOL) == 1 for t in named)


def test_fleet_sends_the_one_named_token(world: World) -> None:
    spec = world.spec(mode=c.MODE_FLEET, launch_template=world.launch_template())
    named = world.engine.launch_tokens(spec)

    world.engine.acquire(spec)

    (sent,) = world.captured.of("CreateFleet")
    assert named == (sent["ClientToken"],)
    assert naming.signed_generation(named[0], KEY, CLUSTER, POOL) == 1
