"""The launch template's request (pure) and its provider's check/diff/create/update/delete
against moto in-process (with the project's emulator patches)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from devenv.emulator import install
from stacks.launch_template import (
    LaunchTemplateProvider,
    adopt,
    client_token,
    efa_interfaces,
    launch_template_data,
    launch_template_request,
)

pytestmark = pytest.mark.unit

TAGS = {"atomic-gang.k8s.aws/pool": "p1", "atomic-gang.k8s.aws/managed": "true"}


def props(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "atomic-gang-demo-p1",
        "region": "us-east-1",
        "endpoint": "",
        "image_id": "ami-0123456789abcdef0",
        "instance_type": "p5.48xlarge",
        "user_data": "MIME-Version: 1.0\n\nnodeadm",
        "instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/ip",
        "security_group_ids": ["sg-2", "sg-1"],
        "efa_network_cards": [],
        "placement_group_name": "",
        "tags": TAGS,
    }
    base.update(overrides)
    return base


def test_data_requires_imdsv2_and_encodes_user_data() -> None:
    data = launch_template_data(props())

    assert data["MetadataOptions"] == {
        "HttpTokens": "required",
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 2,
    }
    assert base64.b64decode(data["UserData"]).decode() == "MIME-Version: 1.0\n\nnodeadm"
    assert data["IamInstanceProfile"] == {"Arn": "arn:aws:iam::123456789012:instance-profile/ip"}
    assert data["SecurityGroupIds"] == ["sg-2", "sg-1"]
    assert "NetworkInterfaces" not in data and "Placement" not in data


def test_data_tags_everything_launched_from_it() -> None:
    specs = launch_template_data(props())["TagSpecifications"]

    assert [s["ResourceType"] for s in specs] == ["instance", "volume", "network-interface"]
    for spec in specs:
        assert {t["Key"]: t["Value"] for t in spec["Tags"]} == TAGS


def test_efa_shape_gets_one_interface_per_card_and_the_placement_group() -> None:
    data = launch_template_data(
        props(efa_network_cards=[0, 1, 2, 3], placement_group_name="atomic-gang-demo-p1")
    )

    interfaces = data["NetworkInterfaces"]
    assert [(i["NetworkCardIndex"], i["DeviceIndex"]) for i in interfaces] == [
        (0, 0),
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    assert {i["InterfaceType"] for i in interfaces} == {"efa"}
    assert all(i["DeleteOnTermination"] and i["Groups"] == ["sg-2", "sg-1"] for i in interfaces)
    # Security groups live on the interfaces; EC2 refuses them in both places.
    assert "SecurityGroupIds" not in data
    assert data["Placement"] == {"GroupName": "atomic-gang-demo-p1"}


def test_a_capacity_block_is_targeted_by_the_template_with_its_market_type() -> None:
    data = launch_template_data(
        props(
            capacity_reservation_id="cr-0123456789abcdef0",
            capacity_reservation_kind="capacity-block",
        )
    )
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}


def test_an_odcr_is_not_targeted_by_the_template() -> None:
    """A fleet names an ODCR in ReservedCapacityOptions and does not draw on one its
    template targets by id; RunInstances names it in its own request."""
    data = launch_template_data(
        props(capacity_reservation_id="cr-0123456789abcdef0", capacity_reservation_kind="odcr")
    )
    assert "CapacityReservationSpecification" not in data
    assert "InstanceMarketOptions" not in data


def test_no_reservation_leaves_the_template_untargeted() -> None:
    data = launch_template_data(props(capacity_reservation_id="", capacity_reservation_kind=""))
    assert "CapacityReservationSpecification" not in data
    assert "InstanceMarketOptions" not in data


def test_efa_interfaces_without_security_groups_carry_none() -> None:
    assert "Groups" not in efa_interfaces([0], [])[0]


def test_request_names_and_tags_the_template_with_a_stable_token() -> None:
    request = launch_template_request(props())

    assert request["LaunchTemplateName"] == "atomic-gang-demo-p1"
    assert request["TagSpecifications"] == [
        {
            "ResourceType": "launch-template",
            "Tags": [
                {"Key": "atomic-gang.k8s.aws/managed", "Value": "true"},
                {"Key": "atomic-gang.k8s.aws/pool", "Value": "p1"},
            ],
        }
    ]
    assert request["ClientToken"] == client_token(props())
    assert len(request["ClientToken"]) <= 64
    assert client_token(props(user_data="other")) != request["ClientToken"]


@pytest.mark.parametrize(
    ("change", "replaces", "changes"),
    [
        ({}, [], False),
        ({"name": "other"}, ["name"], True),
        ({"region": "us-west-2"}, ["region"], True),
        ({"user_data": "new"}, [], True),
        ({"tags": {"a": "b"}}, [], True),
        ({"efa_network_cards": [0]}, [], True),
        ({"endpoint": "http://127.0.0.1:1"}, [], True),
    ],
)
def test_diff_replaces_on_identity_and_updates_on_data(
    change: dict[str, Any], replaces: list[str], changes: bool
) -> None:
    olds = {**props(), "launch_template_id": "lt-1", "version": "1"}
    result = LaunchTemplateProvider().diff("lt-1", olds, props(**change))

    assert result.changes is changes
    assert result.replaces == replaces
    assert result.delete_before_replace is True


def test_check_reports_missing_fields_and_sorts_security_groups() -> None:
    result = LaunchTemplateProvider().check({}, props(user_data="", metadata_hop_limit=0))

    assert {f.property for f in result.failures} == {"user_data", "metadata_hop_limit"}
    assert result.inputs["security_group_ids"] == ["sg-1", "sg-2"]
    assert LaunchTemplateProvider().check({}, props()).failures == []


@pytest.fixture
def aws() -> Iterator[Any]:
    with mock_aws():
        install().reset()
        import boto3  # type: ignore[import-untyped]

        yield boto3.client("ec2", region_name="us-east-1")


def _default_data(ec2: Any, template_id: str) -> dict[str, Any]:
    found = ec2.describe_launch_template_versions(
        LaunchTemplateId=template_id, Versions=["$Default"]
    )["LaunchTemplateVersions"]
    return dict(found[0]["LaunchTemplateData"])


def test_create_update_read_delete(aws: Any) -> None:
    provider = LaunchTemplateProvider()
    created = provider.create(props())
    assert created.outs is not None and created.outs["version"] == "1"

    updated = provider.update(created.id, created.outs, props(user_data="v2"))
    assert updated.outs is not None and updated.outs["version"] == "2"
    assert base64.b64decode(_default_data(aws, created.id)["UserData"]) == b"v2"
    # A change of connection details alone makes no new version.
    same = provider.update(created.id, updated.outs, props(user_data="v2", endpoint="x"))
    assert same.outs is not None and same.outs["version"] == "2"

    assert provider.read(created.id, props()).id == created.id
    provider.delete(created.id, props())
    assert aws.describe_launch_templates()["LaunchTemplates"] == []
    assert provider.read(created.id, props()).id == ""
    provider.delete(created.id, props())  # already gone: done


def test_create_adopts_a_template_an_interrupted_create_left(aws: Any) -> None:
    aws.create_launch_template(
        LaunchTemplateName="atomic-gang-demo-p1", LaunchTemplateData={"ImageId": "ami-old"}
    )

    created = LaunchTemplateProvider().create(props())

    assert [t["LaunchTemplateId"] for t in aws.describe_launch_templates()["LaunchTemplates"]] == [
        created.id
    ]
    assert _default_data(aws, created.id)["ImageId"] == "ami-0123456789abcdef0"
    found = adopt(props())
    assert found is not None and found[0] == created.id
    aws.delete_launch_template(LaunchTemplateId=created.id)
    assert adopt(props()) is None
