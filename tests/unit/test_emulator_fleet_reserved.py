"""Instant fleets into reservations, placement groups and EFA interfaces, in-process.

Fleets are asked exactly as the product's fleet mode asks (a launch template, one
override per subnet, MinTargetCapacity with SingleAvailabilityZone); what EC2 documents for
Capacity Blocks and ODCRs in fleets is what the tests expect back.
"""

from __future__ import annotations

from typing import Any

import pytest

from devenv.emulator import EmulatorState
from tests.support.clocks import SecondsClock
from tests.unit.test_emulator_reservations import (
    P5,
    T0,
    ami,
    clock,
    ec2,
    emulator,
    instance,
    live_count,
    refusal,
    reservation,
    run,
    targeting,
)

pytestmark = pytest.mark.unit
__all__ = ["clock", "emulator"]  # the fixtures, used by name

P4D = "p4d.24xlarge"


def subnets() -> dict[str, str]:
    found = ec2().describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    return {s["AvailabilityZone"]: s["SubnetId"] for s in found["Subnets"]}


def template(name: str, **data: Any) -> str:
    made = ec2().create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": ami(), "InstanceType": P5, **data}
    )
    return str(made["LaunchTemplate"]["LaunchTemplateId"])


def fleet(
    template_id: str, count: int, azs: list[str], kind: str = "on-demand", **extra: Any
) -> Any:
    by_az = subnets()
    on_demand = {"MinTargetCapacity": count, "SingleAvailabilityZone": True, **extra.pop("od", {})}
    return ec2().create_fleet(
        Type="instant",
        TargetCapacitySpecification={
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": kind,
            **extra.pop("target", {}),
        },
        OnDemandOptions=on_demand,
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": template_id,
                    "Version": "$Latest",
                },
                "Overrides": [
                    {"SubnetId": by_az[az], "InstanceType": P5, "Priority": float(i), **extra}
                    for i, az in enumerate(azs)
                ],
            }
        ],
    )


def fleet_ids(answer: Any) -> list[str]:
    return [i for group in answer["Instances"] for i in group["InstanceIds"]]


def block_template(block: str) -> str:
    return template(
        f"block-{block}",
        InstanceMarketOptions={"MarketType": "capacity-block"},
        **targeting(block),
    )


# --- fleets into reservations -----------------------------------------------------------------
def test_a_fleet_into_a_block_fulfils_what_it_can_and_reports_the_rest(
    emulator: EmulatorState,
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block"
    )
    answer = fleet(block_template(block), 3, ["us-east-1a"], kind="capacity-block")
    ids = fleet_ids(answer)
    assert len(ids) == 2  # EC2 keeps the partial set; N-or-0 is the product's rollback
    assert {instance(i)["CapacityReservationId"] for i in ids} == {block}
    assert [e["ErrorCode"] for e in answer["Errors"]] == ["InsufficientInstanceCapacity"]
    assert reservation(block)["AvailableInstanceCount"] == 0


def test_a_fleet_into_a_block_not_yet_started_answers_insufficient_capacity(
    emulator: EmulatorState, clock: SecondsClock
) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block", start=T0 + 5
    )
    lt = block_template(block)
    answer = fleet(lt, 2, ["us-east-1a"], kind="capacity-block")
    assert fleet_ids(answer) == []
    assert {e["ErrorCode"] for e in answer["Errors"]} == {"InsufficientInstanceCapacity"}
    clock.now = T0 + 5
    assert len(fleet_ids(fleet(lt, 2, ["us-east-1a"], kind="capacity-block"))) == 2


def test_a_block_fleet_refuses_what_ec2_documents_as_unsupported(emulator: EmulatorState) -> None:
    block = emulator.add_capacity_reservation(
        P5, "us-east-1a", 2, reservation_type="capacity-block"
    )
    lt = block_template(block)
    first = {"CapacityReservationOptions": {"UsageStrategy": "use-capacity-reservations-first"}}
    code, _ = refusal(lambda: fleet(lt, 2, ["us-east-1a"], kind="capacity-block", od=first))
    assert code == "InvalidParameterCombination"
    no_market = template("no-market", **targeting(block))
    code, message = refusal(lambda: fleet(no_market, 2, ["us-east-1a"], kind="capacity-block"))
    assert code == "InvalidParameterCombination" and "MarketType" in message
    assert live_count() == 0


