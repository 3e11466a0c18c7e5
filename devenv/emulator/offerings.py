"""Capacity Block offerings and their purchase: DescribeCapacityBlockOfferings and
PurchaseCapacityBlock, as EC2 documents them.

moto has neither. The pages followed (Amazon EC2 API Reference and User Guide):
- "DescribeCapacityBlockOfferings" (API Reference): InstanceType, InstanceCount and
  CapacityDurationHours are required; "You must specify the duration in 1-day increments up
  14 days, and in 7-day increments up to 182 days" (`check_duration`: 24..336 hours in steps
  of 24, then 504..4368 in steps of 168; anything else is InvalidParameterValue);
  StartDateRange is "the earliest start date", EndDateRange "the latest end date" of an
  offering; InstanceCount: "Each Capacity Block can have up to 64 instances".
- "CapacityBlockOffering" (API Reference): the fields of each offering, UpfrontFee a
  string ("the total price to be paid up front") with its CurrencyCode.
- "PurchaseCapacityBlock" (API Reference): CapacityBlockOfferingId and InstancePlatform
  required, TagSpecifications "the tags to apply to the Capacity Block"; the answer is the
  new CapacityReservation.
- "Capacity Blocks for ML" / "Work with Capacity Blocks" (User Guide): a purchased block is
  a Capacity Reservation of type `capacity-block`, `scheduled` until its start and
  `active` from it (the existing `reservations` model gives both from the clock).

Not followed on purpose: EC2 starts real blocks at 11:30 UTC; the seeded calendar may start
an offering at any time, because a test needs a block that starts when it chooses (the
same choice `reservations` makes). The calendar is seeded through the control API
(`add_offering`): one entry per instance type, zone, start and duration, with the instances
it can still sell and the upfront fee of ONE instance for the whole duration. An offering
answered for InstanceCount=k costs k times that fee. A purchase takes its instances out of
the entry (shrinks it; an entry sold out is gone), so the next describe answers what is left.

Not settled by the docs: the code for an unknown or sold-out offering id. EC2's error page
lists none for it; InvalidParameterValue is what it answers a value it cannot use, so the
emulator gives that.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from moto.core.utils import get_service_model
from moto.ec2.exceptions import EC2ClientError

from devenv.emulator.model import EmulatorInputError, check_count, check_instance_type

MAX_BLOCK_INSTANCES: Final = 64
DAY_HOURS: Final = 24
WEEK_HOURS: Final = 7 * DAY_HOURS
# "1-day increments up 14 days, and in 7-day increments up to 182 days".
ALLOWED_DURATION_HOURS: Final = frozenset(
    {d * DAY_HOURS for d in range(1, 15)} | {w * WEEK_HOURS for w in range(2, 27)}
)


def instance_platforms() -> tuple[str, ...]:
    """CapacityReservationInstancePlatform's values, as botocore's EC2 model lists them."""
    shape = get_service_model("ec2").shape_for("CapacityReservationInstancePlatform")
    return tuple(shape.enum)


@dataclass(frozen=True)
class CalendarEntry:
    """Capacity EC2 can sell: `available` instances of a type in a zone, from `start` for
    `hours`; `fee` is one instance's upfront fee for the whole block."""

    entry_id: str
    account_id: str
    region: str
    instance_type: str
    availability_zone: str
    start: float
    hours: int
    available: int
    fee: Decimal
    currency: str = "USD"

    @property
    def end(self) -> float:
        return self.start + self.hours * 3600.0


def check_duration(hours: Any) -> int:
    """CapacityDurationHours as EC2 takes it, else its InvalidParameterValue."""
    if isinstance(hours, bool) or not isinstance(hours, int) or hours not in ALLOWED_DURATION_HOURS:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"The value '{hours}' for parameter CapacityDurationHours is invalid. Specify a "
            "duration in 1-day increments (24 hours) up to 14 days, or in 7-day increments "
            "(168 hours) up to 182 days.",
        )
    return hours


def _fee(value: Any) -> Decimal:
    try:
        fee = Decimal(str(value))
    except InvalidOperation:
        raise EmulatorInputError(
            "upfront_fee", f"upfront_fee must be a number, got {value!r}"
        ) from None
    if not fee.is_finite() or fee < 0:
        raise EmulatorInputError("upfront_fee", f"upfront_fee must be >= 0, got {value!r}")
    return fee


