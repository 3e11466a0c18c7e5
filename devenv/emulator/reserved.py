"""Reserved capacity's half of `EmulatorState`: reservations, placement groups, the wall
clock they are judged by, and the log of launch requests as they reached EC2.

The log exists so a test can assert what the product sent (the reservation target, market
type, placement group, network interfaces) from the emulator's side of the wire, not from a
mock of the product's own client.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from devenv.emulator.fleet_answers import FleetAnswers
from devenv.emulator.model import (
    EmulatorInputError,
    RegionSeed,
    check_count,
    check_instance_type,
    zone_backend,
)
from devenv.emulator.offerings import OfferingBook
from devenv.emulator.placement import PlacementBook
from devenv.emulator.reservations import ReservationBook

LAUNCH_LOG_SIZE: Final = 500
LAUNCH_ACTIONS: Final = ("RunInstances", "CreateFleet")

When = float | int | dt.datetime | None


class ReservedCapacity:
    """Mixed into `EmulatorState`, which supplies `lock`, `_regions` and `ensure_seeded`."""

    lock: threading.RLock
    _regions: dict[tuple[str, str], RegionSeed]
    ensure_seeded: Callable[[str, str], RegionSeed]

    def _clear_reserved_state(self) -> None:
        # Epoch seconds; unit tests swap in a fake to step reservations through their window.
        self.wall_clock: Callable[[], float] = time.time
        self.clock_offset = 0.0
        self.reservations = ReservationBook(self.now)
        self.offerings = OfferingBook(self.now)
        self.placement_groups = PlacementBook()
        self._launches: deque[dict[str, Any]] = deque(maxlen=LAUNCH_LOG_SIZE)
        # What the fleet pages leave open, answered one way or the other (`fleet_answers`).
        self.fleet_answers = FleetAnswers()

    # --- the clock reservations are judged by ---------------------------------------------
    def now(self) -> float:
        """The emulator's wall clock in epoch seconds: `wall_clock()` moved by `advance_clock`."""
        return self.wall_clock() + self.clock_offset

    def advance_clock(self, seconds: float) -> float:
        """Move the emulator's wall clock forward, so a block starts or ends without waiting."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise EmulatorInputError("seconds", f"seconds must be a number >= 0, got {seconds!r}")
        with self.lock:
            self.clock_offset += float(seconds)
            return self.now()

    # --- reservations ------------------------------------------------------------------------
    def add_capacity_reservation(
        self,
        instance_type: str,
        availability_zone: str,
        count: int,
        reservation_type: str = "default",
        start: When = None,
        end: When = None,
        match: str = "targeted",
        account_id: str = DEFAULT_ACCOUNT_ID,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """An ODCR (`default`) or Capacity Block (`capacity-block`) of `count` instances; its id
        (the same call as `EmulatorClient.add_capacity_reservation`, in-process).

        `start`/`end` are epoch seconds or datetimes. An ODCR without them is active from now
        with no end; a block without them runs from now for a day. `tags` are its tags, as
        CreateCapacityReservation's TagSpecifications or a Capacity Block's purchase give
        them (DescribeCapacityReservations shows them; IAM reads them as aws:ResourceTag).
        """
        check_instance_type(instance_type)
        check_count("count", count, minimum=1)
        with self.lock:
            backend = zone_backend(account_id, availability_zone)
            self.ensure_seeded(account_id, backend.region_name)
            made = self.reservations.add(
                account_id=account_id,
                region=backend.region_name,
                instance_type=instance_type,
                availability_zone=availability_zone,
                count=count,
                reservation_type=reservation_type,
                start=_epoch_seconds("start", start),
                end=_epoch_seconds("end", end),
                match=match,
            )
            if tags:
                backend.tags[made.reservation_id].update({str(k): str(v) for k, v in tags.items()})
            return made.reservation_id

    def add_capacity_block_offering(
        self,
        instance_type: str,
        availability_zone: str,
        instances: int,
        start: When,
        duration_hours: int,
        upfront_fee: float | int | str,
        account_id: str = DEFAULT_ACCOUNT_ID,
    ) -> str:
        """Put capacity on EC2's Capacity Block calendar (`offerings`): `instances` of a
        type in a zone from `start` for `duration_hours`, each at `upfront_fee` for the
        whole block; DescribeCapacityBlockOfferings answers it until it is bought or starts.
        Returns the calendar entry's id."""
        epoch = _epoch_seconds("start", start)
        if epoch is None:
            raise EmulatorInputError("start", "start is required")
        with self.lock:
            backend = zone_backend(account_id, availability_zone)
            self.ensure_seeded(account_id, backend.region_name)
            return self.offerings.add(
                account_id=account_id,
                region=backend.region_name,
                instance_type=instance_type,
                availability_zone=availability_zone,
                start=epoch,
                hours=duration_hours,
                instances=instances,
                upfront_fee=upfront_fee,
            ).entry_id

    def capacity_block_calendar(self) -> list[dict[str, Any]]:
        """What is left on the calendar, soonest first."""
        with self.lock:
            return [
                {
                    "entry_id": e.entry_id,
                    "instance_type": e.instance_type,
                    "availability_zone": e.availability_zone,
                    "start": e.start,
                    "duration_hours": e.hours,
                    "instances": e.available,
                    "upfront_fee": str(e.fee),
                }
                for e in self.offerings.entries()
            ]

    def force_reservation_state(
        self, reservation_id: str, state: str | None, launch_error: str | None = None
    ) -> None:
        """Show a reservation in one of EC2's documented states (`unavailable`, ...) until
        called again with None; `launch_error` is the code a launch into it answers."""
        with self.lock:
            self.reservations.force_state(reservation_id, state, launch_error)

    def set_fleet_placement_answer(self, answer: str) -> None:
        """How an instant fleet answers an override in another zone than its cluster
        placement group's instances: `per-override` (default) or `refuse-call`."""
        with self.lock:
            self.placement_groups.set_fleet_answer(answer)

    def capacity_reservation_views(self) -> list[dict[str, Any]]:
        """What DescribeCapacityReservations answers, for every seeded region, no lag hiding
        anything: EC2's own record of the reservations."""
        with self.lock:
            return [
                self.reservations.view(backend, reservation)
                for backend in self._seeded_backends()
                for reservation in self.reservations.in_region(backend)
            ]

    def placement_group_views(self) -> list[dict[str, Any]]:
        with self.lock:
            return [
                group.view()
                for backend in self._seeded_backends()
                for group in self.placement_groups.in_region(backend)
            ]

    def reclaim_expired_blocks(self, backend: Any) -> None:
        with self.lock:
            self.reservations.reclaim_expired(backend)

    # --- what reached EC2 --------------------------------------------------------------------
    def record_launch(
        self, action: str, params: Mapping[str, Any], instance_ids: list[str], error: str | None
    ) -> None:
        with self.lock:
            self._launches.append(
                {
                    "action": action,
                    "params": copy.deepcopy(dict(params)),
                    "instance_ids": list(instance_ids),
                    "error": error,
                    "at": self.now(),
                }
            )

    def launch_requests(
        self, action: str | None = None, last: int | None = None
    ) -> list[dict[str, Any]]:
        """RunInstances/CreateFleet requests as received (oldest first), with what came of
        them: `instance_ids` launched and the error code, if EC2 refused the call."""
        if action is not None and action not in LAUNCH_ACTIONS:
            raise EmulatorInputError("action", f"action must be one of {LAUNCH_ACTIONS}")
        if last is not None:
            check_count("last", last, minimum=1)
        with self.lock:
            found = [copy.deepcopy(r) for r in self._launches if action in (None, r["action"])]
        return found[-last:] if last else found

    def _seeded_backends(self) -> list[Any]:
        return [ec2_backends[account][region] for account, region in self._regions]


def _epoch_seconds(name: str, value: When) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise EmulatorInputError(name, f"{name} must be timezone-aware")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EmulatorInputError(name, f"{name} must be epoch seconds or a datetime")
    return float(value)
