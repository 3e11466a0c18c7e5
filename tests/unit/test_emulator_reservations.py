"""Reserved capacity in the EC2 emulator, in-process: ODCRs, Capacity Blocks, the launch log.

Each test drives the emulator with boto3 as the EC2 engine does and asserts what EC2 would
answer; reservation state follows a fake wall clock the tests step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devenv.emulator import EmulatorState, eks_ami_parameter_name
from tests.support.clocks import SecondsClock
from tests.support.ec2_listing import described_instances
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
P5 = "p5.48xlarge"
NO_RETRIES = Config(retries={"total_max_attempts": 1})
SESSION = boto3.session.Session(region_name=REGION)
T0 = 1_900_000_000.0


@pytest.fixture
def clock() -> SecondsClock:
    return SecondsClock(T0)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, clock: SecondsClock) -> Iterator[EmulatorState]:
    with emulator_in_process(monkeypatch, wall_clock=clock) as state:
        yield state


def ec2() -> Any:
    return SESSION.client("ec2", config=NO_RETRIES)


def ami() -> str:
    name = eks_ami_parameter_name("1.36", "x86_64", "nvidia")
    ssm = SESSION.client("ssm", config=NO_RETRIES)
    return str(ssm.get_parameter(Name=name)["Parameter"]["Value"])


def run(count: int, az: str | None = "us-east-1a", maximum: int | None = None, **extra: Any) -> Any:
    if az is not None:
        extra["Placement"] = {**extra.get("Placement", {}), "AvailabilityZone": az}
    return ec2().run_instances(
        ImageId=ami(),
        InstanceType=extra.pop("InstanceType", P5),
        MinCount=count,
        MaxCount=maximum or count,
        **extra,
    )


def targeting(reservation_id: str, block: bool = False) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": reservation_id}
        }
    }
    if block:
        extra["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return extra


def reservation(reservation_id: str) -> dict[str, Any]:
    found = ec2().describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    return dict(found["CapacityReservations"][0])


def instance(instance_id: str) -> dict[str, Any]:
    found = ec2().describe_instances(InstanceIds=[instance_id])["Reservations"]
    return dict(found[0]["Instances"][0])


def refusal(call: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as refused:
        call()
    error = refused.value.response["Error"]
    return str(error["Code"]), str(error["Message"])


def live_count() -> int:
    found = described_instances(
        ec2(), [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    return len(found)


# --- DescribeCapacityReservations ------------------------------------------------------------
def test_describe_answers_ec2s_fields_and_state_follows_the_clock(
    emulator: EmulatorState, clock: SecondsClock
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1b", 2, reservation_type="capacity-block", start=T0 + 60, end=T0 + 3600
    )
    seen = reservation(block)
    assert {k: seen[k] for k in ("InstanceType", "AvailabilityZone", "TotalInstanceCount")} == {
        "InstanceType": P5,
        "AvailabilityZone": "us-east-1b",
        "TotalInstanceCount": 2,
    }
    assert (seen["ReservationType"], seen["InstanceMatchCriteria"]) == (
        "capacity-block",
        "targeted",
    )
    assert seen["State"] == "scheduled"
    assert seen["StartDate"].timestamp() == T0 + 60
    assert seen["EndDate"].timestamp() == T0 + 3600
    clock.now = T0 + 60
    assert reservation(block)["State"] == "active"
    clock.now = T0 + 3600
    assert (reservation(block)["State"], reservation(block)["AvailableInstanceCount"]) == (
        "expired",
        0,
    )


def test_describe_of_an_unknown_or_malformed_id_answers_ec2s_codes(
    emulator: EmulatorState,
) -> None:
    describe = ec2().describe_capacity_reservations
    code, message = refusal(lambda: describe(CapacityReservationIds=["cr-0123456789abcdef0"]))
    assert code == "InvalidCapacityReservationId.NotFound" and "cr-0123456789abcdef0" in message
    assert refusal(lambda: describe(CapacityReservationIds=["odcr-1"]))[0] == (
        "InvalidCapacityReservationId.Malformed"
    )


# --- RunInstances into a reservation ---------------------------------------------------------
def test_a_targeted_odcr_takes_the_launch_and_gets_its_slot_back_on_termination(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1a", 4)
    emulator.set_capacity("us-east-1a", P5, 0)  # on-demand says no; the reservation does not
    launched = run(3, **targeting(odcr))["Instances"]
    assert [i["CapacityReservationId"] for i in launched] == [odcr] * 3
    seen = instance(launched[0]["InstanceId"])
    assert seen["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": odcr
    }
    assert reservation(odcr)["AvailableInstanceCount"] == 1
    ec2().terminate_instances(InstanceIds=[i["InstanceId"] for i in launched])
    assert reservation(odcr)["AvailableInstanceCount"] == 4


def test_a_full_reservation_answers_reservation_capacity_exceeded_and_launches_nothing(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1a", 2)
    code, message = refusal(lambda: run(3, **targeting(odcr)))
    assert code == "ReservationCapacityExceeded" and odcr in message
    assert live_count() == 0
    # MaxCount above the free slots is fine: EC2 launches what fits from MinCount up.
    assert len(run(1, maximum=5, **targeting(odcr))["Instances"]) == 2


def test_a_launch_that_contradicts_the_reservation_is_refused_naming_both_sides(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1a", 2)
    code, message = refusal(lambda: run(1, InstanceType="p4d.24xlarge", **targeting(odcr)))
    assert code == "InvalidParameterCombination" and "p4d.24xlarge" in message and P5 in message
    code, message = refusal(lambda: run(1, az="us-east-1c", **targeting(odcr)))
    assert code == "InvalidParameterCombination" and "us-east-1c" in message
    assert "us-east-1a" in message
    # Without an AZ, EC2 launches in the reservation's.
    launched = run(1, az=None, **targeting(odcr))["Instances"][0]
    assert launched["Placement"]["AvailabilityZone"] == "us-east-1a"


def test_an_unknown_reservation_is_not_found(emulator: EmulatorState) -> None:
    code, _ = refusal(lambda: run(1, **targeting("cr-0123456789abcdef0")))
    assert code == "InvalidCapacityReservationId.NotFound"


def test_an_open_odcr_is_used_by_untargeted_launches_and_a_targeted_one_is_not(
    emulator: EmulatorState,
) -> None:
    emulator.set_capacity("us-east-1a", P5, 0)
    targeted = emulator.add_capacity_reservation(P5, "us-east-1a", 2)
    assert refusal(lambda: run(1))[0] == "InsufficientInstanceCapacity"
    opened = emulator.add_capacity_reservation(P5, "us-east-1a", 2, match="open")
    launched = run(2)["Instances"]
    assert [i["CapacityReservationId"] for i in launched] == [opened, opened]
    assert reservation(targeted)["AvailableInstanceCount"] == 2
    # An instance that opts out never lands in a reservation.
    no = {"CapacityReservationSpecification": {"CapacityReservationPreference": "none"}}
    emulator.set_capacity("us-east-1a", P5, 1)
    assert "CapacityReservationId" not in run(1, **no)["Instances"][0]


def test_a_block_not_yet_started_answers_insufficient_capacity_then_launches_once_active(
    emulator: EmulatorState, clock: SecondsClock
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block", start=T0 + 30
    )
    code, message = refusal(lambda: run(2, **targeting(block, block=True)))
    assert code == "InsufficientInstanceCapacity" and "scheduled" in message
    assert live_count() == 0
    clock.now = T0 + 30
    launched = run(2, **targeting(block, block=True))["Instances"]
    assert {i["CapacityReservationId"] for i in launched} == {block}
    assert instance(launched[0]["InstanceId"])["InstanceLifecycle"] == "capacity-block"


def test_a_block_launched_without_its_market_type_is_refused(emulator: EmulatorState) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block"
    )
    code, message = refusal(lambda: run(1, **targeting(block)))
    assert code == "InvalidParameterValue" and "market type" in message
    odcr = emulator.add_capacity_reservation(P5, "us-east-1a", 2)
    assert refusal(lambda: run(1, **targeting(odcr, block=True)))[0] == (
        "InvalidParameterCombination"
    )


def test_an_ended_block_refuses_launches_and_ec2_reclaims_its_instances(
    emulator: EmulatorState, clock: SecondsClock
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block", end=T0 + 600
    )
    launched = run(2, **targeting(block, block=True))["Instances"]
    clock.now = T0 + 600
    code, message = refusal(lambda: run(1, **targeting(block, block=True)))
    assert code == "InvalidParameterValue" and "expired" in message
    states = {instance(i["InstanceId"])["State"]["Name"] for i in launched}
    assert states == {"terminated"}


# --- the launch log -----------------------------------------------------------------------------
def test_the_launch_log_keeps_each_request_as_received_with_its_outcome(
    emulator: EmulatorState,
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 1, reservation_type="capacity-block"
    )
    refusal(lambda: run(2, **targeting(block, block=True)))
    launched = run(1, **targeting(block, block=True))["Instances"][0]["InstanceId"]
    first, second = emulator.launch_requests("RunInstances")
    assert first["error"] == "ReservationCapacityExceeded" and first["instance_ids"] == []
    assert second["error"] is None and second["instance_ids"] == [launched]
    sent = second["params"]
    assert sent["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": block
    }
    assert sent["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert emulator.launch_requests("CreateFleet") == []


def test_a_replayed_client_token_returns_the_same_instances_without_taking_more_slots(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1a", 4)
    first = run(2, ClientToken="gang-1", **targeting(odcr))["Instances"]
    again = run(2, ClientToken="gang-1", **targeting(odcr))["Instances"]
    assert [i["InstanceId"] for i in again] == [i["InstanceId"] for i in first]
    assert reservation(odcr)["AvailableInstanceCount"] == 2


def test_capacity_reservations_only_never_falls_back_to_on_demand(
    emulator: EmulatorState,
) -> None:
    only = {
        "CapacityReservationSpecification": {
            "CapacityReservationPreference": "capacity-reservations-only"
        }
    }
    assert refusal(lambda: run(1, **only))[0] == "InsufficientInstanceCapacity"
    opened = emulator.add_capacity_reservation(P5, "us-east-1a", 1, match="open")
    assert run(1, **only)["Instances"][0]["CapacityReservationId"] == opened
