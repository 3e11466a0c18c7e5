"""Capacity reservations, in both modes: what the engine decides from EC2's record, and the
request it sends (or that it sends none).

A small stateful stub EC2 is handed to the engine: it answers DescribeCapacityReservations
from a table and records every launch request. Each outcome is checked in runinstances and
fleet mode. The same outcomes against the emulator's reservation model (consumption, EC2's
own errors) belong to the emulator tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.api import constants as c
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import CloudError, ErrorKind, ReservationNotActive
from provisioner.cloud.reservations import reservation_from
from provisioner.cloud.types import (
    CapacityReservationRef,
    LaunchSpec,
    LaunchTemplateRef,
    SubnetRef,
)
from tests.support.clocks import RecordingClock

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P5 = "p5.48xlarge"
ODCR = "cr-0123456789abcdef0"
BLOCK = "cr-0fedcba9876543210"
SUBNETS = (
    SubnetRef("subnet-aaaaaaaa", "us-east-1a"),
    SubnetRef("subnet-bbbbbbbb", "us-east-1b"),
    SubnetRef("subnet-cccccccc", "us-east-1c"),
)
MODES = ("runinstances", "fleet")


def reservation(
    rid: str = ODCR,
    *,
    kind: str = "default",
    state: str = "active",
    available: int = 4,
    total: int = 8,
    instance_type: str = P5,
    zone: str = "us-east-1b",
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "CapacityReservationId": rid,
        "InstanceType": instance_type,
        "AvailabilityZone": zone,
        "TotalInstanceCount": total,
        "AvailableInstanceCount": available,
        "State": state,
        "ReservationType": kind,
        "InstanceMatchCriteria": "targeted",
    }
    if start is not None:
        raw["StartDate"] = start
    if end is not None:
        raw["EndDate"] = end
    return raw


def block(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "rid": BLOCK,
        "kind": "capacity-block",
        "start": NOW - timedelta(hours=1),
        "end": NOW + timedelta(hours=23),
    }
    fields.update(overrides)
    return reservation(**fields)


def _client_error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (stub)"}}, operation)


@dataclass
class StubEc2:
    """Answers what the engine asks during an acquire; records every call."""

    reservations: dict[str, dict[str, Any]]
    fleet_fulfils: int | None = None  # None: the whole target
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def of(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == operation]

    def launches(self) -> list[dict[str, Any]]:
        return self.of("RunInstances") + self.of("CreateFleet")

    def describe_capacity_reservations(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("DescribeCapacityReservations", kwargs))
        (rid,) = kwargs["CapacityReservationIds"]
        if rid not in self.reservations:
            raise _client_error("InvalidCapacityReservationId.NotFound", "Describe")
        return {"CapacityReservations": [self.reservations[rid]]}

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("DescribeInstances", kwargs))
        return {"Reservations": []}

    def _ids(self, n: int) -> list[str]:
        return [f"i-{k:017x}" for k in range(1, n + 1)]

    def run_instances(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("RunInstances", kwargs))
        ids = self._ids(kwargs["MaxCount"])
        return {"ReservationId": "r-1", "Instances": [{"InstanceId": i} for i in ids]}

    def create_fleet(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("CreateFleet", kwargs))
        target = kwargs["TargetCapacitySpecification"]["TotalTargetCapacity"]
        got = target if self.fleet_fulfils is None else self.fleet_fulfils
        override = kwargs["LaunchTemplateConfigs"][0]["Overrides"][0]
        answer: dict[str, Any] = {
            "FleetId": "fleet-1",
            "Instances": [
                {
                    "LaunchTemplateAndOverrides": {"Overrides": override},
                    "InstanceIds": self._ids(got),
                }
            ],
            "Errors": [],
        }
        if got < target:
            answer["Errors"] = [
                {"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "block is full"}
            ]
        return answer

    def terminate_instances(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("TerminateInstances", kwargs))
        return {"TerminatingInstances": []}


def engine_for(ec2: StubEc2) -> Ec2Engine:
    unused: Any = object()
    clock = RecordingClock(wall=NOW, never_sleeps="an acquire never sleeps")
    return Ec2Engine(CloudClients(ec2=ec2, ssm=unused, eks=unused, iam=unused), clock)


def spec(mode: str, rid: str = ODCR, **overrides: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "pool_name": "pretrain-p5",
        "pool_uid": "6f1c1c9e-pool",
        "acquire_generation": 1,
        "cluster_name": "train",
        "count": 4,
        "instance_type": P5,
        "mode": mode,
        "subnets": SUBNETS,
        "ami_id": "ami-0123456789abcdef0",
        "launch_template": LaunchTemplateRef("lt-0123456789abcdef0"),
        "capacity_reservation": CapacityReservationRef(rid),
        "block_release_margin": timedelta(minutes=35),
    }
    fields.update(overrides)
    return LaunchSpec(**fields)


def refused(ec2: StubEc2, launch: LaunchSpec) -> CloudError:
    with pytest.raises(CloudError) as caught:
        engine_for(ec2).acquire(launch)
    assert ec2.launches() == [], "a refused reservation must not be launched into"
    return caught.value


# --- found and active -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_active_odcr_is_targeted_in_its_zone_only(mode: str) -> None:
    ec2 = StubEc2({ODCR: reservation()})
    result = engine_for(ec2).acquire(spec(mode))

    assert len(result.instance_ids) == 4 and result.capacity_block_ends_at is None
    assert result.subnets == (SUBNETS[1],)
    if mode == "runinstances":
        (sent,) = ec2.of("RunInstances")
        assert sent["CapacityReservationSpecification"] == {
            "CapacityReservationTarget": {"CapacityReservationId": ODCR}
        }
        assert "InstanceMarketOptions" not in sent
        assert sent["SubnetId"] == "subnet-bbbbbbbb"
    else:
        (sent,) = ec2.of("CreateFleet")
        assert [o["SubnetId"] for o in sent["LaunchTemplateConfigs"][0]["Overrides"]] == [
            "subnet-bbbbbbbb"
        ]
        # CreateFleet's API reference: an ODCR by id is reserved capacity named in
        # ReservedCapacityOptions, with no On-Demand target, options or UsageStrategy.
        assert sent["TargetCapacitySpecification"] == {
            "TotalTargetCapacity": 4,
            "DefaultTargetCapacityType": "reserved-capacity",
        }
        assert sent["ReservedCapacityOptions"] == {
            "ReservationTypes": ["on-demand-capacity-reservation"],
            "CapacityReservationTarget": {"CapacityReservationIds": [ODCR]},
        }
        assert "OnDemandOptions" not in sent


@pytest.mark.parametrize("mode", MODES)
def test_the_tokens_named_for_a_reservation_are_those_sent_in_its_zone(mode: str) -> None:
    ec2 = StubEc2({ODCR: reservation()})
    engine = engine_for(ec2)
    named = engine.launch_tokens(spec(mode))

    engine.acquire(spec(mode))

    (sent,) = ec2.launches()
    assert named == (sent["ClientToken"],)  # runinstances: the zone's one subnet only


@pytest.mark.parametrize("mode", MODES)
def test_active_capacity_block_is_launched_as_a_block(mode: str) -> None:
    ec2 = StubEc2({BLOCK: block()})
    result = engine_for(ec2).acquire(spec(mode, BLOCK))

    assert len(result.instance_ids) == 4
    assert result.capacity_block_ends_at == NOW + timedelta(hours=23)
    if mode == "runinstances":
        (sent,) = ec2.of("RunInstances")
        assert sent["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
        assert sent["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
            "CapacityReservationId": BLOCK
        }
        assert sent["SubnetId"] == "subnet-bbbbbbbb"
    else:
        (sent,) = ec2.of("CreateFleet")
        target = sent["TargetCapacitySpecification"]
        assert target == {"TotalTargetCapacity": 4, "DefaultTargetCapacityType": "capacity-block"}
        # A capacity-block fleet carries no On-Demand options at all (nor reserved ones).
        assert "OnDemandOptions" not in sent and "ReservedCapacityOptions" not in sent
        assert [o["SubnetId"] for o in sent["LaunchTemplateConfigs"][0]["Overrides"]] == [
            "subnet-bbbbbbbb"
        ]


@pytest.mark.parametrize("mode", MODES)
def test_an_odcr_in_a_placement_group_is_launched_from_that_group(mode: str) -> None:
    raw = reservation()
    raw["PlacementGroupArn"] = "arn:aws:ec2:us-east-1:123456789012:placement-group/train-pg"
    ec2 = StubEc2({ODCR: raw})
    engine_for(ec2).acquire(spec(mode, placement_group_name="atomic-gang-train-pretrain-p5"))

    if mode == "runinstances":
        (sent,) = ec2.of("RunInstances")
        assert sent["Placement"] == {"GroupName": "train-pg"}
    else:
        (sent,) = ec2.of("CreateFleet")
        (override,) = sent["LaunchTemplateConfigs"][0]["Overrides"]
        assert override["Placement"] == {"GroupName": "train-pg"}


@pytest.mark.parametrize("mode", MODES)
def test_the_pools_placement_group_is_used_otherwise(mode: str) -> None:
    ec2 = StubEc2({BLOCK: block()})
    engine_for(ec2).acquire(spec(mode, BLOCK, placement_group_name="atomic-gang-train-p5"))
    (sent,) = ec2.launches()
    placement = (
        sent["Placement"]
        if mode == "runinstances"
        else sent["LaunchTemplateConfigs"][0]["Overrides"][0]["Placement"]
    )
    assert placement == {"GroupName": "atomic-gang-train-p5"}


def test_a_partial_fleet_answer_from_a_block_is_rolled_back() -> None:
    ec2 = StubEc2({BLOCK: block()}, fleet_fulfils=3)
    with pytest.raises(CloudError) as caught:
        engine_for(ec2).acquire(spec("fleet", BLOCK))

    assert caught.value.kind is ErrorKind.MALFORMED and caught.value.ends_generation
    # The stub never shows them shutting down, so the rollback terminates again and hands
    # them over (see test_eventual_consistency): every call names the partial set.
    calls = ec2.of("TerminateInstances")
    assert calls and all(
        sorted(call["InstanceIds"]) == [f"i-{k:017x}" for k in range(1, 4)] for call in calls
    )


# --- refused before any launch ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_scheduled_block_holds_with_its_start_time(mode: str) -> None:
    start = NOW + timedelta(minutes=20)
    ec2 = StubEc2({BLOCK: block(state="scheduled", start=start, end=start + timedelta(days=1))})
    err = refused(ec2, spec(mode, BLOCK))

    assert isinstance(err, ReservationNotActive) and err.kind is ErrorKind.NOT_ACTIVE
    assert err.starts_at == start and not err.ends_generation
    assert "2026-03-01T12:20:00Z" in err.message and BLOCK in err.message


@pytest.mark.parametrize("mode", MODES)
def test_expired_block_is_a_config_error_naming_it(mode: str) -> None:
    ended = NOW - timedelta(hours=1)
    ec2 = StubEc2({BLOCK: block(state="expired", start=ended - timedelta(days=1), end=ended)})
    err = refused(ec2, spec(mode, BLOCK))

    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationNotUsable"
    assert BLOCK in err.message and "expired" in err.message


@pytest.mark.parametrize("mode", MODES)
def test_block_ending_within_the_release_margin_is_not_launched_into(mode: str) -> None:
    ec2 = StubEc2({BLOCK: block(end=NOW + timedelta(minutes=30))})
    err = refused(ec2, spec(mode, BLOCK))
    assert err.kind is ErrorKind.CONFIG and err.reason == "CapacityBlockEnding"
    assert BLOCK in err.message


@pytest.mark.parametrize("state", ["cancelled", "failed"])
def test_cancelled_or_failed_odcr_is_a_config_error(state: str) -> None:
    err = refused(StubEc2({ODCR: reservation(state=state)}), spec("runinstances"))
    assert err.kind is ErrorKind.CONFIG and ODCR in err.message and state in err.message


@pytest.mark.parametrize("mode", MODES)
def test_unknown_reservation_is_a_config_error_naming_it(mode: str) -> None:
    err = refused(StubEc2({}), spec(mode, "cr-0aaaaaaaaaaaaaaaa"))
    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationNotFound"
    assert "cr-0aaaaaaaaaaaaaaaa" in err.message
    assert c.ANN_CAPACITY_RESERVATION_ID in err.message


@pytest.mark.parametrize("mode", MODES)
def test_reservation_of_another_type_is_a_config_error_naming_both(mode: str) -> None:
    ec2 = StubEc2({ODCR: reservation(instance_type="p4d.24xlarge")})
    err = refused(ec2, spec(mode))
    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationTypeMismatch"
    assert "p4d.24xlarge" in err.message and P5 in err.message


@pytest.mark.parametrize("mode", MODES)
def test_explicit_zone_contradicting_the_reservation_names_both(mode: str) -> None:
    launch = spec(mode, subnets=(SUBNETS[0],), explicit_placement=("us-east-1a",))
    err = refused(StubEc2({ODCR: reservation(zone="us-east-1b")}), launch)
    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationZoneConflict"
    assert "us-east-1a" in err.message and "us-east-1b" in err.message


def test_reservation_zone_without_a_cluster_subnet_is_a_config_error() -> None:
    launch = spec("runinstances", subnets=(SUBNETS[0],))
    err = refused(StubEc2({ODCR: reservation(zone="us-east-1b")}), launch)
    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationZoneNotInSubnets"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("available", [3, 0], ids=["fewer-free-than-n", "full"])
def test_fewer_free_slots_than_n_is_a_shortfall_at_zero(mode: str, available: int) -> None:
    err = refused(StubEc2({ODCR: reservation(available=available)}), spec(mode))
    assert err.kind is ErrorKind.CAPACITY and err.ends_generation
    assert err.reason == "ReservationShortfall"
    assert f"{available} of 8" in err.message and "needs 4" in err.message


def test_reservation_record_is_parsed_from_ec2s_fields() -> None:
    parsed = reservation_from(
        block(start="2026-03-01T11:00:00Z", end="2026-03-02T11:00:00.000Z", available=2)
    )
    assert parsed.kind == "capacity-block" and parsed.match_criteria == "targeted"
    assert parsed.start == datetime(2026, 3, 1, 11, tzinfo=UTC)
    assert parsed.end == datetime(2026, 3, 2, 11, tzinfo=UTC)
    assert (parsed.total, parsed.available) == (8, 2)
    assert parsed.ref() == CapacityReservationRef(BLOCK, "capacity-block", "us-east-1b")
    assert reservation_from(reservation()).kind == "odcr"
