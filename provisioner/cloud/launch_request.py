"""The launch requests a spec makes, as sent: one function for the controller and doctor.

`Ec2Engine.acquire` sends them (through `runinstances.launch_runinstances`, one per subnet of
the sweep until one launches, or `fleet.launch_fleet`, one CreateFleet); `atomic-gang
doctor`'s launch check sends each with `DryRun=True`. Both build them with `requests_for`'s
builders (`runinstances.request`, `fleet.request`), so what doctor checks is what the
controller sends, field by field (`tests/unit/test_doctor_request.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.api import constants as c
from provisioner.cloud import fleet, runinstances
from provisioner.cloud.types import InstanceTypeInfo, LaunchSpec, SubnetRef


@dataclass(frozen=True)
class LaunchRequest:
    """One call a launch of the spec sends: its EC2 action, the subnet of a RunInstances
    try (None for a fleet), and its parameters."""

    action: str  # "RunInstances" | "CreateFleet"
    subnet: SubnetRef | None
    params: dict[str, Any]


def requests_for(spec: LaunchSpec, info: InstanceTypeInfo | None) -> tuple[LaunchRequest, ...]:
    """Every request a launch of ``spec`` (already targeted at its reservation) may send,
    in order; ``info`` is DescribeInstanceTypes' answer for an EFA launch."""
    if spec.mode == c.MODE_FLEET:
        return (LaunchRequest("CreateFleet", None, fleet.request(spec)),)
    return tuple(
        LaunchRequest("RunInstances", subnet, runinstances.request(spec, subnet, info))
        for subnet in spec.subnets
    )
