"""Capacity reservations on the emulator, in both modes: the engine's decision, and the request
that reached EC2 read back from the emulator's side of the wire.

Where ``test_cloud_reservations`` hands the engine a stub EC2, here the engine talks to the
in-process emulator (moto plus the project's reservation model): reservations are made with
its control API, their state follows its clock (bound to the engine's fake clock, so a block
starts when the test moves time), launches consume their slots and give them back on
termination, and ``launch_requests`` shows every RunInstances/CreateFleet as EC2 received
it. Fleet mode launches from a template built by the pool stack's own
``launch_template_data``, which is where a fleet's reservation target lives.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from provisioner.cloud.errors import CloudError, ErrorKind, ReservationNotActive
from provisioner.cloud.types import CapacityReservationRef, LaunchSpec, LaunchTemplateRef
from stacks.launch_template import launch_template_data
from tests.unit.test_cloud_helpers import GPU_TYPE, POOL, REGION, World, emulated_aws

pytestmark = pytest.mark.unit

MODES = ("runinstances", "fleet")
P5 = "p5.48xlarge"
ZONE = "us-east-1b"  # not the first subnet's zone, so "only the reservation's zone" can fail
N = 4


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        # Reservation states follow the emulator's wall clock: make it the engine's clock.
        w.emu.wall_clock = lambda: w.clock.now().timestamp()
        yield w


# --- helpers ------------------------------------------------------------------------------


def odcr(world: World, count: int = 6, instance_type: str = GPU_TYPE, zone: str = ZONE) -> str:
    return world.emu.add_capacity_reservation(instance_type, zone, count)


def capacity_block(
    world: World, count: int = 6, start_in: float = -3600.0, hours: float = 24.0
) -> str:
    start = world.clock.now() + timedelta(seconds=start_in)
    return world.emu.add_capacity_reservation(
        P5, ZONE, count, "capacity-block", start=start, end=start + timedelta(hours=hours)
    )


def spec(world: World, mode: str, rid: str, **overrides: Any) -> LaunchSpec:
    """The pool's launch as the reconciler builds it: the reservation by id only."""
    instance_type = overrides.pop("instance_type", GPU_TYPE)
    fields: dict[str, Any] = {
        "mode": mode,
        "count": N,
        "instance_type": instance_type,
        "capacity_reservation": CapacityReservationRef(rid),
        "block_release_margin": timedelta(minutes=35),
    }
    if mode == "fleet":
        # CreateFleet takes user data, profile and the reservation target from the template.
        fields.update(
            launch_template=template(world, rid, instance_type),
            user_data=None,
            instance_profile=None,
        )
    fields.update(overrides)
    return world.spec(**fields)


def template(world: World, rid: str, instance_type: str) -> LaunchTemplateRef:
    """The pool stack's launch template for this reservation (as its provider writes it)."""
    known = {r["CapacityReservationId"]: r for r in world.emu.capacity_reservation_views()}
    kind = "capacity-block" if known.get(rid, {}).get("ReservationType") == "capacity-block" else ""
    data = launch_template_data(
        {
            "image_id": world.ami_id(),
            "instance_type": instance_type,
            "user_data": world.engine.render_user_data(world.cluster, POOL, "gen-1"),
            "instance_profile_arn": world.profile.arn,
            "capacity_reservation_id": rid,
            "capacity_reservation_kind": kind,
        }
    )
    made = world.ec2.create_launch_template(
        LaunchTemplateName=f"atomic-gang-{POOL}-{uuid.uuid4().hex[:8]}", LaunchTemplateData=data
    )
    return LaunchTemplateRef(made["LaunchTemplate"]["LaunchTemplateId"], "$Latest")


def reservation(world: World, rid: str) -> dict[str, Any]:
    (found,) = world.ec2.describe_capacity_reservations(CapacityReservationIds=[rid])[
        "CapacityReservations"
    ]
    return dict(found)


def available(world: World, rid: str) -> int:
    return int(reservation(world, rid)["AvailableInstanceCount"])


def instances(world: World, ids: Any = None) -> list[dict[str, Any]]:
    if ids is None:
        return world.live_instances()
    found = world.ec2.describe_instances(InstanceIds=list(ids))
    return [i for r in found["Reservations"] for i in r["Instances"]]


def refused(world: World, launch: LaunchSpec) -> CloudError:
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(launch)
    assert world.emu.launch_requests() == [], "a refused reservation reached EC2"
    assert world.live_instances() == []
    return caught.value


