"""The emulator's Capacity Block calendar as EC2 documents it: DescribeCapacityBlockOfferings
filtered by type, count, duration and window, the durations EC2 sells and nothing else,
PurchaseCapacityBlock creating a scheduled block with its tags and shrinking the calendar,
a purchase whose answer is lost after it took effect, and the purchase evaluated by IAM.

Every call goes through boto3 to the in-process emulator (moto plus the project's patches).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.unit.test_cloud_helpers import REGION, World, _session, emulated_aws

pytestmark = pytest.mark.unit

P5 = "p5.48xlarge"
ZONE = f"{REGION}a"
NO_RETRIES = Config(retries={"max_attempts": 1, "mode": "standard"})


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        # The calendar and the blocks follow the emulator's wall clock: make it the test's.
        w.emu.wall_clock = lambda: w.clock.now().timestamp()
        yield w


def _at(world: World, seconds: float) -> datetime:
    return world.clock.now() + timedelta(seconds=seconds)


def _seed(
    world: World,
    start_in: float,
    fee: str,
    *,
    instances: int = 4,
    hours: int = 24,
    instance_type: str = P5,
    zone: str = ZONE,
) -> str:
    return world.emu.add_capacity_block_offering(
        instance_type, zone, instances, _at(world, start_in), hours, fee
    )


def _offerings(world: World, count: int = 2, hours: int = 24, **extra: Any) -> list[Any]:
    answer = world.ec2.describe_capacity_block_offerings(
        InstanceType=P5, InstanceCount=count, CapacityDurationHours=hours, **extra
    )
    return list(answer["CapacityBlockOfferings"])


def _refused(call: Any, **params: Any) -> str:
    with pytest.raises(ClientError) as caught:
        call(**params)
    return str(caught.value.response["Error"]["Code"])


def _blocks(world: World) -> list[dict[str, Any]]:
    return list(world.ec2.describe_capacity_reservations()["CapacityReservations"])


def test_offerings_are_filtered_by_type_count_duration_and_window(world: World) -> None:
    soon = _seed(world, 300, "1000.50")
    _seed(world, 600, "900", instances=1)  # too few for 2
    _seed(world, 900, "800", hours=48)  # another duration
    _seed(world, 1200, "700", instance_type="p4d.24xlarge")  # another type
    _seed(world, -60, "100")  # already started: no longer sold
    late = _seed(world, 7200, "500")

    found = _offerings(world)
    assert [(o["StartDate"], o["UpfrontFee"]) for o in found] == [
        (_at(world, 300), "2001.00"),
        (_at(world, 7200), "1000.00"),
    ], "an offering for k instances costs k times one instance's fee"
    first = found[0]
    assert (first["InstanceType"], first["AvailabilityZone"], first["InstanceCount"]) == (
        P5,
        ZONE,
        2,
    )
    assert first["EndDate"] - first["StartDate"] == timedelta(hours=24)
    assert (first["CapacityBlockDurationHours"], first["CurrencyCode"]) == (24, "USD")
    assert soon and late

    after = _offerings(world, StartDateRange=_at(world, 301))
    assert [o["StartDate"] for o in after] == [_at(world, 7200)]
    before = _offerings(world, EndDateRange=_at(world, 300 + 24 * 3600))
    assert [o["StartDate"] for o in before] == [_at(world, 300)]
    assert [o["StartDate"] for o in _offerings(world, hours=48)] == [_at(world, 900)]


@pytest.mark.parametrize("hours", [24, 48, 14 * 24, 21 * 24, 182 * 24])
def test_every_duration_ec2_sells_is_accepted(world: World, hours: int) -> None:
    _seed(world, 300, "10", hours=hours)
    assert [o["CapacityBlockDurationHours"] for o in _offerings(world, hours=hours)] == [hours]


@pytest.mark.parametrize("hours", [1, 12, 25, 15 * 24, 16 * 24, 183 * 24, 189 * 24, 0])
def test_a_duration_ec2_does_not_sell_is_refused(world: World, hours: int) -> None:
    code = _refused(
        world.ec2.describe_capacity_block_offerings,
        InstanceType=P5,
        InstanceCount=1,
        CapacityDurationHours=hours,
    )
    assert code == "InvalidParameterValue"


def test_more_than_sixty_four_instances_is_refused(world: World) -> None:
    code = _refused(
        world.ec2.describe_capacity_block_offerings,
        InstanceType=P5,
        InstanceCount=65,
        CapacityDurationHours=24,
    )
    assert code == "InvalidParameterValue"


def test_a_purchase_makes_a_scheduled_tagged_block_and_shrinks_the_calendar(world: World) -> None:
    _seed(world, 300, "1000", instances=4)
    offering = _offerings(world)[0]
    tags = [{"Key": "atomic-gang/cluster", "Value": "demo"}, {"Key": "pool", "Value": "p"}]

    bought = world.ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering["CapacityBlockOfferingId"],
        InstancePlatform="Linux/UNIX",
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": tags}],
    )["CapacityReservation"]

    assert bought["ReservationType"] == "capacity-block"
    assert (bought["State"], bought["InstanceType"], bought["AvailabilityZone"]) == (
        "scheduled",
        P5,
        ZONE,
    )
    assert (bought["TotalInstanceCount"], bought["InstancePlatform"]) == (2, "Linux/UNIX")
    assert (bought["StartDate"], bought["EndDate"]) == (offering["StartDate"], offering["EndDate"])
    assert sorted(bought["Tags"], key=lambda t: t["Key"]) == tags
    [listed] = _blocks(world)
    assert listed["CapacityReservationId"] == bought["CapacityReservationId"]
    assert listed["Tags"] == bought["Tags"]

    # Two of the four are sold: an offering of three is gone, one of two remains.
    assert _offerings(world, count=3) == []
    assert len(_offerings(world, count=2)) == 1

    world.clock.advance(301)
    assert _blocks(world)[0]["State"] == "active"


def test_a_sold_out_offering_is_gone_and_cannot_be_bought_again(world: World) -> None:
    _seed(world, 300, "1000", instances=2)
    offering_id = _offerings(world)[0]["CapacityBlockOfferingId"]
    world.ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering_id, InstancePlatform="Linux/UNIX"
    )
    assert _offerings(world) == []
    assert world.emu.capacity_block_calendar() == []

    code = _refused(
        world.ec2.purchase_capacity_block,
        CapacityBlockOfferingId=offering_id,
        InstancePlatform="Linux/UNIX",
    )
    assert code == "InvalidParameterValue"
    assert len(_blocks(world)) == 1


def test_a_purchase_needs_a_known_offering_and_a_platform(world: World) -> None:
    _seed(world, 300, "1000")
    offering_id = _offerings(world)[0]["CapacityBlockOfferingId"]
    purchase = world.ec2.purchase_capacity_block
    unknown = _refused(purchase, CapacityBlockOfferingId="cb-0", InstancePlatform="Linux/UNIX")
    assert unknown == "InvalidParameterValue"
    odd = _refused(purchase, CapacityBlockOfferingId=offering_id, InstancePlatform="Plan 9")
    assert odd == "InvalidParameterValue"
    assert _blocks(world) == []


def test_an_offering_that_started_before_its_purchase_is_refused(world: World) -> None:
    _seed(world, 60, "1000")
    offering_id = _offerings(world)[0]["CapacityBlockOfferingId"]
    world.clock.advance(61)
    code = _refused(
        world.ec2.purchase_capacity_block,
        CapacityBlockOfferingId=offering_id,
        InstancePlatform="Linux/UNIX",
    )
    assert code == "InvalidParameterValue"
    assert _blocks(world) == []


def test_a_purchase_whose_answer_is_lost_took_effect_once(world: World) -> None:
    _seed(world, 300, "1000", instances=4)
    offering_id = _offerings(world)[0]["CapacityBlockOfferingId"]
    world.emu.inject_fault("PurchaseCapacityBlock", "InternalError", after=True)
    tags = [{"Key": "intent", "Value": "w-1"}]

    code = _refused(
        world.ec2.purchase_capacity_block,  # one attempt: the fixture's clients do not retry
        CapacityBlockOfferingId=offering_id,
        InstancePlatform="Linux/UNIX",
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": tags}],
    )

    assert code == "InternalError"
    [bought] = _blocks(world)
    assert (bought["TotalInstanceCount"], bought["State"], bought["Tags"]) == (2, "scheduled", tags)
    assert [e["instances"] for e in world.emu.capacity_block_calendar()] == [2]
    assert [e["action"] for e in world.emu.consumed()] == ["PurchaseCapacityBlock"]


def test_an_sdk_retry_of_a_lost_purchase_answer_buys_a_second_block(world: World) -> None:
    """PurchaseCapacityBlock takes no ClientToken: botocore retries a 5xx, and EC2 sells the
    same offering again while it has the capacity. A caller must send it with one attempt."""
    _seed(world, 300, "1000", instances=4)
    offering_id = _offerings(world)[0]["CapacityBlockOfferingId"]
    world.emu.inject_fault("PurchaseCapacityBlock", "InternalError", after=True)
    retrying = _session().client(
        "ec2", region_name=REGION, config=Config(retries={"max_attempts": 2, "mode": "standard"})
    )
    retrying.purchase_capacity_block(
        CapacityBlockOfferingId=offering_id, InstancePlatform="Linux/UNIX"
    )
    assert len(_blocks(world)) == 2


def _user(statements: list[dict[str, Any]]) -> Any:
    iam = _session().client("iam", config=NO_RETRIES)
    iam.create_user(UserName="buyer")
    policy = {"Version": "2012-10-17", "Statement": statements}
    iam.put_user_policy(UserName="buyer", PolicyName="p", PolicyDocument=json.dumps(policy))
    made = iam.create_access_key(UserName="buyer")["AccessKey"]
    import boto3

    session = boto3.Session(
        aws_access_key_id=made["AccessKeyId"],
        aws_secret_access_key=made["SecretAccessKey"],
        region_name=REGION,
    )
    return session.client("ec2", config=NO_RETRIES)


def test_iam_scopes_the_purchase_by_its_request_tags(world: World) -> None:
    _seed(world, 300, "1000", instances=4)
    ours = {"aws:RequestTag/atomic-gang/cluster": "demo"}
    ec2 = _user(
        [
            {"Effect": "Allow", "Action": "ec2:DescribeCapacityBlockOfferings", "Resource": "*"},
            {
                "Effect": "Allow",
                "Action": "ec2:PurchaseCapacityBlock",
                "Resource": "arn:aws:ec2:*:*:capacity-reservation/*",
                "Condition": {"StringEquals": ours},
            },
            {
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": "arn:aws:ec2:*:*:capacity-reservation/*",
                "Condition": {"StringEquals": {"ec2:CreateAction": "PurchaseCapacityBlock"}},
            },
        ]
    )
    offering_id = ec2.describe_capacity_block_offerings(
        InstanceType=P5, InstanceCount=2, CapacityDurationHours=24
    )["CapacityBlockOfferings"][0]["CapacityBlockOfferingId"]

    def buy(cluster: str, dry_run: bool = False) -> Any:
        tags = [{"Key": "atomic-gang/cluster", "Value": cluster}]
        return ec2.purchase_capacity_block(
            CapacityBlockOfferingId=offering_id,
            InstancePlatform="Linux/UNIX",
            TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": tags}],
            DryRun=dry_run,
        )

    with pytest.raises(ClientError) as other:
        buy("someone-else")
    assert other.value.response["Error"]["Code"] == "UnauthorizedOperation"
    assert "ec2:PurchaseCapacityBlock" in other.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as dry:
        buy("demo", dry_run=True)
    assert dry.value.response["Error"]["Code"] == "DryRunOperation"
    assert _blocks(world) == []

    bought = buy("demo")["CapacityReservation"]
    assert [b["CapacityReservationId"] for b in _blocks(world)] == [bought["CapacityReservationId"]]


def test_the_engine_reads_offerings_as_typed_offerings_with_decimal_fees(world: World) -> None:
    _seed(world, 600, "1234.56")
    _seed(world, 300, "99.99")
    found = world.engine.capacity_block_offerings(P5, 2, 24)
    assert [(o.start, o.upfront_fee) for o in found] == [
        (_at(world, 300), Decimal("199.98")),
        (_at(world, 600), Decimal("2469.12")),
    ]
    assert {(o.instance_type, o.availability_zone, o.instance_count) for o in found} == {
        (P5, ZONE, 2)
    }
    later = world.engine.capacity_block_offerings(P5, 2, 24, earliest_start=_at(world, 301))
    assert [o.upfront_fee for o in later] == [Decimal("2469.12")]


def test_the_control_api_seeds_the_calendar_and_names_a_bad_field(world: World) -> None:
    from werkzeug.test import Client

    from devenv.emulator.server import ControlApp

    app = Client(ControlApp(world.emu, aws_app=lambda environ, start: []))
    body = {
        "instance_type": P5,
        "availability_zone": ZONE,
        "instances": 2,
        "start": _at(world, 300).timestamp(),
        "duration_hours": 24,
        "upfront_fee": "1000",
    }
    made = app.post("/_emulator/capacity-block-offerings", json=body)
    assert made.status_code == 200
    listed = app.get("/_emulator/capacity-block-offerings").get_json()["calendar"]
    assert [(e["entry_id"], e["instances"], e["upfront_fee"]) for e in listed] == [
        (made.get_json()["entry_id"], 2, "1000")
    ]
    assert [o["UpfrontFee"] for o in _offerings(world)] == ["2000.00"]

    for field, bad in (("upfront_fee", -1), ("start", None), ("instances", 0)):
        refused = app.post("/_emulator/capacity-block-offerings", json={**body, field: bad})
        assert refused.status_code == 400 and refused.get_json()["field"] == field
