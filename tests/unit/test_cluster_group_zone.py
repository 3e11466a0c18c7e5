"""A cluster placement group lives in one Availability Zone ("Placement groups for your
Amazon EC2 instances"): the emulator refuses a launch into it in another zone than the
instances it holds, and the engine, in both modes, launches the gang in the group's zone
or waits at $0, never reporting a configuration error for it.

EC2's code for the refusal comes from users' reports (the page names none); how an instant
fleet answers is not written down, so both of the emulator's answers are exercised.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.cloud.errors import CloudError, ErrorKind
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit

GROUP = "pg-pretrain"


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        w.ec2.create_placement_group(GroupName=GROUP, Strategy="cluster")
        yield w


def launch_in(world: World, zone: str, group: str = GROUP) -> str:
    """Someone's instance in the group (a set still shutting down, a stray)."""
    made = world.ec2.run_instances(
        ImageId=world.ami_id(),
        InstanceType="m5.large",
        MinCount=1,
        MaxCount=1,
        SubnetId=world.subnets[zone],
        Placement={"GroupName": group},
    )
    return str(made["Instances"][0]["InstanceId"])


def zones_of(world: World, ids: Any) -> set[str]:
    found = world.ec2.describe_instances(InstanceIds=list(ids))["Reservations"]
    return {i["Placement"]["AvailabilityZone"] for r in found for i in r["Instances"]}


# --- the emulator ----------------------------------------------------------------------------
def test_a_launch_into_a_cluster_group_in_another_zone_is_refused_until_it_empties(
    world: World,
) -> None:
    first = launch_in(world, "us-east-1a")
    with pytest.raises(ClientError) as refused:
        launch_in(world, "us-east-1b")
    error = refused.value.response["Error"]
    assert error["Code"] == "InvalidPlacementGroup.InUse"
    assert GROUP in error["Message"] and "us-east-1a" in error["Message"]

    launch_in(world, "us-east-1a")  # the group's own zone takes more
    world.ec2.terminate_instances(InstanceIds=[first])
    world.ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in world.live_instances()])
    launch_in(world, "us-east-1b")


def test_a_spread_group_may_span_zones(world: World) -> None:
    world.ec2.create_placement_group(GroupName="spread", Strategy="spread")
    launch_in(world, "us-east-1a", "spread")
    launch_in(world, "us-east-1b", "spread")


# --- the engine ------------------------------------------------------------------------------
def test_runinstances_mode_moves_past_zones_the_group_refuses_to_the_groups_zone(
    world: World,
) -> None:
    launch_in(world, "us-east-1c")
    result = world.engine.acquire(world.spec(placement_group_name=GROUP))
    assert zones_of(world, result.instance_ids) == {"us-east-1c"}
    assert [a.error_code for a in result.attempts] == [
        "InvalidPlacementGroup.InUse",
        "InvalidPlacementGroup.InUse",
        None,
    ]


def test_runinstances_mode_waits_at_zero_when_no_allowed_zone_is_the_groups(
    world: World,
) -> None:
    launch_in(world, "us-east-1c")
    spec = world.spec(placement_group_name=GROUP, subnets=world.subnet_refs("us-east-1a"))
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec)
    assert caught.value.kind is ErrorKind.CAPACITY
    assert "InvalidPlacementGroup.InUse" in caught.value.message
    assert len(world.live_instances()) == 1


def fleet_spec(world: World) -> Any:
    return world.spec(
        mode="fleet",
        placement_group_name=GROUP,
        launch_template=world.launch_template(),
        user_data=None,
        instance_profile=None,
    )


def test_fleet_mode_lands_in_the_groups_zone_when_ec2_fails_only_the_other_overrides(
    world: World,
) -> None:
    launch_in(world, "us-east-1b")
    result = world.engine.acquire(fleet_spec(world))
    assert zones_of(world, result.instance_ids) == {"us-east-1b"}


def test_fleet_mode_is_a_wait_at_zero_naming_the_group_when_ec2_refuses_the_whole_call(
    world: World,
) -> None:
    world.emu.set_fleet_placement_answer("refuse-call")
    launch_in(world, "us-east-1b")
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(fleet_spec(world))
    err = caught.value
    assert err.kind is ErrorKind.CAPACITY and err.reason == "PlacementGroupInAnotherZone"
    assert "one zone" in err.message
    assert len(world.live_instances()) == 1
