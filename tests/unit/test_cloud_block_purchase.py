"""Buying a Capacity Block through the engine, against the in-process emulator: one call,
one attempt, tagged; a refusal from EC2 is told apart from an answer that never came; and the
block bought under an intent is found by its tag, so no second purchase is ever blind."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from provisioner.api import constants as c
from provisioner.cloud.block_purchase import BlockPurchaseRefused
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import CloudError, ErrorKind
from tests.unit.test_cloud_helpers import CLUSTER, REGION, World, emulated_aws

pytestmark = pytest.mark.unit

P5 = "p5.48xlarge"


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        w.emu.wall_clock = lambda: w.clock.now().timestamp()
        yield w


def _offering(world: World) -> str:
    world.emu.add_capacity_block_offering(
        P5, f"{REGION}a", 4, world.clock.now() + timedelta(minutes=5), 24, "100"
    )
    return world.engine.capacity_block_offerings(P5, 2, 24)[0].offering_id


def _tags(intent: str) -> dict[str, str]:
    return {c.TAG_CLUSTER: CLUSTER, c.TAG_POOL: "pool-a", c.TAG_PURCHASE_INTENT: intent}


def _blocks(world: World) -> list[dict[str, object]]:
    return list(world.ec2.describe_capacity_reservations()["CapacityReservations"])


def test_a_purchase_is_one_tagged_call_and_found_by_its_intent(world: World) -> None:
    offering = _offering(world)
    bought = world.engine.purchase_capacity_block(offering, _tags("pool-uid-1"))
    [block] = _blocks(world)
    assert block["CapacityReservationId"] == bought and block["State"] == "scheduled"
    assert world.engine.bought_block(CLUSTER, "pool-uid-1") == bought
    assert world.engine.bought_block(CLUSTER, "pool-uid-2") is None
    assert world.engine.bought_block("other-cluster", "pool-uid-1") is None


def test_a_lost_answer_is_unknown_and_buys_exactly_one_block(world: World) -> None:
    offering = _offering(world)
    world.emu.inject_fault("PurchaseCapacityBlock", "InternalError", after=True)
    with pytest.raises(CloudError) as caught:
        world.engine.purchase_capacity_block(offering, _tags("pool-uid-1"))
    assert not isinstance(caught.value, BlockPurchaseRefused)
    assert caught.value.kind is ErrorKind.RETRYABLE
    assert len(_blocks(world)) == 1  # one attempt: no SDK retry bought a second
    assert world.engine.bought_block(CLUSTER, "pool-uid-1") is not None


def test_a_refusal_from_ec2_bought_nothing(world: World) -> None:
    with pytest.raises(BlockPurchaseRefused) as caught:
        world.engine.purchase_capacity_block("cb-0123456789abcdef0", _tags("pool-uid-1"))
    assert caught.value.kind is ErrorKind.CONFIG and caught.value.code == "InvalidParameterValue"
    assert _blocks(world) == []


def test_clients_without_a_single_attempt_client_never_buy(world: World) -> None:
    clients = CloudClients(
        ec2=world.clients.ec2, ssm=world.clients.ssm, eks=world.clients.eks, iam=world.clients.iam
    )
    engine = Ec2Engine(clients, world.clock)
    with pytest.raises(CloudError, match="single-attempt"):
        engine.purchase_capacity_block(_offering(world), _tags("pool-uid-1"))
    assert _blocks(world) == []
