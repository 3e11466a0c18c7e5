"""A Job's gang shape: the frozen `GangShape` model, its parser, and the reuse comparison.

The Workload reconciler calls `parse_gang_shape` with the owner Job's labels and
annotations and the Workload's total pod count; on `GangShapeError` it rejects the
admission check with `str(error)` as the message and `error.reason` as the reason. It
calls `shape_differences` (and `describe_shape_conflict` for the message) to decide
whether a later claimant may reuse a pool. The per-key rules live in `shape_rules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, Self

from pydantic import ValidationError, model_validator

from provisioner.api import constants as c
from provisioner.api.durations import format_duration
from provisioner.api.fields import (
    AmiId,
    AmiVariant,
    AvailabilityZone,
    CapacityReservationId,
    GangCount,
    InstanceType,
    Mode,
    NonNegativeDuration,
    PlacementStrategy,
    PoolName,
    PositiveDuration,
    Region,
    RoleArn,
    SubnetId,
)
from provisioner.api.meta import KubeModel
from provisioner.api.problems import GangShapeError, Problem
from provisioner.api.settings import Settings
from provisioner.api.shape_rules import default_ami_variant, read_shape_fields, zone_in_region

__all__ = [
    "GangShape",
    "GangShapeError",
    "Problem",
    "default_ami_variant",
    "describe_shape_conflict",
    "parse_gang_shape",
    "shape_differences",
    "shape_identity",
]


class GangShape(KubeModel):
    """What a gang needs: N instances of one type, where, as whom, and for how long."""

    pool: PoolName
    count: GangCount
    instance_type: InstanceType
    mode: Mode
    region: Region
    availability_zones: tuple[AvailabilityZone, ...] = ()
    subnets: tuple[SubnetId, ...] = ()
    node_role_arn: RoleArn
    keep_warm_ttl: NonNegativeDuration
    max_lifetime: PositiveDuration
    ami_variant: AmiVariant
    ami_id: AmiId | None = None
    capacity_reservation_id: CapacityReservationId | None = None
    efa: bool = False
    placement_group: PlacementStrategy = "none"
    # A gang that asks for time: the Capacity Block the controller buys for it lasts this
    # long (whole hours EC2 sells; `shape_rules`). None: it asks for capacity only.
    capacity_block_duration: PositiveDuration | None = None

    @model_validator(mode="after")
    def _placement(self) -> Self:
        if self.availability_zones and self.subnets:
            raise ValueError("availabilityZones and subnets are mutually exclusive")
        outside = [z for z in self.availability_zones if not zone_in_region(z, self.region)]
        if outside:
            raise ValueError(f"zones {outside} are not in region {self.region}")
        if self.capacity_reservation_id and self.capacity_block_duration:
            raise ValueError("capacityReservationId and capacityBlockDuration are exclusive")
        return self


def parse_gang_shape(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    total_pod_count: int,
    settings: Settings,
    kind: str = "Job",
) -> GangShape:
    """Validate a Job's pool label and gang annotations against the controller's settings.

    Returns the shape with every default filled in, or raises `GangShapeError` listing
    every problem. Annotations outside the atomic-gang.k8s.aws/ prefix are ignored. `kind`
    is the kind the labels and annotations were applied on (a count problem names it).
    """
    fields = read_shape_fields(labels, annotations, total_pod_count, settings, kind)
    try:
        return GangShape.model_validate(fields)
    except ValidationError as exc:
        # The rules should refuse everything the model refuses. If they ever miss
        # something, the user still gets a GangShapeError that names the key.
        raise GangShapeError([_model_problem(e, annotations) for e in exc.errors()]) from exc


_KEY_OF_FIELD: Final = {
    "pool": c.POOL_LABEL,
    **{key.removeprefix(c.PREFIX).replace("-", "_"): key for key in c.GANG_ANNOTATIONS},
}


def _model_problem(err: Any, annotations: Mapping[str, str]) -> Problem:
    # Errors without a field come from the placement check, which is about subnets vs zones.
    key = _KEY_OF_FIELD.get(str(err["loc"][0]) if err["loc"] else "subnets", c.ANN_SUBNETS)
    return Problem(
        key=key,
        value=annotations.get(key),
        reason=c.REASON_INVALID_ANNOTATION,
        detail=str(err["msg"]),
        accepted="a value as the annotation reference describes",
    )


# Fields a later claimant must share with the pool's snapshot, by annotation name.
# keep-warm-ttl is left out: sequential claimants may ask for different windows.
_MUST_MATCH: Final = (
    ("count", "count"),
    ("instance_type", "instance-type"),
    ("mode", "mode"),
    ("region", "region"),
    ("node_role_arn", "node-role-arn"),
    ("ami_variant", "ami-variant"),
    ("ami_id", "ami-id"),
    ("availability_zones", "availability-zones"),
    ("subnets", "subnets"),
    ("max_lifetime", "max-lifetime"),
    ("capacity_reservation_id", "capacity-reservation-id"),
    ("efa", "efa"),
    ("placement_group", "placement-group"),
    ("capacity_block_duration", "capacity-block-duration"),
)


def shape_differences(a: GangShape, b: GangShape) -> list[str]:
    """Annotation names (without prefix) of the fields on which two shapes differ and must
    not; empty means `b` may reuse a pool built for `a`."""
    return [name for field, name in _MUST_MATCH if getattr(a, field) != getattr(b, field)]


def shape_identity(shape: GangShape) -> list[tuple[str, str]]:
    """The fields a claimant must share with a pool, by annotation name, as text: what
    makes two shapes one pool's (a derived pool's name hashes it)."""
    return [(name, _display(getattr(shape, field))) for field, name in _MUST_MATCH]


def _display(value: Any) -> str:
    if value is None or value == ():
        return "unset"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def describe_shape_conflict(pool: GangShape, job: GangShape) -> str:
    """A message for the Rejected check: what differs, both values, and what to do."""
    parts = [
        f"{name} (pool: {_display(getattr(pool, field))}, Job: {_display(getattr(job, field))})"
        for field, name in _MUST_MATCH
        if getattr(pool, field) != getattr(job, field)
    ]
    return (
        f"Pool {pool.pool} was created for a different gang shape: {'; '.join(parts)}. "
        f"Match the pool's shape, or use a different {c.POOL_LABEL} label."
    )
