"""Where each slot of an instant fleet draws capacity from: reservations or ordinary capacity.

As EC2's fleet documentation states it:
- `DefaultTargetCapacityType=capacity-block` ("Tutorial: Configure your EC2 Fleet to
  launch instances into Capacity Blocks"): every launch template carries
  `InstanceMarketOptions.MarketType=capacity-block` and targets one Capacity Block;
  several blocks in one request, `OnDemandTargetCapacity`/`SpotTargetCapacity`, or
  `OnDemandOptions.CapacityReservationOptions` are refused. The fleet fulfils what the
  block can hold and returns those instances with an InsufficientInstanceCapacity error
  for the rest (MinTargetCapacity does not turn that into none); a block that has not
  started answers insufficient capacity. It never falls back to On-Demand.
- `DefaultTargetCapacityType=reserved-capacity` (CreateFleet's API reference,
  ReservedCapacityOptionsRequest): `ReservedCapacityOptions` names the reservations
  (`CapacityReservationTarget.CapacityReservationIds`, not together with resource-group
  ARNs) and the `ReservationTypes` to use; it may be given only with `reserved-capacity`,
  which refuses `OnDemandTargetCapacity`/`SpotTargetCapacity` ("Launch instances into an
  interruptible Capacity Reservation", Considerations). Slots launch only into the named
  reservations that match their type and zone and are active, and into ordinary On-Demand
  capacity only with `ReservedCapacityFallbackOptions.MarketTypes=[on-demand]`. Whether a
  shortfall launches the part the reservations hold is documented only for interruptible
  reservations (it does); `fleet_answers.reserved_shortfall` gives each answer. Resource
  groups are not modelled.
- On-Demand fleets: a launch template's `CapacityReservationSpecification` is read as
  for any launch ("Launch instances into an existing Capacity Reservation": into any open
  reservation, into a specific one, or into a group). A template that targets a
  reservation by id (`CapacityReservationTarget.CapacityReservationId`, the way Karpenter
  launches into an ODCR) draws only on that reservation (`slot_source`), and is refused
  per slot as a launch would be when it does not match. Otherwise ("Use Capacity
  Reservations in EC2 Fleet") active `open` ODCRs of the slot's type and AZ are used before
  ordinary capacity (unless the template's preference is `none`), and
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
RESERVED_CAPACITY: Final = "reserved-capacity"
ODCR_TYPE: Final = "on-demand-capacity-reservation"
RESERVATION_TYPES: Final = (ODCR_TYPE, CAPACITY_BLOCK_MARKET, "interruptible-capacity-reservation")
RESERVED_LIFECYCLE: Final = ODCR_TYPE


@dataclass(frozen=True)
class ReservedTarget:
    """What a reserved-capacity fleet may draw on: the named reservations of the allowed
    types, and ordinary On-Demand capacity if it falls back."""

    reservation_ids: tuple[str, ...]
    types: tuple[str, ...]
    fallback_on_demand: bool


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


def reserved_target(backend: Any, params: Mapping[str, Any]) -> ReservedTarget | None:
    """The request-level rules of `reserved-capacity` (None for other fleets)."""
    target = params.get("TargetCapacitySpecification") or {}
    options = params.get("ReservedCapacityOptions")
    reserved = target.get("DefaultTargetCapacityType") == RESERVED_CAPACITY
    if options and not reserved:
        raise EC2ClientError(
            "InvalidParameterCombination",
            "ReservedCapacityOptions can be used only when DefaultTargetCapacityType is "
            "reserved-capacity.",
        )
    if not reserved:
        return None
    if target.get("OnDemandTargetCapacity") or target.get("SpotTargetCapacity"):
        raise EC2ClientError(
            "InvalidParameterCombination",
            "OnDemandTargetCapacity and SpotTargetCapacity are not supported when "
            "DefaultTargetCapacityType is reserved-capacity.",
        )
    options = options or {}
    named = options.get("CapacityReservationTarget") or {}
    ids = tuple(str(i) for i in named.get("CapacityReservationIds") or ())
    if ids and named.get("CapacityReservationResourceGroupArns"):
        raise EC2ClientError(
            "InvalidParameterCombination",
            "Specify Capacity Reservation IDs or a Capacity Reservation Resource Group ARN, "
            "but not both.",
        )
    for rid in ids:
        EMULATOR.reservations.find(backend, rid)  # EC2's NotFound/Malformed for a bad id
    types = tuple(str(t) for t in options.get("ReservationTypes") or RESERVATION_TYPES)
    fallback = options.get("ReservedCapacityFallbackOptions") or {}
    return ReservedTarget(ids, types, "on-demand" in (fallback.get("MarketTypes") or ()))


def reserved_slot_source(
    backend: Any, az: str, instance_type: str, target: ReservedTarget
) -> SlotSource:
    book = EMULATOR.reservations
    ids: list[str | None] = []
    for rid in target.reservation_ids:
        reservation = book.find(backend, rid)
        kind = CAPACITY_BLOCK_MARKET if reservation.is_block else ODCR_TYPE
        if kind not in target.types:
            continue
        if (reservation.availability_zone, reservation.instance_type) != (az, instance_type):
            continue
        if book.state(reservation) != "active":
            continue
        ids += [rid] * book.available(backend, reservation)
    if target.fallback_on_demand:
        ids += [None] * EMULATOR.free_slots(backend, az, instance_type)
    return SlotSource(RESERVED_CAPACITY, tuple(ids))


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