def reserved_fleet(
    template_id: str, count: int, azs: list[str], ids: list[str], **extra: Any
) -> Any:
    """A reserved-capacity instant fleet naming `ids`, as CreateFleet's API reference
    spells it (ReservedCapacityOptions beside DefaultTargetCapacityType)."""
    by_az = subnets()
    options: dict[str, Any] = {
        "ReservationTypes": ["on-demand-capacity-reservation"],
        "CapacityReservationTarget": {"CapacityReservationIds": ids},
        **extra.pop("options", {}),
    }
    return ec2().create_fleet(
        Type="instant",
        TargetCapacitySpecification={
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": "reserved-capacity",
            **extra.pop("target", {}),
        },
        ReservedCapacityOptions=options,
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": template_id,
                    "Version": "$Latest",
                },
                "Overrides": [
                    {"SubnetId": by_az[az], "InstanceType": P5, "Priority": float(i)}
                    for i, az in enumerate(azs)
                ],
            }
        ],
        **extra,
    )


def test_a_reserved_capacity_fleet_launches_only_into_the_named_odcr(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1b", 3)
    lt = template("plain")
    ids = fleet_ids(reserved_fleet(lt, 3, ["us-east-1a", "us-east-1b"], [odcr]))
    assert len(ids) == 3
    assert {instance(i)["CapacityReservationId"] for i in ids} == {odcr}
    assert {instance(i)["Placement"]["AvailabilityZone"] for i in ids} == {"us-east-1b"}
    assert reservation(odcr)["AvailableInstanceCount"] == 0
    # Full, and no fallback market: nothing from ordinary capacity.
    full = reserved_fleet(lt, 1, ["us-east-1b"], [odcr])
    assert fleet_ids(full) == []
    assert {e["ErrorCode"] for e in full["Errors"]} == {"ReservationCapacityExceeded"}


@pytest.mark.parametrize(("answer", "launched"), [("partial", 2), ("none", 0)])
def test_a_short_reserved_capacity_fleet_answers_as_switched(
    emulator: EmulatorState, answer: str, launched: int
) -> None:
    """Not settled by the docs for ODCRs (the interruptible-reservation walkthrough says a
    fleet launches what it can): each answer is one switch away."""
    emulator.fleet_answers.set(reserved_shortfall=answer)
    odcr = emulator.add_capacity_reservation(P5, "us-east-1b", 2)
    short = reserved_fleet(template("short"), 3, ["us-east-1b"], [odcr])
    assert len(fleet_ids(short)) == launched
    assert {e["ErrorCode"] for e in short["Errors"]} == {"ReservationCapacityExceeded"}
    assert live_count() == launched


def test_a_reserved_capacity_fleet_falls_back_to_on_demand_only_when_asked(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1b", 1)
    fallback = {"ReservedCapacityFallbackOptions": {"MarketTypes": ["on-demand"]}}
    ids = fleet_ids(reserved_fleet(template("fb"), 3, ["us-east-1b"], [odcr], options=fallback))
    assert sorted(str(instance(i).get("CapacityReservationId")) for i in ids) == [
        "None",
        "None",
        odcr,
    ]


def test_reserved_capacity_refusals_are_ec2s(emulator: EmulatorState) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1b", 2)
    lt = template("refused")
    on_demand_target = {"target": {"OnDemandTargetCapacity": 2}}
    code, _ = refusal(lambda: reserved_fleet(lt, 2, ["us-east-1b"], [odcr], **on_demand_target))
    assert code == "InvalidParameterCombination"
    both = {
        "options": {
            "CapacityReservationTarget": {
                "CapacityReservationIds": [odcr],
                "CapacityReservationResourceGroupArns": [
                    "arn:aws:resource-groups:us-east-1:1:group/g"
                ],
            }
        }
    }
    code, _ = refusal(lambda: reserved_fleet(lt, 2, ["us-east-1b"], [odcr], **both))
    assert code == "InvalidParameterCombination"
    code, _ = refusal(lambda: reserved_fleet(lt, 2, ["us-east-1b"], ["cr-0123456789abcdef0"]))
    assert code == "InvalidCapacityReservationId.NotFound"
    on_demand = {"target": {"DefaultTargetCapacityType": "on-demand"}}
    code, message = refusal(lambda: reserved_fleet(lt, 2, ["us-east-1b"], [odcr], **on_demand))
    assert code == "InvalidParameterCombination" and "reserved-capacity" in message
    assert live_count() == 0


def test_an_on_demand_fleet_draws_on_the_odcr_its_template_targets_by_id(
    emulator: EmulatorState,
) -> None:
    """ "Launch instances into an existing Capacity Reservation": a launch targets a specific
    reservation by id, and a launch template carries that target (Karpenter launches ODCRs
    so: LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget).
    An On-Demand fleet of that template launches into the reservation, and only there."""
    odcr = emulator.add_capacity_reservation(P5, "us-east-1b", 3)
    only = {"CapacityReservationPreference": "capacity-reservations-only"}
    spec = targeting(odcr)
    lt = template("odcr", **spec)
    only_lt = template(
        "odcr-only",
        CapacityReservationSpecification={**spec["CapacityReservationSpecification"], **only},
    )
    ids = fleet_ids(fleet(lt, 2, ["us-east-1b"]))
    assert len(ids) == 2
    assert {instance(i).get("CapacityReservationId") for i in ids} == {odcr}
    assert reservation(odcr)["AvailableInstanceCount"] == 1
    # More than it holds: N-or-0 as for any instant fleet; nothing taken from elsewhere.
    short = fleet(only_lt, 2, ["us-east-1b"])
    assert short["Instances"] == [] and short["Errors"]
    assert reservation(odcr)["AvailableInstanceCount"] == 1
    assert live_count() == 2


def test_use_capacity_reservations_first_prefers_the_az_with_an_open_odcr(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation(P5, "us-east-1c", 2, match="open")
    lt = template("open")
    plain = fleet_ids(fleet(lt, 2, ["us-east-1a", "us-east-1c"]))
    assert {instance(i)["Placement"]["AvailabilityZone"] for i in plain} == {"us-east-1a"}
    first = {"CapacityReservationOptions": {"UsageStrategy": "use-capacity-reservations-first"}}
    ids = fleet_ids(fleet(lt, 2, ["us-east-1a", "us-east-1c"], od=first))
    assert {instance(i)["CapacityReservationId"] for i in ids} == {odcr}


def test_the_launch_log_keeps_fleet_requests(emulator: EmulatorState) -> None:
    lt = template("logged")
    ids = fleet_ids(fleet(lt, 2, ["us-east-1a"]))
    (logged,) = emulator.launch_requests("CreateFleet")
    assert logged["instance_ids"] == ids
    assert logged["params"]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == (
        "on-demand"
    )


# --- placement groups -----------------------------------------------------------------------
def test_placement_groups_are_created_described_and_deleted_as_on_ec2(
    emulator: EmulatorState,
) -> None:
    made = ec2().create_placement_group(GroupName="gang", Strategy="cluster")["PlacementGroup"]
    assert made["GroupId"].startswith("pg-") and made["State"] == "available"
    code, _ = refusal(lambda: ec2().create_placement_group(GroupName="gang", Strategy="cluster"))
    assert code == "InvalidPlacementGroup.Duplicate"
    (seen,) = ec2().describe_placement_groups(GroupNames=["gang"])["PlacementGroups"]
    assert (seen["GroupName"], seen["Strategy"], seen["GroupId"]) == (
        "gang",
        "cluster",
        made["GroupId"],
    )
    launched = run(2, Placement={"GroupName": "gang"})["Instances"]
    assert instance(launched[0]["InstanceId"])["Placement"]["GroupName"] == "gang"
    code, _ = refusal(lambda: ec2().delete_placement_group(GroupName="gang"))
    assert code == "InvalidPlacementGroup.InUse"
    ec2().terminate_instances(InstanceIds=[i["InstanceId"] for i in launched])
    ec2().delete_placement_group(GroupName="gang")
    code, _ = refusal(lambda: ec2().describe_placement_groups(GroupNames=["gang"]))
    assert code == "InvalidPlacementGroup.Unknown"


def test_placement_groups_carry_their_tags_and_filter_by_them(emulator: EmulatorState) -> None:
    ec2().create_placement_group(
        GroupName="tagged",
        Strategy="cluster",
        TagSpecifications=[
            {"ResourceType": "placement-group", "Tags": [{"Key": "pool", "Value": "p1"}]}
        ],
    )
    ec2().create_placement_group(GroupName="other", Strategy="spread")
    found = ec2().describe_placement_groups(Filters=[{"Name": "tag:pool", "Values": ["p1"]}])
    assert [g["GroupName"] for g in found["PlacementGroups"]] == ["tagged"]
    spread = ec2().describe_placement_groups(Filters=[{"Name": "strategy", "Values": ["spread"]}])
    assert [g["GroupName"] for g in spread["PlacementGroups"]] == ["other"]


def test_a_launch_into_an_unknown_placement_group_is_refused(emulator: EmulatorState) -> None:
    code, _ = refusal(lambda: run(1, Placement={"GroupName": "nope"}))
    assert code == "InvalidPlacementGroup.Unknown"
    assert live_count() == 0


def test_a_fleet_launches_into_the_templates_placement_group(emulator: EmulatorState) -> None:
    ec2().create_placement_group(GroupName="lt-gang", Strategy="cluster")
    lt = template("in-group", Placement={"GroupName": "lt-gang"})
    ids = fleet_ids(fleet(lt, 2, ["us-east-1a"]))
    assert {instance(i)["Placement"]["GroupName"] for i in ids} == {"lt-gang"}


# --- EFA interfaces -------------------------------------------------------------------------
def efa(cards: int, subnet: str | None = None) -> list[dict[str, Any]]:
    return [
        {
            "DeviceIndex": 0 if card == 0 else 1,
            "NetworkCardIndex": card,
            "InterfaceType": "efa",
            "DeleteOnTermination": True,
            **({"SubnetId": subnet} if subnet else {}),
        }
        for card in range(cards)
    ]


def interfaces(instance_id: str) -> list[tuple[int, int, str]]:
    found = instance(instance_id)["NetworkInterfaces"]
    return sorted(
        (n["Attachment"]["NetworkCardIndex"], n["Attachment"]["DeviceIndex"], n["InterfaceType"])
        for n in found
    )


def test_efa_interfaces_of_a_runinstances_request_are_on_every_card(
    emulator: EmulatorState,
) -> None:
    subnet = subnets()["us-east-1a"]
    launched = run(2, az=None, NetworkInterfaces=efa(4, subnet))["Instances"]
    expected = [(0, 0, "efa"), (1, 1, "efa"), (2, 1, "efa"), (3, 1, "efa")]
    assert interfaces(launched[0]["InstanceId"]) == expected
    assert interfaces(launched[1]["InstanceId"]) == expected
    ec2().terminate_instances(InstanceIds=[launched[0]["InstanceId"]])
    left = ec2().describe_network_interfaces()["NetworkInterfaces"]
    assert len(left) == 4  # the terminated instance's four were deleted with it


def test_efa_interfaces_of_a_launch_template_reach_fleet_instances(
    emulator: EmulatorState,
) -> None:
    lt = template("efa", NetworkInterfaces=efa(2))
    (iid,) = fleet_ids(fleet(lt, 1, ["us-east-1a"]))
    assert interfaces(iid) == [(0, 0, "efa"), (1, 1, "efa")]


def test_a_p4d_odcr_gang_with_efa_in_a_group_carries_every_field(emulator: EmulatorState) -> None:
    """The shape the issue's runinstances e2e asks for, all on one request."""
    ec2().create_placement_group(GroupName="p4d", Strategy="cluster")
    odcr = emulator.add_capacity_reservation(P4D, "us-east-1a", 4)
    subnet = subnets()["us-east-1a"]
    launched = run(
        4,
        az=None,
        InstanceType=P4D,
        NetworkInterfaces=efa(4, subnet),
        Placement={"GroupName": "p4d"},
        **targeting(odcr),
    )["Instances"]
    for each in launched:
        seen = instance(each["InstanceId"])
        assert seen["CapacityReservationId"] == odcr
        assert seen["Placement"]["GroupName"] == "p4d"
        assert [kind for _, _, kind in interfaces(each["InstanceId"])] == ["efa"] * 4
    assert reservation(odcr)["AvailableInstanceCount"] == 0
