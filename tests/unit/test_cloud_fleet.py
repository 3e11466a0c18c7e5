"""fleet mode against the emulator: instant CreateFleet with MinTargetCapacity = N."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.api import constants as c
from provisioner.cloud import naming
from provisioner.cloud.errors import CloudError, ErrorKind, classify_code, describe_code
from provisioner.cloud.fleet import launch_fleet
from provisioner.cloud.nodeadm import parse_user_data
from provisioner.cloud.types import LaunchSpec, SubnetRef
from tests.unit.test_cloud_helpers import CLUSTER, GPU_TYPE, POOL, POOL_UID, World, emulated_aws

pytestmark = pytest.mark.unit

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def fleet_spec(world: World, **overrides: Any) -> LaunchSpec:
    user_data = world.engine.render_user_data(world.cluster, POOL, "gen-1")
    fields: dict[str, Any] = {
        "mode": "fleet",
        "launch_template": world.launch_template(user_data),
        "user_data": None,
        "instance_profile": None,
    }
    fields.update(overrides)
    return world.spec(**fields)


def test_full_gang_is_launched_with_tags_user_data_and_profile(world: World) -> None:
    spec = fleet_spec(world)
    result = world.engine.acquire(spec)

    assert len(result.instance_ids) == 4 and result.mode == "fleet"
    assert result.fleet_id and result.client_token == naming.client_token(POOL_UID, 1, "fleet")
    assert len(result.availability_zones) == 1
    for view in world.engine.describe(result.instance_ids):
        assert view.managed.managed and view.managed.cluster == CLUSTER
        assert view.managed.pool == POOL and view.managed.group == "gen-1"
        assert view.tags[c.cluster_ownership_tag(CLUSTER)] == "owned"
        raw = world.ec2.describe_instance_attribute(
            InstanceId=view.instance_id, Attribute="userData"
        )["UserData"]["Value"]
        node = parse_user_data(base64.b64decode(raw))
        assert node.labels[c.GROUP_LABEL] == "gen-1"
    assert spec.launch_template is not None
    template_id = spec.launch_template.template_id
    template = world.ec2.describe_launch_template_versions(LaunchTemplateId=template_id)[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert template["IamInstanceProfile"] == {"Arn": world.profile.arn}

    (sent,) = world.captured.of("CreateFleet")
    assert sent["Type"] == "instant"
    assert sent["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 4,
        "DefaultTargetCapacityType": "on-demand",
        "OnDemandTargetCapacity": 4,
    }
    assert sent["OnDemandOptions"]["MinTargetCapacity"] == 4
    assert sent["OnDemandOptions"]["SingleAvailabilityZone"] is True
    overrides = sent["LaunchTemplateConfigs"][0]["Overrides"]
    assert [o["SubnetId"] for o in overrides] == [world.subnets[z] for z in ZONES]
    assert [o["Priority"] for o in overrides] == [0.0, 1.0, 2.0]
    assert {t["ResourceType"] for t in sent["TagSpecifications"]} == {"instance", "fleet"}


def test_fleet_uses_a_later_zone_when_the_first_is_short(world: World) -> None:
    world.emu.set_capacity("us-east-1a", GPU_TYPE, 2)
    result = world.engine.acquire(fleet_spec(world))
    assert result.availability_zones == ("us-east-1b",)
    assert len(world.live_instances()) == 4


def test_capacity_shortfall_everywhere_leaves_nothing(world: World) -> None:
    for zone in ZONES:
        world.emu.set_capacity(zone, GPU_TYPE, 3)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(fleet_spec(world))

    assert caught.value.kind is ErrorKind.CAPACITY and caught.value.ends_generation
    assert caught.value.code == "InsufficientInstanceCapacity"
    assert world.live_instances() == []


def test_short_fleet_answer_is_rolled_back_to_zero(world: World) -> None:
    world.emu.set_short_answer("CreateFleet", missing=1)

    with pytest.raises(CloudError) as caught:
        world.engine.acquire(fleet_spec(world))

    err = caught.value
    assert err.kind is ErrorKind.MALFORMED and err.reason == "PartialFleet"
    assert "3 of 4" in err.message and "terminated" in err.message
    assert err.instance_ids == ()
    assert world.live_instances() == []
    terminated = world.captured.of("TerminateInstances")
    assert len(terminated) == 1 and len(terminated[0]["InstanceIds"]) == 3


def test_repeated_client_token_does_not_launch_a_second_set(world: World) -> None:
    spec = fleet_spec(world)
    first = launch_fleet(world.ec2, spec)
    again = launch_fleet(world.ec2, spec)

    assert again.fleet_id == first.fleet_id
    assert again.instance_ids == first.instance_ids
    assert len(world.live_instances()) == 4


def test_fleet_without_a_launch_template_is_a_config_error(world: World) -> None:
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(fleet_spec(world, launch_template=None))
    assert caught.value.kind is ErrorKind.CONFIG
    assert caught.value.reason == "FleetNeedsLaunchTemplate"
    assert world.captured.of("CreateFleet") == []


def test_throttled_create_fleet_is_retryable(world: World) -> None:
    world.emu.inject_fault("CreateFleet", "RequestLimitExceeded")
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(fleet_spec(world))
    assert caught.value.kind is ErrorKind.RETRYABLE
    assert world.live_instances() == []


def test_release_of_a_fleet_gang_deletes_its_leftover_eni(world: World) -> None:
    result = world.engine.acquire(fleet_spec(world))
    target = world.engine.describe(result.instance_ids[:1])[0]
    assert target.subnet_id is not None
    eni = world.ec2.create_network_interface(SubnetId=target.subnet_id)["NetworkInterface"]
    world.ec2.attach_network_interface(
        NetworkInterfaceId=eni["NetworkInterfaceId"], InstanceId=target.instance_id, DeviceIndex=1
    )

    report = world.engine.release(result.instance_ids)

    assert report.enis_deleted == (eni["NetworkInterfaceId"],) and report.complete
    assert world.live_instances() == []


def extra_subnet(world: World, zone: str, cidr: str) -> str:
    made = world.ec2.create_subnet(
        VpcId=world.cluster.vpc_id, CidrBlock=cidr, AvailabilityZone=zone
    )
    subnet_id: str = made["Subnet"]["SubnetId"]
    return subnet_id


def test_a_zone_with_two_subnets_gets_one_override_and_the_gang_launches(world: World) -> None:
    # eksctl registers a public and a private subnet in every zone; both reach the plan.
    private = extra_subnet(world, "us-east-1a", "172.31.250.0/24")
    subnets = (
        SubnetRef(private, "us-east-1a"),
        *world.subnet_refs("us-east-1a", "us-east-1b", "us-east-1c"),
    )
    result = world.engine.acquire(fleet_spec(world, subnets=subnets))

    assert len(result.instance_ids) == 4
    (sent,) = world.captured.of("CreateFleet")
    overrides = sent["LaunchTemplateConfigs"][0]["Overrides"]
    # The zone's first subnet in the plan's order stands for it.
    assert [o["SubnetId"] for o in overrides] == [
        private,
        world.subnets["us-east-1b"],
        world.subnets["us-east-1c"],
    ]
    assert [o["Priority"] for o in overrides] == [0.0, 1.0, 2.0]


def test_ec2_refuses_two_overrides_of_one_instance_pool_and_creates_no_fleet(
    world: World,
) -> None:
    # The emulator follows EC2 here: a request the product never sends, sent by hand.
    second = extra_subnet(world, "us-east-1a", "172.31.251.0/24")
    spec = fleet_spec(world)
    assert spec.launch_template is not None
    fleets_before = world.ec2.describe_fleets()["Fleets"]
    with pytest.raises(ClientError) as caught:
        world.ec2.create_fleet(
            Type="instant",
            TargetCapacitySpecification={
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": "on-demand",
            },
            LaunchTemplateConfigs=[
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": spec.launch_template.template_id,
                        "Version": "$Latest",
                    },
                    "Overrides": [
                        {"InstanceType": spec.instance_type, "SubnetId": subnet}
                        for subnet in (world.subnets["us-east-1a"], second)
                    ],
                }
            ],
        )
    assert caught.value.response["Error"]["Code"] == "InvalidFleetConfig"
    assert "duplicate instance pools" in caught.value.response["Error"]["Message"]
    assert world.ec2.describe_fleets()["Fleets"] == fleets_before
    assert world.live_instances() == []


def test_invalid_fleet_config_is_a_configuration_error_naming_the_fix() -> None:
    assert classify_code("InvalidFleetConfig") is ErrorKind.CONFIG
    reason, fix = describe_code("InvalidFleetConfig", ErrorKind.CONFIG)
    assert reason == "InvalidFleetConfig" and c.ANN_SUBNETS in fix


def test_two_user_named_subnets_in_one_zone_the_nearly_full_one_named_first(
    world: World,
) -> None:
    """The Job names a private /28 (11 free addresses) before the zone's roomy subnet; a
    gang of 4 nodes with 4 interfaces each needs 16. User-named subnets rank as discovered
    ones do, so the fleet's one override for the zone is the roomy subnet and the gang
    launches there; the /28 stays in the plan as the zone's fallback."""
    nearly_full = extra_subnet(world, "us-east-1b", "172.31.250.0/28")
    roomy = world.subnets["us-east-1b"]
    plan = world.engine.plan_subnets(
        mode="fleet",
        cluster=world.cluster,
        explicit_subnet_ids=[nearly_full, roomy],
        addresses_needed=16,
    )
    assert plan == (SubnetRef(roomy, "us-east-1b"), SubnetRef(nearly_full, "us-east-1b"))

    result = world.engine.acquire(fleet_spec(world, subnets=plan))

    assert len(result.instance_ids) == 4
    (sent,) = world.captured.of("CreateFleet")
    assert [o["SubnetId"] for o in sent["LaunchTemplateConfigs"][0]["Overrides"]] == [roomy]
    assert {i["SubnetId"] for i in world.live_instances()} == {roomy}
