"""The control API's half of the Capacity Block calendar (`offerings`):

    POST /_emulator/capacity-block-offerings {instance_type, availability_zone, instances,
         start (epoch seconds on the emulator's clock), duration_hours, upfront_fee (one
         instance's, for the whole block)} -> {entry_id}

Kept out of `server` (which holds every other route) for the house's file-size rule.
"""

from __future__ import annotations

from typing import Any

from devenv.emulator import control_fields as fields
from devenv.emulator.model import EmulatorInputError
from devenv.emulator.state import EmulatorState


def add_offering(state: EmulatorState, body: dict[str, Any]) -> dict[str, Any]:
    start = fields.number(body, "start")
    if start is None:
        raise fields.BadField("start", "start is required (epoch seconds)")
    fee = body.get("upfront_fee")
    if isinstance(fee, bool) or not isinstance(fee, int | float | str):
        raise EmulatorInputError("upfront_fee", "upfront_fee is required: a number or a string")
    entry_id = state.add_capacity_block_offering(
        fields.string(body, "instance_type"),
        fields.string(body, "availability_zone"),
        fields.integer(body, "instances"),
        start=start,
        duration_hours=fields.integer(body, "duration_hours"),
        upfront_fee=fee,
    )
    return {"entry_id": entry_id}
