"""The engine against the emulator's Capacity Block states and end: an `unavailable` block
is waited on at $0 and used again once EC2 shows it active; a block in its last thirty
minutes (EC2 is already terminating its instances) is never launched into.

Helpers and the world are the emulated reservation tests' own.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from provisioner.cloud.errors import ErrorKind
from tests.unit.test_cloud_helpers import World
from tests.unit.test_cloud_reservations_emulated import (
    MODES,
    P5,
    capacity_block,
    instances,
    refused,
    reservation,
    spec,
    world,
)

pytestmark = pytest.mark.unit
__all__ = ["world"]  # the fixture, imported to be found by pytest


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("launch_error", [None, "InvalidParameterValue"])
def test_an_unavailable_block_is_waited_on_at_zero_then_used_when_active(
    world: World, mode: str, launch_error: str | None
) -> None:
    rid = capacity_block(world)
    world.emu.force_reservation_state(rid, "unavailable", launch_error)
    assert reservation(world, rid)["AvailableInstanceCount"] > 0

    err = refused(world, spec(world, mode, rid, instance_type=P5))
    assert err.kind is ErrorKind.CAPACITY and err.reason == "ReservationUnavailable"
    assert rid in err.message and "unavailable" in err.message

    world.emu.force_reservation_state(rid, None)
    result = world.engine.acquire(spec(world, mode, rid, instance_type=P5))
    assert {i["CapacityReservationId"] for i in instances(world, result.instance_ids)} == {rid}


@pytest.mark.parametrize("mode", MODES)
def test_a_block_ec2_is_already_reclaiming_is_not_launched_into_even_with_no_margin(
    world: World, mode: str
) -> None:
    rid = capacity_block(world, start_in=-(24 * 3600 - 25 * 60), hours=24)
    assert reservation(world, rid)["State"] == "active"
    err = refused(
        world, spec(world, mode, rid, instance_type=P5, block_release_margin=timedelta(0))
    )
    assert err.kind is ErrorKind.CONFIG and err.reason == "CapacityBlockEnding"