def take_slots(world: World, rid: str, instance_type: str, count: int, block: bool) -> list[str]:
    """Someone else's instances in the reservation (a second client, untagged by us)."""
    other = boto3.client("ec2", region_name=REGION)
    params: dict[str, Any] = {
        "ImageId": world.ami_id(),
        "InstanceType": instance_type,
        "MinCount": count,
        "MaxCount": count,
        "Placement": {"AvailabilityZone": ZONE},
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": rid}
        },
    }
    if block:
        params["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return [i["InstanceId"] for i in other.run_instances(**params)["Instances"]]


# --- found and active ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_active_odcr_launches_n_inside_it_in_its_zone_and_gives_them_back(
    world: World, mode: str
) -> None:
    rid = odcr(world)
    assert available(world, rid) == 6

    result = world.engine.acquire(spec(world, mode, rid))

    assert len(result.instance_ids) == N and result.capacity_block_ends_at is None
    launched = instances(world, result.instance_ids)
    assert {i["CapacityReservationId"] for i in launched} == {rid}
    assert {i["Placement"]["AvailabilityZone"] for i in launched} == {ZONE}
    assert all(i.get("InstanceLifecycle") != "capacity-block" for i in launched)
    assert available(world, rid) == 2
    (sent,) = world.emu.launch_requests()
    assert sent["error"] is None and sorted(sent["instance_ids"]) == sorted(result.instance_ids)
    params = sent["params"]
    if mode == "runinstances":
        assert sent["action"] == "RunInstances"
        assert params["CapacityReservationSpecification"] == {
            "CapacityReservationTarget": {"CapacityReservationId": rid}
        }
        assert "InstanceMarketOptions" not in params
        assert params["SubnetId"] == world.subnets[ZONE]
    else:
        assert sent["action"] == "CreateFleet"
        target = params["TargetCapacitySpecification"]
        assert target["DefaultTargetCapacityType"] == "reserved-capacity"
        assert params["ReservedCapacityOptions"]["CapacityReservationTarget"] == {
            "CapacityReservationIds": [rid]
        }
        assert "OnDemandOptions" not in params
        overrides = [o for cfg in params["LaunchTemplateConfigs"] for o in cfg["Overrides"]]
        assert [o["SubnetId"] for o in overrides] == [world.subnets[ZONE]]

    world.engine.release(result.instance_ids)
    assert available(world, rid) == 6


@pytest.mark.parametrize("mode", MODES)
def test_active_capacity_block_is_launched_as_a_block_and_gives_its_slots_back(
    world: World, mode: str
) -> None:
    rid = capacity_block(world)
    assert reservation(world, rid)["State"] == "active"

    result = world.engine.acquire(spec(world, mode, rid, instance_type=P5))

    assert len(result.instance_ids) == N
    assert result.capacity_block_ends_at == reservation(world, rid)["EndDate"]
    launched = instances(world, result.instance_ids)
    assert {i["CapacityReservationId"] for i in launched} == {rid}
    assert {i["InstanceLifecycle"] for i in launched} == {"capacity-block"}
    assert {i["Placement"]["AvailabilityZone"] for i in launched} == {ZONE}
    assert available(world, rid) == 2
    (sent,) = world.emu.launch_requests()
    params = sent["params"]
    if mode == "runinstances":
        assert params["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
        assert params["CapacityReservationSpecification"] == {
            "CapacityReservationTarget": {"CapacityReservationId": rid}
        }
        assert params["SubnetId"] == world.subnets[ZONE]
    else:
        target = params["TargetCapacitySpecification"]
        assert target["DefaultTargetCapacityType"] == "capacity-block"
        assert "OnDemandTargetCapacity" not in target
        assert "OnDemandOptions" not in params
        overrides = [o for cfg in params["LaunchTemplateConfigs"] for o in cfg["Overrides"]]
        assert [o["SubnetId"] for o in overrides] == [world.subnets[ZONE]]

    world.engine.release(result.instance_ids)
    assert available(world, rid) == 6


# --- refused before any launch ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_scheduled_block_holds_with_its_start_and_acquires_once_it_starts(
    world: World, mode: str
) -> None:
    rid = capacity_block(world, start_in=20 * 60)
    start = reservation(world, rid)["StartDate"]
    assert reservation(world, rid)["State"] == "scheduled"

    with pytest.raises(ReservationNotActive) as caught:
        world.engine.acquire(spec(world, mode, rid, instance_type=P5))
    err = caught.value
    assert err.kind is ErrorKind.NOT_ACTIVE and not err.ends_generation
    assert err.starts_at == start
    assert rid in err.message and f"{start:%Y-%m-%dT%H:%M:%SZ}" in err.message
    assert world.emu.launch_requests() == [] and world.live_instances() == []

    world.clock.advance(20 * 60)  # both clocks: the block is active now
    assert reservation(world, rid)["State"] == "active"
    result = world.engine.acquire(spec(world, mode, rid, instance_type=P5))
    assert {i["CapacityReservationId"] for i in instances(world, result.instance_ids)} == {rid}


