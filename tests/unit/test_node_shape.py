"""What a simulated node has (the devices its device plugins would advertise), computed from
the emulator's own EC2 answers."""

from __future__ import annotations

from typing import Any

import pytest

from devenv.emulator import EmulatorState
from devenv.node_shape import (
    CAPACITY_TYPE,
    EFA,
    EKS_CAPACITY_TYPE,
    GPU,
    NEURON,
    NEURON_CORE,
    RESERVATION_ID,
    RESERVATION_TYPE,
    accelerators,
    reserved_capacity_labels,
)
from tests.unit.test_emulator_fleet_reserved import efa, subnets
from tests.unit.test_emulator_reservations import clock, ec2, emulator, instance, run, targeting

pytestmark = pytest.mark.unit
__all__ = ["clock", "emulator"]  # the fixtures, used by name


def type_info(name: str) -> dict[str, Any]:
    return dict(ec2().describe_instance_types(InstanceTypes=[name])["InstanceTypes"][0])


def test_a_p4d_on_an_odcr_with_efa_advertises_its_gpus_interfaces_and_reservation(
    emulator: EmulatorState,
) -> None:
    odcr = emulator.add_capacity_reservation("p4d.24xlarge", "us-east-1a", 1)
    launched = run(
        1,
        az=None,
        InstanceType="p4d.24xlarge",
        NetworkInterfaces=efa(4, subnets()["us-east-1a"]),
        **targeting(odcr),
    )["Instances"][0]
    seen = instance(launched["InstanceId"])
    devices = accelerators(seen, type_info("p4d.24xlarge"))
    assert devices == {GPU: "8", EFA: "4"} and NEURON not in devices
    assert reserved_capacity_labels(seen) == {
        EKS_CAPACITY_TYPE: "ON_DEMAND",
        CAPACITY_TYPE: "reserved",
        RESERVATION_ID: odcr,
        RESERVATION_TYPE: "default",
    }


def test_a_p5_on_a_block_without_efa_interfaces_advertises_no_efa(
    emulator: EmulatorState,
) -> None:
    block = emulator.add_capacity_reservation(
        "p5.48xlarge", "us-east-1a", 1, reservation_type="capacity-block"
    )
    launched = run(1, **targeting(block, block=True))["Instances"][0]
    seen = instance(launched["InstanceId"])
    devices = accelerators(seen, type_info("p5.48xlarge"))
    assert devices[GPU] == "8" and EFA not in devices
    labels = reserved_capacity_labels(seen)
    assert (labels[EKS_CAPACITY_TYPE], labels[RESERVATION_TYPE]) == (
        "CAPACITY_BLOCK",
        "capacity-block",
    )


def test_trainium_advertises_neuron_devices_and_cores_and_plain_types_nothing_extra(
    emulator: EmulatorState,
) -> None:
    launched = run(1, InstanceType="trn1.32xlarge")["Instances"][0]
    seen = instance(launched["InstanceId"])
    devices = accelerators(seen, type_info("trn1.32xlarge"))
    assert devices == {NEURON: "16", NEURON_CORE: "32"}
    plain = instance(run(1, InstanceType="m5.large")["Instances"][0]["InstanceId"])
    assert accelerators(plain, type_info("m5.large")) == {}
    assert reserved_capacity_labels(plain) == {EKS_CAPACITY_TYPE: "ON_DEMAND"}


def test_a_p5_with_an_ena_primary_and_efa_only_interfaces_advertises_32_efa_devices(
    emulator: EmulatorState,
) -> None:
    subnet = subnets()["us-east-1a"]
    layout = [{"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface"}] + [
        {
            "NetworkCardIndex": card,
            "DeviceIndex": 1 if card == 0 else 0,
            "InterfaceType": "efa-only",
        }
        for card in range(32)
    ]
    launched = run(1, az=None, NetworkInterfaces=[{**n, "SubnetId": subnet} for n in layout])[
        "Instances"
    ][0]
    devices = accelerators(instance(launched["InstanceId"]), type_info("p5.48xlarge"))
    assert devices[EFA] == "32"
