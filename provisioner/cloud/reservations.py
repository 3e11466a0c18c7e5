"""A gang's capacity reservation: looked up before every launch, and what it allows.

Called by ``Ec2Engine.acquire`` (look up, then decide) and ``Ec2Engine.reservation`` (the
pool's launch template needs the kind). DescribeCapacityReservations becomes a typed
:class:`Reservation`; :func:`decide` turns it into the subnets a launch may use or one of:

* CONFIG naming the id: unknown, expired, cancelled or failed; a Capacity Block that ends
  before a gang on it could do any work;
* CONFIG naming both: another instance type than the gang's; a zone that contradicts the
  Job's zones or subnets (or that none of the cluster's subnets is in);
* :class:`ReservationNotActive` carrying the start: a Capacity Block not started yet (EC2
  would answer InsufficientCapacity); the pool holds at $0 and acquires when it starts;
* CAPACITY: fewer free slots than N, or a reservation EC2 shows as ``unavailable``.
  Nothing is launched, so nothing bills.

Every state DescribeCapacityReservations documents (botocore's CapacityReservationState,
the "View the state of a Capacity Reservation" and "View Capacity Blocks" pages) has one
outcome below; a state this table does not know is never launched into.

Each of these is decided before a single instance is asked for, so a reservation that
cannot take the whole gang never leaves part of one running.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final, cast

from provisioner.api import constants as c
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, ReservationNotActive, to_cloud_error
from provisioner.cloud.types import MatchCriteria, Reservation, ReservationKind, SubnetRef

__all__ = ["decide", "describe_reservation", "reservation_from"]

# States in which nothing will ever launch into the reservation again. `cancelling`: the
# capacity "has been released" and only the charges wind down.
_FINISHED: Final = frozenset(
    {"expired", "cancelled", "cancelling", "failed", "payment-failed", "unsupported"}
)
# States of a reservation that may still become active.
_NOT_YET: Final = frozenset({"scheduled", "pending", "payment-pending", "assessing", "delayed"})
# `unavailable` is listed among a Capacity Block's states (CapacityBlock in the API
# reference) without a sentence of its own; the same reference counts a block's
# "unavailable capacity" as capacity unusable because of a failed system status check.
# The reservation is still the user's and its window still runs, so a launch into it is a
# CAPACITY wait (nothing launched, retried whole, Retry to Kueue after the usual number of
# shortfalls), not a CONFIG error: the annotation is right and may work again unchanged.
_UNAVAILABLE: Final = "unavailable"
_ACTIVE: Final = "active"
_KNOWN: Final = _FINISHED | _NOT_YET | {_UNAVAILABLE, _ACTIVE}
# EC2 starts terminating a block's instances this long before its end ("Work with Capacity
# Blocks": thirty minutes before the reservation expires), whatever the installer's margin.
EC2_BLOCK_RECLAIM: Final = timedelta(minutes=30)


def _fix() -> str:
    return f"Fix {c.ANN_CAPACITY_RESERVATION_ID}"


def describe_reservation(ec2: Ec2Api, reservation_id: str) -> Reservation:
    """The reservation ``reservation_id``, or CONFIG naming it when EC2 does not know it."""
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id]).get(
            "CapacityReservations"
        )
    except Exception as exc:
        err = to_cloud_error(exc, f"DescribeCapacityReservations {reservation_id}")
        if err.kind in (ErrorKind.CONFIG, ErrorKind.NOT_FOUND):
            raise _unknown(reservation_id, err.code) from exc
        raise err from exc
    if not found:
        raise _unknown(reservation_id, None)
    return reservation_from(found[0])


def _unknown(reservation_id: str, code: str | None) -> CloudError:
    return CloudError(
        ErrorKind.CONFIG,
        code,
        "ReservationNotFound",
        f"Capacity reservation {reservation_id} does not exist in this region (or this "
        f"account cannot see it). {_fix()}: name a reservation shown by "
        "`aws ec2 describe-capacity-reservations`.",
    )


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def reservation_from(raw: dict[str, Any]) -> Reservation:
    kind: ReservationKind = (
        "capacity-block" if raw.get("ReservationType") == "capacity-block" else "odcr"
    )
    match = raw.get("InstanceMatchCriteria") or "open"
    return Reservation(
        reservation_id=str(raw["CapacityReservationId"]),
        kind=kind,
        instance_type=str(raw.get("InstanceType") or ""),
        availability_zone=str(raw.get("AvailabilityZone") or ""),
        total=int(raw.get("TotalInstanceCount") or 0),
        available=int(raw.get("AvailableInstanceCount") or 0),
        state=str(raw.get("State") or ""),
        start=_time(raw.get("StartDate")),
        end=_time(raw.get("EndDate")),
        match_criteria=cast(MatchCriteria, match if match in ("open", "targeted") else "open"),
        # arn:aws:ec2:<region>:<account>:placement-group/<name>
        placement_group_name=str(raw["PlacementGroupArn"]).rsplit("/", 1)[-1]
        if raw.get("PlacementGroupArn")
        else None,
    )


def _at(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"


def _what(r: Reservation) -> str:
    return "Capacity Block" if r.kind == "capacity-block" else "capacity reservation"


def decide(
    r: Reservation,
    *,
    instance_type: str,
    count: int,
    subnets: Sequence[SubnetRef],
    explicit_placement: Sequence[str],
    now: datetime,
    block_release_margin: timedelta = timedelta(0),
) -> tuple[SubnetRef, ...]:
    """The subnets (all in the reservation's zone) a launch of ``count`` may use now, or
    the CloudError that says why not; see the module docstring for each outcome."""
    name = f"{_what(r)} {r.reservation_id}"
    ended = r.end is not None and now >= r.end
    if r.state in _FINISHED or (ended and r.kind == "capacity-block"):
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "ReservationNotUsable",
            f"{name} is {r.state if r.state in _FINISHED else 'expired'}"
            + (f" (it ended at {_at(r.end)})" if r.end is not None else "")
            + f"; nothing can launch into it. {_fix()}: name an active or scheduled one.",
        )
    if r.instance_type != instance_type:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "ReservationTypeMismatch",
            f"{name} is for {r.instance_type}, but the gang asks for {instance_type}. Set "
            f"{c.ANN_INSTANCE_TYPE} to {r.instance_type}, or point {c.ANN_CAPACITY_RESERVATION_ID}"
            f" at a reservation for {instance_type}.",
        )
    inside = tuple(s for s in subnets if s.availability_zone == r.availability_zone)
    if not inside:
        if explicit_placement:
            raise CloudError(
                ErrorKind.CONFIG,
                None,
                "ReservationZoneConflict",
                f"{name} is in {r.availability_zone}, but the Job asks for "
                f"{', '.join(explicit_placement)} ({c.ANN_AVAILABILITY_ZONES} / "
                f"{c.ANN_SUBNETS}). A reservation can only be used in its own zone: allow "
                f"{r.availability_zone}, or remove the zone/subnet annotation.",
            )
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "ReservationZoneNotInSubnets",
            f"{name} is in {r.availability_zone}, but no subnet of the gang is; add a "
            f"subnet in {r.availability_zone} to the cluster, or point "
            f"{c.ANN_CAPACITY_RESERVATION_ID} at a reservation in the gang's zones.",
        )
    margin = max(block_release_margin, EC2_BLOCK_RECLAIM)
    if r.kind == "capacity-block" and r.end is not None and now >= r.end - margin:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "CapacityBlockEnding",
            f"{name} ends at {_at(r.end)}; gangs on a block are released {margin} before "
            "its end (EC2 starts terminating a block's instances 30 minutes before it), so "
            f"it has no time left for this gang. {_fix()}: name a later block.",
        )
    not_started = r.start is not None and now < r.start
    if r.state in _NOT_YET or not_started:
        when = f"at {_at(r.start)}" if r.start is not None else "when EC2 makes it active"
        raise ReservationNotActive(
            "ReservationNotActive",
            f"{name} is {r.state or 'not active'} and starts {when}; the gang is held at $0 "
            "(nothing is launched) and is acquired as soon as it starts.",
            r.start,
        )
    if r.state == _UNAVAILABLE or r.state not in _KNOWN:
        raise CloudError(
            ErrorKind.CAPACITY,
            None,
            "ReservationUnavailable",
            f"EC2 shows {name} as {r.state or 'without a state'}"
            + (
                " (its capacity cannot be used now, e.g. after a failed status check)"
                if r.state == _UNAVAILABLE
                else " (a state this controller does not know)"
            )
            + "; nothing was launched (the gang stays pending at $0 and is retried whole "
            "when EC2 shows it active). If it stays so, ask AWS Support about the "
            f"reservation or point {c.ANN_CAPACITY_RESERVATION_ID} at another one.",
        )
    if r.available < count:
        raise CloudError(
            ErrorKind.CAPACITY,
            "ReservationCapacityExceeded",
            "ReservationShortfall",
            f"{name} has {r.available} of {r.total} slots free and the gang needs {count}; "
            "nothing was launched (the gang stays pending at $0 and is retried whole when "
            "slots free up).",
        )
    return inside
