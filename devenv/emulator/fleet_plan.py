"""Where an instant fleet's instances go: the request's placement rules and a pure planner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moto.ec2.exceptions import EC2ClientError


@dataclass(frozen=True)
class FleetRequest:
    """The parts of an instant CreateFleet request that decide placement."""

    total: int
    min_target: int
    single_az: bool
    single_type: bool
    lifecycle: str

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FleetRequest:
        target = params.get("TargetCapacitySpecification") or {}
        # Capacity blocks are paid like on-demand and take the on-demand options.
        spot = target.get("DefaultTargetCapacityType") == "spot"
        lifecycle = "spot" if spot else "on-demand"
        options_key = "SpotOptions" if spot else "OnDemandOptions"
        options = params.get(options_key) or {}
        request = cls(
            total=int(target.get("TotalTargetCapacity") or 0),
            min_target=int(options.get("MinTargetCapacity") or 0),
            single_az=bool(options.get("SingleAvailabilityZone")),
            single_type=bool(options.get("SingleInstanceType")),
            lifecycle=lifecycle,
        )
        request._validate(options_key)
        return request

    def _validate(self, options_key: str) -> None:
        if self.total < 1:
            raise EC2ClientError("InvalidParameterValue", "TotalTargetCapacity must be at least 1.")
        if self.min_target > self.total:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"{options_key}.MinTargetCapacity ({self.min_target}) cannot be greater "
                f"than TotalTargetCapacity ({self.total}).",
            )
        # AWS documents MinTargetCapacity as valid only with one of these two set.
        if self.min_target and not (self.single_az or self.single_type):
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"{options_key}.MinTargetCapacity requires SingleAvailabilityZone or "
                "SingleInstanceType to be true.",
            )


@dataclass(frozen=True)
class FleetSlot:
    """One launch template config + override, resolved to where it would launch."""

    index: int
    az: str
    instance_type: str
    priority: float
    # Where its instances' capacity comes from when that is not the pool's ordinary capacity
    # (a targeted reservation's id), so slots share free capacity only with their own kind.
    source: str = ""
    # UsageStrategy use-capacity-reservations-first: slots with unused reservations go first.
    reserved_first: bool = False

    @property
    def pool(self) -> tuple[str, ...]:
        return (
            (self.az, self.instance_type, self.source)
            if self.source
            else (
                self.az,
                self.instance_type,
            )
        )


def plan_fleet(
    slots: Sequence[FleetSlot],
    total: int,
    *,
    single_az: bool,
    single_type: bool,
    free: Mapping[tuple[str, ...], int],
) -> dict[int, int]:
    """How many instances each slot gets: the first group that fits `total`, else the best.

    With SingleAvailabilityZone / SingleInstanceType the slots are grouped by AZ / type and
    all instances come from one group, as AWS does; within a group they are spread one at a
    time over the slots (in priority order) while their pools have free slots.
    """
    best: dict[int, int] = {}
    for group in _slot_groups(slots, single_az, single_type):
        allocation = _spread(group, total, dict(free))
        if sum(allocation.values()) == total:
            return allocation
        if sum(allocation.values()) > sum(best.values()):
            best = allocation
    return best


def _slot_groups(
    slots: Sequence[FleetSlot], single_az: bool, single_type: bool
) -> list[list[FleetSlot]]:
    ordered = sorted(slots, key=lambda s: (not s.reserved_first, s.priority, s.index))
    groups: dict[tuple[str, str], list[FleetSlot]] = {}
    for slot in ordered:
        key = (slot.az if single_az else "", slot.instance_type if single_type else "")
        groups.setdefault(key, []).append(slot)
    return list(groups.values())


def _spread(
    group: Sequence[FleetSlot], total: int, free: dict[tuple[str, ...], int]
) -> dict[int, int]:
    allocation: dict[int, int] = {}
    placed = 0
    progress = True
    while placed < total and progress:
        progress = False
        for slot in group:
            if placed == total or free.get(slot.pool, 0) <= 0:
                continue
            free[slot.pool] -= 1
            allocation[slot.index] = allocation.get(slot.index, 0) + 1
            placed += 1
            progress = True
    return allocation
