"""Subnet planning: explicit wins, zones filter and order, and the per-zone ranking rule."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.types import SubnetRef
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def extra_subnet(world: World, zone: str, cidr: str) -> str:
    made = world.ec2.create_subnet(
        VpcId=world.cluster.vpc_id, CidrBlock=cidr, AvailabilityZone=zone
    )
    subnet_id: str = made["Subnet"]["SubnetId"]
    return subnet_id


def test_cluster_subnets_in_zone_order(world: World) -> None:
    plan = world.engine.plan_subnets(mode="runinstances", cluster=world.cluster)
    assert [s.availability_zone for s in plan] == sorted(world.subnets)
    assert plan[0] == SubnetRef(world.subnets["us-east-1a"], "us-east-1a")


def test_requested_zones_filter_and_order(world: World) -> None:
    plan = world.engine.plan_subnets(
        mode="runinstances", cluster=world.cluster, availability_zones=["us-east-1c", "us-east-1a"]
    )
    assert plan == world.subnet_refs("us-east-1c", "us-east-1a")


def with_subnets(world: World, *extra: str) -> object:
    return type(world.cluster)(
        **{**world.cluster.__dict__, "subnet_ids": (*world.cluster.subnet_ids, *extra)}
    )


@pytest.mark.parametrize("mode", ["runinstances", "fleet"])
def test_every_subnet_of_a_zone_in_rank_order_private_first(world: World, mode: str) -> None:
    small = extra_subnet(world, "us-east-1b", "172.31.250.0/28")
    plan = world.engine.plan_subnets(
        mode=mode, cluster=with_subnets(world, small), availability_zones=["us-east-1b"]
    )
    # Default subnets map public addresses; the private /28 ranks first despite its size,
    # and the zone's public subnet follows as its fallback.
    assert plan == (SubnetRef(small, "us-east-1b"), *world.subnet_refs("us-east-1b"))


@pytest.mark.parametrize("mode", ["runinstances", "fleet"])
def test_a_subnet_without_room_for_the_gang_ranks_behind_the_zones_others(
    world: World, mode: str
) -> None:
    """eksctl's layout: a public and a private subnet per zone. The private /28 has 11 free
    addresses: enough for a gang of 8 single-interface nodes, not for 4 nodes of 4 EFA
    interfaces, whose launch there would fail InsufficientFreeAddressesInSubnet."""
    small = extra_subnet(world, "us-east-1b", "172.31.250.0/28")
    cluster = with_subnets(world, small)
    public = world.subnet_refs("us-east-1b")

    fits = world.engine.plan_subnets(
        mode=mode, cluster=cluster, availability_zones=["us-east-1b"], addresses_needed=8
    )
    full = world.engine.plan_subnets(
        mode=mode, cluster=cluster, availability_zones=["us-east-1b"], addresses_needed=16
    )

    assert fits == (SubnetRef(small, "us-east-1b"), *public)
    assert full == (*public, SubnetRef(small, "us-east-1b"))


def test_explicit_subnets_win_and_keep_their_order(world: World) -> None:
    wanted = [world.subnets["us-east-1d"], world.subnets["us-east-1a"]]
    plan = world.engine.plan_subnets(
        mode="runinstances", cluster=world.cluster, explicit_subnet_ids=wanted
    )
    assert plan == world.subnet_refs("us-east-1d", "us-east-1a")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        (
            {"explicit_subnet_ids": ["subnet-1"], "availability_zones": ["us-east-1a"]},
            "SubnetsAndZones",
        ),
        ({"availability_zones": ["us-west-2a"]}, "NoSubnetInZone"),
        ({"explicit_subnet_ids": ["subnet-00000000000000000"]}, "InvalidSubnet"),
    ],
)
def test_refusals(world: World, kwargs: dict[str, list[str]], reason: str) -> None:
    with pytest.raises(CloudError) as caught:
        world.engine.plan_subnets(mode="runinstances", cluster=world.cluster, **kwargs)
    assert caught.value.kind is ErrorKind.CONFIG and caught.value.reason == reason


def test_subnet_outside_the_cluster_vpc_is_refused(world: World) -> None:
    vpc = world.ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    foreign = world.ec2.create_subnet(
        VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone="us-east-1a"
    )["Subnet"]["SubnetId"]
    with pytest.raises(CloudError) as caught:
        world.engine.plan_subnets(
            mode="runinstances", cluster=world.cluster, explicit_subnet_ids=[foreign]
        )
    assert caught.value.reason == "SubnetOutsideClusterVpc"


def test_runinstances_falls_back_to_the_zones_next_subnet_when_one_is_out_of_addresses(
    world: World,
) -> None:
    """The sweep's rule for a subnet-only answer: the zone's next subnet, in the same pass."""
    small = extra_subnet(world, "us-east-1b", "172.31.250.0/28")
    plan = world.engine.plan_subnets(
        mode="runinstances", cluster=with_subnets(world, small), availability_zones=["us-east-1b"]
    )
    world.emu.inject_fault("RunInstances", "InsufficientFreeAddressesInSubnet")

    result = world.engine.acquire(world.spec(count=2, subnets=plan))

    (public,) = world.subnet_refs("us-east-1b")
    assert result.subnets == (public,)
    assert [(a.subnet, a.error_code) for a in result.attempts] == [
        (SubnetRef(small, "us-east-1b"), "InsufficientFreeAddressesInSubnet"),
        (public, None),
    ]
    assert len(world.live_instances()) == 2