@pytest.mark.parametrize("mode", MODES)
def test_expired_block_is_a_config_error_naming_it(world: World, mode: str) -> None:
    rid = capacity_block(world, start_in=-2 * 86400, hours=24)
    assert reservation(world, rid)["State"] == "expired"

    err = refused(world, spec(world, mode, rid, instance_type=P5))

    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationNotUsable"
    assert rid in err.message and "expired" in err.message


@pytest.mark.parametrize("mode", MODES)
def test_unknown_reservation_is_a_config_error_naming_it(world: World, mode: str) -> None:
    rid = "cr-0aaaaaaaaaaaaaaaa"
    with pytest.raises(ClientError) as answered:
        world.ec2.describe_capacity_reservations(CapacityReservationIds=[rid])
    assert answered.value.response["Error"]["Code"] == "InvalidCapacityReservationId.NotFound"

    err = refused(world, spec(world, mode, rid))

    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationNotFound"
    assert rid in err.message


@pytest.mark.parametrize("mode", MODES)
def test_reservation_for_another_type_is_a_config_error_naming_both(
    world: World, mode: str
) -> None:
    rid = odcr(world, instance_type=P5)

    err = refused(world, spec(world, mode, rid, instance_type=GPU_TYPE))

    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationTypeMismatch"
    assert P5 in err.message and GPU_TYPE in err.message and rid in err.message
    assert available(world, rid) == 6


@pytest.mark.parametrize("mode", MODES)
def test_zone_annotation_contradicting_the_reservation_names_both(world: World, mode: str) -> None:
    rid = odcr(world, zone=ZONE)

    launch = spec(
        world,
        mode,
        rid,
        subnets=world.subnet_refs("us-east-1a"),
        explicit_placement=("us-east-1a",),
    )
    err = refused(world, launch)

    assert err.kind is ErrorKind.CONFIG and err.reason == "ReservationZoneConflict"
    assert "us-east-1a" in err.message and ZONE in err.message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["odcr", "block"])
def test_fewer_free_than_n_is_a_shortfall_with_nothing_launched(
    world: World, mode: str, kind: str
) -> None:
    rid = odcr(world, count=N - 1) if kind == "odcr" else capacity_block(world, count=N - 1)
    instance_type = GPU_TYPE if kind == "odcr" else P5

    err = refused(world, spec(world, mode, rid, instance_type=instance_type))

    assert err.kind is ErrorKind.CAPACITY and err.ends_generation
    assert err.reason == "ReservationShortfall"
    assert f"{N - 1} of {N - 1}" in err.message and f"needs {N}" in err.message
    assert available(world, rid) == N - 1


@pytest.mark.parametrize("mode", MODES)
def test_full_reservation_is_a_shortfall_and_its_holders_keep_it(world: World, mode: str) -> None:
    rid = odcr(world, count=N)
    holders = take_slots(world, rid, GPU_TYPE, N, block=False)
    assert available(world, rid) == 0
    before = world.emu.launch_requests()

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec(world, mode, rid))

    err = caught.value
    assert err.kind is ErrorKind.CAPACITY and err.reason == "ReservationShortfall"
    assert f"0 of {N}" in err.message
    assert world.emu.launch_requests() == before, "nothing more reached EC2"
    assert {i["InstanceId"] for i in world.live_instances()} == set(holders)


# --- a race between the lookup and the launch ---------------------------------------------


def race_after_lookup(world: World, rid: str, instance_type: str, block: bool) -> list[str]:
    """Once the engine has read the reservation, someone else takes one of its slots."""
    taken: list[str] = []

    def steal(**_: Any) -> None:
        if not taken:
            taken.extend(take_slots(world, rid, instance_type, 1, block))

    world.ec2.meta.events.register("after-call.ec2.DescribeCapacityReservations", steal)
    return taken


