"""The rule of `atomic-gang.k8s.aws/capacity-block-duration`: how long a Capacity Block
the controller buys for a gang lasts. Called by `shape_rules` (the annotation table).

A duration EC2 sells (`durations.BLOCK_DURATION_HOURS`: whole days up to 14, whole weeks
from 3 to 26), no longer than the installer's `blockPurchase.maxDuration`, and not beside
the Job's own `capacity-reservation-id` (a gang runs on one reservation).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pydantic import TypeAdapter, ValidationError

from provisioner.api import constants as c
from provisioner.api.durations import BLOCK_DURATION_HOURS, BLOCK_DURATIONS_SOLD, format_duration
from provisioner.api.fields import PositiveDuration

__all__ = ["BlockDurationRefusal", "block_duration"]

_DURATION = TypeAdapter[timedelta](PositiveDuration)
ACCEPTED = f'a duration EC2 sells Capacity Blocks for: {BLOCK_DURATIONS_SOLD}, such as "24h"'


@dataclass(frozen=True)
class BlockDurationRefusal:
    reason: str
    detail: str
    accepted: str = ACCEPTED


def block_duration(
    raw: str | None, limit: timedelta, reservation: str | None
) -> timedelta | BlockDurationRefusal | None:
    """The duration asked for (None: the Job asks for no block), or why it is refused."""
    if raw is None:
        return None
    try:
        value = _DURATION.validate_python(raw)
    except ValidationError:
        return BlockDurationRefusal(c.REASON_INVALID_ANNOTATION, "not a positive Go duration")
    hours, rest = divmod(value, timedelta(hours=1))
    if rest or hours not in BLOCK_DURATION_HOURS:
        return BlockDurationRefusal(c.REASON_INVALID_ANNOTATION, "EC2 sells no block that long")
    if value > limit:
        return BlockDurationRefusal(
            c.REASON_EXCEEDS_LIMIT,
            f"the controller buys blocks of at most {format_duration(limit)} "
            "(blockPurchase.maxDuration; the installer may raise it)",
        )
    if reservation:
        return BlockDurationRefusal(
            c.REASON_INVALID_ANNOTATION,
            f"the Job names its own reservation in {c.ANN_CAPACITY_RESERVATION_ID}, and a "
            "gang runs on one reservation",
            f"either {c.ANN_CAPACITY_RESERVATION_ID} (a block you bought) or this annotation "
            "(a block the controller buys), not both",
        )
    return value