class OfferingBook:
    """The calendar of offerings, and the offering ids it has answered (id -> entry, count)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._entries: dict[str, CalendarEntry] = {}
        self._answered: dict[str, tuple[str, int]] = {}

    def add(
        self,
        *,
        account_id: str,
        region: str,
        instance_type: str,
        availability_zone: str,
        start: float,
        hours: int,
        instances: int,
        upfront_fee: Any,
        currency: str = "USD",
    ) -> CalendarEntry:
        check_instance_type(instance_type)
        check_count("instances", instances, minimum=1)
        if isinstance(hours, bool) or not isinstance(hours, int) or hours < 1:
            raise EmulatorInputError("duration_hours", "duration_hours must be an integer >= 1")
        entry = CalendarEntry(
            entry_id="cbe-" + uuid.uuid4().hex[:12],
            account_id=account_id,
            region=region,
            instance_type=instance_type,
            availability_zone=availability_zone,
            start=float(start),
            hours=hours,
            available=instances,
            fee=_fee(upfront_fee),
            currency=currency,
        )
        self._entries[entry.entry_id] = entry
        return entry

    def entries(self) -> list[CalendarEntry]:
        return sorted(self._entries.values(), key=lambda e: (e.start, e.entry_id))

    def describe(self, backend: Any, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """DescribeCapacityBlockOfferings' answer for `params` (the request's parameters)."""
        instance_type = params.get("InstanceType")
        if not instance_type:
            raise EC2ClientError(
                "MissingParameter", "The request must contain the parameter InstanceType."
            )
        count = _request_count(params.get("InstanceCount"))
        hours = check_duration(_as_int(params.get("CapacityDurationHours")))
        earliest = _epoch(params.get("StartDateRange"))
        latest_end = _epoch(params.get("EndDateRange"))
        now = self._now()
        where = (str(backend.account_id), str(backend.region_name))
        found = []
        for entry in self.entries():
            if (entry.account_id, entry.region) != where or entry.instance_type != instance_type:
                continue
            if entry.hours != hours or entry.available < count or entry.start < now:
                continue
            if earliest is not None and entry.start < earliest:
                continue
            if latest_end is not None and entry.end > latest_end:
                continue
            found.append(self._offering(entry, count))
        return found

    def _offering(self, entry: CalendarEntry, count: int) -> dict[str, Any]:
        offering_id = f"cb-{uuid.uuid5(uuid.NAMESPACE_URL, f'{entry.entry_id}/{count}').hex[:17]}"
        self._answered[offering_id] = (entry.entry_id, count)
        return {
            "CapacityBlockOfferingId": offering_id,
            "InstanceType": entry.instance_type,
            "AvailabilityZone": entry.availability_zone,
            "InstanceCount": count,
            "StartDate": _datetime(entry.start),
            "EndDate": _datetime(entry.end),
            "CapacityBlockDurationHours": entry.hours,
            "CapacityBlockDurationMinutes": 0,
            "UpfrontFee": f"{entry.fee * count:.2f}",
            "CurrencyCode": entry.currency,
            "Tenancy": "default",
        }

    def take(self, offering_id: str) -> tuple[CalendarEntry, int]:
        """Sell the offering `offering_id` names: the entry as it was and the count sold; the
        entry shrinks by that count (and is gone once sold out)."""
        answered = self._answered.get(offering_id or "")
        entry = self._entries.get(answered[0]) if answered else None
        if answered is None or entry is None or entry.available < answered[1]:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"The Capacity Block offering '{offering_id}' does not exist or is no longer "
                "available. Describe the offerings again and choose another.",
            )
        if entry.start < self._now():
            raise EC2ClientError(
                "InvalidParameterValue",
                f"The Capacity Block offering '{offering_id}' has already started.",
            )
        count = answered[1]
        left = entry.available - count
        if left:
            self._entries[entry.entry_id] = replace(entry, available=left)
        else:
            del self._entries[entry.entry_id]
        return entry, count


def _request_count(value: Any) -> int:
    count = _as_int(value)
    if count is None:
        raise EC2ClientError(
            "MissingParameter", "The request must contain the parameter InstanceCount."
        )
    if not 1 <= count <= MAX_BLOCK_INSTANCES:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"The value '{count}' for parameter InstanceCount is invalid. A Capacity Block "
            f"holds 1 to {MAX_BLOCK_INSTANCES} instances.",
        )
    return count


def _as_int(value: Any) -> Any:
    if value is None or isinstance(value, int):
        return value
    try:
        return int(str(value))
    except ValueError:
        return value


def _epoch(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.timestamp()
    text = str(value)
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise EC2ClientError(
                "InvalidParameterValue", f"The value '{text}' is not a valid timestamp."
            ) from None


def _datetime(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)
