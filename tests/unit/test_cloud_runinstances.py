"""runinstances mode against the emulator: N-or-0, the AZ sweep, tokens, request shape."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from provisioner.api import constants as c
from provisioner.cloud import naming
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.nodeadm import parse_user_data
from provisioner.cloud.runinstances import launch_runinstances
from tests.unit.test_cloud_helpers import CLUSTER, GPU_TYPE, POOL, POOL_UID, World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def test_full_gang_is_launched_with_tags_user_data_and_profile(world: World) -> None:
    spec = world.spec()
    result = world.engine.acquire(spec)

    assert len(result.instance_ids) == 4
    assert result.mode == "runinstances" and result.group == "gen-1" and not result.adopted
    assert result.availability_zones == ("us-east-1a",)
    assert result.client_token == naming.client_token(POOL_UID, 1, world.subnets["us-east-1a"])
    views = world.engine.describe(result.instance_ids)
    assert [v.instance_id for v in views] == list(result.instance_ids)
    for view in views:
        assert view.tags[c.TAG_MANAGED] == "true"
        assert view.tags[c.TAG_CLUSTER] == CLUSTER
        assert view.tags[c.TAG_POOL] == POOL
        assert view.tags[c.TAG_GROUP] == "gen-1"
        assert view.tags[c.TAG_MAX_LIFETIME] == "4h0m0s"
        assert view.tags[c.TAG_KEEP_WARM_UNTIL] == ""
        assert view.tags[c.cluster_ownership_tag(CLUSTER)] == "owned"
        assert view.managed.pool == POOL and view.managed.keep_warm_until is None
        assert view.provider_id == f"aws:///us-east-1a/{view.instance_id}"
    for instance_id in result.instance_ids:
        user_data = world.ec2.describe_instance_attribute(
            InstanceId=instance_id, Attribute="userData"
        )["UserData"]["Value"]
        node = parse_user_data(base64.b64decode(user_data))
        assert node.labels == {c.POOL_LABEL: POOL, c.GROUP_LABEL: "gen-1"}
        assert node.cluster_name == CLUSTER
    # The emulator checks the profile exists; it records the association on one instance.
    associations = world.ec2.describe_iam_instance_profile_associations()
    assert {
        a["IamInstanceProfile"]["Arn"] for a in associations["IamInstanceProfileAssociations"]
    } == {world.profile.arn}

    (sent,) = world.captured.of("RunInstances")
    assert sent["MinCount"] == sent["MaxCount"] == 4
    assert {t["ResourceType"] for t in sent["TagSpecifications"]} == {
        "instance",
        "volume",
        "network-interface",
    }
    assert sent["MetadataOptions"]["HttpTokens"] == "required"
    assert sent["IamInstanceProfile"] == {"Arn": world.profile.arn}


def test_capacity_shortfall_in_every_zone_leaves_nothing_and_reports_capacity(
    world: World,
) -> None:
    for zone in ("us-east-1a", "us-east-1b", "us-east-1c"):
        world.emu.set_capacity(zone, GPU_TYPE, 3)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec())

    err = caught.value
    assert err.kind is ErrorKind.CAPACITY and err.ends_generation
    assert err.code == "InsufficientInstanceCapacity"
    assert err.reason == "InsufficientCapacity"
    assert "us-east-1a" in err.message and "us-east-1c" in err.message
    assert world.live_instances() == []
    tried = [p["SubnetId"] for p in world.captured.of("RunInstances")]
    assert tried == [world.subnets[z] for z in ("us-east-1a", "us-east-1b", "us-east-1c")]
    assert len({p["ClientToken"] for p in world.captured.of("RunInstances")}) == 3


def test_sweep_moves_to_the_next_zone_after_a_shortfall(world: World) -> None:
    world.emu.set_capacity("us-east-1a", GPU_TYPE, 0)

    result = world.engine.acquire(world.spec())

    assert result.availability_zones == ("us-east-1b",)
    assert [a.error_code for a in result.attempts] == ["InsufficientInstanceCapacity", None]
    assert len(world.live_instances()) == 4


def test_a_zone_that_said_no_is_not_asked_again_through_another_subnet(world: World) -> None:
    other_1a = world.ec2.create_subnet(
        VpcId=world.cluster.vpc_id, CidrBlock="172.31.200.0/24", AvailabilityZone="us-east-1a"
    )["Subnet"]["SubnetId"]
    world.emu.set_capacity("us-east-1a", GPU_TYPE, 0)
    spec = world.spec(subnets=(*world.subnet_refs("us-east-1a"), *world.subnet_refs("us-east-1b")))
    spec = world.spec(
        subnets=(spec.subnets[0], type(spec.subnets[0])(other_1a, "us-east-1a"), spec.subnets[1])
    )

    result = world.engine.acquire(spec)

    assert result.availability_zones == ("us-east-1b",)
    assert other_1a not in [p["SubnetId"] for p in world.captured.of("RunInstances")]


def test_repeated_client_token_returns_the_same_reservation(world: World) -> None:
    spec = world.spec()
    first = launch_runinstances(world.ec2, spec, None)
    again = launch_runinstances(world.ec2, spec, None)

    assert again.instance_ids == first.instance_ids
    assert again.reservation_id == first.reservation_id
    assert len(world.live_instances()) == 4


def test_acquire_after_a_crash_adopts_the_generation_instead_of_launching(world: World) -> None:
    first = world.engine.acquire(world.spec())
    again = world.engine.acquire(world.spec())

    assert again.adopted and set(again.instance_ids) == set(first.instance_ids)
    assert again.client_token == first.client_token
    assert len(world.captured.of("RunInstances")) == 1
    assert len(world.live_instances()) == 4


def test_a_partial_set_of_the_generation_is_terminated_and_reported(world: World) -> None:
    first = world.engine.acquire(world.spec())
    world.ec2.terminate_instances(InstanceIds=[first.instance_ids[0]])

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec())

    assert caught.value.kind is ErrorKind.MALFORMED and caught.value.ends_generation
    assert world.live_instances() == []


def test_efa_asks_for_an_ena_primary_and_efa_only_on_every_card_and_the_placement_group(
    world: World,
) -> None:
    # Every card of the type lists efa-only (DescribeInstanceTypes), so the primary is
    # plain ENA and each card's EFA device is EFA-only ("Maximize network bandwidth ...").
    world.ec2.create_placement_group(GroupName="pg-pretrain", Strategy="cluster")
    world.engine.acquire(
        world.spec(efa=True, placement_group_name="pg-pretrain", security_group_ids=("sg-1",))
    )

    (sent,) = world.captured.of("RunInstances")
    interfaces = sent["NetworkInterfaces"]
    layout = [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in interfaces]
    assert layout == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        (1, 0, "efa-only"),
        (2, 0, "efa-only"),
        (3, 0, "efa-only"),
    ]
    assert all(n["SubnetId"] == world.subnets["us-east-1a"] for n in interfaces)
    assert all(n["Groups"] == ["sg-1"] for n in interfaces)
    assert "SubnetId" not in sent and "SecurityGroupIds" not in sent
    assert sent["Placement"] == {"GroupName": "pg-pretrain"}


def test_efa_on_a_type_without_it_is_a_config_error(world: World) -> None:
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec(instance_type="m5.large", efa=True))
    assert caught.value.kind is ErrorKind.CONFIG and caught.value.reason == "EfaNotSupported"
    assert world.captured.of("RunInstances") == []


def test_launch_template_is_passed_and_ami_may_come_from_it(world: World) -> None:
    template = world.launch_template()
    world.engine.acquire(world.spec(launch_template=template, ami_id=None))

    (sent,) = world.captured.of("RunInstances")
    assert sent["LaunchTemplate"] == {
        "LaunchTemplateId": template.template_id,
        "Version": "$Latest",
    }
    assert "ImageId" not in sent and "MetadataOptions" not in sent


def test_quota_stops_the_sweep_at_once(world: World) -> None:
    world.emu.inject_fault("RunInstances", "VcpuLimitExceeded", count=3)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec())

    assert caught.value.kind is ErrorKind.CAPACITY and caught.value.reason == "QuotaExceeded"
    assert len(world.captured.of("RunInstances")) == 1


def test_throttling_is_retryable_and_keeps_the_generation(world: World) -> None:
    world.emu.inject_fault("RunInstances", "RequestLimitExceeded")

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec())
    assert caught.value.kind is ErrorKind.RETRYABLE and not caught.value.ends_generation

    # The replay sends the same token to the same first subnet and succeeds.
    result = world.engine.acquire(world.spec())
    tokens = [p["ClientToken"] for p in world.captured.of("RunInstances")]
    assert tokens[0] == tokens[1] == result.client_token


def test_type_offered_nowhere_is_a_config_error(world: World) -> None:
    world.emu.inject_fault("RunInstances", "Unsupported", count=3)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec())

    assert caught.value.kind is ErrorKind.CONFIG
    assert caught.value.reason == "InstanceTypeNotOffered"


def test_access_denied_stops_the_sweep_with_the_fix(world: World) -> None:
    world.emu.inject_fault("RunInstances", "UnauthorizedOperation", count=3)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(world.spec())

    assert caught.value.kind is ErrorKind.CONFIG and caught.value.reason == "AccessDenied"
    assert "IAM" in caught.value.message
    assert len(world.captured.of("RunInstances")) == 1
    assert world.live_instances() == []
