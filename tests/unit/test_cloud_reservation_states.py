"""Every reservation state EC2 documents, and what the engine makes of each before it
launches anything (the stub EC2 and builders are the reservation tests' own).

States come from botocore's CapacityReservationState and the "View Capacity Blocks" page;
the 30-minute reclaim from "Work with Capacity Blocks".
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from provisioner.api import constants as c
from provisioner.cloud.errors import ErrorKind
from tests.unit.test_cloud_reservations import (
    BLOCK,
    MODES,
    NOW,
    ODCR,
    StubEc2,
    block,
    refused,
    reservation,
    spec,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("mode", MODES)
def test_an_unavailable_block_is_a_capacity_wait_that_launches_nothing(mode: str) -> None:
    # EC2 may still count free slots on it; the state alone must stop the launch.
    ec2 = StubEc2({BLOCK: block(state="unavailable", available=8)})
    err = refused(ec2, spec(mode, BLOCK))

    assert err.kind is ErrorKind.CAPACITY and err.reason == "ReservationUnavailable"
    assert BLOCK in err.message and "unavailable" in err.message
    assert c.ANN_CAPACITY_RESERVATION_ID in err.message


def test_a_cancelling_reservation_whose_capacity_is_released_is_a_config_error() -> None:
    # `cancelling`: "Capacity has been released but charges continue".
    err = refused(StubEc2({ODCR: reservation(state="cancelling")}), spec("runinstances"))
    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationNotUsable"
    assert ODCR in err.message and "cancelling" in err.message


def test_a_state_ec2_adds_later_is_never_launched_into() -> None:
    err = refused(StubEc2({ODCR: reservation(state="rebalancing")}), spec("runinstances"))
    assert err.kind is ErrorKind.CAPACITY and "rebalancing" in err.message


@pytest.mark.parametrize("mode", MODES)
def test_a_block_in_its_last_thirty_minutes_is_never_launched_into_whatever_the_margin(
    mode: str,
) -> None:
    # EC2 starts terminating a block's instances 30 minutes before its end, so a margin
    # set below that must not buy a gang EC2 is already reclaiming.
    ec2 = StubEc2({BLOCK: block(end=NOW + timedelta(minutes=25))})
    err = refused(ec2, spec(mode, BLOCK, block_release_margin=timedelta(0)))
    assert err.kind is ErrorKind.CONFIG and err.reason == "CapacityBlockEnding"
    assert "30 minutes" in err.message
