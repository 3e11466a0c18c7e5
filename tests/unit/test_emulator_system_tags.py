"""The emulator as EC2 documents it on the evidence the ownership proof reads.

- "Tag your Amazon EC2 resources", Tag restrictions: the `aws:` prefix is reserved; a caller
  can neither set (CreateTags, TagSpecifications at launch) nor delete such a key, so
  `aws:ec2:fleet-id` and `aws:ec2launchtemplate:id` on an instance are EC2's word.
- "FleetData" (EC2 API Reference): DescribeFleets answers each fleet's `ClientToken`; per
  "CreateFleet", a request without one gets a randomly generated token.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from provisioner.api import constants as c
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def _instance(world: World) -> str:
    out = world.ec2.run_instances(ImageId=world.ami_id(), MinCount=1, MaxCount=1)
    return str(out["Instances"][0]["InstanceId"])


def _tags(world: World, instance_id: str) -> dict[str, str]:
    found = world.ec2.describe_instances(InstanceIds=[instance_id])
    return {t["Key"]: t["Value"] for t in found["Reservations"][0]["Instances"][0].get("Tags", [])}


@pytest.mark.parametrize("key", ["aws:ec2:fleet-id", "aws:ec2launchtemplate:id", "AWS:anything"])
def test_a_caller_cannot_set_a_tag_key_in_the_reserved_prefix(world: World, key: str) -> None:
    instance_id = _instance(world)
    with pytest.raises(ClientError) as caught:
        world.ec2.create_tags(Resources=[instance_id], Tags=[{"Key": key, "Value": "fleet-x"}])
    assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "reserved" in caught.value.response["Error"]["Message"]
    assert key not in _tags(world, instance_id)
    with pytest.raises(ClientError):
        world.ec2.run_instances(
            ImageId=world.ami_id(),
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": key, "Value": "x"}]}],
        )


def test_a_caller_cannot_delete_a_system_tag(world: World) -> None:
    template = world.launch_template()
    out = world.ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": template.template_id}, MinCount=1, MaxCount=1
    )
    instance_id = out["Instances"][0]["InstanceId"]
    assert _tags(world, instance_id)["aws:ec2launchtemplate:id"] == template.template_id
    with pytest.raises(ClientError) as caught:
        world.ec2.delete_tags(Resources=[instance_id], Tags=[{"Key": "aws:ec2launchtemplate:id"}])
    assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert _tags(world, instance_id)["aws:ec2launchtemplate:id"] == template.template_id
    # Ordinary keys are untouched by the rule.
    world.ec2.create_tags(Resources=[instance_id], Tags=[{"Key": "team", "Value": "aws:ml"}])
    assert _tags(world, instance_id)["team"] == "aws:ml"


def test_describe_fleets_answers_the_fleets_client_token(world: World) -> None:
    spec = world.spec(count=1, mode=c.MODE_FLEET, launch_template=world.launch_template())
    result = world.engine.acquire(spec)
    tagged = world.ec2.describe_instances(InstanceIds=list(result.instance_ids))
    instance = tagged["Reservations"][0]["Instances"][0]
    fleet_id = {t["Key"]: t["Value"] for t in instance["Tags"]}["aws:ec2:fleet-id"]
    fleet = world.ec2.describe_fleets(FleetIds=[fleet_id])["Fleets"][0]
    assert fleet["ClientToken"] == result.client_token == spec.client_token("fleet")

    untokened = world.ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": spec.launch_template.template_id,  # type: ignore[union-attr]
                    "Version": "$Latest",
                }
            }
        ],
        TargetCapacitySpecification={
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": "on-demand",
        },
    )
    generated = world.ec2.describe_fleets(FleetIds=[untokened["FleetId"]])["Fleets"][0]
    assert generated["ClientToken"] and generated["ClientToken"] != fleet["ClientToken"]