def test_block_fleet_answered_partially_after_a_race_is_rolled_back_to_zero(
    world: World,
) -> None:
    rid = capacity_block(world, count=N)
    launch = spec(world, "fleet", rid, instance_type=P5)
    taken = race_after_lookup(world, rid, P5, block=True)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(launch)

    err = caught.value
    assert taken and err.kind is ErrorKind.MALFORMED and err.reason == "PartialFleet"
    assert f"{N - 1} of {N}" in err.message
    # EC2 (the emulator) really fulfilled part of the block: N-1 launched, then terminated.
    (sent,) = world.emu.launch_requests("CreateFleet")
    assert len(sent["instance_ids"]) == N - 1 and sent["error"] is None
    assert {i["State"]["Name"] for i in instances(world, sent["instance_ids"])} <= {
        "shutting-down",
        "terminated",
    }
    assert [i["InstanceId"] for i in world.live_instances()] == taken
    assert available(world, rid) == N - 1  # only the racer holds a slot

    world.ec2.terminate_instances(InstanceIds=taken)
    assert available(world, rid) == N


def test_block_fleet_partial_switch_is_rolled_back_to_zero(world: World) -> None:
    rid = capacity_block(world)
    world.emu.set_short_answer("CreateFleet", missing=1)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec(world, "fleet", rid, instance_type=P5))

    assert caught.value.kind is ErrorKind.MALFORMED and caught.value.reason == "PartialFleet"
    (sent,) = world.emu.launch_requests()
    assert len(sent["instance_ids"]) == N - 1
    assert world.live_instances() == []
    assert available(world, rid) == 6


def test_odcr_runinstances_after_a_race_is_refused_whole_by_ec2(world: World) -> None:
    rid = odcr(world, count=N)
    taken = race_after_lookup(world, rid, GPU_TYPE, block=False)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec(world, "runinstances", rid))

    assert taken and caught.value.kind is ErrorKind.CAPACITY
    assert caught.value.code == "ReservationCapacityExceeded"
    ours = world.emu.launch_requests()[-1]
    assert ours["error"] == "ReservationCapacityExceeded" and ours["instance_ids"] == []
    assert [i["InstanceId"] for i in world.live_instances()] == taken


@pytest.mark.parametrize("answer", ["partial", "none"])
def test_odcr_fleet_after_a_race_leaves_no_partial_set_whichever_way_ec2_answers(
    world: World, answer: str
) -> None:
    """A reserved-capacity fleet short of its target: the docs do not say whether EC2
    launches the part the ODCR holds; with either answer the product keeps N-or-0."""
    world.emu.fleet_answers.set(reserved_shortfall=answer)
    rid = odcr(world, count=N)
    taken = race_after_lookup(world, rid, GPU_TYPE, block=False)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec(world, "fleet", rid))

    err = caught.value
    (sent,) = world.emu.launch_requests("CreateFleet")
    assert sent["params"]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == (
        "reserved-capacity"
    )
    if answer == "partial":
        assert err.kind is ErrorKind.MALFORMED and err.reason == "PartialFleet"
        assert len(sent["instance_ids"]) == N - 1
    else:
        assert err.kind is ErrorKind.CAPACITY and err.code == "ReservationCapacityExceeded"
        assert sent["instance_ids"] == []
    assert err.ends_generation
    assert [i["InstanceId"] for i in world.live_instances()] == taken
    assert available(world, rid) == N - 1


def test_odcr_fleet_lands_in_the_reservation_now_that_templates_target_by_id(
    world: World,
) -> None:
    """The emulator launches a fleet into an ODCR its template targets by id, as EC2 does
    ("Launch instances into an existing Capacity Reservation"). The product's fleet still
    names the reservation in ReservedCapacityOptions, with a template that targets none:
    N launch into the reservation, in its zone, and nothing else is taken from it."""
    rid = odcr(world)

    result = world.engine.acquire(spec(world, "fleet", rid))

    launched = instances(world, result.instance_ids)
    assert len(launched) == N
    assert {i["CapacityReservationId"] for i in launched} == {rid}
    assert {i["Placement"]["AvailabilityZone"] for i in launched} == {ZONE}
    assert available(world, rid) == 6 - N
    (sent,) = world.emu.launch_requests("CreateFleet")
    assert sent["params"]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == (
        "reserved-capacity"
    )
