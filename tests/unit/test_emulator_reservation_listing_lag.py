"""The emulator's reservation listing lag ("Eventual consistency in the Amazon EC2 API"): for
`seconds` after a PurchaseCapacityBlock took effect, DescribeCapacityReservations without ids
(with or without filters) leaves the new block out, for the client the switch names; reads
by id and the control API's record (EC2's own) still see it. The product's tagged look for a
lost purchase (`find_bought_block`) then finds nothing, though the block was bought.

Every call goes through boto3 to the in-process emulator (moto plus the project's patches).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devenv.emulator.consistency import RESERVATION_LISTING
from devenv.emulator.model import EmulatorInputError
from provisioner.api import constants as c
from provisioner.cloud.block_purchase import find_bought_block
from tests.unit.test_cloud_helpers import REGION, World, emulated_aws

pytestmark = pytest.mark.unit

P5 = "p5.48xlarge"
LAG = 60.0
TAGS = [{"Key": c.TAG_PURCHASE_INTENT, "Value": "w-1"}, {"Key": c.TAG_CLUSTER, "Value": "demo"}]


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def buy(world: World) -> str:
    start = world.emu.now() + 600
    world.emu.add_capacity_block_offering(P5, f"{REGION}a", 2, start, 24, "100")
    [offering] = world.ec2.describe_capacity_block_offerings(
        InstanceType=P5, InstanceCount=2, CapacityDurationHours=24
    )["CapacityBlockOfferings"]
    answer = world.ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering["CapacityBlockOfferingId"],
        InstancePlatform="Linux/UNIX",
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": TAGS}],
    )
    return str(answer["CapacityReservation"]["CapacityReservationId"])


def listed(world: World, **params: Any) -> list[str]:
    answer = world.ec2.describe_capacity_reservations(**params)
    return [r["CapacityReservationId"] for r in answer["CapacityReservations"]]


TAGGED = [{"Name": f"tag:{c.TAG_PURCHASE_INTENT}", "Values": ["w-1"]}]


def test_a_fresh_block_is_left_out_of_listings_until_the_lag_passes(world: World) -> None:
    world.emu.set_reservation_listing_lag(LAG)
    rid = buy(world)

    assert listed(world) == [] and listed(world, Filters=TAGGED) == []
    assert find_bought_block(world.clients.ec2, "demo", "w-1") is None
    # EC2's record holds it, and a read by id sees it.
    assert [r["CapacityReservationId"] for r in world.emu.capacity_reservation_views()] == [rid]
    assert listed(world, CapacityReservationIds=[rid]) == [rid]
    hidden = [e for e in world.emu.consumed() if e.get("kind") == RESERVATION_LISTING]
    assert hidden and hidden[0]["ids"] == [rid]

    world.emu.advance_clock(LAG + 1)
    assert listed(world) == [rid] and listed(world, Filters=TAGGED) == [rid]
    assert find_bought_block(world.clients.ec2, "demo", "w-1") == rid


def test_a_block_bought_longer_ago_than_the_lag_is_listed_and_0_disarms(world: World) -> None:
    before = buy(world)
    world.emu.advance_clock(LAG + 1)
    world.emu.set_reservation_listing_lag(LAG)
    assert listed(world) == [before]
    world.emu.set_reservation_listing_lag(0)
    after = buy(world)
    assert sorted(listed(world)) == sorted([before, after])


def test_a_lag_scoped_to_another_client_leaves_this_one_alone(world: World) -> None:
    world.emu.set_reservation_listing_lag(LAG, client="AKIDSOMEONEELSE")
    rid = buy(world)
    assert listed(world, Filters=TAGGED) == [rid]


def test_a_lag_longer_than_the_bound_is_refused(world: World) -> None:
    with pytest.raises(EmulatorInputError):
        world.emu.set_reservation_listing_lag(301)
