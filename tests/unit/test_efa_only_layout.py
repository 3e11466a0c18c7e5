"""EFA-only interfaces where the instance type takes them: the rule read from
DescribeInstanceTypes, the launch template's layout, and the spec the pool's stack gets.

Page: "Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
(ENA primary on card 0 device 0; EFA-only on card 0 device 1 and on device 0 of every other
card; never an EFA-only primary). The instance-type records are the ones the emulator
answers DescribeInstanceTypes with, read from EC2's own data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from moto.ec2.models.instance_types import INSTANCE_TYPES

from provisioner.cloud.instancetypes import (
    efa_cards,
    efa_interfaces,
    instance_type_info_from,
    uses_efa_only,
)
from provisioner.cloud.types import LaunchTemplateRef
from provisioner.controllers.pool.steps import Action
from stacks.launch_template import launch_template_data
from tests.support.fake_stacks import FakeStacks
from tests.unit.test_cloud_helpers import World, emulated_aws
from tests.unit.test_pool_reconciler_gpu import P5, ec2_with_block, pool, run
from tests.unit.test_stacks_launch_template import props

pytestmark = pytest.mark.unit


def info(instance_type: str, **net: Any) -> Any:
    raw = dict(INSTANCE_TYPES[instance_type])
    raw["NetworkInfo"] = {**raw["NetworkInfo"], **net}
    return instance_type_info_from(raw)


def layout(interfaces: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    return [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces]


def test_p5_gets_an_ena_primary_and_32_efa_only_interfaces_so_one_private_ip() -> None:
    p5 = info("p5.48xlarge")
    assert uses_efa_only(p5) and efa_cards(p5) == tuple(range(32))

    got = layout(efa_interfaces(efa_cards(p5), ["sg-1"], "subnet-1", efa_only=True))
    assert got[0] == (0, 0, "interface")
    assert got[1:] == [(0, 1, "efa-only")] + [(card, 0, "efa-only") for card in range(1, 32)]
    # Only the ENA primary takes an IP address; EFA-only interfaces take none.
    assert [kind for _, _, kind in got].count("efa-only") == 32


def test_a_single_card_efa_type_keeps_one_efa_primary() -> None:
    c5n = info("c5n.18xlarge")
    assert not uses_efa_only(c5n)
    assert layout(efa_interfaces(efa_cards(c5n), [], efa_only=False)) == [(0, 0, "efa")]


def test_cards_that_do_not_list_efa_only_keep_efa_interfaces() -> None:
    cards = [
        {**card, "InterfaceTypes": ["interface", "efa"]}
        for card in INSTANCE_TYPES["p5.48xlarge"]["NetworkInfo"]["NetworkCards"]
    ]
    older = info("p5.48xlarge", NetworkCards=cards)
    assert efa_cards(older) == tuple(range(32)) and not uses_efa_only(older)


def test_the_launch_template_carries_the_efa_only_layout() -> None:
    data = launch_template_data(props(efa_network_cards=[0, 1, 2, 3], efa_only=True))
    assert layout(data["NetworkInterfaces"]) == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        (1, 0, "efa-only"),
        (2, 0, "efa-only"),
        (3, 0, "efa-only"),
    ]
    assert "SecurityGroupIds" not in data
    assert all(i["Groups"] == ["sg-2", "sg-1"] for i in data["NetworkInterfaces"])


def test_the_pools_stack_is_told_to_use_efa_only_when_ec2_lists_it_for_every_card() -> None:
    p5 = replace(P5, efa_only_cards=tuple(range(32)))
    stacks = FakeStacks()
    assert run(ec2_with_block(type_info=p5), stacks, Action.PREPARE_STACK, pool()).ok
    (spec,) = stacks.prepared
    assert spec.efa_network_cards == tuple(range(32)) and spec.efa_only


# --- on the emulator, which refuses the layouts EC2 refuses ---------------------------------
@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def attached(world: World, instance_id: str) -> list[tuple[int, int, str]]:
    found = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    interfaces = found[0]["Instances"][0]["NetworkInterfaces"]
    return sorted(
        (i["Attachment"]["NetworkCardIndex"], i["Attachment"]["DeviceIndex"], i["InterfaceType"])
        for i in interfaces
    )


EXPECTED_P5 = sorted(
    [(0, 0, "interface"), (0, 1, "efa-only")] + [(card, 0, "efa-only") for card in range(1, 32)]
)


def test_a_p5_gang_in_runinstances_mode_launches_with_efa_only_interfaces(world: World) -> None:
    result = world.engine.acquire(
        world.spec(instance_type="p5.48xlarge", count=2, efa=True, security_group_ids=())
    )
    assert all(attached(world, i) == EXPECTED_P5 for i in result.instance_ids)


def test_a_p5_gang_in_fleet_mode_launches_from_the_stacks_efa_only_template(
    world: World,
) -> None:
    data = launch_template_data(
        props(
            image_id=world.ami_id(),
            instance_profile_arn=world.profile.arn,
            security_group_ids=[],
            efa_network_cards=list(range(32)),
            efa_only=True,
        )
    )
    made = world.ec2.create_launch_template(LaunchTemplateName="lt-p5", LaunchTemplateData=data)
    template = LaunchTemplateRef(made["LaunchTemplate"]["LaunchTemplateId"], "$Latest")
    result = world.engine.acquire(
        world.spec(
            instance_type="p5.48xlarge",
            count=2,
            mode="fleet",
            efa=True,
            launch_template=template,
            user_data=None,
            instance_profile=None,
        )
    )
    assert all(attached(world, i) == EXPECTED_P5 for i in result.instance_ids)
