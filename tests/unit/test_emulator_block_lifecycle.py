"""A Capacity Block's end and slots as EC2 documents them, and the reservation states EC2
shows on its own, in the in-process emulator (helpers are the reservation tests' own).

Pages: "Work with Capacity Blocks" (thirty minutes before the end EC2 begins to terminate
the block's instances), "Launch instances using Capacity Blocks" (a stopping or
shutting-down instance keeps its slot), botocore's CapacityReservationState.
"""

from __future__ import annotations

import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from devenv.emulator import EmulatorState
from tests.support.clocks import SecondsClock
from tests.unit.test_emulator_reservations import (
    P5,
    REGION,
    T0,
    clock,
    emulator,
    instance,
    refusal,
    reservation,
    run,
    targeting,
)

pytestmark = pytest.mark.unit
__all__ = ["clock", "emulator"]  # fixtures, imported to be found by pytest


def test_ec2_starts_terminating_a_blocks_instances_thirty_minutes_before_its_end(
    emulator: EmulatorState, clock: SecondsClock
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block", end=T0 + 3 * 3600
    )
    ids = [i["InstanceId"] for i in run(2, **targeting(block, block=True))["Instances"]]
    clock.now = T0 + 3 * 3600 - 31 * 60
    assert {instance(i)["State"]["Name"] for i in ids} == {"running"}
    clock.now = T0 + 3 * 3600 - 30 * 60
    assert {instance(i)["State"]["Name"] for i in ids} == {"terminated"}
    # The block itself stays active until its end date.
    assert reservation(block)["State"] == "active"


def test_a_shutting_down_instance_keeps_its_block_slot_until_it_has_terminated(
    emulator: EmulatorState,
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 1, reservation_type="capacity-block"
    )
    (launched,) = run(1, **targeting(block, block=True))["Instances"]
    moto_instance = ec2_backends[DEFAULT_ACCOUNT_ID][REGION].get_instance(launched["InstanceId"])
    moto_instance._state.name, moto_instance._state.code = "shutting-down", 32

    assert reservation(block)["AvailableInstanceCount"] == 0
    code, _ = refusal(lambda: run(1, **targeting(block, block=True)))
    assert code == "ReservationCapacityExceeded"

    moto_instance._state.name, moto_instance._state.code = "terminated", 48
    assert reservation(block)["AvailableInstanceCount"] == 1
    assert len(run(1, **targeting(block, block=True))["Instances"]) == 1


@pytest.mark.parametrize(
    ("launch_error", "expected"),
    [(None, "InsufficientInstanceCapacity"), ("InvalidParameterValue", "InvalidParameterValue")],
)
def test_an_unavailable_block_is_shown_so_and_its_launch_answer_is_switchable(
    emulator: EmulatorState, launch_error: str | None, expected: str
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block"
    )
    emulator.force_reservation_state(block, "unavailable", launch_error)
    assert reservation(block)["State"] == "unavailable"
    code, message = refusal(lambda: run(1, **targeting(block, block=True)))
    assert code == expected and block in message and "unavailable" in message

    emulator.force_reservation_state(block, None)
    assert reservation(block)["State"] == "active"
    assert len(run(1, **targeting(block, block=True))["Instances"]) == 1


def test_only_documented_states_can_be_forced(emulator: EmulatorState) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 1, reservation_type="capacity-block"
    )
    with pytest.raises(ValueError, match="state must be one of"):
        emulator.force_reservation_state(block, "broken")
