"""Capacity Block offerings as EC2 answers them (DescribeCapacityBlockOfferings), typed, and
the pure choice among them.

`CapacityBlockOffering` is one offering: an id that PurchaseCapacityBlock takes, its zone,
start, end and upfront fee (EC2 answers the fee as a string of the currency's units; it is
kept a `Decimal`, never a float, because it is money). `list_offerings` reads every page.
`choose_offering` is the rule a team that signs the GPU bill expects: the earliest start
whose fee is within the cap, the lower fee between two that start together; none that
starts by the latest acceptable start -> no choice, with the earliest offering named so the
refusal can say what would have been bought.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from provisioner.api.durations import BLOCK_DURATION_HOURS
from provisioner.cloud.ec2api import Ec2Api, parse_aws_timestamp
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error

__all__ = [
    "ALLOWED_DURATION_HOURS",
    "CapacityBlockOffering",
    "OfferingChoice",
    "choose_offering",
    "list_offerings",
]

# What EC2 sells (`api.durations.BLOCK_DURATION_HOURS`, which a Job's annotation is checked
# against too).
ALLOWED_DURATION_HOURS: Final = BLOCK_DURATION_HOURS


@dataclass(frozen=True)
class CapacityBlockOffering:
    offering_id: str
    instance_type: str
    availability_zone: str
    instance_count: int
    start: datetime
    end: datetime
    duration_hours: int
    upfront_fee: Decimal
    currency: str

    @classmethod
    def from_ec2(cls, raw: dict[str, Any]) -> CapacityBlockOffering:
        try:
            fee = Decimal(str(raw["UpfrontFee"]))
        except (KeyError, InvalidOperation) as bad:
            raise CloudError(
                ErrorKind.RETRYABLE,
                None,
                "MalformedOffering",
                f"EC2 answered an offering without a readable UpfrontFee: {raw!r}",
            ) from bad
        return cls(
            offering_id=str(raw["CapacityBlockOfferingId"]),
            instance_type=str(raw["InstanceType"]),
            availability_zone=str(raw["AvailabilityZone"]),
            instance_count=int(raw["InstanceCount"]),
            start=_time(raw["StartDate"]),
            end=_time(raw["EndDate"]),
            duration_hours=int(raw.get("CapacityBlockDurationHours") or 0),
            upfront_fee=fee,
            currency=str(raw.get("CurrencyCode") or "USD"),
        )

    def describe(self) -> str:
        """One line for a message: what, where, when, for how much."""
        return (
            f"{self.offering_id} ({self.instance_count} x {self.instance_type} in "
            f"{self.availability_zone}, {self.start.isoformat()} to {self.end.isoformat()}, "
            f"{self.upfront_fee} {self.currency} upfront)"
        )


def _time(value: Any) -> datetime:
    # botocore answers datetimes; a stubbed or recorded answer may carry the string.
    return value if isinstance(value, datetime) else parse_aws_timestamp(value)


def check_duration_hours(hours: int) -> int:
    if hours not in ALLOWED_DURATION_HOURS:
        raise ValueError(
            f"duration {hours}h is not one EC2 sells: 24 to 336 hours in steps of 24 "
            "(1-14 days), or 504 to 4368 in steps of 168 (3-26 weeks)"
        )
    return hours


def list_offerings(
    ec2: Ec2Api,
    *,
    instance_type: str,
    count: int,
    duration_hours: int,
    earliest_start: datetime | None = None,
    latest_end: datetime | None = None,
) -> list[CapacityBlockOffering]:
    """Every offering EC2 answers for the shape and window, soonest first."""
    params: dict[str, Any] = {
        "InstanceType": instance_type,
        "InstanceCount": count,
        "CapacityDurationHours": check_duration_hours(duration_hours),
    }
    if earliest_start is not None:
        params["StartDateRange"] = earliest_start
    if latest_end is not None:
        params["EndDateRange"] = latest_end
    found: list[CapacityBlockOffering] = []
    try:
        while True:
            page = ec2.describe_capacity_block_offerings(**params)
            found += [CapacityBlockOffering.from_ec2(o) for o in page["CapacityBlockOfferings"]]
            token = page.get("NextToken")
            if not token:
                break
            params["NextToken"] = token
    except CloudError:
        raise
    except Exception as exc:
        raise to_cloud_error(exc, "listing Capacity Block offerings") from exc
    return sorted(found, key=lambda o: (o.start, o.upfront_fee, o.offering_id))


@dataclass(frozen=True)
class OfferingChoice:
    """`chosen`: what would be bought (None: nothing fits); `earliest`: the earliest
    offering whatever its fee (None: EC2 offered nothing), named when nothing fits."""

    chosen: CapacityBlockOffering | None
    earliest: CapacityBlockOffering | None
    why: str


def choose_offering(
    offerings: Sequence[CapacityBlockOffering],
    *,
    max_fee: Decimal | None = None,
    latest_start: datetime | None = None,
) -> OfferingChoice:
    """The earliest start within `max_fee`, the lower fee on a tie (then the id, so the
    choice is stable); none starting by `latest_start` -> None, with the earliest offering."""
    ranked = sorted(offerings, key=lambda o: (o.start, o.upfront_fee, o.offering_id))
    earliest = ranked[0] if ranked else None
    if earliest is None:
        return OfferingChoice(None, None, "EC2 offers no Capacity Block of this shape")
    for offering in ranked:
        if latest_start is not None and offering.start > latest_start:
            break
        if max_fee is None or offering.upfront_fee <= max_fee:
            return OfferingChoice(offering, earliest, "the earliest start within the fee cap")
    cap = "" if max_fee is None else f" within {max_fee} {earliest.currency}"
    by = "" if latest_start is None else f" starting by {latest_start.isoformat()}"
    return OfferingChoice(
        None, earliest, f"no offering{cap}{by}; the earliest is {earliest.describe()}"
    )
