"""Reserved capacity through the emulator process: the control API the e2e tests steer with.

`EmulatorClient.add_capacity_reservation`, `advance_clock`, `capacity_reservations` and
`launch_requests` are what the product's end-to-end tests use; these tests show each one
against the server process and boto3 with endpoint_url, as the controller meets them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devenv.emulator import EmulatorClient, EmulatorControlError, eks_ami_parameter_name

pytestmark = pytest.mark.integration

P5 = "p5.48xlarge"
AZ = "us-east-1a"
AwsClientFactory = Callable[..., Any]


def launch_into(aws: AwsClientFactory, reservation_id: str, count: int) -> Any:
    image = aws("ssm").get_parameter(Name=eks_ami_parameter_name("1.36", "x86_64", "nvidia"))
    return aws("ec2").run_instances(
        ImageId=image["Parameter"]["Value"],
        InstanceType=P5,
        MinCount=count,
        MaxCount=count,
        InstanceMarketOptions={"MarketType": "capacity-block"},
        CapacityReservationSpecification={
            "CapacityReservationTarget": {"CapacityReservationId": reservation_id}
        },
    )


def test_a_block_made_over_the_control_api_starts_when_the_clock_passes_its_start(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    start = dt.datetime.fromtimestamp(ec2_emulator.now() + 3600, dt.UTC)
    block = ec2_emulator.add_capacity_reservation(
        P5, AZ, 2, reservation_type="capacity-block", start=start
    )
    with pytest.raises(ClientError) as refused:
        launch_into(emulator_aws_client, block, 2)
    assert refused.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    described = emulator_aws_client("ec2").describe_capacity_reservations(
        CapacityReservationIds=[block]
    )["CapacityReservations"][0]
    assert (described["State"], described["ReservationType"]) == ("scheduled", "capacity-block")

    ec2_emulator.advance_clock(3600)
    launched = launch_into(emulator_aws_client, block, 2)["Instances"]
    assert {i["CapacityReservationId"] for i in launched} == {block}
    (seen,) = [
        r for r in ec2_emulator.capacity_reservations() if r["CapacityReservationId"] == block
    ]
    assert (seen["State"], seen["AvailableInstanceCount"]) == ("active", 0)


def test_launch_requests_show_what_reached_ec2(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    block = ec2_emulator.add_capacity_reservation(P5, AZ, 1, reservation_type="capacity-block")
    launched = launch_into(emulator_aws_client, block, 1)["Instances"][0]["InstanceId"]
    with pytest.raises(ClientError):
        launch_into(emulator_aws_client, block, 1)
    ok, full = ec2_emulator.launch_requests("RunInstances")
    assert (ok["instance_ids"], ok["error"]) == ([launched], None)
    assert ok["params"]["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": block
    }
    assert ok["params"]["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert full["error"] == "ReservationCapacityExceeded"
    assert ec2_emulator.launch_requests("RunInstances", last=1) == [full]
    assert ec2_emulator.launch_requests("CreateFleet") == []


def test_reservation_control_calls_refuse_what_ec2_could_not_hold(
    ec2_emulator: EmulatorClient,
) -> None:
    with pytest.raises(EmulatorControlError) as bad:
        ec2_emulator.add_capacity_reservation(
            P5, AZ, 1, reservation_type="capacity-block", match="open"
        )
    assert bad.value.field == "match"
    with pytest.raises(EmulatorControlError) as bad:
        ec2_emulator.add_capacity_reservation(P5, "us-east-1z", 1)
    assert bad.value.field == "az"
    with pytest.raises(EmulatorControlError) as bad:
        ec2_emulator.launch_requests("TerminateInstances")
    assert bad.value.field == "action"
