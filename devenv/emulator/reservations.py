"""Capacity Reservations: On-Demand Capacity Reservations (ODCRs) and Capacity Blocks for ML.

moto has none. The control API creates them (`ReservationBook.add`), as does
PurchaseCapacityBlock from the seeded offerings (`offerings`, `offering_actions`); EC2's own
CreateCapacityReservation is not modelled. What EC2 shows of them is modelled as its
documentation states:
- The state is derived from the emulator's wall clock at every read: `scheduled` before the
  start, `active` until the end, `expired` after it. A scheduled reservation's slots are
  still all its own (it just cannot launch yet); an expired one has none.
- The available count is the total less the instances that carry the reservation's id
  and still hold their slot, so a terminated instance gives its slot back with no
  bookkeeping to get wrong. "Launch instances using Capacity Blocks": an instance that is
  `stopping` or `shutting-down` still holds it; the capacity shows the slot free only
  once the instance is `stopped` or `terminated`.
- Any documented state can be forced on a reservation (`force_state`): EC2 moves a
  reservation to `unavailable`, `payment-pending`, `delayed` and the rest on its own, and
  the product must read each. What a launch into a forced state answers is not written
  down, so the switch carries the answer (default InsufficientInstanceCapacity, the
  answer documented for a block that cannot take a launch yet).
- Capacity Blocks are always `targeted`; an `open` ODCR is consumed by any launch whose
  type and AZ match and that does not opt out, as EC2 does.
- "Work with Capacity Blocks": thirty minutes before a block expires, EC2 begins to
  terminate the instances still running in it (`reclaim_expired`, called before every EC2
  call, terminates them from `end - 30 min`); the block stays `active` until its end.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from moto.ec2.exceptions import EC2ClientError

from devenv.emulator.model import LIVE_STATES, EmulatorInputError, reservation_of

RESERVATION_TYPES: Final = ("default", "capacity-block")
MATCH_CRITERIA: Final = ("open", "targeted")
CAPACITY_BLOCK_MARKET: Final = "capacity-block"
# Capacity Blocks are sold in whole days; one is the shortest a test would ask for.
DEFAULT_BLOCK_SECONDS: Final = 24 * 3600.0
BLOCK_RECLAIM_SECONDS: Final = 30 * 60.0
# botocore's CapacityReservationState, every value.
DOCUMENTED_STATES: Final = (
    "active", "expired", "cancelled", "pending", "failed", "scheduled", "payment-pending",
    "payment-failed", "assessing", "delayed", "unsupported", "cancelling", "unavailable",
)  # fmt: skip
# Instance states that still hold a reservation slot (see the module docstring).
SLOT_HOLDING_STATES: Final = LIVE_STATES | {"stopping", "shutting-down"}
_ID_RE: Final = re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?$")


@dataclass(frozen=True)
class CapacityReservation:
    """One reservation; `start`/`end` are epoch seconds (None: since creation / no end)."""

    reservation_id: str
    account_id: str
    region: str
    instance_type: str
    availability_zone: str
    total: int
    reservation_type: str
    match: str
    created: float
    start: float | None
    end: float | None
    platform: str = "Linux/UNIX"
    tenancy: str = "default"

    @property
    def is_block(self) -> bool:
        return self.reservation_type == "capacity-block"

    def state(self, now: float) -> str:
        if self.end is not None and now >= self.end:
            return "expired"
        if self.start is not None and now < self.start:
            return "scheduled"
        return "active"


class ReservationBook:
    """Every reservation the control API made; `used`/`available` read moto's instances."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._by_id: dict[str, CapacityReservation] = {}
        # reservation id -> (forced state, error code a launch into it answers)
        self._forced: dict[str, tuple[str, str]] = {}

    def force_state(
        self, reservation_id: str, state: str | None, launch_error: str | None = None
    ) -> None:
        """Show `reservation_id` in `state` (None: back to the clock's state)."""
        if reservation_id not in self._by_id:
            raise EmulatorInputError("reservation_id", f"no reservation {reservation_id}")
        if state is None:
            self._forced.pop(reservation_id, None)
            return
        if state not in DOCUMENTED_STATES:
            raise EmulatorInputError("state", f"state must be one of {DOCUMENTED_STATES}")
        self._forced[reservation_id] = (state, launch_error or "InsufficientInstanceCapacity")

    def add(
        self,
        *,
        account_id: str,
        region: str,
        instance_type: str,
        availability_zone: str,
        count: int,
        reservation_type: str,
        start: float | None,
        end: float | None,
        match: str,
        platform: str = "Linux/UNIX",
    ) -> CapacityReservation:
        if reservation_type not in RESERVATION_TYPES:
            raise EmulatorInputError(
                "reservation_type", f"reservation_type must be one of {RESERVATION_TYPES}"
            )
        if match not in MATCH_CRITERIA:
            raise EmulatorInputError("match", f"match must be one of {MATCH_CRITERIA}")
        if reservation_type == "capacity-block" and match != "targeted":
            raise EmulatorInputError("match", "a Capacity Block is always targeted")
        now = self._now()
        if reservation_type == "capacity-block":
            start = now if start is None else start
            end = start + DEFAULT_BLOCK_SECONDS if end is None else end
        if start is not None and end is not None and end <= start:
            raise EmulatorInputError("end", "end must be after start")
        reservation = CapacityReservation(
            reservation_id="cr-" + uuid.uuid4().hex[:17],
            account_id=account_id,
            region=region,
            instance_type=instance_type,
            availability_zone=availability_zone,
            total=count,
            reservation_type=reservation_type,
            match=match,
            created=now,
            start=start,
            end=end,
            platform=platform,
        )
        self._by_id[reservation.reservation_id] = reservation
        return reservation

    def find(self, backend: Any, reservation_id: str) -> CapacityReservation:
        """The reservation `reservation_id` names in the caller's region, or EC2's error."""
        if not _ID_RE.match(reservation_id or ""):
            raise EC2ClientError(
                "InvalidCapacityReservationId.Malformed",
                f"Invalid id: '{reservation_id}' (expecting 'cr-...')",
            )
        found = self._by_id.get(reservation_id)
        if found is None or (found.account_id, found.region) != _where(backend):
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{reservation_id}' does not exist",
            )
        return found

    def in_region(self, backend: Any) -> list[CapacityReservation]:
        where = _where(backend)
        return [r for r in self._by_id.values() if (r.account_id, r.region) == where]

    def state(self, reservation: CapacityReservation) -> str:
        forced = self._forced.get(reservation.reservation_id)
        return forced[0] if forced else reservation.state(self._now())

    def used(self, backend: Any, reservation: CapacityReservation) -> int:
        return len(_in(backend, reservation.reservation_id, SLOT_HOLDING_STATES))

    def available(self, backend: Any, reservation: CapacityReservation) -> int:
        if self.state(reservation) in _GONE_STATES:
            return 0
        return max(0, reservation.total - self.used(backend, reservation))

    def open_matching(self, backend: Any, az: str, instance_type: str) -> list[CapacityReservation]:
        """Active open ODCRs an untargeted launch of this type in this AZ runs in, oldest first."""
        return sorted(
            (
                r
                for r in self.in_region(backend)
                if r.match == "open"
                and not r.is_block
                and (r.availability_zone, r.instance_type) == (az, instance_type)
                and self.state(r) == "active"
            ),
            key=lambda r: r.created,
        )

    def check_target(
        self,
        reservation: CapacityReservation,
        *,
        instance_type: str,
        az: str | None,
        market_type: str | None,
    ) -> None:
        """Refuse a launch that targets `reservation` the way EC2 does, before counting slots.

        EC2's error table names no code for a type or AZ that contradicts the reservation;
        InvalidParameterCombination is its code for parameters that contradict each other.
        """
        rid = reservation.reservation_id
        if reservation.is_block and market_type != CAPACITY_BLOCK_MARKET:
            # What EC2 answers a launch into a block without its market type.
            raise EC2ClientError(
                "InvalidParameterValue",
                "The market type (purchasing) option is not valid. Choose a different market "
                f"type and try again. {rid} is a Capacity Block: set "
                "InstanceMarketOptions.MarketType to capacity-block.",
            )
        if market_type == CAPACITY_BLOCK_MARKET and not reservation.is_block:
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"MarketType capacity-block needs a Capacity Block; {rid} is an On-Demand "
                "Capacity Reservation.",
            )
        if instance_type != reservation.instance_type:
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"The instance type {instance_type} does not match the instance type "
                f"{reservation.instance_type} of Capacity Reservation {rid}.",
            )
        if az is not None and az != reservation.availability_zone:
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"The Availability Zone {az} does not match the Availability Zone "
                f"{reservation.availability_zone} of Capacity Reservation {rid}.",
            )
        state = self.state(reservation)
        if state == "scheduled":
            # The Capacity Blocks walkthrough: a block that has not started answers
            # insufficient capacity.
            raise EC2ClientError(
                "InsufficientInstanceCapacity",
                f"Insufficient capacity: Capacity Reservation {rid} is scheduled and becomes "
                f"active at {_iso(reservation.start)}.",
            )
        forced = self._forced.get(rid)
        if forced is not None and state not in _GONE_STATES and state != "active":
            raise EC2ClientError(
                forced[1],
                f"Capacity Reservation {rid} is {state}; no instance can launch into it now.",
            )
        if state != "active":
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Capacity Reservation {rid} is {state}; instances launch only into an active "
                "Capacity Reservation.",
            )

    def full_error(self, backend: Any, reservation: CapacityReservation, needed: int) -> Exception:
        return EC2ClientError(
            "ReservationCapacityExceeded",
            f"The targeted Capacity Reservation {reservation.reservation_id} does not have "
            f"enough available instance capacity to fulfill your request: {needed} needed, "
            f"{self.available(backend, reservation)} available.",
        )

    def reclaim_expired(self, backend: Any) -> None:
        """Terminate the instances still running in Capacity Blocks within 30 minutes of
        their end (or past it)."""
        now = self._now()
        doomed = [
            instance.id
            for reservation in self.in_region(backend)
            if reservation.is_block
            and reservation.end is not None
            and now >= reservation.end - BLOCK_RECLAIM_SECONDS
            for instance in _in(backend, reservation.reservation_id, LIVE_STATES)
        ]
        if doomed:
            backend.terminate_instances(doomed)

    def view(self, backend: Any, reservation: CapacityReservation) -> dict[str, Any]:
        """DescribeCapacityReservations' entry for `reservation`."""
        r = reservation
        entry: dict[str, Any] = {
            "CapacityReservationId": r.reservation_id,
            "OwnerId": r.account_id,
            "CapacityReservationArn": (
                f"arn:aws:ec2:{r.region}:{r.account_id}:capacity-reservation/{r.reservation_id}"
            ),
            "InstanceType": r.instance_type,
            "InstancePlatform": r.platform,
            "AvailabilityZone": r.availability_zone,
            "Tenancy": r.tenancy,
            "TotalInstanceCount": r.total,
            "AvailableInstanceCount": self.available(backend, r),
            "EbsOptimized": True,
            "EphemeralStorage": False,
            "State": self.state(r),
            "EndDateType": "unlimited" if r.end is None else "limited",
            "InstanceMatchCriteria": r.match,
            "CreateDate": _datetime(r.created),
            "ReservationType": r.reservation_type,
            "Tags": [
                {"Key": k, "Value": v}
                for k, v in sorted((backend.tags.get(r.reservation_id) or {}).items())
            ],
        }
        if r.start is not None:
            entry["StartDate"] = _datetime(r.start)
        if r.end is not None:
            entry["EndDate"] = _datetime(r.end)
        return entry


def _where(backend: Any) -> tuple[str, str]:
    return (str(backend.account_id), str(backend.region_name))


_GONE_STATES: Final = frozenset(
    {"expired", "cancelled", "cancelling", "failed", "payment-failed", "unsupported"}
)


def _in(backend: Any, reservation_id: str, states: frozenset[str]) -> list[Any]:
    return [
        i
        for i in backend.all_instances()
        if i.state in states and reservation_of(i) == reservation_id
    ]


def _datetime(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


def _iso(epoch: float | None) -> str:
    return "now" if epoch is None else _datetime(epoch).isoformat()
