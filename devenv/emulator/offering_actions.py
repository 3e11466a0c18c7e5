"""DescribeCapacityBlockOfferings and PurchaseCapacityBlock on moto's `EC2Response`, answered
from `EMULATOR.offerings` (the calendar, `offerings`) and `EMULATOR.reservations`.

Authorization runs before them (`authorization.refusal`: the purchase is evaluated on the
new capacity reservation with its request tags, as the Service Authorization Reference lists
ec2:PurchaseCapacityBlock); a DryRun answers right after it, as for the other calls.
A purchase whose answer is lost after it took effect needs nothing here: the fault switches
with `after=True` (`faults`, `install.call_action`) run this handler, then lose its answer.
"""

from __future__ import annotations

from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError

from devenv.emulator.authorization import StatusAnswer, as_answer, permission_answer
from devenv.emulator.context_keys import tag_specs
from devenv.emulator.offerings import instance_platforms
from devenv.emulator.state import EMULATOR

# The resource type a Capacity Block's TagSpecifications name ("PurchaseCapacityBlock").
RESERVATION_RESOURCE = "capacity-reservation"


def describe_capacity_block_offerings(self: Any) -> Any:
    try:
        permission_answer(self)
    except StatusAnswer as answer:
        return as_answer(answer)
    params = {
        name: self._get_param(name)
        for name in (
            "InstanceType",
            "InstanceCount",
            "CapacityDurationHours",
            "StartDateRange",
            "EndDateRange",
        )
    }
    offerings = EMULATOR.offerings.describe(self.ec2_backend, params)
    return ActionResult({"CapacityBlockOfferings": offerings})


def purchase_capacity_block(self: Any) -> Any:
    try:
        permission_answer(self)
    except StatusAnswer as answer:
        return as_answer(answer)
    platform = self._get_param("InstancePlatform")
    if not platform:
        raise EC2ClientError(
            "MissingParameter", "The request must contain the parameter InstancePlatform."
        )
    if platform not in instance_platforms():
        raise EC2ClientError(
            "InvalidParameterValue",
            f"The value '{platform}' for parameter InstancePlatform is invalid.",
        )
    backend = self.ec2_backend
    entry, count = EMULATOR.offerings.take(str(self._get_param("CapacityBlockOfferingId") or ""))
    made = EMULATOR.reservations.add(
        account_id=str(backend.account_id),
        region=str(backend.region_name),
        instance_type=entry.instance_type,
        availability_zone=entry.availability_zone,
        count=count,
        reservation_type="capacity-block",
        start=entry.start,
        end=entry.end,
        match="targeted",
        platform=str(platform),
    )
    tags = tag_specs(self._get_param("TagSpecifications")).get(RESERVATION_RESOURCE) or {}
    if tags:
        backend.tags[made.reservation_id].update(tags)
    # Taken effect: from here a listing may lag behind it (`consistency`).
    EMULATOR.note_purchased(made.reservation_id)
    view = EMULATOR.reservations.view(backend, made)
    return ActionResult({"CapacityReservation": view})
