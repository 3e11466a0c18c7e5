"""Network-interface layouts EC2 refuses, refused by the in-process emulator on RunInstances
and on an instant fleet's launch template (helpers are the reservation tests' own).

Pages: the RunInstances API reference (SubnetId, SecurityGroupIds, AssociatePublicIpAddress),
"Network cards", "Maximize network bandwidth on Amazon EC2 instances with multiple network
cards" (an EFA-only interface is never the primary), DescribeInstanceTypes' InterfaceTypes.
"""

from __future__ import annotations

from typing import Any

import pytest

from devenv.emulator import EmulatorState
from tests.unit.test_emulator_reservations import (
    P5,
    ami,
    clock,
    ec2,
    emulator,
    live_count,
    refusal,
    run,
)

pytestmark = pytest.mark.unit
__all__ = ["clock", "emulator"]  # fixtures, imported to be found by pytest

ZONE = "us-east-1a"


def subnet() -> str:
    found = ec2().describe_subnets(Filters=[{"Name": "availability-zone", "Values": [ZONE]}])
    return str(found["Subnets"][0]["SubnetId"])


def group() -> str:
    return str(ec2().describe_security_groups()["SecurityGroups"][0]["GroupId"])


def ni(card: int, device: int, kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "NetworkCardIndex": card,
        "DeviceIndex": device,
        "InterfaceType": kind,
        "SubnetId": subnet(),
        "Groups": [group()],
        **extra,
    }


RECOMMENDED_P5 = [("interface", 0, 0), ("efa-only", 0, 1)] + [
    ("efa-only", card, 0) for card in range(1, 32)
]


def p5_layout() -> list[dict[str, Any]]:
    return [ni(card, device, kind) for kind, card, device in RECOMMENDED_P5]


def test_the_recommended_p5_layout_launches_with_one_interface_per_card(
    emulator: EmulatorState,
) -> None:
    (launched,) = run(1, az=None, NetworkInterfaces=p5_layout())["Instances"]
    found = ec2().describe_instances(InstanceIds=[launched["InstanceId"]])
    interfaces = found["Reservations"][0]["Instances"][0]["NetworkInterfaces"]
    kinds = sorted((i["Attachment"]["NetworkCardIndex"], i["InterfaceType"]) for i in interfaces)
    assert kinds[:2] == [(0, "efa-only"), (0, "interface")] and len(kinds) == 33


@pytest.mark.parametrize("beside", ["SubnetId", "SecurityGroupIds"])
def test_a_subnet_or_security_group_beside_network_interfaces_is_refused(
    emulator: EmulatorState, beside: str
) -> None:
    extra = {beside: subnet() if beside == "SubnetId" else [group()]}
    code, message = refusal(
        lambda: run(1, az=None, NetworkInterfaces=[ni(0, 0, "interface")], **extra)
    )
    assert code == "InvalidParameterCombination" and beside in message
    assert live_count() == 0


def test_a_public_ip_with_several_interfaces_is_refused(emulator: EmulatorState) -> None:
    layout = [ni(0, 0, "interface", AssociatePublicIpAddress=True), ni(1, 0, "efa-only")]
    code, message = refusal(lambda: run(1, az=None, NetworkInterfaces=layout))
    assert code == "InvalidParameterCombination" and "multiple network interfaces" in message
    assert live_count() == 0


def test_a_card_index_beyond_the_types_cards_is_refused(emulator: EmulatorState) -> None:
    layout = [ni(0, 0, "interface"), ni(32, 0, "efa-only")]
    code, message = refusal(lambda: run(1, az=None, NetworkInterfaces=layout))
    assert code == "InvalidParameterValue" and "32" in message and P5 in message


def test_an_efa_only_primary_is_refused(emulator: EmulatorState) -> None:
    code, message = refusal(lambda: run(1, az=None, NetworkInterfaces=[ni(0, 0, "efa-only")]))
    assert code == "InvalidParameterCombination" and "primary" in message


def test_efa_on_a_type_without_efa_is_refused(emulator: EmulatorState) -> None:
    code, message = refusal(
        lambda: run(1, az=None, InstanceType="m5.large", NetworkInterfaces=[ni(0, 0, "efa")])
    )
    assert code == "InvalidParameterValue" and "efa" in message


def test_an_instant_fleets_launch_template_is_held_to_the_same_rules(
    emulator: EmulatorState,
) -> None:
    data = {"ImageId": ami(), "InstanceType": P5, "NetworkInterfaces": [ni(0, 0, "efa-only")]}
    for key in ("SubnetId", "Groups"):
        data["NetworkInterfaces"][0].pop(key)
    template = ec2().create_launch_template(
        LaunchTemplateName="efa-only-primary", LaunchTemplateData=data
    )
    request = {
        "Type": "instant",
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": "on-demand",
        },
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": template["LaunchTemplate"]["LaunchTemplateId"],
                    "Version": "$Latest",
                },
                "Overrides": [{"SubnetId": subnet()}],
            }
        ],
    }
    code, message = refusal(lambda: ec2().create_fleet(**request))
    assert code == "InvalidParameterCombination" and "primary" in message
    assert live_count() == 0 and ec2().describe_fleets()["Fleets"] == []


def test_an_attach_at_a_device_index_already_taken_is_refused_not_swapped(
    emulator: EmulatorState,
) -> None:
    (launched,) = run(1, az=None, NetworkInterfaces=p5_layout())["Instances"]
    eni = ec2().create_network_interface(SubnetId=subnet())["NetworkInterface"]
    code, message = refusal(
        lambda: ec2().attach_network_interface(
            NetworkInterfaceId=eni["NetworkInterfaceId"],
            InstanceId=launched["InstanceId"],
            DeviceIndex=1,
        )
    )
    assert code == "InvalidParameterValue" and "device index" in message
    ec2().attach_network_interface(
        NetworkInterfaceId=eni["NetworkInterfaceId"],
        InstanceId=launched["InstanceId"],
        DeviceIndex=2,
    )
