"""Where each slot of an instant fleet draws capacity from: reservations or ordinary capacity.

As EC2's fleet documentation states it:
- `DefaultTargetCapacityType=capacity-block`: every launch template carries
  `InstanceMarketOptions.MarketType=capacity-block` and targets one Capacity Block; several
  blocks in one request, `OnDemandTargetCapacity`/`SpotTargetCapacity`, or
  `OnDemandOptions.CapacityReservationOptions` are refused. The fleet fulfils what the
  block can hold and returns those instances with an InsufficientInstanceCapacity error for
  the rest (MinTargetCapacity does not turn that into none); a block that has not started
  answers insufficient capacity. It never falls back to On-Demand.
- On-Demand fleets: a launch template that targets a Capacity Reservation by id launches
  only into it, and if the reservation cannot hold the whole target the launch fails
  (ReservationCapacityExceeded). Otherwise active `open` ODCRs of the slot's type and AZ are
  used before ordinary capacity (unless the template's preference is `none`), and
  `CapacityReservationOptions.UsageStrategy=use-capacity-reservations-first` makes slots
  with unused reservations go first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from moto.ec2.exceptions import EC2ClientError

from devenv.emulator.launch import LaunchOptions
from devenv.emulator.reservations import CAPACITY_BLOCK_MARKET
from devenv.emulator.state import EMULATOR

USE_RESERVATIONS_FIRST: Final = "use-capacity-reservations-first"


@dataclass(frozen=True)
class SlotSource:
    """What one slot can launch: one entry per instance that fits (a reservation id or
    None for ordinary capacity), or the error EC2 answers for the slot instead."""

    key: str
    ids: tuple[str | None, ...]
    error: tuple[str, str] | None = None

    @property
    def reserved(self) -> bool:
        return any(self.ids)


def is_block_fleet(params: Mapping[str, Any]) -> bool:
    target = params.get("TargetCapacitySpecification") or {}
    return target.get("DefaultTargetCapacityType") == CAPACITY_BLOCK_MARKET


def reservations_first(params: Mapping[str, Any]) -> bool:
    options = (params.get("OnDemandOptions") or {}).get("CapacityReservationOptions") or {}
    return options.get("UsageStrategy") == USE_RESERVATIONS_FIRST


def check_block_fleet(params: Mapping[str, Any], options: Sequence[LaunchOptions]) -> None:
    """The request-level refusals of a capacity-block fleet (EC2 raises these)."""
    target = params.get("TargetCapacitySpecification") or {}
    if target.get("OnDemandTargetCapacity") or target.get("SpotTargetCapacity"):
        raise EC2ClientError(
            "InvalidParameterCombination",
            "OnDemandTargetCapacity and SpotTargetCapacity are not supported when "
            "DefaultTargetCapacityType is capacity-block.",
        )
    if (params.get("OnDemandOptions") or {}).get("CapacityReservationOptions"):
        raise EC2ClientError(
            "InvalidParameterCombination",
            "OnDemandOptions.CapacityReservationOptions cannot be used when "
            "DefaultTargetCapacityType is capacity-block.",
        )
    for option in options:
        if option.market_type != CAPACITY_BLOCK_MARKET or not option.reservation_id:
            raise EC2ClientError(
                "InvalidParameterCombination",
                "With DefaultTargetCapacityType capacity-block, the launch template must set "
                "InstanceMarketOptions.MarketType capacity-block and target a Capacity Block "
                "by CapacityReservationId.",
            )
    if len({option.reservation_id for option in options}) > 1:
        raise EC2ClientError(
            "InvalidParameterCombination",
            "Multiple Capacity Blocks in the same EC2 Fleet request are not supported.",
        )


def slot_source(backend: Any, az: str, instance_type: str, options: LaunchOptions) -> SlotSource:
    book = EMULATOR.reservations
    if options.reservation_id:
        try:
            reservation = book.find(backend, options.reservation_id)
            book.check_target(
                reservation, instance_type=instance_type, az=az, market_type=options.market_type
            )
        except EC2ClientError as refused:
            return SlotSource(options.reservation_id, (), (str(refused.code), str(refused.message)))
        free = book.available(backend, reservation)
        return SlotSource(reservation.reservation_id, (reservation.reservation_id,) * free)
    ids: list[str | None] = []
    if options.preference != "none":
        for reservation in book.open_matching(backend, az, instance_type):
            ids += [reservation.reservation_id] * book.available(backend, reservation)
    if options.preference != "capacity-reservations-only":
        ids += [None] * EMULATOR.free_slots(backend, az, instance_type)
    return SlotSource("", tuple(ids))
