"""Field types shared by the settings, the gang shape and the GangNodePool spec.

Each identifier format is written once here as an annotated type, so the chart's
defaults, a Job's annotations and the stored pool snapshot are held to the same rule.
`settings`, `shape` and `gangnodepool` import these; nothing else needs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    GetCoreSchemaHandler,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
)
from pydantic_core import core_schema

from provisioner.api.durations import DurationError, format_duration, parse_duration

__all__ = [
    "AmiId",
    "AmiVariant",
    "AvailabilityZone",
    "CapacityReservationId",
    "GangCount",
    "GoDuration",
    "InstanceId",
    "InstanceType",
    "Mode",
    "NonNegativeDuration",
    "PlacementStrategy",
    "PoolName",
    "PositiveDuration",
    "Region",
    "RoleArn",
    "Seconds",
    "SubnetId",
    "WholeSeconds",
]

Mode = Literal["runinstances", "fleet"]
AmiVariant = Literal["standard", "nvidia", "neuron"]
PlacementStrategy = Literal["none", "cluster"]

# EKS clusters and ARNs live in named partitions (aws, aws-cn, aws-us-gov, aws-iso...).
REGION_PATTERN: Final = r"^[a-z]{2}(-[a-z]+)+-[0-9]+$"
ROLE_ARN_PATTERN: Final = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]+$"
# RFC 1123 label: the pool label value is also the GangNodePool's name.
POOL_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# family.size, where families may carry dashes ("u-6tb1.metal", "mac2-m2pro.metal").
INSTANCE_TYPE_PATTERN: Final = r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$"
AZ_PATTERN: Final = r"^[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]$"
# EC2 ids are 8 hex digits (older) or 17 (current).
SUBNET_PATTERN: Final = r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$"
AMI_PATTERN: Final = r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$"
CAPACITY_RESERVATION_PATTERN: Final = r"^cr-([0-9a-f]{8}|[0-9a-f]{17})$"
INSTANCE_ID_PATTERN: Final = r"^i-([0-9a-f]{8}|[0-9a-f]{17})$"

Region = Annotated[str, StringConstraints(pattern=REGION_PATTERN)]
RoleArn = Annotated[str, StringConstraints(pattern=ROLE_ARN_PATTERN, max_length=2048)]
PoolName = Annotated[str, StringConstraints(pattern=POOL_NAME_PATTERN, max_length=63)]
InstanceType = Annotated[str, StringConstraints(pattern=INSTANCE_TYPE_PATTERN, max_length=64)]
AvailabilityZone = Annotated[str, StringConstraints(pattern=AZ_PATTERN)]
SubnetId = Annotated[str, StringConstraints(pattern=SUBNET_PATTERN)]
AmiId = Annotated[str, StringConstraints(pattern=AMI_PATTERN)]
CapacityReservationId = Annotated[str, StringConstraints(pattern=CAPACITY_RESERVATION_PATTERN)]
InstanceId = Annotated[str, StringConstraints(pattern=INSTANCE_ID_PATTERN)]

_DECIMAL = re.compile(r"[0-9]+", re.ASCII)


def _decimal(value: Any) -> Any:
    # Plain ASCII digits only: int() would also take "٤", "+4", " 4" and "4_0", none of
    # which a user means as a gang size.
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ValueError("not a whole number")
        if len(value) > 9:
            raise ValueError("far larger than any gang")
        return int(value)
    return value


def _non_negative(value: timedelta) -> timedelta:
    if value < timedelta(0):
        raise ValueError("must not be negative")
    return value


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s")
    return value


def _duration(value: Any) -> Any:
    # Numbers are refused rather than read as seconds: "600" means nothing in Go, and a
    # silent unit guess is how a 10-minute TTL becomes a 10-hour one.
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, timedelta):
        return value
    raise DurationError(value, f'expected a string such as "10m", not {type(value).__name__}')


GoDuration = Annotated[
    timedelta,
    BeforeValidator(_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string"}),
]
"""A `timedelta` read from and written as a Go duration string."""


GangCount = Annotated[int, Field(ge=1), BeforeValidator(_decimal)]
NonNegativeDuration = Annotated[GoDuration, AfterValidator(_non_negative)]
PositiveDuration = Annotated[GoDuration, AfterValidator(_positive)]


def _whole_seconds_of(value: Any) -> Any:
    # A timedelta (a test's Settings(...), settings handed on) goes through the same bound
    # as the chart's number; a fraction of a second is refused rather than rounded.
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        if seconds != int(seconds):
            raise ValueError(f"must be a whole number of seconds, not {seconds}")
        return int(seconds)
    return value


def _as_timedelta(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def _as_seconds(value: timedelta) -> int:
    return int(value.total_seconds())


@dataclass(frozen=True)
class WholeSeconds:
    """A duration the settings spell as a whole number of seconds (the chart's `*Seconds`
    keys, e.g. `joinDeadlineSeconds: 600`), held as a `timedelta` like every other duration.

    The number is validated as an int of at least `minimum` (pydantic's own messages: "greater
    than or equal to 1800"), and written back as that number, so a dumped Settings reads again.
    """

    minimum: int = 1

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        seconds = core_schema.int_schema(ge=self.minimum)
        return core_schema.no_info_before_validator_function(
            _whole_seconds_of,
            core_schema.no_info_after_validator_function(_as_timedelta, seconds),
            serialization=core_schema.plain_serializer_function_ser_schema(
                _as_seconds, return_schema=core_schema.int_schema()
            ),
        )


Seconds = Annotated[timedelta, WholeSeconds(1)]
"""A `timedelta` read from and written as a whole number of seconds, at least one."""
