"""Capacity Blocks, network interfaces and cluster placement groups through the emulator
process, as the controller meets them (boto3 with endpoint_url, the control API over HTTP).

Pages: "Work with Capacity Blocks" (EC2 begins to terminate a block's instances thirty
minutes before it expires), botocore's CapacityReservationState (`unavailable`), the
RunInstances API reference and "Maximize network bandwidth on Amazon EC2 instances with
multiple network cards" (interface layouts), "Placement groups for your Amazon EC2
instances" (a cluster group lives in one zone).
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


def image(aws: AwsClientFactory) -> str:
    name = eks_ami_parameter_name("1.36", "x86_64", "nvidia")
    return str(aws("ssm").get_parameter(Name=name)["Parameter"]["Value"])


def launch_into(aws: AwsClientFactory, reservation_id: str, count: int) -> Any:
    return aws("ec2").run_instances(
        ImageId=image(aws),
        InstanceType=P5,
        MinCount=count,
        MaxCount=count,
        InstanceMarketOptions={"MarketType": "capacity-block"},
        CapacityReservationSpecification={
            "CapacityReservationTarget": {"CapacityReservationId": reservation_id}
        },
    )


def states(aws: AwsClientFactory, ids: list[str]) -> set[str]:
    found = aws("ec2").describe_instances(InstanceIds=ids)["Reservations"]
    return {i["State"]["Name"] for r in found for i in r["Instances"]}


def test_a_blocks_instances_are_terminated_from_thirty_minutes_before_its_end(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    end = dt.datetime.fromtimestamp(ec2_emulator.now() + 2 * 3600, dt.UTC)
    block = ec2_emulator.add_capacity_reservation(
        P5, AZ, 2, reservation_type="capacity-block", end=end
    )
    ids = [i["InstanceId"] for i in launch_into(emulator_aws_client, block, 2)["Instances"]]
    ec2_emulator.advance_clock(89 * 60)
    assert states(emulator_aws_client, ids) == {"running"}
    ec2_emulator.advance_clock(60)
    assert states(emulator_aws_client, ids) == {"terminated"}
    (seen,) = [
        r for r in ec2_emulator.capacity_reservations() if r["CapacityReservationId"] == block
    ]
    assert seen["State"] == "active"


def test_an_unavailable_block_is_shown_so_and_refuses_launches_until_cleared(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    block = ec2_emulator.add_capacity_reservation(P5, AZ, 1, reservation_type="capacity-block")
    ec2_emulator.force_reservation_state(block, "unavailable")
    (seen,) = emulator_aws_client("ec2").describe_capacity_reservations(
        CapacityReservationIds=[block]
    )["CapacityReservations"]
    assert seen["State"] == "unavailable"
    with pytest.raises(ClientError) as refused:
        launch_into(emulator_aws_client, block, 1)
    assert refused.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"

    ec2_emulator.force_reservation_state(block, None)
    assert len(launch_into(emulator_aws_client, block, 1)["Instances"]) == 1
    with pytest.raises(EmulatorControlError) as bad:
        ec2_emulator.force_reservation_state(block, "broken")
    assert bad.value.field == "state"


def test_an_efa_only_primary_and_a_card_beyond_the_type_are_refused(
    emulator_aws_client: AwsClientFactory,
) -> None:
    ec2 = emulator_aws_client("ec2")
    subnet = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": [AZ]}])
    subnet_id = subnet["Subnets"][0]["SubnetId"]

    def run(*interfaces: tuple[int, int, str]) -> Any:
        return ec2.run_instances(
            ImageId=image(emulator_aws_client),
            InstanceType=P5,
            MinCount=1,
            MaxCount=1,
            NetworkInterfaces=[
                {"NetworkCardIndex": c, "DeviceIndex": d, "InterfaceType": t, "SubnetId": subnet_id}
                for c, d, t in interfaces
            ],
        )

    for layout, code in (
        ([(0, 0, "efa-only")], "InvalidParameterCombination"),
        ([(0, 0, "interface"), (32, 0, "efa-only")], "InvalidParameterValue"),
    ):
        with pytest.raises(ClientError) as refused:
            run(*layout)
        assert refused.value.response["Error"]["Code"] == code
    launched = run((0, 0, "interface"), (0, 1, "efa-only"), (1, 0, "efa-only"))
    assert len(launched["Instances"]) == 1


def test_a_cluster_group_refuses_a_second_zone(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    ec2 = emulator_aws_client("ec2")
    ec2.create_placement_group(GroupName="capnet-pg", Strategy="cluster")

    def run(zone: str) -> Any:
        return ec2.run_instances(
            ImageId=image(emulator_aws_client),
            InstanceType="m5.large",
            MinCount=1,
            MaxCount=1,
            Placement={"GroupName": "capnet-pg", "AvailabilityZone": zone},
        )

    run("us-east-1a")
    with pytest.raises(ClientError) as refused:
        run("us-east-1b")
    assert refused.value.response["Error"]["Code"] == "InvalidPlacementGroup.InUse"
    ec2_emulator.set_fleet_placement_answer("refuse-call")
    ec2_emulator.set_fleet_placement_answer("per-override")
    with pytest.raises(EmulatorControlError) as bad:
        ec2_emulator.set_fleet_placement_answer("maybe")
    assert bad.value.field == "answer"
